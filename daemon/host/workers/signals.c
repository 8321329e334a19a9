/* SPDX-License-Identifier: MIT */
/*
 * The run's signals and job control (lifecycle.h): SIGCHLD rings the host's bell;
 * Ctrl-C, SIGTERM and SIGHUP are counted as interrupts; Ctrl-Z stops the workers, then
 * the host, and the time stopped is credited to every clock that bounds a worker
 * (lifecycle_credit); the caller's dispositions are put back at the end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "workers/signals.h"
#include "host.h"
#include "workers/spawner.h"
#include "view/ui.h"
#include "wait.h"

_Atomic sig_atomic_t host_sigchld, host_interrupts, host_sigtstp, host_sigcont, host_conts;
static _Atomic uint32_t *sig_bell;
/* The bell for gpud_job_stop, from any thread: host_restore_signals waits until no
 * ringer holds it before the page goes. */
static _Atomic uint32_t *_Atomic bell_sig;
static atomic_int bell_ringers;

static void on_signal(int sig)
{
	int saved = errno;
	if (sig == SIGCHLD)
		host_sigchld = 1;
	else if (sig == SIGTSTP)
		host_sigtstp = 1;
	else if (sig == SIGCONT) {
		host_sigcont = 1;
		host_conts++;
	} else
		host_interrupts++;
	if (sig_bell) {
		atomic_fetch_add(sig_bell, 1);
		wait_futex_wake(sig_bell);
	}
	errno = saved;
}

/* The caller's dispositions, restored when the run ends (libgpud runs in someone else's
 * process). */
static const int run_signals[] = {SIGCHLD, SIGCONT, SIGINT,  SIGTERM,
				  SIGHUP,  SIGTSTP, SIGPIPE, SIGXFSZ};
static struct sigaction saved[sizeof run_signals / sizeof *run_signals];
static bool saved_any;

void host_install_signals(struct host *h, bool keep)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	for (size_t i = 0; i < sizeof run_signals / sizeof *run_signals; i++)
		sigaction(run_signals[i], NULL, &saved[i]);
	saved_any = true;
	sig_bell = h->shm.host_bell;
	atomic_store(&bell_sig, h->shm.host_bell);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	/* A worker's death is seen through SIGCHLD, whoever owns the other signals. */
	sigaction(SIGCHLD, &sa, NULL);
	if (keep)
		return;
	sigaction(SIGCONT, &sa, NULL);
	/* No SA_RESTART: a generator blocked in read() gets EINTR and can give up. */
	sa.sa_flags = 0;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL); /* a closed terminal: stop as for SIGTERM */
	sa.sa_flags = SA_RESTART;
	sigaction(SIGTSTP, &sa, NULL);
	/* A closed standard output shows up as a write error in the sink; a file past
	 * RLIMIT_FSIZE (ulimit -f) as one with EFBIG in the sink or the journal, said and
	 * ended in order, not a death by signal with nothing said. */
	signal(SIGPIPE, SIG_IGN);
	signal(SIGXFSZ, SIG_IGN);
}

void host_restore_signals(void)
{
	if (!saved_any)
		return;
	for (size_t i = 0; i < sizeof run_signals / sizeof *run_signals; i++)
		sigaction(run_signals[i], &saved[i], NULL);
	saved_any = false;
	/* The bell page is unmapped next: no gpud_job_stop may still be ringing it. */
	sig_bell = NULL;
	atomic_store(&bell_sig, NULL);
	while (atomic_load(&bell_ringers))
		sched_yield();
}

void lifecycle_interrupt(void)
{
	int saved_errno = errno;
	host_interrupts++;
	atomic_fetch_add(&bell_ringers, 1);
	_Atomic uint32_t *bell = atomic_load(&bell_sig);
	if (bell) {
		atomic_fetch_add(bell, 1);
		wait_futex_wake(bell);
	}
	atomic_fetch_sub(&bell_ringers, 1);
	errno = saved_errno;
}

void lifecycle_interrupts_reset(void)
{
	host_interrupts = 0;
	host_conts = 0;
	host_sigtstp = 0;
	host_sigcont = 0;
}

/* A worker reaped already (exited) is never signalled: its pid may name another
 * process by now. */
static void signal_workers(struct host *h, int sig)
{
	for (unsigned i = 0; i < h->pool.n; i++)
		if (h->pool.w[i].pid > 0 && !h->pool.w[i].exited)
			spawn_kill(h->pool.w[i].pid, sig);
}

/* Moves a clock on by the `gap` the job was stopped, but never past `now`: no elapsed
 * time computed from it can wrap, and one started during the stop's uncertain start (the
 * loop looked at its clocks last `gap` ago) or on continuing loses nothing. */
static void shift(uint64_t *clock, uint64_t now, uint64_t gap)
{
	if (*clock)
		*clock = *clock + gap < now ? *clock + gap : now;
}

/* Credits `gap` ns, up to `now`, during which the job was stopped to every clock that
 * bounds a worker: time stopped never counts against a task, a setup or a cleanup. */
void lifecycle_credit(struct host *h, uint64_t gap, uint64_t now)
{
	h->ctl.stopped_ns += gap;
	if (h->ctl.interrupted)
		shift(&h->ctl.interrupt_ns, now, gap); /* nor against drain_timeout */
	for (unsigned i = 0; i < h->pool.n; i++) {
		struct host_worker *w = &h->pool.w[i];
		/* The task running now, which may have begun after we last looked: its
		 * clock gets the credit, at most what it has run. */
		uint64_t since = w->rep ? atomic_load(&w->rep->busy_since_ns) : 0;
		if (since != w->seen_since) {
			w->seen_since = since;
			w->grace_ns = 0;
		}
		if (since && since < now)
			w->grace_ns += gap < now - since ? gap : now - since;
		shift(&w->spawned_ns, now, gap);
		shift(&w->still_ns, now, gap);
	}
	if (h->ctl.stopping)
		shift(&h->ctl.stop_ns, now, gap);
}

void lifecycle_job_control(struct host *h)
{
	if (host_sigtstp) {
		/* Ctrl-Z: the workers (in their own groups) stop with us. */
		host_sigtstp = 0;
		uint64_t stopped = wait_now_ns();
		signal_workers(h, SIGSTOP);
		ui_suspend(h, true);
		kill(getpid(), SIGSTOP);
		/* We were stopped until now (SIGSTOP to ourselves takes effect before kill()
		 * returns): credited at once, for exactly as long as it lasted, and not when
		 * the SIGCONT handler, which may run on another thread a moment later, has
		 * said so; the clocks are not looked at before. */
		uint64_t now = wait_now_ns();
		lifecycle_credit(h, now - stopped, now);
		h->ctl.last_check_ns = now;
		ui_suspend(h, false);
		signal_workers(h, SIGCONT);
	}
	if (host_sigcont) {
		/* Continued after a stop from outside (SIGSTOP to the job, a batch system's
		 * suspend): the workers may have been stopped by us. The time it lasted is
		 * credited by lifecycle_timeouts, which notices the gap itself, whichever
		 * thread this handler ran on and when. A SIGCONT that stopped nothing
		 * (Slurm sends one with SIGTERM) changes no clock. */
		host_sigcont = 0;
		signal_workers(h, SIGCONT);
	}
}
