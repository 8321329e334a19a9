/* SPDX-License-Identifier: MIT */
/*
 * gpud-worker: the process that runs a worker plugin. The host starts one per (GPU,
 * slot) by exec, with CUDA_VISIBLE_DEVICES, GPUD_GPU_ID and GPUD_WORKER_ID already in
 * its environment, the run memfd read-only as fd 3, its own out memfd as fd 4, the
 * host's bell page as fd 5 and a pipe from the host as fd 6.
 *
 *   gpud-worker --run INDEX HOST_PID      run as worker INDEX of the run (descriptors 3-6:
 *                                         shm_layout.h)
 *   gpud-worker --run INDEX HOST_PID --stage K   the same, as a worker of CPU stage K
 *                                         ([stage.NAME], its plugin and keys: memory.c)
 *   gpud-worker --check PLUGIN            load PLUGIN as a worker plugin and report
 *   gpud-worker --count-gpus              print the number of CUDA devices (gpus = all)
 *   gpud-worker --describe PLUGIN         print kind, name, version, description (gpud plugins)
 *
 * Loading worker plugins only here keeps the host free of whatever they link (CUDA).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "loader.h"
#include "ring.h"
#include "gpus.h"
#include "output.h"
#include "tools.h"
#include "wait.h"

/* Publish results at least this often, and every PUBLISH_BURST results, so the host
 * sees results of long tasks at once and short ones in cheap bursts. */
#define PUBLISH_BURST 32
#define PUBLISH_NS 100000u
/* A call that runs longer than this has the results before it published by the
 * watcher thread (watch_host): finished results never wait behind a long or hung call,
 * where a kill would have them run again and a drain count them as not run. */
#define HELD_NS 20000000u

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

_Static_assert(GPUD_CALL_BUCKETS == SHM_CALL_BUCKETS, "call buckets: one count");

/* One entry of the tasks in flight. */
struct flight {
	uint64_t from, to; /* its task's record in the task ring: [from, to) */
	uint64_t since;    /* when it was submitted */
	enum { FLY_FREE, FLY_RUNNING, FLY_DONE } state;
};

struct worker {
	const struct shm_header *hdr;
	const struct shm_feed *feed; /* read-only: the host's */
	struct shm_report *rep;      /* ours: the host checks everything in it */
	struct wait_bell host_bell, my_bell;
	struct ring tasks, results;
	uint64_t task_tail;   /* private: next task record to read */
	uint64_t task_head;   /* cached from ctl->task_head */
	uint64_t result_head; /* private: next result record to write */
	uint64_t result_tail; /* cached from ctl->result_tail */
	uint64_t result_need; /* bytes reserved for one result slot, gap included */
	unsigned pending;     /* results written, not yet published */
	/* result_head as of the last call's end, for the watcher to publish while a call
	 * runs long (its own line: the watcher reads it every HELD_NS) */
	_Alignas(64) _Atomic uint64_t committed;
	/* Timeouts ended in place (ABI 1.5, gpud_worker_interrupt): call_seq is odd while a
	 * call of the plugin runs (written by the loop around each call), `interrupting`
	 * the call_seq of a call the watcher is interrupting (0: none), `interrupted` the
	 * last call it interrupted. A call ends only once no interrupt of it is under way
	 * (call_ends), so the plugin is never asked to interrupt a call that has ended. */
	_Alignas(64) _Atomic uint64_t call_seq;
	_Atomic uint64_t interrupting;
	_Atomic uint64_t interrupted;
	_Alignas(64) char committed_end;
	bool waited;           /* the clock read last is stale: we waited since */
	bool interrupts;       /* the plugin ends a call past task_timeout itself */
	bool cut;              /* the call (or one of its split parts) was interrupted */
	uint64_t interrupt_ns; /* when: task_timeout plus one coarse tick (as the host) */
	uint64_t calls;        /* the loop's copy of call_seq */
	uint64_t published_ns;

	/* task timing (TINY_NS) */
	uint64_t timed_ns;     /* the last reading of the clock */
	uint64_t timed_coarse; /* the coarse clock at that reading */
	uint32_t untimed;      /* tasks finished since */
	bool tiny;             /* the last timed tasks took under TINY_NS each */
	double tiny_each;      /* their seconds per task */

	struct plugin plugin; /* its table: plugin.worker */
	void *state;
	struct gpud_kv *kv;
	struct gpud_args args;
	bool cpu_stage; /* --stage K: a CPU stage's worker */
	uint64_t flags; /* GPUD_WORKER_* */

	/* one call's tasks: batch_size of each */
	uint32_t batch;
	struct gpud_task *t;
	struct shm_rec **in, **out;
	uint64_t *out_pos; /* ring position of each result slot */
	struct gpud_error *err;
	char fatal[SHM_MSG_MAX];
	bool tainted; /* the plugin wrote before a result buffer: replace this process */

	/* batches that fit (ABI 1.4; refit): the batch size as adapted to out of memory */
	bool oom_abi;           /* the plugin is 1.4 or newer: GPUD_OOM means out of memory */
	uint32_t batch_cap;     /* the most tasks the next call gets: 1..batch */
	uint32_t shown;         /* the batch size the host is told: batch_cap once a call of
				 * that many fitted (a step up is tried before it is said) */
	uint32_t fitted;        /* the largest call that fitted since the cap last fell */
	uint32_t full_runs;     /* calls of batch_cap tasks that fitted since it last changed */
	uint32_t grow_after;    /* full calls that fit before the cap grows a step */
	uint32_t bad;           /* the smallest call that ran out of memory, last time */
	uint32_t oom_splits;    /* calls that ran out of memory and were split */
	uint32_t *idx;          /* 2 x batch: an out-of-memory call's tasks, and scratch */
	struct gpud_task *part; /* batch: a part's tasks when they are not side by side */
	/* Tasks in flight (gpud_worker_submit/poll; flight 0: process or process_batch).
	 * The arrays above are then a ring of `held` entries in submit order, the task of
	 * sequence number q in entry q % held: [oldest, next) are held (not yet published),
	 * `running` of them with the plugin, `first_running` the oldest of those
	 * (run_in_flight). */
	uint32_t flight, held, running;
	uint64_t oldest, next, first_running;
	uint64_t reserved_head; /* past the last result slot reserved */
	struct flight *fly;     /* per entry: its task's ring positions, submit time, state */
	struct gpud_task **done;
	uint32_t culprit; /* the entry whose task ended this process (fatal, tainted) */

	/* Where the time goes (shm_times): the reading of the clock charged last, the
	 * phases so far, the calls by size, and what the plugin said of its last calls
	 * (gpud_call_times) that is not yet taken from the user's time. */
	uint64_t mark;
	uint64_t ph[PH_COUNT];
	uint64_t by_size[SHM_CALL_BUCKETS]; /* calls by size (bucket) */
	uint32_t call_min, call_max;
	uint64_t items;
	uint64_t plug_unpack, plug_pack;
	uint64_t cpu_read_ns; /* when the CPU times were last read */
	uint32_t dirty;       /* phases (bits 0..PH_COUNT-1) and call figures (CALLS_DIRTY)
			       * changed since the report block was written */
	uint32_t dirty_calls; /* the buckets of calls that changed meanwhile */
};

#define CALLS_DIRTY (1u << 31)

/* Set in every child the plugin forks (pthread_atfork). Such a child has none of the
 * run's shared memory: every shared mapping is MADV_DONTFORK, so it has no rings, no
 * report block and no bells, however it was made. One that returns into our code (a
 * failed exec) leaves quietly here instead of faulting on the first ring it reaches.
 * A plain load after each call into the plugin: no syscall on the way of a task. */
static bool forked_child;

static void on_fork_child(void)
{
	forked_child = true;
}

static inline void leave_if_forked(void)
{
	if (__builtin_expect(forked_child, 0))
		_exit(0);
}

static uint64_t coarse_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Reads the clock and starts timing from now. */
static uint64_t clock_restart(struct worker *w)
{
	w->timed_ns = wait_now_ns();
	w->timed_coarse = coarse_ns();
	w->untimed = 0;
	return w->timed_ns;
}

/* The time after a call that ran n tasks (TINY_NS); *each: seconds per task. */
static uint64_t clock_after(struct worker *w, uint32_t n, uint64_t now, double *each)
{
	w->untimed += n;
	if (w->tiny && w->untimed < TINY_RUN && coarse_ns() == w->timed_coarse) {
		*each = w->tiny_each;
		return now;
	}
	uint64_t end = wait_now_ns();
	*each = (double)(end - w->timed_ns) * 1e-9 / w->untimed;
	w->tiny = *each < TINY_NS * 1e-9;
	w->tiny_each = *each;
	w->timed_ns = end;
	w->timed_coarse = coarse_ns();
	w->untimed = 0;
	return end;
}

