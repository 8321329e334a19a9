/* SPDX-License-Identifier: MIT */
/*
 * The host's bounds on every wait (deadlines.h): task_timeout (a stage's own or
 * [job]'s), setup_timeout, tasks held but never started, cleanup_timeout and
 * drain_timeout; a stop of the whole job credited, not counted; the journal's flush
 * every JOURNAL_FLUSH_NS. Each returns the next time to look.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "workers/deadlines.h"
#include "host.h"
#include "job/stagecfg.h"
#include "util/notes.h"
#include "workers/lifecycle.h"

/* While a task limit is set, the host looks at least this often for a task that began
 * while it slept (it is not woken for task starts unless its sink wants them). */
#define TIMEOUT_POLL_NS 20000000u
/* A worker that holds tasks, runs none and waits for no batch this long is stuck
 * (stopped, or wedged outside any task): its tasks go to another worker. */
#define STILL_NS 3000000000u
/* The loop looks at its clocks at least this often, even with nothing to time, so that
 * the time since it last looked tells whether the job was stopped: a gap of
 * LIFECYCLE_STOP_MIN_NS or more was a stop (lifecycle_timeouts). */
#define LIFECYCLE_LOOK_NS 50000000u
#define LIFECYCLE_STOP_MIN_NS 200000000u
#define LIFECYCLE_HOLD_NS 20000000u

/* Workers told to stop get cleanup_timeout to exit; then they are killed. */
static uint64_t cleanup_deadline(struct host *h, uint64_t now)
{
	double limit = h->cfg->cleanup_timeout;
	if (!h->ctl.stopping || h->ctl.killing || limit <= 0)
		return 0;
	uint64_t deadline = h->ctl.stop_ns + (uint64_t)(limit * 1e9);
	if (now < deadline)
		return deadline;
	for (unsigned i = 0; i < h->pool.n; i++) {
		struct host_worker *w = &h->pool.w[i];
		if (w->state == HW_STOPPING && w->pid > 0 && !w->timed_out && !w->cancelled) {
			w->timed_out = true;
			lifecycle_kill(w);
		}
	}
	return 0;
}

static uint64_t earlier(uint64_t a, uint64_t b)
{
	return !a ? b : !b ? a : a < b ? a : b;
}

/* A worker holding tasks it does not start, while not in a call and not waiting to
 * fill a batch, is stopped or wedged: its tasks go elsewhere. */
static uint64_t check_still(struct host *h, struct host_worker *w, uint64_t now)
{
	/* While a sink call is stuck, nothing is taken from the workers or given to them:
	 * one that holds tasks it has not started waits for the host (backpressure, as
	 * with result rings sized otherwise or batches), it is not wedged. Nor is a CPU
	 * stage's worker whose results wait for room in the next stage (blocked). */
	if (w->blocked || atomic_load_explicit(&h->out.stuck_ns, memory_order_relaxed)) {
		w->still_ns = 0;
		return 0;
	}
	uint64_t tail = atomic_load_explicit(&w->rep->task_tail, memory_order_relaxed);
	bool busy = atomic_load_explicit(&w->rep->busy_since_ns, memory_order_relaxed) != 0;
	/* Unstarted: it has not reported reaching the end of what we published. */
	if (tail != w->seen_tail || busy || tail == w->task_head) {
		w->seen_tail = tail;
		w->still_ns = 0;
		return 0;
	}
	uint64_t limit = STILL_NS + h->shm.hdr->batch_wait_ns;
	if (!w->still_ns) {
		w->still_ns = now;
	} else if (wait_since(now, w->still_ns) >= limit) {
		ui_say(h, UI_EVENT,
		       "worker %d (%s) held %u tasks for %.1f s without starting "
		       "one; giving them to another worker",
		       w->index, WHERE_OF(h, w), tasks_held(w),
		       (double)wait_since(now, w->still_ns) * 1e-9);
		w->held_still = true;
		lifecycle_kill(w);
		return 0;
	}
	return w->still_ns + limit;
}

/* The resolution of CLOCK_MONOTONIC_COARSE (1 to 10 ms, by the kernel's HZ). */
static uint64_t coarse_tick_ns(void)
{
	static uint64_t tick;
	if (!tick) {
		struct timespec res;
		bool ok = clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0 && res.tv_sec == 0 &&
			  res.tv_nsec > 0;
		tick = ok ? (uint64_t)res.tv_nsec : 10000000u;
	}
	return tick;
}

/* The loop looks at least every LIFECYCLE_LOOK_NS when it can. A longer gap since it
 * last did was a stop of the job (SIGSTOP from outside, a batch system's suspend), which
 * counts against nothing, when a SIGCONT came with it; without one it was the host being
 * busy (a slow sink call, a starved CPU), which counts. The SIGCONT's handler may run on
 * another thread a moment after the loop wakes: a gap with no SIGCONT yet is held for one
 * more look, 20 ms on, before anything is enforced (true: look again then). (Ctrl-Z is
 * credited where it is handled.) */
static bool credit_stops(struct host *h, uint64_t now)
{
	uint64_t gap = wait_since(now, h->ctl.last_check_ns);
	bool cont = host_conts != h->ctl.conts_seen;
	h->ctl.conts_seen = host_conts;
	if (h->ctl.held_gap) {
		if (cont)
			lifecycle_credit(h, h->ctl.held_gap, now);
		h->ctl.held_gap = 0;
	} else if (h->ctl.last_check_ns && gap >= LIFECYCLE_STOP_MIN_NS) {
		if (!cont) {
			h->ctl.held_gap = gap;
			h->ctl.last_check_ns = now;
			return true;
		}
		lifecycle_credit(h, gap, now);
	}
	h->ctl.last_check_ns = now;
	return false;
}

