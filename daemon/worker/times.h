/* SPDX-License-Identifier: MIT */
/*
 * Where a worker's time goes (shm_layout.h, struct shm_times) and how its tasks are
 * timed. Each reading of the clock the worker makes anyway (after a wait, after a call
 * or a stretch of tiny calls) ends a stretch of time, which goes to the phase it was
 * spent in; so the phases add up to the time from the process's start to the last
 * reading. Calls that take over TINY_NS a task have two readings more (before the call,
 * after its results are handed over) to tell gpud's work apart from the user's.
 *
 * Every function here runs on the task loop's way (a few per call), so they are inline:
 * the loop compiles as it did when they sat beside it. Owned by the loop's thread; the
 * report block's figures they write (`out`) are read by the host.
 */
#ifndef GPUD_WORKER_TIMES_H
#define GPUD_WORKER_TIMES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <time.h>

#include <gpud/plugin.h>

#include "shm_layout.h"
#include "wait.h"

_Static_assert(GPUD_CALL_BUCKETS == SHM_CALL_BUCKETS, "call buckets: one count");

/* Reading the clock costs about as much as gpud's own work for a no-op task (~20 ns,
 * more in a VM), so tiny tasks are timed in stretches. After a call that took under
 * TINY_NS a task, the next calls are not timed one by one, for up to TINY_RUN tasks and
 * only while the coarse clock (a few ns to read) has not ticked: their results carry
 * the last measured average, and the call that ends the stretch is timed with the
 * whole stretch. busy_since_ns stays at the stretch's start, which is less than one
 * coarse tick early; the host's timeouts allow that tick (lifecycle_timeouts).
 * A call that takes longer than a tick ends the stretch, so longer tasks are timed one
 * by one. */
#define TINY_NS 2000u
#define TINY_RUN 32u

/* Task timing (TINY_NS). */
struct task_clock {
	uint64_t timed_ns;     /* the last reading of the clock */
	uint64_t timed_coarse; /* the coarse clock at that reading */
	uint32_t untimed;      /* tasks finished since */
	bool tiny;             /* the last timed tasks took under TINY_NS each */
	double tiny_each;      /* their seconds per task */
};

#define CALLS_DIRTY (1u << 31)

/* The reading of the clock charged last, the phases so far, the calls by size, and
 * what the plugin said of its last calls (gpud_call_times) that is not yet taken from
 * the user's time; `out` the report block's figures, where they are published. */
struct times {
	struct shm_times *out;
	uint64_t mark;
	uint64_t ph[PH_COUNT];
	uint64_t by_size[SHM_CALL_BUCKETS]; /* calls by size (bucket) */
	uint32_t call_min, call_max;
	uint64_t items;
	uint64_t plug_unpack, plug_pack;
	uint64_t cpu_read_ns; /* when the CPU times were last read */
	/* CPU time in the user's calls (times_user_begins): the thread's CPU clock at the
	 * start of a sampled call, and the calls sampled so far, their CPU and wall time */
	uint64_t cpu_from;
	bool cpu_on;
	uint32_t cpu_skip;
	uint64_t s_cpu, s_wall;
	uint32_t dirty;       /* phases (bits 0..PH_COUNT-1) and call figures (CALLS_DIRTY)
			       * changed since the report block was written */
	uint32_t dirty_calls; /* the buckets of calls that changed meanwhile */
};

static inline uint64_t coarse_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Reads the clock and starts timing from now. */
static inline uint64_t clock_restart(struct task_clock *c)
{
	c->timed_ns = wait_now_ns();
	c->timed_coarse = coarse_ns();
	c->untimed = 0;
	return c->timed_ns;
}

/* The time after a call that ran n tasks (TINY_NS); *each: seconds per task. */
static inline uint64_t clock_after(struct task_clock *c, uint32_t n, uint64_t now, double *each)
{
	c->untimed += n;
	if (c->tiny && c->untimed < TINY_RUN && coarse_ns() == c->timed_coarse) {
		*each = c->tiny_each;
		return now;
	}
	uint64_t end = wait_now_ns();
	*each = (double)(end - c->timed_ns) * 1e-9 / c->untimed;
	c->tiny = *each < TINY_NS * 1e-9;
	c->tiny_each = *each;
	c->timed_ns = end;
	c->timed_coarse = coarse_ns();
	c->untimed = 0;
	return end;
}

/* ns of CPU time of `who` (RUSAGE_SELF: the process, RUSAGE_THREAD: this thread) */
static inline uint64_t cpu_ns(int who)
{
	struct rusage ru;
	if (getrusage(who, &ru) < 0)
		return 0;
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000u +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000u;
}

/* ns of CPU time of the calling thread: a system call (about 0.5 us in a VM), so only
 * around calls that are sampled (times_user_begins). */
static inline uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A call of the user's begins (after the charge of what came before it): its thread's
 * CPU time is measured around it when `sample`, until the charge of the user's time
 * that ends it. The calls not sampled are counted at the sampled ones' share of CPU
 * in their time (times_publish). */
#define CPU_EACH_NS 50000u /* calls at least this long are measured every one */
#define CPU_SAMPLE 64u     /* shorter ones, one in this many */
static inline void times_user_begins(struct times *t, uint64_t last_call_ns)
{
	t->cpu_on = last_call_ns >= CPU_EACH_NS || ++t->cpu_skip % CPU_SAMPLE == 0;
	if (t->cpu_on)
		t->cpu_from = thread_cpu_ns();
}

/* The CPU times, when 10 ms have passed since they were read (or `force`): two system
 * calls, so never on every task's way. */