/* Around every call of process() or process_batch() of a plugin that interrupts
 * (w->interrupts): call_seq odd from here until call_ends. */
static inline void call_begins(struct worker *w)
{
	if (w->interrupts)
		atomic_store(&w->call_seq, ++w->calls);
}

/* The call returned: call_seq even, then waits out an interrupt of it that the watcher
 * began before it saw the change (a moment: gpud_worker_interrupt returns at once).
 * Notes in w->cut whether the call was interrupted. */
static inline void call_ends(struct worker *w)
{
	if (!w->interrupts)
		return;
	uint64_t s = w->calls++;
	atomic_store(&w->call_seq, w->calls);
	while (atomic_load(&w->interrupting) == s)
		sched_yield();
	if (atomic_load_explicit(&w->interrupted, memory_order_relaxed) == s)
		w->cut = true;
}

/* ---- Where the time goes (shm_layout.h, struct shm_times) ----
 *
 * Each reading of the clock the worker makes anyway (after a wait, after a call or a
 * stretch of tiny calls) ends a stretch of time, which goes to the phase it was spent
 * in; so the phases add up to the time from the process's start to the last reading.
 * Calls that take over TINY_NS a task have two readings more (before the call, after
 * its results are handed over) to tell gpud's work apart from the user's. */

/* ns of CPU time of `who` (RUSAGE_SELF: the process, RUSAGE_THREAD: this thread) */
static uint64_t cpu_ns(int who)
{
	struct rusage ru;
	if (getrusage(who, &ru) < 0)
		return 0;
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000u +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000u;
}

/* The CPU times, when 10 ms have passed since they were read (or `force`): two system
 * calls, so never on every task's way. */
static void times_cpu(struct worker *w, uint64_t now, bool force)
{
	if (!force && now - w->cpu_read_ns < 10000000u)
		return;
	w->cpu_read_ns = now;
	atomic_store_explicit(&w->rep->times.cpu_ns, cpu_ns(RUSAGE_SELF), memory_order_relaxed);
	atomic_store_explicit(&w->rep->times.main_cpu_ns, cpu_ns(RUSAGE_THREAD),
			      memory_order_relaxed);
}

/* Writes the call figures that changed into the report block (a few stores). Done
 * before results are published too, so that every result the host has was counted in
 * a call, whatever happens to the process next. */
static void times_publish_calls(struct worker *w)
{
	struct shm_times *t = &w->rep->times;
	for (uint32_t m = w->dirty_calls; m; m &= m - 1) {
		unsigned b = (unsigned)__builtin_ctz(m);
		atomic_store_explicit(&t->calls[b], w->by_size[b], memory_order_relaxed);
	}
	w->dirty_calls = 0;
	atomic_store_explicit(&t->call_min, w->call_min, memory_order_relaxed);
	atomic_store_explicit(&t->call_max, w->call_max, memory_order_relaxed);
	atomic_store_explicit(&t->items, w->items, memory_order_relaxed);
	w->dirty &= ~CALLS_DIRTY;
}

/* Writes what changed into the report block: a few stores a call. */
static void times_publish(struct worker *w)
{
	struct shm_times *t = &w->rep->times;
	times_cpu(w, w->mark, false);
	for (unsigned p = 0; p < PH_COUNT; p++)
		if (w->dirty & (1u << p))
			atomic_store_explicit(&t->phase_ns[p], w->ph[p], memory_order_relaxed);
	if (w->dirty & CALLS_DIRTY)
		times_publish_calls(w);
	w->dirty = 0;
	atomic_store_explicit(&t->end_ns, w->mark, memory_order_release);
}

/* The time from the last reading to `now` was spent in phase p. The user's time first
 * gives the plugin's own unpacking and packing (gpud_call_times) to theirs. */
static void charge(struct worker *w, enum shm_phase p, uint64_t now)
{
	uint64_t d = wait_since(now, w->mark);
	if (p == PH_USER && (w->plug_unpack | w->plug_pack)) {
		uint64_t u = w->plug_unpack < d ? w->plug_unpack : d;
		uint64_t k = w->plug_pack < d - u ? w->plug_pack : d - u;
		w->ph[PH_UNPACK] += u;
		w->ph[PH_HANDBACK] += k;
		d -= u + k;
		w->plug_unpack = w->plug_pack = 0;
		w->dirty |= 1u << PH_UNPACK | 1u << PH_HANDBACK;
	}
	w->ph[p] += d;
	w->dirty |= 1u << p;
	if (now > w->mark)
		w->mark = now;
	times_publish(w);
}

/* Reads the clock and charges phase p with the time since the last reading. */
static uint64_t charge_now(struct worker *w, enum shm_phase p)
{
	uint64_t now = wait_now_ns();
	charge(w, p, now);
	return now;
}

static void count_size(struct worker *w, uint32_t n, uint64_t times)
{
	unsigned b = gpud_call_bucket(n);
	w->by_size[b] += times;
	w->dirty_calls |= 1u << b;
	w->items += n * times;
	w->dirty |= CALLS_DIRTY;
	if (!w->call_min || n < w->call_min)
		w->call_min = n;
	if (n > w->call_max)
		w->call_max = n;
}

/* A call of n tasks returned; `first` is the task array it was given. */
static void count_call(struct worker *w, uint32_t n, const struct gpud_task *first)
{
	const struct gpud_call_times *ct = first->reserved[0];
	w->dirty |= CALLS_DIRTY;
	if (__builtin_expect(ct == NULL, 1)) {
		unsigned b = gpud_call_bucket(n);
		w->by_size[b]++;
		w->dirty_calls |= 1u << b;
		w->items += n;
		if (__builtin_expect(n < w->call_min || !w->call_min, 0))
			w->call_min = n;
		if (__builtin_expect(n > w->call_max, 0))
			w->call_max = n;
		return;
	}
	w->plug_unpack += ct->unpack_ns;
	w->plug_pack += ct->pack_ns;
	bool own = ct->counted != 0;
	for (unsigned b = 0; b < GPUD_CALL_BUCKETS; b++)
		own |= ct->calls[b] != 0;
	if (!own) {
		count_size(w, n, 1);
		return;
	}
	/* The plugin's own calls (several items a task): counted by their sizes. */
	for (unsigned b = 0; b < GPUD_CALL_BUCKETS; b++) {
		w->by_size[b] += ct->calls[b];
		w->dirty_calls |= ct->calls[b] ? 1u << b : 0;
	}
	if (ct->min_items && (!w->call_min || ct->min_items < w->call_min))
		w->call_min = ct->min_items;
	if (ct->max_items > w->call_max)
		w->call_max = ct->max_items;
	w->items += ct->items;
}

/* A wait for tasks starts: the time before it was the user's (tiny calls) or gpud's
 * handing back; the wait is starving, or idle once the generator has ended. */
static enum shm_phase wait_phase(const struct worker *w)
{
	return atomic_load_explicit(&w->feed->drained, memory_order_relaxed) ? PH_IDLE : PH_WAIT;
}

static void set_state(struct worker *w, enum shm_worker_state s, const char *msg)
{
	if (msg)
		snprintf(w->rep->message, sizeof w->rep->message, "%s", msg);
	atomic_store_explicit(&w->rep->state, s, memory_order_release);
	wait_ring_fast(w->host_bell);
}

static void publish(struct worker *w, uint64_t now)
{
	if (w->dirty & CALLS_DIRTY)
		times_publish_calls(w); /* before the results they count */
	atomic_store_explicit(&w->rep->result_head, w->result_head, memory_order_release);
	wait_ring_fast(w->host_bell);
	w->pending = 0;
	w->published_ns = now;
}

static bool task_or_stop(void *ctx)
{
	struct worker *w = ctx;
	return atomic_load_explicit(&w->feed->task_head, memory_order_acquire) != w->task_tail ||
	       atomic_load_explicit(&w->feed->stop, memory_order_acquire);
}

static bool more_tasks(void *ctx)
{
	struct worker *w = ctx;
	return atomic_load_explicit(&w->feed->task_head, memory_order_acquire) != w->task_head;
}

static bool result_space(void *ctx)
{
	struct worker *w = ctx;
	return atomic_load_explicit(&w->feed->result_tail, memory_order_acquire) != w->result_tail;
}

/* The next task record, waiting for one; NULL when told to stop and none is left. */
static struct shm_rec *next_task(struct worker *w, uint64_t *now)
{
	for (;;) {
		struct shm_rec *t = ring_peek(&w->tasks, &w->task_tail, w->task_head);
		if (t)
			return t;
		w->task_head = atomic_load_explicit(&w->feed->task_head, memory_order_acquire);
		if (w->task_head != w->task_tail)
			continue;
		/* Dry: hand over what we have before waiting. */
		if (w->pending)
			publish(w, *now);
		atomic_store_explicit(&w->rep->busy_since_ns, 0, memory_order_relaxed);
		if (atomic_load_explicit(&w->feed->stop, memory_order_acquire)) {
			w->task_head =
				atomic_load_explicit(&w->feed->task_head, memory_order_acquire);
			if (w->task_head == w->task_tail)
				return NULL;
			continue;
		}
		w->waited = true;
		charge_now(w, w->tiny ? PH_USER : PH_HANDBACK);
		enum shm_phase p = wait_phase(w);
		wait_until(w->my_bell, task_or_stop, w, 0);
		*now = charge_now(w, p);
	}
}

