/* SPDX-License-Identifier: MIT */
/* Test worker: a row of `floats` float32s (default 3) for each task, from its input read
 * as a number x (the range generator's): x, x + 0.5, x + 1, ... short_id = N gives task
 * N one float too few (a result of the wrong size); sleep_us = N sleeps N us a task. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("worker", "rows", "1.0");

struct rows {
	long floats, short_id, sleep_us;
};

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	struct rows *r = calloc(1, sizeof *r);
	if (!r)
		return gpud_fail(err, "rows: out of memory");
	r->floats = gpud_arg_long(info->args, "floats", 3);
	r->short_id = gpud_arg_long(info->args, "short_id", -1);
	r->sleep_us = gpud_arg_long(info->args, "sleep_us", 0);
	*state = r;
	return 0;
}

GPUD_EXPORT int gpud_worker_process(void *state, struct gpud_task *task)
{
	struct rows *r = state;
	char num[64];
	size_t n = task->input_size < sizeof num - 1 ? task->input_size : sizeof num - 1;
	memcpy(num, task->input, n);
	num[n] = '\0';
	float x = strtof(num, NULL);
	long k = r->floats - ((long)task->id == r->short_id);
	if ((size_t)k * sizeof(float) > task->result.capacity)
		return gpud_task_fail(task, "rows: result does not fit");
	if (r->sleep_us)
		usleep((useconds_t)r->sleep_us);
	float *out = task->result.data;
	for (long i = 0; i < k; i++)
		out[i] = x + 0.5f * (float)i;
	task->result.size = (size_t)k * sizeof(float);
	return 0;
}

GPUD_EXPORT int gpud_worker_cleanup(void *state, struct gpud_error *err)
{
	(void)err;
	free(state);
	return 0;
}
