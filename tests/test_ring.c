/* SPDX-License-Identifier: MIT */
/* The shared rings: wrap-around, full and empty, mixed sizes, the careful decoder, and
 * a producer with consumers in separate processes hammering tiny rings. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "ring.h"
#include "wait.h"

static const uint32_t task_kinds[] = {REC_TASK, 0};

/* Ring memory from the heap, like the real (mmap'ed) rings: a static array would let
 * the compiler second-guess offsets it cannot know are line-aligned. */
static uint8_t *ring_mem(size_t cap)
{
	uint8_t *m = aligned_alloc(64, cap);
	cr_assert_not_null(m);
	memset(m, 0, cap);
	return m;
}

static uint32_t checksum(const uint8_t *p, size_t n, uint64_t seed)
{
	uint32_t h = 2166136261u ^ (uint32_t)seed;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

/* Fills a record of `size` payload bytes derived from `seq`. */
static void fill(struct shm_rec *r, uint64_t seq, uint32_t size)
{
	uint8_t *p = ring_payload(r);
	for (uint32_t i = 0; i < size; i++)
		p[i] = (uint8_t)(seq * 31 + i * 7);
	r->task_id = seq;
	r->size = size;
	r->seconds = (double)checksum(p, size, seq);
	r->kind = REC_TASK;
}

static void verify(const struct shm_rec *r, uint64_t seq)
{
	cr_assert_eq(r->task_id, seq, "records out of order");
	cr_assert_eq(r->kind, REC_TASK);
	uint32_t sum = checksum((const uint8_t *)r + SHM_REC_HDR, r->size, seq);
	cr_assert_eq((uint32_t)r->seconds, sum, "payload of record %llu corrupted",
		     (unsigned long long)seq);
}

static uint32_t size_of(uint64_t seq, uint32_t max)
{
	/* Empty, tiny, line-sized and maximal records, mixed. */
	uint64_t x = seq * 2654435761u;
	switch (x % 5) {
	case 0:
		return 0;
	case 1:
		return 1;
	case 2:
		return 64;
	case 3:
		return max;
	default:
		return (uint32_t)(x >> 8) % (max + 1);
	}
}

Test(ring, capacity)
{
	cr_expect_eq(ring_capacity_for(64, 0), 128);
	cr_expect_eq(ring_capacity_for(100, 0), 256);
	cr_expect_eq(ring_capacity_for(64, 4096), 4096);
	cr_expect_eq(ring_span(0), 64);
	cr_expect_eq(ring_span(1), 128);
	cr_expect_eq(ring_span(64), 128);
	cr_expect_eq(ring_span(65), 192);
}

Test(ring, empty_and_full)
{
	uint8_t *mem = ring_mem(512);
	struct ring r = {mem, 512, 0};
	uint64_t head = 0, tail = 0;
	cr_expect_null(ring_peek(&r, &tail, head), "empty");
	/* 512 bytes hold eight empty records and no more. */
	for (int i = 0; i < 8; i++) {
		struct shm_rec *rec = ring_reserve(&r, &head, tail, ring_span(0));
		cr_assert_not_null(rec, "record %d", i);
		fill(rec, (uint64_t)i, 0);
		head += ring_span(0);
	}
	cr_expect_null(ring_reserve(&r, &head, tail, ring_span(0)), "full");
	for (int i = 0; i < 8; i++) {
		struct shm_rec *rec = ring_peek(&r, &tail, head);
		cr_assert_not_null(rec);
		verify(rec, (uint64_t)i);
		tail += ring_span(rec->size);
	}
	cr_expect_null(ring_peek(&r, &tail, head), "empty again");
	cr_expect_not_null(ring_reserve(&r, &head, tail, ring_span(0)), "room again");
	free(mem);
}

Test(ring, wrap_around_with_pads)
{
	uint8_t *mem = ring_mem(1024);
	struct ring r = {mem, 1024, 0};
	uint64_t head = 0, tail = 0, next_in = 0, next_out = 0;
	const uint32_t max = 200;
	int pads = 0;
	/* Many laps with one or two records in flight: every offset, every wrap. */
	while (next_out < 5000) {
		uint32_t size = size_of(next_in, max);
		uint64_t before = head;
		struct shm_rec *rec = ring_reserve(&r, &head, tail, ring_span(max));
		if (rec) {
			pads += head != before;
			cr_assert(((uint8_t *)rec - mem) + ring_span(size) <= r.cap,
				  "a record crosses the end");
			fill(rec, next_in++, size);
			head += ring_span(size);
		}
		if (!rec || next_in % 3 == 0) {
			struct shm_rec *out = ring_peek(&r, &tail, head);
			cr_assert_not_null(out);
			verify(out, next_out++);
			tail += ring_span(out->size);
		}
	}
	cr_expect_gt(pads, 100, "the test wrapped often (%d pads)", pads);
	free(mem);
}

Test(ring, check_accepts_what_reserve_writes)
{
	uint8_t *mem = ring_mem(1024);
	struct ring r = {mem, 1024, 0};
	uint64_t head = 0, tail = 0, ctail = 0;
	struct shm_rec *rec, *out, copy;
	const char *why;
	for (uint64_t i = 0; i < 2000; i++) {
		rec = ring_reserve(&r, &head, tail, ring_span(300));
		cr_assert_not_null(rec);
		fill(rec, i, size_of(i, 300));
		head += ring_span(rec->size);
		cr_assert_eq(ring_check(&r, &ctail, head, task_kinds, 300, &copy, &out, &why), 1,
			     "%s", why);
		verify(out, i);
		ctail += ring_span(out->size);
		tail = ctail;
	}
	cr_expect_eq(ring_check(&r, &ctail, head, task_kinds, 300, &copy, &out, &why), 0);
	free(mem);
}

Test(ring, check_rejects_corruption)
{
	uint8_t *mem = ring_mem(1024);
	struct ring r = {mem, 1024, 0};
	struct shm_rec *rec = (struct shm_rec *)mem, *out, copy;
	const char *why;
	uint64_t tail;

	fill(rec, 1, 10);
	tail = 0;
	cr_expect_eq(ring_check(&r, &tail, 2048, task_kinds, 100, &copy, &out, &why), -1,
		     "head too far");
	tail = 0;
	cr_expect_eq(ring_check(&r, &tail, 64, task_kinds, 100, &copy, &out, &why), -1,
		     "a record past the head");
	rec->kind = 0xdeadbeef;
	tail = 0;
	cr_expect_eq(ring_check(&r, &tail, 128, task_kinds, 100, &copy, &out, &why), -1,
		     "unknown kind");
	cr_expect_str_eq(why, "unknown record kind");
	fill(rec, 1, 500);
	tail = 0;
	cr_expect_eq(ring_check(&r, &tail, 1024, task_kinds, 100, &copy, &out, &why), -1,
		     "oversized");
	rec->size = 2000; /* claims more than the ring holds */
	tail = 0;
	cr_expect_eq(ring_check(&r, &tail, 1024, task_kinds, 4096, &copy, &out, &why), -1,
		     "past the ring's end");
	/* A pad at offset 512 claims the rest of the lap, but the head stops short. */
	fill(rec, 1, 10);
	((struct shm_rec *)(mem + 512))->kind = REC_PAD;
	tail = 512;
	cr_expect_eq(ring_check(&r, &tail, 700, task_kinds, 100, &copy, &out, &why), -1,
		     "pad past head");
	free(mem);
}

/* A batch's result slots, as a worker fills them: each reserved at full size, its result
 * at the start, a skip record over what the result left. After an empty result the skip
 * is larger than the largest payload, and is still accepted: its bound is the slot. A
 * skip that reaches past its slot is refused. */
static const uint32_t result_kinds[] = {REC_OK, REC_FAIL, REC_SKIP, 0}; /* as the host */

Test(ring, skips_after_results_of_every_size_fill_their_slots)
{
	const uint64_t max_payload = SHM_MSG_MAX, slot = ring_slot_span(max_payload);
	const uint32_t sizes[] = {0, 1, 64, 300, SHM_MSG_MAX - 64, SHM_MSG_MAX, 0, 0};
	const size_t n = sizeof sizes / sizeof *sizes;
	uint8_t *mem = ring_mem(16384);
	struct ring r = {mem, 16384, SHM_SLOT_GAP};
	struct shm_rec *out, copy;
	const char *why = NULL;
	uint64_t head = 0, tail = 0;

	for (size_t i = 0; i < n; i++) {
		struct shm_rec *res = ring_reserve(&r, &head, tail, slot);
		cr_assert_not_null(res);
		*res = (struct shm_rec){.task_id = i, .kind = REC_OK, .size = sizes[i]};
		uint64_t used = ring_rec_span(&r, REC_OK, sizes[i]);
		cr_assert_leq(used, slot);
		if (used < slot) { /* as loop_finish_result() writes it */
			struct shm_rec *skip = (struct shm_rec *)((uint8_t *)res + used);
			*skip = (struct shm_rec){.kind = REC_SKIP,
						 .size = (uint32_t)(slot - used - SHM_REC_HDR)};
		}
		head += slot;
	}
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(
			ring_check(&r, &tail, head, result_kinds, max_payload, &copy, &out, &why),
			1, "result %zu (%u bytes): %s", i, sizes[i], why);
		cr_expect_eq(copy.kind, REC_OK);
		cr_expect_eq(copy.task_id, i);
		tail += ring_rec_span(&r, copy.kind, copy.size);
		if (sizes[i] == max_payload)
			continue; /* it fills its slot */
		cr_assert_eq(
			ring_check(&r, &tail, head, result_kinds, max_payload, &copy, &out, &why),
			1, "the skip after result %zu (%u bytes): %s", i, sizes[i], why);
		cr_expect_eq(copy.kind, REC_SKIP);
		tail += ring_span(copy.size);
	}
	cr_expect_eq(tail, head, "the skips end where the slots do");
	cr_expect_eq(ring_check(&r, &tail, head, result_kinds, max_payload, &copy, &out, &why), 0);

	/* A skip after an empty result one line longer than the rest of its slot. */
	tail = 0;
	struct shm_rec *skip = (struct shm_rec *)(mem + SHM_REC_HDR + SHM_EMPTY_GAP);
	skip->size += SHM_LINE;
	cr_assert_eq(ring_check(&r, &tail, head, result_kinds, max_payload, &copy, &out, &why), 1);
	tail += ring_rec_span(&r, copy.kind, copy.size);
	cr_expect_eq(ring_check(&r, &tail, head, result_kinds, max_payload, &copy, &out, &why), -1,
		     "a skip past its slot");
	cr_expect_str_eq(why, "record larger than its limit");
	free(mem);
}

