/* SPDX-License-Identifier: MIT */
/* The run's signals and job control (signals.c). */
#ifndef GPUD_SIGNALS_H
#define GPUD_SIGNALS_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

struct host;

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
/* Credits `gap` ns, up to `now`, during which the job was stopped to every clock that
 * bounds a worker (signals.c; the deadlines call it for a stop from outside). */
void lifecycle_credit(struct host *h, uint64_t gap, uint64_t now);

#endif /* GPUD_SIGNALS_H */
