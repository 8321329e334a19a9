/* SPDX-License-Identifier: MIT */
#include "ring.h"

int ring_check(const struct ring *r, uint64_t *tail, uint64_t head, const uint32_t *kinds,
	       uint64_t max_payload, struct shm_rec **out, const char **why)
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
		uint32_t kind = rec->kind;

		if (off % SHM_LINE != 0) {
			*why = "record not line-aligned";
			return -1;
		}
		if (kind == REC_PAD) {
			if (r->cap - off > avail) {
				*why = "pad record past the ring head";
				return -1;
			}
			*tail += r->cap - off;
			continue;
		}
		bool known = false;
		for (const uint32_t *k = kinds; *k; k++)
			known |= (*k == kind);
		if (!known) {
			*why = "unknown record kind";
			return -1;
		}
		if (rec->size > max_payload) {
			*why = "record larger than its limit";
			return -1;
		}
		uint64_t span = ring_span(rec->size);
		if (span > avail || off + span > r->cap) {
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
