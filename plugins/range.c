/* SPDX-License-Identifier: MIT */
/* Generator `range`: the integers start, start+step, ... before stop, as decimal text.
 * Keys: start (default 0), stop (required), step (default 1, not 0). */
#include <stdlib.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("generator", "range", "1.0");
GPUD_PLUGIN_DESCRIPTION("the integers start, start+step, ... before stop, as decimal text");
GPUD_PLUGIN_KEYS("start", "stop", "step");

struct range {
	long next, stop, step;
};

static int parse(const struct gpud_args *args, struct range *r, struct gpud_error *err)
{
	long start = 0, stop = 0, step = 1;
	if (!gpud_arg(args, "stop", NULL))
		return gpud_fail(err, "range: 'stop' is required (the first number not yielded)");
	if (gpud_arg_parse_long(args, "start", 0, &start, err) < 0 ||
	    gpud_arg_parse_long(args, "stop", 0, &stop, err) < 0 ||
	    gpud_arg_parse_long(args, "step", 1, &step, err) < 0)
		return -1;
	if (step == 0)
		return gpud_fail(err, "range: step must not be 0");
	*r = (struct range){start, stop, step};
	return 0;
}

GPUD_EXPORT int gpud_generator_check(const struct gpud_args *args, struct gpud_error *err)
{
	struct range r;
	return parse(args, &r, err);
}

GPUD_EXPORT int gpud_generator_open(const struct gpud_args *args, void **state,
				    struct gpud_error *err)
{
	struct range parsed;
	if (parse(args, &parsed, err) < 0)
		return -1;
	struct range *r = malloc(sizeof *r);
	if (!r)
		return gpud_fail(err, "range: out of memory");
	*r = parsed;
	*state = r;
	return 0;
}

/* Digits of v, written backwards from `end`; returns the first byte. */
static char *format(long v, char *end)
{
	unsigned long u = v < 0 ? 0ul - (unsigned long)v : (unsigned long)v;
	do {
		*--end = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		*--end = '-';
	return end;
}

GPUD_EXPORT int gpud_generator_next(void *state, struct gpud_buf *item, struct gpud_error *err)
{
	struct range *r = state;
	char buf[24], *end = buf + sizeof buf;
	(void)err;
	if (r->step > 0 ? r->next >= r->stop : r->next <= r->stop)
		return 0;
	char *s = format(r->next, end);
	size_t n = (size_t)(end - s);
	item->size = n;
	if (n <= item->capacity) {
		char *d = item->data;
		for (size_t i = 0; i < n; i++)
			d[i] = s[i];
	}
	/* Saturate rather than overflow past LONG_MAX / LONG_MIN. */
	if (__builtin_add_overflow(r->next, r->step, &r->next))
		r->next = r->stop;
	return 1;
}

/* Resuming: the first n numbers, jumped in one step. */
GPUD_EXPORT int gpud_generator_skip(void *state, uint64_t n, struct gpud_error *err)
{
	struct range *r = state;
	(void)err;
	__int128 next = (__int128)r->next + (__int128)n * r->step;
	if (r->step > 0 ? next >= r->stop : next <= r->stop)
		r->next = r->stop;
	else
		r->next = (long)next;
	return 0;
}

GPUD_EXPORT int64_t gpud_generator_total(void *state)
{
	struct range *r = state;
	__int128 span = (__int128)r->stop - r->next;
	if ((r->step > 0 && span <= 0) || (r->step < 0 && span >= 0))
		return 0;
	return (int64_t)((span + r->step + (r->step > 0 ? -1 : 1)) / r->step);
}

GPUD_EXPORT void gpud_generator_close(void *state)
{
	free(state);
}