/* ---- a producer and two consumers in separate processes, tiny rings ---- */

#define N_CONSUMERS 2
#define PER_CONSUMER 200000u
#define MAX_PAYLOAD 150u

struct shared {
	struct shm_bell producer_bell;
	_Atomic uint32_t producer_sleeping;
	struct {
		_Atomic uint64_t head;
		uint8_t _p0[56];
		_Atomic uint64_t tail;
		uint8_t _p1[56];
		struct shm_bell bell;
		_Atomic uint32_t sleeping;
		_Atomic uint32_t bad;
		uint8_t _p2[60];
		_Alignas(64) uint8_t mem[512]; /* room for two largest records */
	} ch[N_CONSUMERS];
};

#define PBELL(s)                                                                                   \
	((struct wait_bell){.bell = &(s)->producer_bell.bell, .sleeping = &(s)->producer_sleeping})
#define CBELL(s, k)                                                                                \
	((struct wait_bell){.bell = &(s)->ch[k].bell.bell, .sleeping = &(s)->ch[k].sleeping})

struct wait_ctx {
	_Atomic uint64_t *word;
	uint64_t seen;
};

static bool moved(void *p)
{
	struct wait_ctx *c = p;
	return atomic_load_explicit(c->word, memory_order_acquire) != c->seen;
}

