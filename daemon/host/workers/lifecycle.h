/* SPDX-License-Identifier: MIT */
/* Worker lifecycles seen from the host (lifecycle.c). */
#ifndef GPUD_LIFECYCLE_H
#define GPUD_LIFECYCLE_H

#include <signal.h>

#include "host.h"
#include "workers/children.h"
#include "workers/deadlines.h"
#include "workers/signals.h"

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
/* Worker w exited (lifecycle_reap marked it) and its last results are taken in: its
 * death is handled (blame, restart or retirement). */
void lifecycle_exited(struct host *h, struct host_worker *w);
/* Kills worker w and its whole process group for writing something invalid: its
 * unconsumed results are not trusted, its current call gets a strike. */
void lifecycle_corrupt(struct host *h, struct host_worker *w, const char *why);
/* Kills worker w's process group and pid (not one reaped already, whose pid may name
 * another process by now); what it was killed for is the caller's to mark first. */
void lifecycle_kill(struct host_worker *w);
void lifecycle_stop_all(struct host *h);
void lifecycle_kill_all(struct host *h);
/* Requeues every task w holds: it is gone for good and runs none of them. */
void lifecycle_take_back(struct host *h, struct host_worker *w);
unsigned lifecycle_live(const struct host *h);

/* The run's signals and job control: signals.h (signals.c). */

#endif
