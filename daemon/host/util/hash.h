/* SPDX-License-Identifier: MIT */
/* The host's small hashes: fingerprints, check words, samples. Not for security: a
 * worker never chooses what is hashed to get past a check with them. */
#ifndef GPUD_HASH_H
#define GPUD_HASH_H

#include <stdint.h>

/* FNV-1a's offset basis: where every hash here starts. */
#define HASH_SEED UINT64_C(1469598103934665603)

/* Mixes v into h (a 64-bit finaliser: every bit of v reaches every bit of the result). */
static inline uint64_t hash_mix(uint64_t h, uint64_t v)
{
	h ^= v + UINT64_C(0x9e3779b97f4a7c15) + (h << 6) + (h >> 2);
	h *= UINT64_C(0xff51afd7ed558ccd);
	return h ^ (h >> 33);
}

/* FNV-1a of the string s (NULL: none) onto h, with an end mark: "ab","c" != "a","bc". */
static inline uint64_t hash_str(uint64_t h, const char *s)
{
	for (; s && *s; s++)
		h = (h ^ (unsigned char)*s) * UINT64_C(1099511628211);
	return (h ^ 0xff) * UINT64_C(1099511628211);
}

#endif /* GPUD_HASH_H */
