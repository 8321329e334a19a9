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

/* How often the stand-in looks; a call seen running at two looks in a row is stuck,
 * so the loop is taken over 1 to 2 periods after a call blocks. */
#define STANDIN_POLL_NS 500000u

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
	struct host_worker *w = h->filling;
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
	uint64_t seen = UINT64_MAX;
	while (!atomic_load_explicit(&g->ending, memory_order_acquire)) {
		wait_futex_wait(&g->ending, 0, STANDIN_POLL_NS);
		if (atomic_load_explicit(&g->ending, memory_order_acquire))
			break;
		uint64_t calls = atomic_load_explicit(&g->calls, memory_order_relaxed);
		if (calls != seen || !atomic_load_explicit(&g->in_call, memory_order_relaxed)) {
			seen = calls;
			continue;
		}
		/* The same call as last time: take over, unless it returns meanwhile. */
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
	atomic_store_explicit(&h->gate.ending, 1, memory_order_release);
	wait_futex_wake(&h->gate.ending);
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