/* Room for one more result at *head (the private head of this call's slots). */
/* Room for one more result slot at *head (the private head of this call's slots). */
static struct shm_rec *reserve_result(struct worker *w, uint64_t *head)
{
	for (;;) {
		struct shm_rec *r = ring_reserve(&w->results, head, w->result_tail, w->result_need);
		if (r)
			return r;
		w->result_tail = atomic_load_explicit(&w->feed->result_tail, memory_order_acquire);
		r = ring_reserve(&w->results, head, w->result_tail, w->result_need);
		if (r)
			return r;
		/* Full: the host must see our results to free space. */
		publish(w, charge_now(w, w->tiny ? PH_USER : PH_UNPACK));
		atomic_store_explicit(&w->rep->busy_since_ns, 0, memory_order_relaxed);
		w->waited = true;
		wait_until(w->my_bell, result_space, w, 0);
		charge_now(w, PH_HANDBACK);
		w->result_tail = atomic_load_explicit(&w->feed->result_tail, memory_order_acquire);
	}
}

static _Noreturn void finish(int status);

/* Gathers up to w->batch tasks after `first`, waiting at most batch_wait_ns for more;
 * *end is the ring position after the last one (past any pad between them). */
static uint32_t gather(struct worker *w, struct shm_rec *first, uint64_t *end)
{
	uint32_t n = 0;
	uint64_t pos = w->task_tail;
	uint64_t deadline = 0;
	w->in[n++] = first;
	pos += ring_span(first->size);
	while (n < w->batch_cap) {
		struct shm_rec *t = ring_peek(&w->tasks, &pos, w->task_head);
		if (!t) {
			w->task_head =
				atomic_load_explicit(&w->feed->task_head, memory_order_acquire);
			if (w->task_head != pos)
				continue;
			if (!w->hdr->batch_wait_ns ||
			    atomic_load_explicit(&w->feed->stop, memory_order_acquire))
				break;
			uint64_t now = wait_now_ns();
			if (!deadline)
				deadline = now + w->hdr->batch_wait_ns;
			if (now >= deadline)
				break;
			if (w->pending)
				publish(w, now);
			w->waited = true;
			charge(w, w->tiny ? PH_USER : PH_UNPACK, now);
			wait_until(w->my_bell, more_tasks, w, deadline);
			charge_now(w, PH_WAIT);
			w->task_head =
				atomic_load_explicit(&w->feed->task_head, memory_order_acquire);
			continue;
		}
		w->in[n++] = t;
		pos += ring_span(t->size);
	}
	*end = pos;
	return n;
}

/* Writes task i's result record (and, in a batch slot, a filler over the rest). */
/* The canary: the header line before a result buffer, and a line right after its
 * capacity, hold this pattern while the plugin runs. */
static void arm(struct shm_rec *r, uint32_t capacity)
{
	uint64_t *hdr = (uint64_t *)r;
	uint64_t after[SHM_LINE / 8];
	for (unsigned k = 0; k < SHM_LINE / 8; k++)
		hdr[k] = after[k] = SHM_CANARY;
	memcpy((uint8_t *)ring_payload(r) + capacity, after, sizeof after);
}

enum breach { BREACH_NONE, BREACH_BEFORE, BREACH_AFTER };

/* Which canary the plugin overwrote, if any. */
static enum breach disarm(const struct shm_rec *r, uint32_t capacity)
{
	const uint64_t *hdr = (const uint64_t *)r;
	uint64_t after[SHM_LINE / 8], bad = 0;
	memcpy(after, (const uint8_t *)r + SHM_REC_HDR + capacity, sizeof after);
	for (unsigned k = 0; k < SHM_LINE / 8; k++)
		bad |= hdr[k] ^ SHM_CANARY;
	if (bad)
		return BREACH_BEFORE;
	for (unsigned k = 0; k < SHM_LINE / 8; k++)
		bad |= after[k] ^ SHM_CANARY;
	return bad ? BREACH_AFTER : BREACH_NONE;
}

/* ---- batches that fit (ABI 1.4) ----
 *
 * A call that ran out of memory (it returned GPUD_OOM, or marked tasks with
 * gpud_task_oom) does not fail its tasks: those it did not finish run again on this
 * worker in calls half its size, halving again while a part runs out, down to single
 * tasks; one that runs out alone fails, saying so. Each task keeps its result slot, so
 * the records are written as for any call (finish_result), in task order.
 *
 * Then the batch size (batch_cap) adapts: down at once to the largest call that fitted
 * (or the size that fitted before, when that is below the one that ran out), back up
 * by an eighth (at least one task) after grow_after full calls in a row fit, never
 * above batch_size; the host is told a size once a call of that many fitted.
 * grow_after starts at FIT_GROW_AFTER and doubles each time memory runs out (up to
 * FIT_GROW_MAX), so a worker at its limit seldom tries a size that fails; it is back at
 * FIT_GROW_AFTER once a size that ran out has fitted grow_after times. Only this path
 * pays: a call that fits costs a look at each task's mark. */
#define FIT_GROW_AFTER 16u
#define FIT_GROW_MAX 1024u

/* Task i's struct as the plugin first sees it, pointing at its input and result slot. */
static void task_init(struct worker *w, uint32_t i)
{
	struct shm_rec *t = w->in[i];
	w->err[i].message[0] = '\0';
	w->t[i] = (struct gpud_task){
		.id = t->task_id,
		.input = ring_payload(t),
		.input_size = t->size,
		.result = {.data = ring_payload(w->out[i]),
			   .size = 0,
			   .capacity = w->hdr->max_result_bytes},
		.error = &w->err[i],
		.attempt = (int)t->attempt,
	};
}

/* Whether task i, of a call that returned rc, ran out of memory. */
static bool task_oom(const struct worker *w, uint32_t i, int rc)
{
	int f = w->t[i].failed;
	return f == GPUD_TASK_OOM || (rc == GPUD_OOM && f == 0);
}

static bool any_oom(const struct worker *w, uint32_t n, int rc)
{
	bool oom = rc == GPUD_OOM;
	for (uint32_t i = 0; i < n; i++)
		oom |= w->t[i].failed == GPUD_TASK_OOM;
	return oom;
}

/* The batch size and the splits, for the host (a line written only when they change). */
static void publish_fit(struct worker *w)
{
	atomic_store_explicit(&w->rep->batch_now, w->shown, memory_order_relaxed);
	atomic_store_explicit(&w->rep->oom_splits, w->oom_splits, memory_order_relaxed);
}

/* A call split because it ran out of memory: counted for the host at once, so that a
 * part of it that then ends the worker leaves the splits before it counted. */
static void count_split(struct worker *w)
{
	w->oom_splits++;
	atomic_store_explicit(&w->rep->oom_splits, w->oom_splits, memory_order_relaxed);
}

/* A call of n tasks fitted while the batch size is (or was said to be) below
 * batch_size. */
static void fit_grow(struct worker *w, uint32_t n)
{
	if (n > w->fitted)
		w->fitted = n;
	if (n < w->batch_cap)
		return;
	if (w->shown != w->batch_cap) {
		w->shown = w->batch_cap; /* the step up held */
		publish_fit(w);
	}
	if (w->batch_cap == w->batch || ++w->full_runs < w->grow_after)
		return;
	uint32_t step = w->batch_cap / 8 ? w->batch_cap / 8 : 1;
	if (w->batch_cap >= w->bad)
		w->grow_after = FIT_GROW_AFTER; /* what ran out fits now: memory was freed */
	w->batch_cap = w->batch - w->batch_cap > step ? w->batch_cap + step : w->batch;
	w->full_runs = 0;
}

/* Task i ran out of memory in a call of its own: it fails, saying so (a CPU stage's
 * worker has no GPU: its memory is the machine's). */
static void oom_alone(struct worker *w, uint32_t i)
{
	const char *what =
		w->cpu_stage
			? "out of memory: this task alone does not fit in memory (batch of 1)"
			: "out of memory: this task alone does not fit on the GPU (batch of 1)";
	size_t what_len = strlen(what);
	char *msg = w->err[i].message;
	size_t said = strnlen(msg, sizeof w->err[i].message), room = sizeof w->err[i].message;
	size_t head = what_len + (said ? 2 : 0);
	if (said > room - 1 - head)
		said = room - 1 - head;
	memmove(msg + head, msg, said);
	memcpy(msg, what, what_len);
	if (said)
		memcpy(msg + what_len, ": ", 2);
	msg[head + said] = '\0';
	w->t[i].failed = 1;
}