static void consumer(struct shared *s, int k)
{
	struct ring r = {s->ch[k].mem, sizeof s->ch[k].mem, 0};
	uint64_t tail = 0, head = 0, seq = 0;
	while (seq < PER_CONSUMER) {
		struct shm_rec *rec = ring_peek(&r, &tail, head);
		if (!rec) {
			/* Dry: hand back what we consumed before waiting, as a worker does. */
			atomic_store_explicit(&s->ch[k].tail, tail, memory_order_release);
			wait_ring_fast(PBELL(s));
			struct wait_ctx c = {&s->ch[k].head, head};
			if (atomic_load_explicit(&s->ch[k].head, memory_order_acquire) == head)
				wait_until(CBELL(s, k), moved, &c, 0);
			head = atomic_load_explicit(&s->ch[k].head, memory_order_acquire);
			continue;
		}
		uint32_t sum = checksum(ring_payload(rec), rec->size, rec->task_id);
		if (rec->task_id != seq || (uint32_t)rec->seconds != sum)
			atomic_fetch_add(&s->ch[k].bad, 1);
		seq++;
		tail += ring_span(rec->size);
		/* Publish every few records, like a worker's bursts. */
		if (seq % 3 == 0 || seq == PER_CONSUMER) {
			atomic_store_explicit(&s->ch[k].tail, tail, memory_order_release);
			wait_ring_fast(PBELL(s));
		}
	}
	_exit(0);
}

