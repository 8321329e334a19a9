/* SPDX-License-Identifier: MIT */
/*
 * Byte rings of 64-byte-aligned records in shared memory (layout: shm_layout.h).
 *
 * Positions are 64-bit byte counters that only grow; the offset in the ring is
 * position & (cap - 1). The producer keeps its head private and publishes it in
 * bursts; the consumer keeps its tail likewise. These helpers are the hot path and are
 * inline, ring_check() too: the careful decoder for records written by another process.
 */
#ifndef GPUD_RING_H
#define GPUD_RING_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "shm_layout.h"

struct ring {
	uint8_t *base;
	uint64_t cap; /* a power of two, >= 2 lines */
	uint64_t gap; /* result rings: SHM_SLOT_GAP; task rings: 0 */
};

/* Bytes a record with `size` payload bytes takes. */
static inline uint64_t ring_span(uint64_t size)
{
	return SHM_REC_HDR + ((size + SHM_LINE - 1) & ~(uint64_t)(SHM_LINE - 1));
}

/* Bytes a record of `kind` takes in ring `r`: in a result ring (r->gap != 0), a result
 * with a payload is followed by its slot gap, an empty one by one unused line
 * (shm_layout.h: SHM_SLOT_GAP, SHM_EMPTY_GAP). */
static inline uint64_t ring_rec_span(const struct ring *r, uint32_t kind, uint64_t size)
{
	if (!r->gap || (kind != REC_OK && kind != REC_FAIL))
		return ring_span(size);
	return ring_span(size) + (size ? r->gap : SHM_EMPTY_GAP);
}

/* Bytes of one result slot, reserved before a call for each of its tasks (a batch's, a
 * task in flight): the largest payload a result may have (`max_payload`: the larger of
 * max_result_bytes and SHM_MSG_MAX) and the slot gap. */
static inline uint64_t ring_slot_span(uint64_t max_payload)
{
	return ring_span(max_payload) + SHM_SLOT_GAP;
}

/* The largest payload of a REC_SKIP record: it fills the rest of a reserved slot after
 * its result, which takes at least an empty result's span (a header and SHM_EMPTY_GAP),
 * so it is bounded by the slot, not by `max_payload`. */
static inline uint64_t ring_skip_max(uint64_t max_payload)
{
	return ring_slot_span(max_payload) - (SHM_REC_HDR + SHM_EMPTY_GAP) - SHM_REC_HDR;
}

static inline struct shm_rec *ring_at(const struct ring *r, uint64_t pos)
{
	return (struct shm_rec *)(r->base + (pos & (r->cap - 1)));
}

static inline void *ring_payload(struct shm_rec *rec)
{
	return (uint8_t *)rec + SHM_REC_HDR;
}

/*
 * Producer: finds room for a record of up to `need` bytes (header included) at *head,
 * given that everything before `tail` is free. When the record would cross the ring's
 * end it writes a pad record and moves *head to the next lap. Returns the record to
 * fill, or NULL when there is not enough free space yet.
 */
static inline struct shm_rec *ring_reserve(const struct ring *r, uint64_t *head, uint64_t tail,
					   uint64_t need)
{
	uint64_t off = *head & (r->cap - 1);
	if (off + need > r->cap) {
		uint64_t pad = r->cap - off;
		if (*head + pad + need - tail > r->cap)
			return NULL;
		struct shm_rec *p = (struct shm_rec *)(r->base + off);
		p->kind = REC_PAD;
		p->size = 0;
		*head += pad;
		off = 0;
	}
	if (*head + need - tail > r->cap)
		return NULL;
	return (struct shm_rec *)(r->base + off);
}

/*
 * Consumer: the record at *tail, skipping pad records (which moves *tail), or NULL when
 * *tail has reached `head`. Trusts the producer; see ring_check() for one that doesn't.
 */
static inline struct shm_rec *ring_peek(const struct ring *r, uint64_t *tail, uint64_t head)
{
	while (*tail != head) {
		uint64_t off = *tail & (r->cap - 1);
		struct shm_rec *rec = (struct shm_rec *)(r->base + off);
		if (rec->kind != REC_PAD)
			return rec;
		*tail += r->cap - off;
	}
	return NULL;
}

/*
 * The careful consumer, for records written by a process that is not trusted: like
 * ring_peek, but it reads each header once, into *copy, and checks that copy: kinds in
 * `kinds` (a 0-terminated list of allowed kinds besides REC_PAD), payload at most
 * `max_payload` (a REC_SKIP's at most ring_skip_max(max_payload): the rest of its slot),
 * the whole record (with its gap) before `head` and inside the ring. Callers use only
 * *copy, never the header in the ring, which the producer may still be changing.
 * Returns 1 with *copy and *out (the record, for its payload) set, 0 when the ring is
 * empty, or -1 with *why set when the producer wrote something that is not a valid
 * record.
 */
static inline int ring_check(const struct ring *r, uint64_t *tail, uint64_t head,
			     const uint32_t *kinds, uint64_t max_payload, struct shm_rec *copy,
			     struct shm_rec **out, const char **why)
{
	/* Positions come from another process: a head behind the tail or more than a
	 * ring ahead of it is corruption, not an empty or full ring. */
	if (head - *tail > r->cap) {
		*why = "ring head out of range";
		return -1;
	}
	while (*tail != head) {
		uint64_t off = *tail & (r->cap - 1);
		uint64_t avail = head - *tail;
		struct shm_rec *rec = (struct shm_rec *)(r->base + off);

		if (off % SHM_LINE != 0) {
			*why = "record not line-aligned";
			return -1;
		}
		/* One read of the header; every check and every later use is of the copy. */
		memcpy(copy, rec, sizeof *copy);
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		if (copy->kind == REC_PAD) {
			if (r->cap - off > avail) {
				*why = "pad record past the ring head";
				return -1;
			}
			*tail += r->cap - off;
			continue;
		}
		bool known = false;
		for (const uint32_t *k = kinds; *k; k++)
			known |= (*k == copy->kind);
		if (!known) {
			*why = "unknown record kind";
			return -1;
		}
		if (copy->size >
		    (copy->kind == REC_SKIP ? ring_skip_max(max_payload) : max_payload)) {
			*why = "record larger than its limit";
			return -1;
		}
		uint64_t span = ring_rec_span(r, copy->kind, copy->size);
		if (span > avail || off + ring_span(copy->size) > r->cap) {
			*why = "record runs past the ring head or end";
			return -1;
		}
		*out = rec;
		return 1;
	}
	return 0;
}

/* The smallest power of two >= 2 * need and >= min_bytes. */
uint64_t ring_capacity_for(uint64_t need, uint64_t min_bytes);

#endif /* GPUD_RING_H */