/* Task i's failure when its call returned rc (other than GPUD_OOM) and did not mark it. */
static void settle(struct worker *w, uint32_t i, int rc)
{
	if (rc == 0 || rc == GPUD_OOM || w->t[i].failed)
		return;
	w->t[i].failed = 1;
	if (!w->err[i].message[0])
		snprintf(w->err[i].message, sizeof w->err[i].message,
			 "process_batch() returned %d without a message", rc);
}

/* After a call over the tasks idx[from, from + m) returned rc: settles those it
 * finished and moves those that ran out of memory, in order, to the end of the range;
 * returns how many did. A task whose canary the call overwrote is finished (its record
 * says so), and *stop is set when the process is to be replaced (a write before a result
 * buffer, gpud_task_fatal): nothing more runs in it. */
static uint32_t sort_out(struct worker *w, uint32_t from, uint32_t m, int rc, bool *stop)
{
	uint32_t *idx = w->idx + from, *oom = w->idx + w->batch, kept = 0, o = 0;
	for (uint32_t j = 0; j < m; j++) {
		uint32_t i = idx[j];
		enum breach b = disarm(w->out[i], w->hdr->max_result_bytes);
		if (b == BREACH_BEFORE || w->t[i].failed == GPUD_TASK_FATAL)
			*stop = true;
		if (b == BREACH_NONE && task_oom(w, i, rc)) {
			oom[o++] = i;
		} else {
			settle(w, i, rc);
			idx[kept++] = i;
		}
	}
	memcpy(idx + kept, oom, o * sizeof *oom);
	return o;
}

/* Runs the tasks idx[from, from + m) again in one call; returns what it returned. */
static int call_part(struct worker *w, uint32_t from, uint32_t m)
{
	const uint32_t *idx = w->idx + from;
	for (uint32_t j = 0; j < m; j++) {
		arm(w->out[idx[j]], w->hdr->max_result_bytes);
		task_init(w, idx[j]);
	}
	/* The plugin takes an array: the part's own when its tasks are side by side. */
	bool side_by_side = idx[m - 1] - idx[0] == m - 1;
	struct gpud_task *t = side_by_side ? &w->t[idx[0]] : w->part;
	for (uint32_t j = 0; !side_by_side && j < m; j++)
		w->part[j] = w->t[idx[j]];
	/* Each call has its own task_timeout. */
	atomic_store_explicit(&w->rep->cur_task, w->t[idx[0]].id, memory_order_relaxed);
	atomic_store_explicit(&w->rep->busy_since_ns, wait_now_ns(), memory_order_relaxed);
	call_begins(w);
	int rc = w->plugin.worker.process_batch(w->state, t, m);
	leave_if_forked();
	call_ends(w);
	count_call(w, m, t);
	for (uint32_t j = 0; !side_by_side && j < m; j++)
		w->t[idx[j]] = w->part[j];
	return rc;
}

/* The first n tasks' call returned rc and ran out of memory: see above. Every task has
 * its outcome in w->t when it returns 0 (for finish_result). */
static int refit(struct worker *w, uint32_t n, int rc)
{
	bool stop = false;
	for (uint32_t i = 0; i < n; i++)
		w->idx[i] = i;
	uint32_t left = sort_out(w, 0, n, rc, &stop), from = n - left;
	uint32_t fit = 0, bad = n, part = (n + 1) / 2;
	if (n == 1 && left) {
		oom_alone(w, w->idx[from++]);
		left--;
	} else if (left) {
		count_split(w);
	}
	while (left) {
		if (stop) {
			for (uint32_t j = from; j < from + left; j++) {
				uint32_t i = w->idx[j];
				w->t[i].failed = 1;
				snprintf(w->err[i].message, sizeof w->err[i].message,
					 "out of memory in a call of %u tasks, and not run again: "
					 "another task of the call ended this worker",
					 n);
			}
			break;
		}
		uint32_t m = left < part ? left : part;
		uint32_t o = sort_out(w, from, m, call_part(w, from, m), &stop);
		from += m - o;
		left -= m - o;
		if (!o) {
			fit = m > fit ? m : fit;
		} else if (m == 1) {
			oom_alone(w, w->idx[from++]);
			left--;
		} else {
			count_split(w);
			bad = m < bad ? m : bad;
			part = (m + 1) / 2;
		}
	}
	if (n > 1) {
		/* Down at once: to what fitted now, or before when that is below what ran out. */
		uint32_t before = w->fitted < bad ? w->fitted : 0;
		w->fitted = fit > before ? fit : before;
		w->batch_cap = w->shown = w->fitted ? w->fitted : 1;
		w->full_runs = 0;
		w->grow_after = w->grow_after < FIT_GROW_MAX ? 2 * w->grow_after : FIT_GROW_MAX;
		w->bad = bad;
		publish_fit(w);
	}
	return 0;
}

/* Writes task i's result record at ring position `pos` (and, in a batch slot, a filler
 * over the rest of the slot). Returns the bytes the record takes, gap included. */
static uint64_t finish_result(struct worker *w, uint32_t i, uint64_t pos, int rc, double seconds,
			      bool slot, uint32_t call)
{
	struct gpud_task *task = &w->t[i];
	struct shm_rec *r = w->out[i], *t = w->in[i];
	struct gpud_error *err = &w->err[i];
	uint32_t max_result = w->hdr->max_result_bytes;
	uint32_t kind, size, flags = 0;
	enum breach breach = disarm(r, max_result);

	/* Before the buffer lies this slot's header and the gap to the last result: a
	 * plugin that wrote there may have written more of our memory. */
	if (breach == BREACH_BEFORE)
		w->tainted = true;
	if (breach != BREACH_NONE) {
		/* Caught here, before the host could take anything the write reached: a
		 * payload is followed by SHM_SLOT_GAP unused bytes, so a write of up to that
		 * much reached no payload; at most headers of empty results, whose check
		 * words the host verifies. */
		kind = REC_FAIL;
		flags = REC_FLAG_BOUNDS;
		size = (uint32_t)snprintf(
			ring_payload(r), SHM_MSG_MAX,
			"the plugin wrote %s its result buffer (capacity %u bytes)",
			breach == BREACH_BEFORE ? "before the start of" : "past the end of",
			max_result);
	} else if (task->failed == GPUD_TASK_TIMED_OUT && w->cut) {
		/* Its call ran past task_timeout and was interrupted (gpud_worker_interrupt):
		 * a timeout, the process goes on. The plugin's note is the payload. */
		kind = REC_FAIL;
		flags = REC_FLAG_TIMEOUT;
		size = (uint32_t)strnlen(err->message, sizeof err->message);
		memcpy(ring_payload(r), err->message, size);
	} else if (task->failed || rc != 0) {
		if (w->oom_abi && task_oom(w, i, rc))
			oom_alone(w, i); /* process(): a call of one task */
		if (!err->message[0])
			snprintf(err->message, sizeof err->message,
				 "%s returned %d without a message",
				 w->flight ? "gpud_worker_submit/poll"
				 : slot    ? "process_batch()"
					   : "process()",
				 rc);
		kind = REC_FAIL;
		size = (uint32_t)strnlen(err->message, sizeof err->message);
		memcpy(ring_payload(r), err->message, size);
		if (task->failed == GPUD_TASK_REJECT)
			flags = REC_FLAG_REJECT;
		if (task->failed == GPUD_TASK_FATAL) {
			flags = REC_FLAG_FATAL;
			memcpy(w->fatal, err->message, sizeof w->fatal);
			if (!w->fatal[0])
				snprintf(w->fatal, sizeof w->fatal,
					 "gpud_task_fatal() without a message");
		}
	} else if (task->result.size > max_result) {
		kind = REC_FAIL;
		size = (uint32_t)snprintf(ring_payload(r), SHM_MSG_MAX,
					  "result of %zu bytes exceeds max_result_bytes (%u)",
					  task->result.size, max_result);
	} else {
		kind = REC_OK;
		size = (uint32_t)task->result.size;
	}
	uint64_t sec_bits;
	memcpy(&sec_bits, &seconds, sizeof sec_bits);
	flags |= call << REC_CALL_SHIFT;
	*r = (struct shm_rec){
		.task_id = t->task_id,
		.kind = kind,
		.size = size,
		.attempt = t->attempt,
		.flags = flags,
		.seconds = seconds,
		.check = shm_rec_check(t->task_id, kind, size, t->attempt, flags, sec_bits, pos),
	};
	uint64_t used = ring_rec_span(&w->results, kind, size);
	if (slot && used < w->result_need) {
		/* The slot was reserved at full size: skip over what this result left. */
		struct shm_rec *f = (struct shm_rec *)((uint8_t *)r + used);
		f->kind = REC_SKIP;
		f->size = (uint32_t)(w->result_need - used - SHM_REC_HDR);
	}
	return used;
}

