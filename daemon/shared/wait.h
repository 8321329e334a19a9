/* SPDX-License-Identifier: MIT */
/*
 * Waking and sleeping across processes without lost wake-ups.
 *
 * A sleeper reads the bell, raises its sleeping flag, fences, re-checks its condition,
 * and only then sleeps on the bell (FUTEX_WAIT returns at once if the bell moved). A
 * waker publishes its data, fences, and rings the bell only if the flag is up. Either
 * the sleeper's re-check sees the data or the waker sees the flag: the two fences make
 * it one or the other (Dekker), so no wake-up is lost, and a busy peer never pays for
 * a syscall.
 *
 * Waiting is staged: spin briefly, then yield the CPU, then sleep. A syscall per
 * message would cap the rings far below what they can do, while sleeping at once
 * costs a futex round trip per burst; pure spinning starves the other processes on a
 * machine with fewer cores than processes.
 */
#ifndef GPUD_WAIT_H
#define GPUD_WAIT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "shm_layout.h"

/* A sleeper's bell (the futex word; wakers bump it) and its sleeping flag (only the
 * sleeper writes it). They may live in different memory: each where its writer may
 * write. `tell`, when set, is another futex word the sleeper bumps and wakes as it goes
 * to sleep (after the spin and the yields), for whoever wants to know that it ran out
 * of work: a worker tells the host's bell, so the host loop's stand-in looks at once
 * (standin.h). */
struct wait_bell {
	_Atomic uint32_t *bell;
	_Atomic uint32_t *sleeping;
	_Atomic uint32_t *tell;
};

/* Wakes the sleeper, whether or not it sleeps. Call after publishing. */
void wait_ring(struct wait_bell d);

/* Inline fast path: wakes the sleeper only if its flag is up; most calls find nobody
 * asleep. */
static inline void wait_ring_fast(struct wait_bell d)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(d.sleeping, memory_order_relaxed))
		wait_ring(d);
}

typedef bool (*wait_ready_fn)(void *ctx);

/*
 * Waits until ready(ctx) is true, the bell rings, or the CLOCK_MONOTONIC deadline
 * (nanoseconds; 0 = none) passes: spins, yields, then sleeps on d.bell. Returns true when
 * ready(ctx) was seen true. ready() must be cheap and side-effect free.
 */
bool wait_until(struct wait_bell d, wait_ready_fn ready, void *ctx, uint64_t deadline_ns);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t wait_now_ns(void);
/* The time from `then` to `now`, 0 when `then` is later (a clock read before another
 * thread set `then`): no elapsed time can wrap around. */
static inline uint64_t wait_since(uint64_t now, uint64_t then)
{
	return now > then ? now - then : 0;
}

/* Raw futex wake of every waiter on `word`. Async-signal-safe. */
void wait_futex_wake(_Atomic uint32_t *word);
/* Raw futex wait while *word == seen, for at most timeout_ns (0: no limit). */
void wait_futex_wait(_Atomic uint32_t *word, uint32_t seen, uint64_t timeout_ns);

#endif /* GPUD_WAIT_H */
