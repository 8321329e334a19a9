/* SPDX-License-Identifier: MIT */
/*
 * The canaries around a result buffer: the header line before it, and a line right
 * after its capacity, hold SHM_CANARY while the plugin runs. Armed before every call and
 * checked after it, on every task's way: inline.
 */
#ifndef GPUD_WORKER_CANARY_H
#define GPUD_WORKER_CANARY_H

#include <stdint.h>
#include <string.h>

#include "ring.h"

static inline void arm(struct shm_rec *r, uint32_t capacity)
{
	uint64_t *hdr = (uint64_t *)r;
	uint64_t after[SHM_LINE / 8];
	for (unsigned k = 0; k < SHM_LINE / 8; k++)
		hdr[k] = after[k] = SHM_CANARY;
	memcpy((uint8_t *)ring_payload(r) + capacity, after, sizeof after);
}

enum breach { BREACH_NONE, BREACH_BEFORE, BREACH_AFTER };

/* Which canary the plugin overwrote, if any. */
static inline enum breach disarm(const struct shm_rec *r, uint32_t capacity)
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

#endif