static void run_tasks(struct worker *w)
{
	uint64_t now = clock_restart(w);
	uint32_t cap = w->hdr->max_result_bytes;

	for (;;) {
		struct shm_rec *first = next_task(w, &now);
		if (!first)
			break;
		uint64_t end_pos = w->task_tail + ring_span(first->size);
		uint32_t n = w->batch > 1 ? gather(w, first, &end_pos) : (w->in[0] = first, 1);
		bool slots = w->plugin.worker.process_batch != NULL;

		/* Result space for every task of the call, before the call. */
		uint64_t head = w->result_head;
		for (uint32_t i = 0; i < n; i++) {
			w->out[i] = reserve_result(w, &head);
			w->out_pos[i] = head;
			arm(w->out[i], cap);
			head += slots ? w->result_need : 0;
		}
		for (uint32_t i = 0; i < n; i++)
			task_init(w, i);

		/* Tell the host which tasks run, since when (timeouts, starts, dashboard).
		 * The clock starts now: waiting for tasks or result space never counts. */
		if (w->waited) {
			now = clock_restart(w);
			w->waited = false;
			charge(w, PH_UNPACK, now);
		} else if (!w->tiny) {
			charge_now(w, PH_UNPACK);
		}
		atomic_store_explicit(&w->rep->cur_task, first->task_id, memory_order_relaxed);
		atomic_store_explicit(&w->rep->busy_since_ns, now, memory_order_relaxed);
		uint64_t call_from = w->task_tail;
		atomic_store_explicit(&w->rep->run_from, call_from, memory_order_relaxed);
		atomic_store_explicit(&w->rep->task_tail, end_pos, memory_order_release);

		w->cut = false;
		call_begins(w);
		int rc = slots ? w->plugin.worker.process_batch(w->state, w->t, n)
			       : w->plugin.worker.process(w->state, &w->t[0]);
		leave_if_forked();
		call_ends(w);
		count_call(w, n, w->t);
		if (slots && w->oom_abi && !w->cut && any_oom(w, n, rc))
			rc = refit(w, n, rc);
		else if (slots && w->shown < w->batch)
			fit_grow(w, n);
		double each;
		uint64_t end = clock_after(w, n, now, &each);
		if (w->untimed == 0) /* the clock was read: the call (or stretch) ends here */
			charge(w, PH_USER, end);

		uint64_t used = 0;
		for (uint32_t i = 0; i < n; i++)
			used = finish_result(w, i, w->out_pos[i], rc, each, slots,
					     slots && i == 0 ? n : 0);
		/* `head` is where the last slot was reserved (past any pad the reservation
		 * wrote): in slot mode already past that slot, otherwise past it after this. */
		w->result_head = slots ? head : head + used;
		atomic_store_explicit(&w->committed, w->result_head, memory_order_release);
		w->task_tail = end_pos;
		now = end;
		w->pending += n;
		if (w->tainted) {
			/* It may have written anywhere in our memory, the report block too:
			 * say again which call this was, hand over the results, and leave. */
			atomic_store_explicit(&w->rep->busy_since_ns, end, memory_order_relaxed);
			atomic_store_explicit(&w->rep->run_from, call_from, memory_order_relaxed);
			atomic_store_explicit(&w->rep->task_tail, end_pos, memory_order_relaxed);
			publish(w, end);
			finish(WORKER_EXIT_TAINTED);
		}
		if (w->fatal[0]) {
			/* The plugin says this process is beyond repair: hand over the results,
			 * then leave; the host starts a fresh worker. */
			publish(w, end);
			snprintf(w->rep->message, sizeof w->rep->message, "%s", w->fatal);
			finish(WORKER_EXIT_FATAL);
		}
		if (w->pending >= PUBLISH_BURST || end - w->published_ns >= PUBLISH_NS || slots)
			publish(w, end);
		if (!w->tiny)
			charge_now(w, PH_HANDBACK);
	}
	if (w->pending)
		publish(w, now);
}

/* ---- Tasks in flight (ABI 1.4: gpud_worker_submit, gpud_worker_poll) ----
 *
 * Tasks are submitted in ring order, each with its result slot reserved in ring order
 * (full size, as a batch's: the plugin writes its result in place), and finish in any
 * order; results are published in submit order as the finished prefix grows. So the
 * host sees results in the order it handed tasks out, and its checks and its recovery
 * stay as they are. Up to max_in_flight run at once; finished ones wait behind an
 * older running one in up to as many entries again (`held`), so one long task does not
 * keep the engine from running others. The report names the oldest running task:
 * busy_since_ns its submit time (its task_timeout), run_from..timed_to its record (a
 * timeout blames it alone), run_from..task_tail what a crash blames (what is before
 * it finished, and runs again elsewhere). */

/* How long a poll may wait: with room for more tasks, briefly, so new ones go in soon
 * after they arrive; otherwise only a finished task can change anything. */
#define FLY_POLL_MS 1
#define FLY_WAIT_MS 100

/* The report for what runs now (after each submit and each finish). */
static void report_flight(struct worker *w)
{
	if (w->running) {
		uint32_t i = (uint32_t)(w->first_running % w->held);
		const struct flight *f = &w->fly[i];
		atomic_store_explicit(&w->rep->cur_task, w->t[i].id, memory_order_relaxed);
		atomic_store_explicit(&w->rep->busy_since_ns, f->since, memory_order_relaxed);
		atomic_store_explicit(&w->rep->run_from, f->from, memory_order_relaxed);
		atomic_store_explicit(&w->rep->timed_to, f->to, memory_order_relaxed);
	} else {
		atomic_store_explicit(&w->rep->busy_since_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&w->rep->run_from, w->task_tail, memory_order_relaxed);
		atomic_store_explicit(&w->rep->timed_to, 0, memory_order_relaxed);
	}
	atomic_store_explicit(&w->rep->task_tail, w->task_tail, memory_order_release);
}

/* A result slot for the next task without waiting, or NULL when the ring is full (or,
 * with nothing held, after waiting for room). */
static struct shm_rec *reserve_flight(struct worker *w, uint64_t *head)
{
	if (w->next == w->oldest)
		return reserve_result(w, head);
	struct shm_rec *r = ring_reserve(&w->results, head, w->result_tail, w->result_need);
	if (r)
		return r;
	w->result_tail = atomic_load_explicit(&w->feed->result_tail, memory_order_acquire);
	return ring_reserve(&w->results, head, w->result_tail, w->result_need);
}

/* Task `i` finished (rc: submit's or poll's verdict): its result written in its slot. */
static void land(struct worker *w, uint32_t i, int rc, uint64_t now)
{
	bool ended = w->tainted || w->fatal[0];
	w->fly[i].state = FLY_DONE;
	w->running--;
	finish_result(w, i, w->out_pos[i], rc, (double)(now - w->fly[i].since) * 1e-9, true, 0);
	if (!ended && (w->tainted || w->fatal[0]))
		w->culprit = i; /* the first: nothing more is submitted after it */
}

/* Submits task record `t` (at w->task_tail); false when no result slot is free now. */
static bool submit_one(struct worker *w, struct shm_rec *t, uint64_t now)
{
	uint32_t i = (uint32_t)(w->next % w->held);
	uint64_t head = w->reserved_head;
	struct shm_rec *r = reserve_flight(w, &head);
	if (!r)
		return false;
	uint32_t cap = w->hdr->max_result_bytes;
	w->in[i] = t;
	w->out[i] = r;
	w->out_pos[i] = head;
	w->reserved_head = head + w->result_need;
	arm(r, cap);
	w->err[i].message[0] = '\0';
	w->t[i] = (struct gpud_task){
		.id = t->task_id,
		.input = ring_payload(t),
		.input_size = t->size,
		.result = {.data = ring_payload(r), .size = 0, .capacity = cap},
		.error = &w->err[i],
		.attempt = (int)t->attempt,
	};
	w->fly[i] = (struct flight){.from = w->task_tail,
				    .to = w->task_tail + ring_span(t->size),
				    .since = now,
				    .state = FLY_RUNNING};
	w->task_tail = w->fly[i].to;
	if (!w->running)
		w->first_running = w->next;
	w->next++;
	w->running++;
	report_flight(w);
	int rc = w->plugin.worker.submit(w->state, &w->t[i]);
	leave_if_forked();
	count_call(w, 1, &w->t[i]);
	if (rc != 0)
		land(w, i, rc, wait_now_ns());
	return true;
}

/* Leaves after a poll that failed, or that handed back what is not in flight: the
 * finished results go to the host first; the rest fail or run again (a crash). The
 * engine as a whole failed: the report names every task still held as the call. */
