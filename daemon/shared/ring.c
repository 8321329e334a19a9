/* SPDX-License-Identifier: MIT */
#include "ring.h"

uint64_t ring_capacity_for(uint64_t need, uint64_t min_bytes)
{
	uint64_t cap = 2 * SHM_LINE;
	while (cap < 2 * need || cap < min_bytes)
		cap <<= 1;
	return cap;
}
