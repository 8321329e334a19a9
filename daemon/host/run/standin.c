/* SPDX-License-Identifier: MIT */
/* The host loop's stand-in while a generator call is stuck (standin.h). */
#define _GNU_SOURCE
#include "run/standin.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gpud/gpud.h>

#include "util/abort.h"
#include "host.h"
#include "workers/lifecycle.h"
#include "workers/memory.h"
#include "util/notes.h"

/* When the stand-in looks (standin.h): STANDIN_POLL_NS after a look that found the
 * loop in a generator call (seen there again, the call is stuck and the loop is taken
 * over), otherwise when the host's bell rings (a worker ran out of work and went to
 * sleep, a signal came) or STANDIN_IDLE_NS have passed. */
#define STANDIN_POLL_NS 500000u
#define STANDIN_IDLE_NS 10000000u
/* A sink call is looked at again this long after a look found it running: a sink that
 * is slow on every call (a database, a Python callback) costs no wake-ups, and control
 * comes back within this of a signal. */
#define STANDIN_SINK_NS 100000000u

/* Orders the loop thread's stores before our loads, as if it had run a full fence. */
static void heavy_barrier(const struct gate *g)
{
	if (g->fence || syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
		atomic_thread_fence(memory_order_seq_cst); /* the loop thread fences itself */
}

/* Tasks the loop's thread wrote into the ring it was filling before the stuck call:
 * the worker gets them now. */
static void publish_filled(struct host *h)
{
	struct host_worker *w = h->gate.filling;
	/* One still starting is handed its tasks when ready (run/dispatcher.c). */
	if (w && w->rep && w->state != HW_STARTING &&
	    atomic_load_explicit(&w->feed->task_head, memory_order_relaxed) != w->task_head) {
		atomic_store_explicit(&w->feed->task_head, w->task_head, memory_order_release);
		wait_ring(shm_worker_bell(w));
	}
}

/* Runs the loop until the stuck call returns; false when the run ended meanwhile. */
static bool stand_in(struct host *h)
{
	struct gate *g = &h->gate;
	publish_filled(h);
	while (atomic_load_explicit(&g->in_call, memory_order_acquire)) {
		if (h->gate.loop.pass(h, false))
			return false;
	}
	atomic_store_explicit(&g->taken, 0, memory_order_release);
	wait_futex_wake(&g->taken);
	return true;
}

static const char *kind_name(int kind)
{
	switch (kind) {
	case GPUD_TASK_OK:
		return "ok";
	case GPUD_TASK_ERROR:
		return "error";
	case GPUD_TASK_TIMEOUT:
		return "timeout";
	case GPUD_TASK_START:
		return "task start";
	case GATE_SINK_CLOSE:
		return "close";
	default:
		return "worker event";
	}
}

/*
 * A sink call that does not return (a full pipe, a stopped reader, a callback that
 * blocks). The loop's thread is inside it somewhere in the middle of a pass, holding
 * the event's input and result where they lie in the rings, so the loop cannot be run
 * for it the way it is for a generator call, made at one place. The stand-in keeps the
 * run in control around the call instead: signals are taken (the first starts the
 * drain's clock, the second stops every worker), task_timeout, setup_timeout and the
 * other bounds still stop workers (they are restarted once the call returns), results
 * wait in the workers' rings (which then wait: backpressure, nothing lost), and the
 * run ends, without the sink, once the drain's time is up, at a second interrupt, or at
 * sink_timeout. false when it ended the run.
 */
static bool keep_watch(struct host *h, uint64_t since_ns)
{
	struct gate *g = &h->gate;
	const struct cfg *c = h->cfg;
	uint64_t tell_at = since_ns + 1000000000u, stopped = h->ctl.stopped_ns;
	atomic_store(&h->out.stuck_ns, since_ns);
	while (atomic_load_explicit(&g->in_call, memory_order_acquire)) {
		uint32_t bell = atomic_load_explicit(h->shm.bell.bell, memory_order_seq_cst);
		h->gate.loop.signals(h); /* before the clock is read: it may start the drain's */
		uint64_t now = wait_now_ns();
		uint64_t deadline = lifecycle_timeouts(h, now);
		/* A stop of the job that lifecycle_timeouts found (and credited to the other
		 * clocks) does not count against sink_timeout either. */
		if (h->ctl.stopped_ns != stopped) {
			since_ns += h->ctl.stopped_ns - stopped;
			tell_at += h->ctl.stopped_ns - stopped;
			stopped = h->ctl.stopped_ns;
			atomic_store(&h->out.stuck_ns, since_ns);
		}
		/* A gap lifecycle_timeouts holds for one more look (a stop whose SIGCONT's
		 * handler has not run yet: deadlines.c, credit_stops): nothing is enforced
		 * until it is decided, 20 ms on (under load the handler came late, and the
		 * 2 s the job was stopped counted against sink_timeout). */
		if (h->ctl.held_gap) {
			wait_futex_wait(h->shm.bell.bell, bell, 20000000u);
			continue;
		}
		if (now >= tell_at) {
			char what[96];
			if (g->sink_kind == GATE_SINK_CLOSE)
				snprintf(what, sizeof what, "close");
			else if (g->sink_task == UINT64_MAX)
				snprintf(what, sizeof what, "call for a %s",
					 kind_name(g->sink_kind));
			else
				snprintf(what, sizeof what, "call for task %llu (%s)",
					 (unsigned long long)g->sink_task, kind_name(g->sink_kind));
			ui_say(h, UI_EVENT,
			       "the sink's %s has not returned for %.0f s; results wait "
			       "in the workers' rings (Ctrl-C or SIGTERM ends the run after "
			       "drain_timeout%s)",
			       what, (double)(now - since_ns) * 1e-9,
			       c->sink_timeout > 0 ? ", sink_timeout by itself" : "");
			tell_at = since_ns + 2 * (now - since_ns);
		}
		bool end = h->ctl.killing;
		if (h->ctl.interrupted && c->drain_timeout > 0 &&
		    wait_since(now, h->ctl.interrupt_ns) >= (uint64_t)(c->drain_timeout * 1e9))
			end = true;
		if (c->sink_timeout > 0 &&
		    wait_since(now, since_ns) >= (uint64_t)(c->sink_timeout * 1e9)) {
			/* Ended as by SIGTERM: resumable, the undelivered outcomes run again. */
			host_abort(h, "the sink's call has not returned in %g s (sink_timeout)",
				   c->sink_timeout);
			h->ctl.interrupted = true;
			end = true;
		}
		if (end)
			return false;
		uint64_t wait_ns = STANDIN_IDLE_NS;
		if (deadline && deadline > now && deadline - now < wait_ns)
			wait_ns = deadline - now;
		wait_futex_wait(h->shm.bell.bell, bell, wait_ns);
	}
	uint64_t now = wait_now_ns();
	if (now >= since_ns + 1000000000u)
		ui_say(h, UI_EVENT, "the sink's call returned after %.1f s",
		       (double)(now - since_ns) * 1e-9);
	atomic_store(&h->out.stuck_ns, 0);
	atomic_store_explicit(&g->taken, 0, memory_order_release);
	wait_futex_wake(&g->taken);
	return true;
}

/* The run ended while the generator call is stuck: a generator with an interrupt
 * entry (an in-process one, gpud.h) is asked to return, and once its call has, the loop
 * is given back to the loop's thread, which ends the run as usual (the loop's next pass
 * finds it over) and returns to the caller. false when the generator has no such
 * entry, or its call has not returned within GPUD_INTERRUPT_WAIT_S. */
static bool interrupt_generator(struct host *h)
{
	struct gate *g = &h->gate;
	if (!h->gen_ops->interrupt)
		return false;
	h->gen_ops->interrupt(h->gen);
	uint64_t start = wait_now_ns();
	while (atomic_load_explicit(&g->in_call, memory_order_acquire)) {
		if (wait_since(wait_now_ns(), start) >=
		    GPUD_INTERRUPT_WAIT_S * UINT64_C(1000000000))
			return false;
		uint32_t bell = atomic_load_explicit(h->shm.bell.bell, memory_order_seq_cst);
		wait_futex_wait(h->shm.bell.bell, bell, 1000000u);
	}
	atomic_store_explicit(&g->taken, 0, memory_order_release);
	wait_futex_wake(&g->taken);
	return true;
}

/* STANDIN_POLL_NS, or GPUD_STANDIN_POLL_MS from the environment: the tests lengthen it so
 * that a task left for the stand-in to hand over is told apart from one handed over at
 * once by hundreds of milliseconds, not by a fraction of one (tests/test_stalls.c). */
static uint64_t standin_poll_ns(void)
{
	const char *env = getenv("GPUD_STANDIN_POLL_MS");
	char *end;
	unsigned long ms = env ? strtoul(env, &end, 10) : 0;
	if (!env || end == env || *end || ms == 0 || ms > 10000)
		return STANDIN_POLL_NS;
	return (uint64_t)ms * 1000000u;
}

static void *standin_main(void *arg)
{
	struct host *h = arg;
	struct gate *g = &h->gate;
	uint64_t seen = UINT64_MAX; /* the call found running at the last look */
	uint64_t seen_ns = 0;       /* when */
	const uint64_t poll_ns = standin_poll_ns();
	uint64_t period = poll_ns; /* how long it may run before a take-over */
	for (;;) {
		/* The bell before `ending`: standin_stop() sets `ending` before it rings,
		 * so either we see `ending` or the wait below sees the bell move. */
		uint32_t bell = atomic_load_explicit(h->shm.bell.bell, memory_order_seq_cst);
		if (atomic_load_explicit(&g->ending, memory_order_seq_cst))
			break;
		uint64_t wait_ns = STANDIN_IDLE_NS;
		if (seen != UINT64_MAX) {
			/* A call is being watched: look again once it has run a full period
			 * (a bell that rings meanwhile does not shorten that). */
			uint64_t ran = wait_now_ns() - seen_ns;
			wait_ns = ran < period ? period - ran : 0;
		}
		if (wait_ns)
			wait_futex_wait(h->shm.bell.bell, bell, wait_ns);
		if (atomic_load_explicit(&g->ending, memory_order_acquire))
			break;
		uint64_t calls = atomic_load_explicit(&g->calls, memory_order_relaxed);
		if (!atomic_load_explicit(&g->in_call, memory_order_relaxed)) {
			seen = UINT64_MAX;
			continue;
		}
		if (calls != seen) {
			seen = calls;
			seen_ns = wait_now_ns();
			period = atomic_load_explicit(&g->sink, memory_order_relaxed)
					 ? STANDIN_SINK_NS
					 : poll_ns;
			continue;
		}
		if (wait_now_ns() - seen_ns < period)
			continue; /* woken early: the full period first */
		/* The same call as a period ago: take over, unless it returns meanwhile. */
		atomic_store_explicit(&g->taken, 1, memory_order_relaxed);
		heavy_barrier(g);
		/* The acquire pairs with gate_enter's release: what the loop wrote before
		 * the call is ours to read and write now. */
		if (atomic_load_explicit(&g->in_call, memory_order_acquire) &&
		    atomic_load_explicit(&g->calls, memory_order_relaxed) == calls) {
			bool sink = atomic_load_explicit(&g->sink, memory_order_relaxed);
			if (sink ? !keep_watch(h, seen_ns)
				 : !stand_in(h) && !interrupt_generator(h)) {
				/* The run is over and the generator or the sink is still in its
				 * call. */
				if (sink)
					h->out.stuck = true;
				else
					h->flow.stuck = true;
				int rc = h->gate.loop.finish(h);
				fflush(NULL);
				_exit(rc);
			}
		} else {
			atomic_store_explicit(&g->taken, 0, memory_order_release);
			wait_futex_wake(&g->taken);
		}
		seen = UINT64_MAX;
	}
	return NULL;
}

int standin_start(struct host *h, const struct standin_loop *loop)
{
	struct gate *g = &h->gate;
	g->loop = *loop;
	static int registered = -1;
	if (registered < 0)
		registered = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0,
				     0) == 0;
	g->fence = !registered;
	atomic_store(&g->ending, 0);
	atomic_store(&g->taken, 0);
	int e = pthread_create(&h->standin, NULL, standin_main, h);
	if (e)
		return -e;
	h->standin_running = true;
	return 0;
}

void standin_stop(struct host *h)
{
	if (!h->standin_running)
		return;
	atomic_store_explicit(&h->gate.ending, 1, memory_order_seq_cst);
	wait_ring(h->shm.bell); /* the stand-in sleeps on the host's bell */
	pthread_join(h->standin, NULL);
	h->standin_running = false;
}

void standin_wait(struct host *h)
{
	struct gate *g = &h->gate;
	/* The stand-in may sleep in the loop's wait: it wakes for the host's bell. */
	wait_ring(h->shm.bell);
	while (atomic_load_explicit(&g->taken, memory_order_acquire))
		wait_futex_wait(&g->taken, 1, 0);
}
