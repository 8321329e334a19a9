/* SPDX-License-Identifier: MIT */
/* The host loop's stand-in while a generator call is stuck (standin.h). */
#define _GNU_SOURCE
#include "standin.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "dispatcher.h"
#include "host.h"
#include "memory.h"

/* When the stand-in looks (standin.h): STANDIN_POLL_NS after a look that found the
 * loop in a generator call (seen there again, the call is stuck and the loop is taken
 * over), otherwise when the host's bell rings (a worker ran out of work and went to
 * sleep, a signal came) or STANDIN_IDLE_NS have passed. */
#define STANDIN_POLL_NS 500000u
#define STANDIN_IDLE_NS 10000000u

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
	if (w && w->rep && atomic_load_explicit(&w->feed->task_head, memory_order_relaxed) != w->task_head) {
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
		if (dispatch_pass(h, false))
			return false;
	}
	atomic_store_explicit(&g->taken, 0, memory_order_release);
	wait_futex_wake(&g->taken);
	return true;
}

static void *standin_main(void *arg)
{
	struct host *h = arg;
	struct gate *g = &h->gate;
	uint64_t seen = UINT64_MAX; /* the call found running at the last look */
	uint64_t seen_ns = 0;       /* when */
	for (;;) {
		/* The bell before `ending`: standin_stop() sets `ending` before it rings,
		 * so either we see `ending` or the wait below sees the bell move. */
		uint32_t bell = atomic_load_explicit(h->bell.bell, memory_order_seq_cst);
		if (atomic_load_explicit(&g->ending, memory_order_seq_cst))
			break;
		uint64_t wait_ns = STANDIN_IDLE_NS;
		if (seen != UINT64_MAX) {
			/* A call is being watched: look again once it has run a full period
			 * (a bell that rings meanwhile does not shorten that). */
			uint64_t ran = wait_now_ns() - seen_ns;
			wait_ns = ran < STANDIN_POLL_NS ? STANDIN_POLL_NS - ran : 0;
		}
		if (wait_ns)
			wait_futex_wait(h->bell.bell, bell, wait_ns);
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
			continue;
		}
		if (wait_now_ns() - seen_ns < STANDIN_POLL_NS)
			continue; /* woken early: the full period first */
		/* The same call as a period ago: take over, unless it returns meanwhile. */
		atomic_store_explicit(&g->taken, 1, memory_order_relaxed);
		heavy_barrier(g);
		if (atomic_load_explicit(&g->in_call, memory_order_relaxed) &&
		    atomic_load_explicit(&g->calls, memory_order_relaxed) == calls) {
			atomic_thread_fence(memory_order_acquire);
			if (!stand_in(h)) {
				/* The run is over and the generator is still in its call. */
				h->gen_stuck = true;
				int rc = h->finish(h);
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

int standin_start(struct host *h)
{
	struct gate *g = &h->gate;
	static int registered = -1;
	if (registered < 0)
		registered = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
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
	wait_ring(h->bell); /* the stand-in sleeps on the host's bell */
	pthread_join(h->standin, NULL);
	h->standin_running = false;
}

void standin_wait(struct host *h)
{
	struct gate *g = &h->gate;
	/* The stand-in may sleep in the loop's wait: it wakes for the host's bell. */
	wait_ring(h->bell);
	while (atomic_load_explicit(&g->taken, memory_order_acquire))
		wait_futex_wait(&g->taken, 1, 0);
}
