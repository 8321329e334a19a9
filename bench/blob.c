/* SPDX-License-Identifier: MIT */
/* Benchmark generator `blob`: `count` tasks of `size` bytes each (suffixes K, M). Every
 * byte of every task is written (a pattern that changes per task), so the bytes really
 * travel; size = 0 gives empty tasks for measuring per-task overhead. */
#include <stdlib.h>
#include <string.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("generator", "blob", "1.0");
GPUD_PLUGIN_DESCRIPTION("benchmark: count tasks of size bytes each");

struct blob {
	long left, size, n;
};

GPUD_EXPORT int gpud_generator_open(const struct gpud_args *args, void **state,
				    struct gpud_error *err)
{
	struct blob *b = calloc(1, sizeof *b);
	const char *s = gpud_arg(args, "size", "0");
	char *end;
	if (!b)
		return gpud_fail(err, "blob: out of memory");
	if (gpud_arg_parse_long(args, "count", 1000000, &b->left, err) < 0) {
		free(b);
		return -1;
	}
	b->size = strtol(s, &end, 10);
	if (*end == 'K' || *end == 'k')
		b->size <<= 10, end++;
	else if (*end == 'M' || *end == 'm')
		b->size <<= 20, end++;
	if (*end || b->size < 0) {
		free(b);
		return gpud_fail(err, "blob: size = '%s': expected bytes, like 0, 64K or 1M", s);
	}
	*state = b;
	return 0;
}

GPUD_EXPORT int gpud_generator_next(void *state, struct gpud_buf *item, struct gpud_error *err)
{
	struct blob *b = state;
	(void)err;
	if (b->left-- <= 0)
		return 0;
	item->size = (size_t)b->size;
	if (item->size <= item->capacity && item->size)
		memset(item->data, (int)(b->n & 0xff), item->size);
	b->n++;
	return 1;
}

GPUD_EXPORT int64_t gpud_generator_total(void *state)
{
	struct blob *b = state;
	return b->left > 0 ? b->left : 0;
}

GPUD_EXPORT void gpud_generator_close(void *state)
{
	free(state);
}
