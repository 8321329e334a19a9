/* SPDX-License-Identifier: MIT */
#include "ring.h"

#include <string.h>

int ring_check(const struct ring *r, uint64_t *tail, uint64_t head, const uint32_t *kinds,
	       uint64_t max_payload, struct shm_rec *copy, struct shm_rec **out,
	       const char **why)
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
		if (copy->size > max_payload) {
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

uint64_t ring_capacity_for(uint64_t need, uint64_t min_bytes)
{
	uint64_t cap = 2 * SHM_LINE;
	while (cap < 2 * need || cap < min_bytes)
		cap <<= 1;
	return cap;
}