static inline void times_cpu(struct times *t, uint64_t now, bool force)
{
	if (!force && now - t->cpu_read_ns < 10000000u)
		return;
	t->cpu_read_ns = now;
	atomic_store_explicit(&t->out->cpu_ns, cpu_ns(RUSAGE_SELF), memory_order_relaxed);
	atomic_store_explicit(&t->out->main_cpu_ns, cpu_ns(RUSAGE_THREAD), memory_order_relaxed);
}

/* Writes the call figures that changed into the report block (a few stores). Done
 * before results are published too, so that every result the host has was counted in
 * a call, whatever happens to the process next. */
static inline void times_publish_calls(struct times *t)
{
	struct shm_times *o = t->out;
	for (uint32_t m = t->dirty_calls; m; m &= m - 1) {
		unsigned b = (unsigned)__builtin_ctz(m);
		atomic_store_explicit(&o->calls[b], t->by_size[b], memory_order_relaxed);
	}
	t->dirty_calls = 0;
	atomic_store_explicit(&o->call_min, t->call_min, memory_order_relaxed);
	atomic_store_explicit(&o->call_max, t->call_max, memory_order_relaxed);
	atomic_store_explicit(&o->items, t->items, memory_order_relaxed);
	t->dirty &= ~CALLS_DIRTY;
}

/* Writes what changed into the report block: a few stores a call. */
static inline void times_publish(struct times *t)
{
	struct shm_times *o = t->out;
	times_cpu(t, t->mark, false);
	for (unsigned p = 0; p < PH_COUNT; p++)
		if (t->dirty & (1u << p))
			atomic_store_explicit(&o->phase_ns[p], t->ph[p], memory_order_relaxed);
	if (t->dirty & (1u << PH_USER) && t->s_wall) {
		double share = (double)t->s_cpu / (double)t->s_wall;
		uint64_t cpu = (uint64_t)((double)t->ph[PH_USER] * (share < 1 ? share : 1));
		atomic_store_explicit(&o->user_cpu_ns, cpu, memory_order_relaxed);
	}
	if (t->dirty & CALLS_DIRTY)
		times_publish_calls(t);
	t->dirty = 0;
	atomic_store_explicit(&o->end_ns, t->mark, memory_order_release);
}

/* The time from the last reading to `now` was spent in phase p. The user's time first
 * gives the plugin's own unpacking and packing (gpud_call_times) to theirs. */
static inline void times_charge(struct times *t, enum shm_phase p, uint64_t now)
{
	uint64_t d = wait_since(now, t->mark);
	uint64_t whole = d;
	if (p == PH_USER && (t->plug_unpack | t->plug_pack)) {
		uint64_t u = t->plug_unpack < d ? t->plug_unpack : d;
		uint64_t k = t->plug_pack < d - u ? t->plug_pack : d - u;
		t->ph[PH_UNPACK] += u;
		t->ph[PH_HANDBACK] += k;
		d -= u + k;
		t->plug_unpack = t->plug_pack = 0;
		t->dirty |= 1u << PH_UNPACK | 1u << PH_HANDBACK;
	}
	if (t->cpu_on && p == PH_USER && whole) {
		/* A sampled call: the plugin's own unpacking and packing, given above to
		 * theirs, take their share of its CPU time with them. */
		uint64_t c = thread_cpu_ns() - t->cpu_from;
		t->s_cpu += (uint64_t)((double)c * (double)d / (double)whole);
		t->s_wall += d;
	}
	t->cpu_on = false;
	t->ph[p] += d;
	t->dirty |= 1u << p;
	if (now > t->mark)
		t->mark = now;
	times_publish(t);
}

/* Reads the clock and charges phase p with the time since the last reading. */
static inline uint64_t times_charge_now(struct times *t, enum shm_phase p)
{
	uint64_t now = wait_now_ns();
	times_charge(t, p, now);
	return now;
}

static inline void times_count_size(struct times *t, uint32_t n, uint64_t times)
{
	unsigned b = gpud_call_bucket(n);
	t->by_size[b] += times;
	t->dirty_calls |= 1u << b;
	t->items += n * times;
	t->dirty |= CALLS_DIRTY;
	if (!t->call_min || n < t->call_min)
		t->call_min = n;
	if (n > t->call_max)
		t->call_max = n;
}

/* A call of n tasks returned; `first` is the task array it was given. */
static inline void times_count_call(struct times *t, uint32_t n, const struct gpud_task *first)
{
	const struct gpud_call_times *ct = first->reserved[0];
	t->dirty |= CALLS_DIRTY;
	if (__builtin_expect(ct == NULL, 1)) {
		unsigned b = gpud_call_bucket(n);
		t->by_size[b]++;
		t->dirty_calls |= 1u << b;
		t->items += n;
		if (__builtin_expect(n < t->call_min || !t->call_min, 0))
			t->call_min = n;
		if (__builtin_expect(n > t->call_max, 0))
			t->call_max = n;
		return;
	}
	t->plug_unpack += ct->unpack_ns;
	t->plug_pack += ct->pack_ns;
	bool own = ct->counted != 0;
	for (unsigned b = 0; b < GPUD_CALL_BUCKETS; b++)
		own |= ct->calls[b] != 0;
	if (!own) {
		times_count_size(t, n, 1);
		return;
	}
	/* The plugin's own calls (several items a task): counted by their sizes. */
	for (unsigned b = 0; b < GPUD_CALL_BUCKETS; b++) {
		t->by_size[b] += ct->calls[b];
		t->dirty_calls |= ct->calls[b] ? 1u << b : 0;
	}
	if (ct->min_items && (!t->call_min || ct->min_items < t->call_min))
		t->call_min = ct->min_items;
	if (ct->max_items > t->call_max)
		t->call_max = ct->max_items;
	t->items += ct->items;
}

#endif