static _Noreturn void flight_broken(struct worker *w, const char *msg, uint64_t now)
{
	atomic_store_explicit(&w->rep->timed_to, 0, memory_order_relaxed);
	publish(w, now);
	snprintf(w->rep->message, sizeof w->rep->message, "%s", msg);
	finish(WORKER_EXIT_FATAL);
}

/* A task said this process is beyond repair (gpud_task_fatal) or wrote before its
 * result buffer: the finished results before it go to the host, and the report names
 * that task alone as the call (run_from..timed_to, written again: a write before a
 * buffer may have reached the report block), as after a process() call. The host then
 * fails it (or gives it a strike), and the tasks held beside it, not its fault, run
 * again; when its own result was handed over, it is the host's already. */
static _Noreturn void flight_culprit(struct worker *w, uint64_t now)
{
	const struct flight *f = &w->fly[w->culprit];
	atomic_store_explicit(&w->rep->cur_task, w->t[w->culprit].id, memory_order_relaxed);
	atomic_store_explicit(&w->rep->busy_since_ns, f->since ? f->since : 1,
			      memory_order_relaxed);
	atomic_store_explicit(&w->rep->run_from, f->from, memory_order_relaxed);
	atomic_store_explicit(&w->rep->timed_to, f->to, memory_order_relaxed);
	atomic_store_explicit(&w->rep->task_tail, w->task_tail, memory_order_release);
	publish(w, now);
	if (w->tainted)
		finish(WORKER_EXIT_TAINTED);
	snprintf(w->rep->message, sizeof w->rep->message, "%s", w->fatal);
	finish(WORKER_EXIT_FATAL);
}

/* Publishes the finished prefix (in submit order) and reports what still runs. */
static void flight_settle(struct worker *w, uint64_t now)
{
	while (w->oldest != w->next && w->fly[w->oldest % w->held].state == FLY_DONE) {
		uint32_t i = (uint32_t)(w->oldest % w->held);
		w->fly[i].state = FLY_FREE;
		w->result_head = w->out_pos[i] + w->result_need;
		w->oldest++;
		w->pending++;
	}
	if (w->first_running < w->oldest)
		w->first_running = w->oldest;
	while (w->running && w->fly[w->first_running % w->held].state != FLY_RUNNING)
		w->first_running++;
	atomic_store_explicit(&w->committed, w->result_head, memory_order_release);
	report_flight(w);
	if (w->tainted || w->fatal[0])
		flight_culprit(w, now);
	if (w->pending >= PUBLISH_BURST || (w->pending && now - w->published_ns >= PUBLISH_NS))
		publish(w, now);
}

/* One poll of the plugin, its finished tasks landed and settled. */
static void poll_flight(struct worker *w, int timeout_ms)
{
	struct gpud_error err = {{0}};
	if (timeout_ms && w->pending)
		publish(w, wait_now_ns()); /* nothing for the host waits behind the poll */
	int n = w->plugin.worker.poll(w->state, w->done, w->flight, timeout_ms, &err);
	leave_if_forked();
	uint64_t now = charge_now(w, PH_USER);
	if (n < 0) {
		char msg[SHM_MSG_MAX + 32];
		if (err.message[0])
			snprintf(msg, sizeof msg, "gpud_worker_poll failed: %s", err.message);
		else
			snprintf(msg, sizeof msg,
				 "gpud_worker_poll failed: it returned %d without a message", n);
		flight_broken(w, msg, now);
	}
	if ((uint32_t)n > w->flight)
		flight_broken(w, "gpud_worker_poll returned more tasks than it was given room for",
			      now);
	for (int k = 0; k < n; k++) {
		/* The plugin's pointers: each must be an entry of ours that is running. */
		uintptr_t p = (uintptr_t)w->done[k], base = (uintptr_t)w->t;
		uintptr_t off = p - base;
		uint32_t i = (uint32_t)(off / sizeof *w->t);
		if (p < base || off % sizeof *w->t || i >= w->held ||
		    w->fly[i].state != FLY_RUNNING)
			flight_broken(w,
				      "gpud_worker_poll returned a task that is not in flight "
				      "(not one submit was given, or one it returned before)",
				      now);
		land(w, i, w->t[i].failed ? -1 : 0, now);
	}
	flight_settle(w, now);
}

static void run_in_flight(struct worker *w)
{
	uint64_t now = wait_now_ns();
	w->reserved_head = w->result_head;
	for (;;) {
		/* What the ring holds goes in, up to max_in_flight running. */
		bool room = true;
		while (w->running < w->flight && w->next - w->oldest < w->held) {
			struct shm_rec *t = ring_peek(&w->tasks, &w->task_tail, w->task_head);
			if (!t) {
				w->task_head = atomic_load_explicit(&w->feed->task_head,
								    memory_order_acquire);
				t = ring_peek(&w->tasks, &w->task_tail, w->task_head);
			}
			if (!t)
				break;
			if (!submit_one(w, t, now)) {
				room = false;
				break;
			}
			now = charge_now(w, PH_USER);
			if (w->tainted || w->fatal[0])
				break; /* nothing more goes to this process (flight_settle) */
		}
		flight_settle(w, now); /* submit may have failed some at once */
		if (w->oldest == w->next) {
			/* Idle: wait for a task, or the end. */
			if (!next_task(w, &now))
				break;
			now = wait_now_ns();
			continue;
		}
		bool more = room && w->running < w->flight && w->next - w->oldest < w->held &&
			    !atomic_load_explicit(&w->feed->stop, memory_order_acquire);
		poll_flight(w, more ? FLY_POLL_MS : FLY_WAIT_MS);
		now = wait_now_ns();
	}
	if (w->pending)
		publish(w, now);
}

static _Noreturn void finish(int status)
{
	fflush(NULL);
	output_prefix_finish();
	_exit(status);
}

/* A key count written in decimal. */
static int blob_str_n(const char *s, size_t *n)
{
	char *e;
	errno = 0;
	unsigned long v = strtoul(s, &e, 10);
	if (!*s || *e || errno)
		return -1;
	*n = v;
	return 0;
}

/* The next NUL-terminated string of the blob at *p (before end), or NULL. */
static const char *blob_str(const char **p, const char *end)
{
	const char *nul = memchr(*p, '\0', (size_t)(end - *p));
	if (!nul)
		return NULL;
	const char *s = *p;
	*p = nul + 1;
	return s;
}

/* Reads the plugin path and [worker] args from the config blob, bounds-checked; a CPU
 * stage's worker (stage >= 0) reads its [stage.NAME]'s, which follow (memory.c). */
static int read_config(struct worker *w, const char **plugin, long stage)
{
	const char *p = (const char *)w->hdr + w->hdr->config_off;
	const char *end = p + w->hdr->config_len;
	size_t n = w->hdr->n_args;
	const char *strs[2 * SHM_MAX_ARGS + 1];

	if (n > SHM_MAX_ARGS || w->hdr->config_off + w->hdr->config_len > w->hdr->total_size)
		return -1;
	const char *stage_plugin = NULL;
	for (long k = -1; k < stage; k++) {
		/* skip a section: the plugin, then n keys and values; then the next
		 * stage's plugin and key count */
		for (size_t i = 0; i < 2 * n + (k < 0); i++)
			if (!blob_str(&p, end))
				return -1;
		const char *count = NULL;
		if (!(stage_plugin = blob_str(&p, end)) || !(count = blob_str(&p, end)) ||
		    blob_str_n(count, &n) < 0 || n > SHM_MAX_ARGS)
			return -1;
	}
	size_t i0 = 0;
	if (stage_plugin)
		strs[i0++] = stage_plugin;
	for (size_t i = i0; i < 2 * n + 1; i++) {
		const char *nul = memchr(p, '\0', (size_t)(end - p));
		if (!nul)
			return -1;
		strs[i] = p;
		p = nul + 1;
	}
	*plugin = strs[0];
	w->kv = calloc(n ? n : 1, sizeof *w->kv);
	if (!w->kv)
		return -1;
	for (size_t i = 0; i < n; i++)
		w->kv[i] = (struct gpud_kv){strs[1 + 2 * i], strs[2 + 2 * i]};
	w->args = (struct gpud_args){w->kv, n};
	return 0;
}

/* Maps `len` bytes of fd at `off` with an inaccessible guard page on either side, so
 * a write running off either end faults instead of landing in other memory. */
