/* SPDX-License-Identifier: MIT */
/* What the dense example, its input generator and its CPU reference agree on: the same
 * numbers from the same seeds. */
#ifndef GPUD_DENSE_COMMON_H
#define GPUD_DENSE_COMMON_H

#include <math.h>
#include <stdint.h>

static inline uint64_t dense_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* A number in [-1, 1) from a seed and an index. */
static inline float dense_uniform(uint64_t seed, uint64_t i)
{
	return (float)((double)(dense_mix(seed * 0x100000001b3ull ^ i) >> 11) * 0x1.0p-52 - 1.0);
}

/* W[o][i] (out_dim rows of in_dim), scaled so outputs stay near 1. */
static inline float dense_weight(uint64_t seed, uint32_t in_dim, uint32_t o, uint32_t i)
{
	return dense_uniform(seed ^ 0x5745494748545321ull, (uint64_t)o * in_dim + i) /
	       sqrtf((float)in_dim);
}

/* Element i of task k's input vector. */
static inline float dense_input(uint64_t seed, uint32_t dim, uint64_t k, uint32_t i)
{
	return dense_uniform(seed, k * dim + i);
}

#endif
