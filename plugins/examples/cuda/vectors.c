/* SPDX-License-Identifier: MIT */
/* Generator `vectors` (the dense example's input): `count` float32 vectors of `dim`
 * elements, task k's vector derived from `seed` and k (see dense_common.h), so the CPU
 * reference can rebuild any of them. */
#include <stdlib.h>

#include <gpud/plugin.h>

#include "dense_common.h"

GPUD_PLUGIN("generator", "vectors", "1.0");
GPUD_PLUGIN_DESCRIPTION("example: count float32 vectors of dim elements from seed");
GPUD_PLUGIN_KEYS("dim", "count", "seed");

struct vectors {
	long dim, count, seed, next;
};

GPUD_EXPORT int gpud_generator_open(const struct gpud_args *args, void **state,
				    struct gpud_error *err)
{
	struct vectors v = {0};
	if (gpud_arg_parse_long(args, "dim", 1024, &v.dim, err) < 0 ||
	    gpud_arg_parse_long(args, "count", 10000, &v.count, err) < 0 ||
	    gpud_arg_parse_long(args, "seed", 7, &v.seed, err) < 0)
		return -1;
	if (v.dim < 1 || v.count < 0)
		return gpud_fail(err, "vectors: dim must be 1 or more and count 0 or more");
	struct vectors *p = malloc(sizeof *p);
	if (!p)
		return gpud_fail(err, "vectors: out of memory");
	*p = v;
	*state = p;
	return 0;
}

GPUD_EXPORT int gpud_generator_next(void *state, struct gpud_buf *item, struct gpud_error *err)
{
	struct vectors *v = state;
	(void)err;
	if (v->next >= v->count)
		return 0;
	item->size = (size_t)v->dim * sizeof(float);
	if (item->size <= item->capacity) {
		float *out = item->data;
		for (long i = 0; i < v->dim; i++)
			out[i] = dense_input((uint64_t)v->seed, (uint32_t)v->dim, (uint64_t)v->next,
					     (uint32_t)i);
	}
	v->next++;
	return 1;
}

GPUD_EXPORT int64_t gpud_generator_total(void *state)
{
	return ((struct vectors *)state)->count;
}

GPUD_EXPORT void gpud_generator_close(void *state)
{
	free(state);
}
