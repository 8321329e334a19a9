/* SPDX-License-Identifier: MIT */
/* Test worker: the per-channel means of an image of interleaved RGB uint8 pixels (what
 * the jpeg stage gives), as 3 float32s. An input that is not whole pixels fails.
 * sleep_us = N sleeps N us a task (a run slow enough to be killed half way). */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("worker", "means", "1.0");
GPUD_PLUGIN_KEYS("sleep_us");

static long sleep_us;

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	(void)err;
	sleep_us = gpud_arg_long(info->args, "sleep_us", 0);
	*state = &sleep_us;
	return 0;
}

GPUD_EXPORT int gpud_worker_process(void *state, struct gpud_task *task)
{
	(void)state;
	size_t n = task->input_size / 3;
	if (n == 0 || task->input_size % 3)
		return gpud_task_fail(task, "means: %zu bytes are not RGB pixels",
				      task->input_size);
	if (task->result.capacity < 3 * sizeof(float))
		return gpud_task_fail(task, "means: max_result_bytes below 12");
	const uint8_t *p = task->input;
	uint64_t sum[3] = {0, 0, 0};
	for (size_t i = 0; i < n; i++)
		for (int c = 0; c < 3; c++)
			sum[c] += p[3 * i + c];
	float out[3];
	for (int c = 0; c < 3; c++)
		out[c] = (float)((double)sum[c] / (double)n);
	if (sleep_us > 0)
		usleep((useconds_t)sleep_us);
	memcpy(task->result.data, out, sizeof out);
	task->result.size = sizeof out;
	return 0;
}