static void *map_guarded(int fd, uint64_t off, uint64_t len, int prot)
{
	uint8_t *area =
		mmap(NULL, len + 2 * SHM_PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (area == MAP_FAILED)
		return NULL;
	void *m = mmap(area + SHM_PAGE, len, prot, MAP_SHARED | MAP_FIXED, fd, (off_t)off);
	if (m == MAP_FAILED || madvise(m, len, MADV_DONTFORK) < 0) {
		munmap(area, len + 2 * SHM_PAGE);
		return NULL;
	}
	return m;
}

/* Maps the run memfd read-only (a write to it faults), this worker's out memfd as two
 * guarded parts (report block, result ring) and the host's bell page. */
static int map_shm(struct worker *w, long index)
{
	struct stat st, out;
	if (fstat(SHM_FD_RUN, &st) < 0 || (size_t)st.st_size < sizeof(struct shm_header) ||
	    fstat(SHM_FD_OUT, &out) < 0)
		return -1;
	/* Every shared mapping is MADV_DONTFORK: a child the plugin forks has none of
	 * them, so it can neither read tasks nor write results (forked_child). */
	void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, SHM_FD_RUN, 0);
	if (m == MAP_FAILED || madvise(m, (size_t)st.st_size, MADV_DONTFORK) < 0)
		return -1;
	const struct shm_header *h = w->hdr = m;
	if (h->magic != SHM_MAGIC || h->version != SHM_VERSION || h->header_size != sizeof *h ||
	    h->feed_size != sizeof(struct shm_feed) ||
	    h->report_size != sizeof(struct shm_report) || h->total_size != (uint64_t)st.st_size ||
	    index < 0 || index >= h->n_workers ||
	    h->feeds_off + (uint64_t)h->n_workers * sizeof(struct shm_feed) > h->total_size ||
	    h->out_size != (uint64_t)out.st_size || h->out_size <= SHM_OUT_RING_OFF)
		return -1;
	w->feed = (const struct shm_feed *)((const uint8_t *)m + h->feeds_off) + index;
	const struct shm_feed *f = w->feed;
	if (f->task_ring_off + f->task_ring_cap > h->total_size ||
	    SHM_OUT_RING_OFF + f->result_ring_cap > h->out_size)
		return -1;
	w->rep = map_guarded(SHM_FD_OUT, 0, SHM_PAGE, PROT_READ | PROT_WRITE);
	uint8_t *results = map_guarded(SHM_FD_OUT, SHM_OUT_RING_OFF, f->result_ring_cap,
				       PROT_READ | PROT_WRITE);
	_Atomic uint32_t *bell =
		mmap(NULL, SHM_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, SHM_FD_BELL, 0);
	if (!w->rep || !results || bell == MAP_FAILED || madvise(bell, SHM_PAGE, MADV_DONTFORK) < 0)
		return -1;
	close(SHM_FD_RUN);
	close(SHM_FD_OUT);
	close(SHM_FD_BELL);
	w->tasks = (struct ring){(uint8_t *)m + f->task_ring_off, f->task_ring_cap, 0};
	w->results = (struct ring){results, f->result_ring_cap, SHM_SLOT_GAP};
	w->host_bell =
		(struct wait_bell){.bell = bell, .sleeping = (_Atomic uint32_t *)&h->host_sleeping};
	/* Going to sleep, a worker rings the host's bell: if the host loop is stuck in a
	 * generator call, its stand-in looks at once (standin.h). */
	w->my_bell = (struct wait_bell){.bell = (_Atomic uint32_t *)&f->bell.bell,
					.sleeping = &w->rep->sleeping,
					.tell = bell};
	uint32_t res = h->max_result_bytes > SHM_MSG_MAX ? h->max_result_bytes : SHM_MSG_MAX;
	w->result_need = ring_span(res) + SHM_SLOT_GAP;
	w->task_tail = w->task_head = f->task_base;
	atomic_store(&w->rep->task_tail, f->task_base);
	atomic_store(&w->rep->run_from, f->task_base);
	return 0;
}

/* The host holds the write end of the pipe on fd 6 and never writes: end of file means
 * it is gone. Unlike PR_SET_PDEATHSIG this survives a plugin changing its credentials,
 * and it takes the process group the host made for us (anything the plugin started)
 * along. That group, never "our group now" (kill(0)): the plugin may have moved us into
 * another one, the host's own among them. Its id is our pid, which no other process
 * can take while we live, so it is never anyone else's. */
static struct worker *watched; /* set once the shared memory is mapped */

/* While a call runs longer than HELD_NS, the results finished before it are published
 * from here (the loop publishes in bursts, and only between calls). The loop's own
 * publishing only moves the head on, and this only from the value it last saw to the
 * loop's committed one, so the head never goes back. */
static void publish_held(struct worker *w)
{
	uint64_t since = atomic_load_explicit(&w->rep->busy_since_ns, memory_order_relaxed);
	uint64_t now = wait_now_ns();
	if (!since || now < since || now - since < HELD_NS)
		return;
	uint64_t cur = atomic_load_explicit(&w->rep->result_head, memory_order_relaxed);
	uint64_t head = atomic_load_explicit(&w->committed, memory_order_acquire);
	if (head == cur || head - cur > (UINT64_C(1) << 62))
		return; /* nothing held, or the loop has published past it */
	if (atomic_compare_exchange_strong_explicit(&w->rep->result_head, &cur, head,
						    memory_order_release, memory_order_relaxed))
		wait_ring_fast(w->host_bell);
}

/* A call past task_timeout in a plugin that can end it (gpud_worker_interrupt): asked
 * once to, while the loop cannot end the call meanwhile (call_ends waits). The host
 * kills the process when the call has not returned timeout_grace later. */
static void interrupt_late(struct worker *w)
{
	uint64_t s = atomic_load(&w->call_seq);
	if (!(s & 1) || s == atomic_load_explicit(&w->interrupted, memory_order_relaxed))
		return;
	/* Written before call_seq: this call's start, or a later call's (seen below). */
	uint64_t since = atomic_load_explicit(&w->rep->busy_since_ns, memory_order_relaxed);
	uint64_t now = wait_now_ns();
	if (!since || now < since || now - since < w->interrupt_ns)
		return;
	atomic_store(&w->interrupting, s);
	if (atomic_load(&w->call_seq) == s) {
		atomic_store_explicit(&w->interrupted, s, memory_order_relaxed);
		w->plugin.worker.interrupt(w->state);
	}
	atomic_store(&w->interrupting, 0);
}

