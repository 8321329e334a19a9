/* SPDX-License-Identifier: MIT */
/* What the array readers (generators `npy`, `hdf5`) share: the `rows = A:B` key. */
#ifndef GPUD_PLUGINS_ARRAYS_ROWS_H
#define GPUD_PLUGINS_ARRAYS_ROWS_H

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <gpud/plugin.h>

/* A bound of `rows`: digits only; "" keeps *out. */
static inline int rows_bound_(const char *p, const char *end, uint64_t *out)
{
	if (p == end)
		return 0;
	uint64_t v = 0;
	for (; p < end; p++) {
		if (!isdigit((unsigned char)*p) || v > (UINT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	*out = v;
	return 0;
}

/* `rows` (A:B, A:, :B; absent: every row) of an array of `total` rows, as Python slices
 * it but without negative bounds or a step: *first = A, *end = B. A bound past the
 * array, or B below A, is an error naming the value, `who` and `what` (the file). */
static inline int rows_parse(const struct gpud_args *args, const char *who, const char *what,
			     uint64_t total, uint64_t *first, uint64_t *end, struct gpud_error *err)
{
	const char *v = gpud_arg(args, "rows", NULL);
	*first = 0;
	*end = total;
	if (!v)
		return 0;
	const char *colon = strchr(v, ':');
	const char *stop = v + strlen(v);
	if (!colon || rows_bound_(v, colon, first) < 0 || rows_bound_(colon + 1, stop, end) < 0)
		return gpud_fail(err,
				 "%s: rows = '%s': expected A:B (A:, :B), whole numbers from 0",
				 who, v);
	if (*end > total)
		return gpud_fail(err, "%s: rows = '%s': %s has %llu rows", who, v, what,
				 (unsigned long long)total);
	if (*first > *end)
		return gpud_fail(err, "%s: rows = '%s': the first row is past the last", who, v);
	return 0;
}

#endif
