/* SPDX-License-Identifier: MIT */
/* Test generator: yields 0, 1, ... and fails after `fail_after` items; with
 * `huge_every = N` every Nth item claims to be larger than max_task_bytes; with
 * `block_after = N` the call after N items blocks for `block_ms` (0: for ever, through
 * any signal, like a read that retries on EINTR), once; with `block_every = N` the call
 * after every N items blocks for `block_ms`. `stamp = 1`: each item is the
 * CLOCK_MONOTONIC time it was yielded at, in nanoseconds, instead of its number.
 * `pad = P`: item i is its number followed by i % P copies of 'x' (inputs of many sizes).
 * `exit_after = N`: the call after N items calls exit(`exit_status`) (default 0), as a
 * plugin that thinks it owns the process would. `task_fail_every = N`: every Nth item
 * fails its task (GPUD_GENERATOR_TASK_FAILED, ABI 1.7), the stream going on.
 * `call_us = N`: every call takes N microseconds more (a source slower than a no-op). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("generator", "failgen", "1.0");

struct fg {
	long n, fail_after, huge_every, stop, block_after, block_ms, block_every, stamp, pad;
	long exit_after, exit_status, task_fail_every, call_us;
};

GPUD_EXPORT int gpud_generator_open(const struct gpud_args *args, void **state,
				    struct gpud_error *err)
{
	struct fg *g = calloc(1, sizeof *g);
	if (!g)
		return gpud_fail(err, "failgen: out of memory");
	g->fail_after = gpud_arg_long(args, "fail_after", -1);
	g->huge_every = gpud_arg_long(args, "huge_every", 0);
	g->stop = gpud_arg_long(args, "stop", 1000);
	g->block_after = gpud_arg_long(args, "block_after", -1);
	g->block_ms = gpud_arg_long(args, "block_ms", 0);
	g->block_every = gpud_arg_long(args, "block_every", 0);
	g->stamp = gpud_arg_long(args, "stamp", 0);
	g->pad = gpud_arg_long(args, "pad", 0);
	if (g->pad < 0 || g->pad > 1000) {
		free(g);
		return gpud_fail(err, "failgen: pad must be 0 to 1000");
	}
	g->exit_after = gpud_arg_long(args, "exit_after", -1);
	g->exit_status = gpud_arg_long(args, "exit_status", 0);
	g->task_fail_every = gpud_arg_long(args, "task_fail_every", 0);
	g->call_us = gpud_arg_long(args, "call_us", 0);
	if (g->block_every > 0)
		g->block_after = g->block_every;
	*state = g;
	return 0;
}

GPUD_EXPORT int gpud_generator_next(void *state, struct gpud_buf *item, struct gpud_error *err)
{
	struct fg *g = state;
	if (g->call_us > 0) {
		struct timespec ts = {g->call_us / 1000000, g->call_us % 1000000 * 1000};
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	if (g->n == g->block_after) {
		g->block_after = g->block_every > 0 ? g->n + g->block_every : -1;
		if (!g->block_ms)
			for (;;)
				pause();
		struct timespec ts = {g->block_ms / 1000, g->block_ms % 1000 * 1000000};
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	if (g->n == g->exit_after)
		exit((int)g->exit_status);
	if (g->fail_after >= 0 && g->n >= g->fail_after)
		return gpud_fail(err, "failgen: the input went away after %ld items", g->n);
	if (g->n >= g->stop)
		return 0;
	if (g->huge_every && g->n % g->huge_every == g->huge_every - 1) {
		item->size = item->capacity + 100;
		g->n++;
		return 1;
	}
	if (g->task_fail_every && g->n % g->task_fail_every == g->task_fail_every - 1) {
		gpud_fail(err, "failgen: item %ld cannot be made", g->n);
		g->n++;
		return GPUD_GENERATOR_TASK_FAILED;
	}
	if (g->stamp) {
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		item->size = (size_t)snprintf(item->data, item->capacity, "%lld",
					      (long long)now.tv_sec * 1000000000 + now.tv_nsec);
	} else {
		item->size = (size_t)snprintf(item->data, item->capacity, "%ld", g->n);
		for (long k = 0; g->pad && k < g->n % g->pad && item->size < item->capacity; k++)
			((char *)item->data)[item->size++] = 'x';
	}
	g->n++;
	return 1;
}

GPUD_EXPORT void gpud_generator_close(void *state)
{
	free(state);
}