static void *watch_host(void *arg)
{
	(void)arg;
	struct pollfd p = {SHM_FD_HOST, POLLIN, 0};
	for (;;) {
		int n = poll(&p, 1, HELD_NS / 1000000u);
		if (n == 0) {
			struct worker *w = __atomic_load_n(&watched, __ATOMIC_ACQUIRE);
			if (w)
				publish_held(w);
			if (w && w->interrupts)
				interrupt_late(w);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		char c;
		if (n < 0 || read(SHM_FD_HOST, &c, 1) <= 0)
			break;
	}
	kill(-getpid(), SIGKILL);
	_exit(1);
}

static int pin_rings(struct worker *w, char *why, size_t len);

/* Ties this process to the host: dies with it, leaves the job's signals to it, and
 * starts the thread that watches it. 0, or -1 (the host is gone, or no thread). */
static int attach_to_host(long host_pid)
{
	pthread_t watcher;
	sigset_t all, old;
	/* Die with the host, and catch the case where it died before this line. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != (pid_t)host_pid)
		return -1;
	/* Signals meant for the job (Ctrl-C, a batch system's SIGTERM to every process,
	 * a closed terminal, Ctrl-Z) are the host's to act on. */
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGTSTP, SIG_IGN);
	signal(SIGTTIN, SIG_IGN);
	signal(SIGTTOU, SIG_IGN);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int watching = pthread_create(&watcher, NULL, watch_host, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (watching != 0)
		return -1;
	if (pthread_atfork(NULL, NULL, on_fork_child) != 0) {
		fprintf(stderr, "gpud-worker: cannot register the fork handler\n");
		return -1;
	}
	return 0;
}

/* The plugin loaded and a batch's buffers allocated; on failure the setup is reported
 * failed and the process ends. */
static void load_plugin(struct worker *w, const char *plugin_path)
{
	char msg[1200];
	if (loader_open(&w->plugin, plugin_path, LOADER_WORKER, msg, sizeof msg) < 0) {
		set_state(w, WS_SETUP_FAILED, msg);
		finish(1);
	}
	const struct worker_ops *ops = &w->plugin.worker;
	w->batch = ops->process_batch && w->hdr->batch_size > 1 ? w->hdr->batch_size : 1;
	/* Tasks in flight: with more than one allowed, or when it is all the plugin has. */
	uint32_t most = w->hdr->max_in_flight ? w->hdr->max_in_flight : 1;
	if (ops->submit && (most > 1 || (!ops->process && !ops->process_batch))) {
		w->flight = most;
		w->held = 2 * most; /* finished ones wait behind a running one: as many again */
		w->batch = 1;
	}
	uint32_t n = w->held > w->batch ? w->held : w->batch;
	w->t = calloc(n, sizeof *w->t);
	w->in = calloc(n, sizeof *w->in);
	w->out = calloc(n, sizeof *w->out);
	w->out_pos = calloc(n, sizeof *w->out_pos);
	w->err = malloc(n * sizeof *w->err);
	w->fly = calloc(w->held ? w->held : 1, sizeof *w->fly);
	w->done = calloc(w->flight ? w->flight : 1, sizeof *w->done);
	w->idx = calloc(2 * (size_t)w->batch, sizeof *w->idx);
	w->part = calloc(w->batch, sizeof *w->part);
	w->oom_abi = w->plugin.info->abi_minor >= 4;
	w->batch_cap = w->shown = w->batch;
	w->grow_after = FIT_GROW_AFTER;
	/* For the host's window: an engine is given three times max_in_flight; a plugin of
	 * this job that calls process() (a CPU stage's, say) is given what it keeps busy. */
	atomic_store_explicit(&w->rep->flight, w->flight, memory_order_relaxed);
	w->bad = UINT32_MAX;
	if (!w->t || !w->in || !w->out || !w->out_pos || !w->err || !w->fly || !w->done ||
	    !w->idx || !w->part) {
		set_state(w, WS_SETUP_FAILED, "worker: out of memory for a batch of tasks");
		finish(1);
	}
	publish_fit(w);
}

/* The plugin's setup, with the rings pinned first when asked; on failure the setup is
 * reported failed and the process ends. */
static void set_up_plugin(struct worker *w)
{
	char msg[1200];
	struct gpud_error err = {{0}};
	int pinned = pin_rings(w, msg, sizeof msg);
	if (pinned < 0) {
		set_state(w, WS_SETUP_FAILED, msg);
		finish(1);
	}
	static int gpu_ids[WORKER_MAX_GPUS];
	struct gpud_worker_info info = {
		.worker_id = w->feed->worker_id,
		.gpu_id = w->feed->gpu_id,
		.n_gpus = worker_gpu_ids(w->feed->gpu_id, gpu_ids, WORKER_MAX_GPUS),
		.gpu_ids = gpu_ids,
		.seed = w->feed->seed,
		.args = &w->args,
		.flags = pinned ? GPUD_WORKER_PINNED : 0,
		.batch_size = w->batch,
		.max_in_flight = w->flight ? w->flight : 1,
	};
	int set_up = w->plugin.worker.setup(&info, &w->state, &err);
	leave_if_forked();
	if (set_up != 0) {
		if (!err.message[0])
			snprintf(err.message, sizeof err.message,
				 "setup() failed without a message");
		set_state(w, WS_SETUP_FAILED, err.message);
		finish(1);
	}
	/* pin_memory = auto: a plugin that brought the CUDA runtime in during its setup (a
	 * Python worker that imports torch there) gets its rings pinned now; without a GPU
	 * the registration fails and is skipped, as before the setup. */
	if (!pinned && w->hdr->pin_memory == SHM_PIN_AUTO)
		pin_rings(w, msg, sizeof msg);
}

/* The plugin's cleanup, reported; then the process ends. */
static _Noreturn void clean_up_plugin(struct worker *w)
{
	const struct worker_ops *ops = &w->plugin.worker;
	struct gpud_error err = {{0}};
	charge_now(w, w->tiny ? PH_USER : PH_HANDBACK); /* the last results handed over */
	set_state(w, WS_CLEANUP, NULL);
	int cleaned = ops->cleanup ? ops->cleanup(w->state, &err) : 0;
	leave_if_forked();
	times_cpu(w, charge_now(w, PH_SETUP), true);
	if (cleaned != 0) {
		if (!err.message[0])
			snprintf(err.message, sizeof err.message,
				 "cleanup() failed without a message");
		set_state(w, WS_CLEANUP_FAILED, err.message);
	} else {
		set_state(w, WS_DONE, NULL);
	}
	/* No dlclose: a plugin's threads or atexit handlers may still need its code. */
	finish(0);
}

static int run(long index, long host_pid, long stage)
{
	struct worker w = {.mark = wait_now_ns()};
	const char *plugin_path;

	if (attach_to_host(host_pid) < 0)
		return 1;
	output_prefix_start((int)index);
	if (map_shm(&w, index) < 0) {
		fprintf(stderr, "gpud-worker: the shared memory handed over is not a gpud run's\n");
		return 1;
	}
	atomic_store_explicit(&w.rep->times.start_ns, w.mark, memory_order_relaxed);
	times_publish(&w);
	/* From here on every exit is _exit: the plugin may hold threads or memory that
	 * exit-time handlers must not walk into. */
	w.cpu_stage = stage >= 0;
	if (read_config(&w, &plugin_path, stage) < 0) {
		set_state(&w, WS_SETUP_FAILED, "worker: malformed configuration in shared memory");
		finish(1);
	}
	set_state(&w, WS_SETUP, NULL);
	load_plugin(&w, plugin_path);
	set_up_plugin(&w);
	/* Timeouts ended in place: the plugin can (ABI 1.5), a limit applies, and its calls
	 * are process() or process_batch() (tasks in flight time out as before). */
	if (w.plugin.worker.interrupt && w.feed->interrupt_ms && !w.flight) {
		struct timespec tick = {0};
		clock_getres(CLOCK_MONOTONIC_COARSE, &tick);
		w.interrupts = true;
		w.interrupt_ns = (uint64_t)w.feed->interrupt_ms * 1000000u +
				 (uint64_t)tick.tv_sec * 1000000000u + (uint64_t)tick.tv_nsec;
		atomic_store_explicit(&w.rep->interrupts, 1, memory_order_relaxed);
	}
	charge_now(&w, PH_SETUP);
	set_state(&w, WS_READY, NULL);
	__atomic_store_n(&watched, &w, __ATOMIC_RELEASE);
	if (w.flight)
		run_in_flight(&w);
	else
		run_tasks(&w);
	clean_up_plugin(&w);
}

static int pin_rings(struct worker *w, char *why, size_t len)
{
	static const char *const names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so",
					    "/usr/local/cuda/lib64/libcudart.so"};
	uint32_t mode = w->hdr->pin_memory;
	void *lib = NULL;
	if (mode == SHM_PIN_OFF || w->cpu_stage) /* a CPU stage's worker has no GPU */
		return 0;
	/* auto: only when the plugin brought the CUDA runtime in with it, so a plugin that
	 * does not use CUDA never pays for a CUDA context. */
	for (size_t i = 0; i < sizeof names / sizeof *names && !lib; i++)
		lib = dlopen(names[i],
			     RTLD_NOW | RTLD_LOCAL | (mode == SHM_PIN_AUTO ? RTLD_NOLOAD : 0));
	if (!lib) {
		if (mode == SHM_PIN_AUTO)
			return 0;
		snprintf(why, len, "pin_memory = on: cannot load the CUDA runtime (libcudart)");
		return -1;
	}
	int (*reg)(void *, size_t, unsigned) =
		(int (*)(void *, size_t, unsigned))dlsym(lib, "cudaHostRegister");
	const char *(*name)(int) = (const char *(*)(int))dlsym(lib, "cudaGetErrorName");
	const char *(*text)(int) = (const char *(*)(int))dlsym(lib, "cudaGetErrorString");
	int (*last)(void) = (int (*)(void))dlsym(lib, "cudaGetLastError");
	if (!reg) {
		if (mode == SHM_PIN_AUTO)
			return 0;
		snprintf(why, len, "pin_memory = on: libcudart has no cudaHostRegister");
		return -1;
	}
	/* The task ring is mapped read-only here: it is registered as such. */
	int rc = reg(w->tasks.base, w->tasks.cap,
		     1 /* cudaHostRegisterPortable */ | 8 /* cudaHostRegisterReadOnly */);
	if (rc == 0)
		rc = reg(w->results.base, w->results.cap, 1 /* cudaHostRegisterPortable */);
	if (rc == 0)
		return 1;
	if (last)
		last(); /* leave no sticky error behind for the plugin */
	if (mode == SHM_PIN_AUTO)
		return 0;
	snprintf(why, len,
		 "pin_memory = on: cudaHostRegister of the task and result rings failed: %s (%s)",
		 name ? name(rc) : "error", text ? text(rc) : "?");
	return -1;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--describe") == 0)
		return worker_describe(argv[2]);
	if (argc == 2 && strcmp(argv[1], "--count-gpus") == 0)
		return worker_count_gpus();
	if (argc == 3 && strcmp(argv[1], "--check") == 0)
		return worker_check(argv[2]);
	if (argc == 4 && strcmp(argv[1], "--run") == 0)
		return run(strtol(argv[2], NULL, 10), strtol(argv[3], NULL, 10), -1);
	if (argc == 6 && strcmp(argv[1], "--run") == 0 && strcmp(argv[4], "--stage") == 0)
		return run(strtol(argv[2], NULL, 10), strtol(argv[3], NULL, 10),
			   strtol(argv[5], NULL, 10));
	fprintf(stderr, "gpud-worker is started by gpud; it is not meant to be run by hand.\n");
	return 2;
}
