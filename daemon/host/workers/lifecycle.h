/* SPDX-License-Identifier: MIT */
/* Worker lifecycles seen from the host (lifecycle.c). */
#ifndef GPUD_LIFECYCLE_H
#define GPUD_LIFECYCLE_H

#include <signal.h>

#include "host.h"

/* The run's side of a worker's life, which lifecycle.c, below the run, calls through
 * h->pool.up, set by run/ (run.c: run_up) before any worker starts: a task's outcome
 * (events_outcome), a worker's event for the sink (events_worker), a task to run again
 * (tasks_requeue), and a worker whose setup finished being given its first tasks
 * (dispatch_first_window). Not on the per-task path: deaths, setups and timeouts. */
struct lifecycle_up {
	void (*outcome)(struct host *h, const struct host_worker *w, const struct task_ent *t,
			const void *input, enum cause cause, const void *result, size_t result_size,
			const char *message, double seconds);
	void (*worker_event)(struct host *h, enum gpud_event_kind kind, const struct host_worker *w,
			     const char *message);
	void (*requeue)(struct host *h, const struct task_ent *t, const void *input, int avoid,
			unsigned stage);
	void (*ready)(struct host *h, struct host_worker *w);
};

/* How many workers killed for corrupting their memory are told of, per run. */
#define LIFECYCLE_CORRUPTIONS_TOLD 5

/* A worker in setup: notices when it is ready or has failed. */
void lifecycle_poll(struct host *h, struct host_worker *w);
/* Reaps every child that exited; a worker's exit is marked (w->exited) for
 * lifecycle_exited, once the dispatcher has taken in its last results. */
void lifecycle_reap(struct host *h);
void lifecycle_exited(struct host *h, struct host_worker *w);
/* Enforces task_timeout, setup_timeout, the bound on unstarted tasks and the cleanup
 * bound; returns the next deadline to wake up for (0: none). */
uint64_t lifecycle_timeouts(struct host *h, uint64_t now);
/* Kills worker w and its whole process group for writing something invalid: its
 * unconsumed results are not trusted, its current call gets a strike. */
void lifecycle_corrupt(struct host *h, struct host_worker *w, const char *why);
void lifecycle_stop_all(struct host *h);
void lifecycle_kill_all(struct host *h);
/* Requeues every task w holds: it is gone for good and runs none of them. */
void lifecycle_take_back(struct host *h, struct host_worker *w);
unsigned lifecycle_live(const struct host *h);
/* End of run: kills and reaps every process left below the host (children of workers
 * that outlived them), but the ones lifecycle_children_note saw; returns how many. */
unsigned lifecycle_sweep(void);
/* Notes the process's children at the start of a run (a libgpud caller's): neither
 * lifecycle_reap nor lifecycle_sweep touches them, nor takes their exit status.
 * lifecycle_children_forget ends that at the run's end. */
void lifecycle_children_note(void);
void lifecycle_children_forget(void);

/* Signals: SIGCHLD, SIGINT/SIGTERM/SIGHUP (interrupts, counted), SIGTSTP (stop the job),
 * SIGCONT (the job goes on; counted in host_conts, which tells a stop from outside from
 * a busy host in lifecycle_timeouts: time stopped does not count against any bound).
 * Atomics, not volatile: the handler runs on whichever thread the signal lands on (the
 * loop's or the stand-in's), and either may be reading them. Lock-free, so safe in a
 * handler. */
extern _Atomic sig_atomic_t host_sigchld, host_interrupts, host_sigtstp, host_sigcont, host_conts;
/* Installs the run's handlers (keep: SIGCHLD's alone, the others stay the caller's),
 * saving the dispositions it replaces for host_restore_signals. */
void host_install_signals(struct host *h, bool keep);
/* Puts back what host_install_signals replaced; nothing when it did not run. */
void host_restore_signals(void);
/* SIGTERM's path without a signal (gpud_job_stop): async-signal-safe. */
void lifecycle_interrupt(void);
/* Forgets interrupts and job-control signals of an earlier run in this process. */
void lifecycle_interrupts_reset(void);
/* Applies a pending SIGTSTP or SIGCONT (dispatcher loop). */
void lifecycle_job_control(struct host *h);

#endif
