/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "wait.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Spinning longer than a few microseconds only steals the CPU from the peer we wait
 * for; after the spin, yielding keeps latency low while the peer is mid-burst, and
 * past YIELD_NS of idleness the peer is plainly not coming back soon: sleep. */
#define SPIN_ROUNDS 64
#define YIELD_NS 60000u

uint64_t wait_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void wait_futex_wake(_Atomic uint32_t *word)
{
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void wait_ring(struct wait_bell d)
{
	atomic_fetch_add_explicit(d.bell, 1, memory_order_seq_cst);
	wait_futex_wake(d.bell);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

void wait_futex_wait(_Atomic uint32_t *word, uint32_t seen, uint64_t timeout_ns)
{
	struct timespec ts = {(time_t)(timeout_ns / 1000000000u), (long)(timeout_ns % 1000000000u)};
	/* EAGAIN (the word moved), EINTR (a signal: the caller looks at its flags) and
	 * ETIMEDOUT all mean: go and look again. */
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, seen, timeout_ns ? &ts : NULL, NULL, 0);
}

static void futex_sleep(_Atomic uint32_t *word, uint32_t seen, uint64_t deadline_ns)
{
	uint64_t left = 0;
	if (deadline_ns) {
		uint64_t now = wait_now_ns();
		left = deadline_ns > now ? deadline_ns - now : 0;
		if (left == 0)
			return;
	}
	wait_futex_wait(word, seen, left);
}

bool wait_until(struct wait_bell d, wait_ready_fn ready, void *ctx, uint64_t deadline_ns)
{
	for (int i = 0; i < SPIN_ROUNDS; i++) {
		if (ready(ctx))
			return true;
		cpu_relax();
	}
	uint64_t start = wait_now_ns();
	for (;;) {
		if (ready(ctx))
			return true;
		uint64_t now = wait_now_ns();
		if (deadline_ns && now >= deadline_ns)
			return false;
		if (now - start >= YIELD_NS)
			break;
		sched_yield();
	}

	uint32_t seen = atomic_load_explicit(d.bell, memory_order_seq_cst);
	atomic_store_explicit(d.sleeping, 1, memory_order_seq_cst);
	atomic_thread_fence(memory_order_seq_cst);
	bool ok = ready(ctx);
	if (!ok) {
		if (d.tell) {
			atomic_fetch_add_explicit(d.tell, 1, memory_order_relaxed);
			wait_futex_wake(d.tell);
		}
		futex_sleep(d.bell, seen, deadline_ns);
		ok = ready(ctx);
	}
	atomic_store_explicit(d.sleeping, 0, memory_order_relaxed);
	return ok;
}
