/* SPDX-License-Identifier: MIT */
/* Example worker `echo`: the result is the input, byte for byte. */
#include <string.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("worker", "echo", "1.0");
GPUD_PLUGIN_DESCRIPTION("example: the result is the input");
GPUD_PLUGIN_NO_KEYS;

static int dummy;

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	(void)info;
	(void)err;
	*state = &dummy;
	return 0;
}

GPUD_EXPORT int gpud_worker_process(void *state, struct gpud_task *task)
{
	(void)state;
	if (task->input_size > task->result.capacity)
		return gpud_task_fail(task,
				      "echo: input of %zu bytes exceeds max_result_bytes (%zu)",
				      task->input_size, task->result.capacity);
	/* Copy in pieces below 1 MiB: on some CPUs glibc's memcpy switches to a much
	 * slower strategy at exactly 1 MiB. */
	const char *in = task->input;
	char *out = task->result.data;
	size_t left = task->input_size;
	while (left) {
		size_t n = left < (512u << 10) ? left : (512u << 10);
		memcpy(out, in, n);
		in += n;
		out += n;
		left -= n;
	}
	task->result.size = task->input_size;
	return 0;
}
