/* SPDX-License-Identifier: MIT */
/*
 * Benchmark worker `engine`: an inference engine that schedules requests itself,
 * simulated. Every task submitted runs at once, side by side (a GPU running many
 * requests together); a task takes short_us, or long_us for every `every`-th task id
 * (uneven lengths, as generation lengths are). The result is the input.
 *   in_order = true   tasks are handed back only in the order they came (a worker that
 *                     does not complete out of order): a finished task waits behind a
 *                     longer one before it, and so does the slot it holds.
 * bench/inflight.sh runs it with max_in_flight tasks, both ways.
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("worker", "engine", "1.0");
GPUD_PLUGIN_DESCRIPTION("benchmark: a simulated engine with many requests in flight");
GPUD_PLUGIN_KEYS("short_us", "long_us", "every", "in_order");

struct running {
	struct gpud_task *task;
	uint64_t due_ns;
};

struct engine {
	long short_us, long_us, every;
	bool in_order;
	struct running *run; /* in submission order */
	size_t n, cap;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	struct engine *e = calloc(1, sizeof *e);
	if (!e)
		return gpud_fail(err, "engine: out of memory");
	if (gpud_arg_parse_long(info->args, "short_us", 1000, &e->short_us, err) < 0 ||
	    gpud_arg_parse_long(info->args, "long_us", 20000, &e->long_us, err) < 0 ||
	    gpud_arg_parse_long(info->args, "every", 8, &e->every, err) < 0) {
		free(e);
		return -1;
	}
	const char *o = gpud_arg(info->args, "in_order", "false");
	e->in_order = strcmp(o, "true") == 0 || strcmp(o, "1") == 0;
	if (e->every < 1)
		e->every = 1;
	*state = e;
	return 0;
}

GPUD_EXPORT int gpud_worker_submit(void *state, struct gpud_task *task)
{
	struct engine *e = state;
	if (task->input_size > task->result.capacity)
		return gpud_task_reject(task, "engine: input larger than max_result_bytes");
	if (e->n == e->cap) {
		size_t cap = e->cap ? 2 * e->cap : 64;
		struct running *r = realloc(e->run, cap * sizeof *r);
		if (!r)
			return gpud_task_fail(task, "engine: out of memory");
		e->run = r;
		e->cap = cap;
	}
	long us = task->id % (uint64_t)e->every == 0 ? e->long_us : e->short_us;
	e->run[e->n++] = (struct running){task, now_ns() + (uint64_t)us * 1000u};
	return 0;
}

GPUD_EXPORT int gpud_worker_poll(void *state, struct gpud_task **done, size_t max, int timeout_ms,
				 struct gpud_error *err)
{
	(void)err;
	struct engine *e = state;
	uint64_t now = now_ns(), limit = now + (uint64_t)timeout_ms * 1000000u;
	for (;;) {
		size_t got = 0, keep = 0;
		uint64_t next = UINT64_MAX;
		bool blocked = false;
		for (size_t i = 0; i < e->n; i++) {
			struct running r = e->run[i];
			if (got < max && !blocked && r.due_ns <= now) {
				struct gpud_task *t = r.task;
				memcpy(t->result.data, t->input, t->input_size);
				t->result.size = t->input_size;
				done[got++] = t;
				continue;
			}
			if (e->in_order)
				blocked = true;
			if (r.due_ns < next && (!e->in_order || keep == 0))
				next = r.due_ns;
			e->run[keep++] = r;
		}
		e->n = keep;
		if (got || now >= limit || e->n == 0)
			return (int)got;
		uint64_t until = next < limit ? next : limit;
		struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
		now = now_ns();
	}
}

GPUD_EXPORT int gpud_worker_cleanup(void *state, struct gpud_error *err)
{
	(void)err;
	struct engine *e = state;
	free(e->run);
	free(e);
	return 0;
}