/* The journal catches up every JOURNAL_FLUSH_NS. */
static uint64_t flush_journal(struct host *h, uint64_t now, uint64_t deadline)
{
	if (h->journal.fd < 0)
		return deadline;
	if (wait_since(now, h->journal.flushed_ns) >= JOURNAL_FLUSH_NS &&
	    journal_flush(&h->journal, false) < 0 && !h->resume.journal_failed) {
		h->resume.journal_failed = true;
		ui_say(h, UI_EVENT,
		       "cannot write the journal %s: %s; --resume may run finished tasks again",
		       h->journal.path, strerror(errno));
	}
	return earlier(deadline, h->journal.flushed_ns + JOURNAL_FLUSH_NS);
}

/* Interrupted: the running tasks get drain_timeout to finish, then are stopped, so a
 * batch system's SIGTERM ... SIGKILL still finds the run closed in good order. */
static uint64_t enforce_drain(struct host *h, uint64_t now, uint64_t deadline)
{
	if (!h->ctl.interrupted || h->ctl.killing || h->ctl.stopping || h->cfg->drain_timeout <= 0)
		return deadline;
	uint64_t drain = (uint64_t)(h->cfg->drain_timeout * 1e9);
	if (wait_since(now, h->ctl.interrupt_ns) < drain)
		return earlier(deadline, h->ctl.interrupt_ns + drain);
	ui_say(h, UI_EVENT,
	       "drain_timeout (%g s) passed: stopping the running tasks (they count as not "
	       "run)",
	       h->cfg->drain_timeout);
	lifecycle_kill_all(h);
	return deadline;
}

/* Worker w's setup_timeout, the tasks it holds without starting them, and its
 * task_timeout (limit ns, 0 none); the next time to look. */
static uint64_t enforce_worker(struct host *h, struct host_worker *w, uint64_t now, uint64_t limit,
			       uint64_t setup_limit, uint64_t deadline)
{
	if (w->pid <= 0 || w->timed_out || w->corrupt || w->exited)
		return deadline;
	if (w->state == HW_STARTING && setup_limit) {
		if (wait_since(now, w->spawned_ns) < setup_limit)
			return earlier(deadline, w->spawned_ns + setup_limit);
		w->setup_timed_out = true;
		lifecycle_kill(w);
		return deadline;
	}
	/* A worker told to stop while the run goes on (its GPU was retired) finishes what
	 * it holds, under the same task_timeout. */
	if (w->state != HW_READY && w->state != HW_STOPPING)
		return deadline;
	if (w->state == HW_READY)
		deadline = earlier(deadline, check_still(h, w, now));
	if (!limit)
		return deadline;
	uint64_t since = atomic_load_explicit(&w->rep->busy_since_ns, memory_order_relaxed);
	if (since != w->seen_since) {
		w->seen_since = since;
		w->grace_ns = 0;
	}
	/* A task may have begun after `now` was read: that is not a long one (and now -
	 * since would wrap around). */
	if (!since || since >= now)
		return deadline;
	uint64_t ran = now - since;
	ran = ran > w->grace_ns ? ran - w->grace_ns : 0;
	/* A worker that interrupts its own call at task_timeout (gpud_worker_interrupt,
	 * every Python worker) has timeout_grace more to return from it: then its tasks
	 * time out and it goes on, model and all. */
	if (h->cfg->timeout_grace > 0 &&
	    atomic_load_explicit(&w->rep->interrupts, memory_order_relaxed) == 1)
		limit += (uint64_t)(h->cfg->timeout_grace * 1e9);
	if (ran < limit)
		return earlier(deadline, now + (limit - ran));
	/* A plugin stuck in a kernel or a C loop cannot be interrupted from inside (or
	 * did not return within timeout_grace when it was): the worker goes, a fresh one
	 * takes its place. */
	w->timed_out = true;
	lifecycle_kill(w);
	return deadline;
}

uint64_t lifecycle_timeouts(struct host *h, uint64_t now)
{
	double limit_s = h->cfg->task_timeout;
	if (credit_stops(h, now))
		return now + LIFECYCLE_HOLD_NS;
	uint64_t deadline = cleanup_deadline(h, now);
	deadline = flush_journal(h, now, deadline);
	deadline = enforce_drain(h, now, deadline);
	if (h->ctl.stopping)
		return earlier(deadline, now + LIFECYCLE_LOOK_NS);
	/* Plus one tick of the coarse clock: a worker running tiny tasks reports when a
	 * stretch of them began, which may be up to a tick before the task now running
	 * (worker/times.h, TINY_NS). */
	uint64_t limit = limit_s > 0 ? (uint64_t)(limit_s * 1e9) + coarse_tick_ns() : 0;
	uint64_t setup_limit = (uint64_t)(h->cfg->setup_timeout * 1e9);
	bool staged = h->pool.n_stages && stagecfg_any_timeout(h->cfg);
	deadline = earlier(deadline,
			   now + (limit_s > 0 || staged ? TIMEOUT_POLL_NS : LIFECYCLE_LOOK_NS));
	for (unsigned i = 0; i < h->pool.n; i++) {
		struct host_worker *w = &h->pool.w[i];
		uint64_t own = limit;
		if (w->stage < h->pool.n_stages) { /* a CPU stage's: its own, if it has one */
			double s = stagecfg_task_timeout(h->cfg, w->stage);
			own = s > 0 ? (uint64_t)(s * 1e9) + coarse_tick_ns() : 0;
		}
		deadline = enforce_worker(h, w, now, own, setup_limit, deadline);
	}
	return deadline;
}