struct space_ctx {
	struct shared *s;
	uint64_t seen[N_CONSUMERS];
};

static bool any_tail_moved(void *p)
{
	struct space_ctx *c = p;
	for (int k = 0; k < N_CONSUMERS; k++)
		if (atomic_load_explicit(&c->s->ch[k].tail, memory_order_acquire) != c->seen[k])
			return true;
	return false;
}

Test(ring, processes_hammer_tiny_rings, .timeout = 120)
{
	struct shared *s =
		mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(s, MAP_FAILED);
	memset(s, 0, sizeof *s);
	pid_t pids[N_CONSUMERS];
	for (int k = 0; k < N_CONSUMERS; k++) {
		pids[k] = fork();
		cr_assert_geq(pids[k], 0);
		if (pids[k] == 0)
			consumer(s, k);
	}

	struct ring r[N_CONSUMERS];
	uint64_t head[N_CONSUMERS] = {0}, tail[N_CONSUMERS] = {0}, seq[N_CONSUMERS] = {0};
	for (int k = 0; k < N_CONSUMERS; k++)
		r[k] = (struct ring){s->ch[k].mem, sizeof s->ch[k].mem, 0};
	unsigned done = 0;
	while (done < N_CONSUMERS) {
		bool progress = false;
		done = 0;
		for (int k = 0; k < N_CONSUMERS; k++) {
			if (seq[k] == PER_CONSUMER) {
				done++;
				continue;
			}
			tail[k] = atomic_load_explicit(&s->ch[k].tail, memory_order_acquire);
			uint64_t h0 = head[k];
			struct shm_rec *rec;
			while (seq[k] < PER_CONSUMER &&
			       (rec = ring_reserve(&r[k], &head[k], tail[k],
						   ring_span(MAX_PAYLOAD)))) {
				fill(rec, seq[k], size_of(seq[k], MAX_PAYLOAD));
				head[k] += ring_span(rec->size);
				seq[k]++;
			}
			if (head[k] != h0) {
				atomic_store_explicit(&s->ch[k].head, head[k],
						      memory_order_release);
				wait_ring_fast(CBELL(s, k));
				progress = true;
			}
		}
		if (!progress && done < N_CONSUMERS) {
			struct space_ctx c = {s, {0}};
			for (int k = 0; k < N_CONSUMERS; k++)
				c.seen[k] = tail[k];
			wait_until(PBELL(s), any_tail_moved, &c, 0);
		}
	}
	for (int k = 0; k < N_CONSUMERS; k++) {
		int st;
		cr_assert_eq(waitpid(pids[k], &st, 0), pids[k]);
		cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "consumer %d failed", k);
		cr_expect_eq(atomic_load(&s->ch[k].bad), 0, "consumer %d saw corrupt records", k);
	}
	munmap(s, sizeof *s);
}

static bool never(void *ctx)
{
	(void)ctx;
	return false;
}

/* A sleeper with a `tell` word bumps it as it goes to sleep, and only then: the spin
 * and the yields before do not (the host's stand-in is woken by it, standin.h). */
Test(ring, a_sleeper_tells_when_it_goes_to_sleep)
{
	_Atomic uint32_t bell = 0, sleeping = 0, tell = 0;
	struct wait_bell d = {.bell = &bell, .sleeping = &sleeping, .tell = &tell};
	uint64_t t0 = wait_now_ns();
	cr_expect_not(wait_until(d, never, NULL, t0 + 30000u),
		      "a 30 us deadline ends in the yields");
	cr_expect_eq(atomic_load(&tell), 0u, "no sleep, no tell");
	cr_expect_not(wait_until(d, never, NULL, wait_now_ns() + 100000000u));
	cr_expect_eq(atomic_load(&tell), 1u, "one sleep, one tell");
	cr_expect_eq(atomic_load(&sleeping), 0u, "the flag is down again");
}
