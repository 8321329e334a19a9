/* SPDX-License-Identifier: MIT */
/* A worker plugin that writes 200 KB to standard error from its constructor, as a
 * chatty library linked into a plugin might: helper processes (gpud check, gpud
 * plugins) must read it alongside their answer, not stall on a full pipe. Tasks echo. */
#include <string.h>
#include <unistd.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("worker", "noisy", "1.0");

__attribute__((constructor)) static void chatter(void)
{
	char line[1000];
	memset(line, 'x', sizeof line - 1);
	line[sizeof line - 1] = '\n';
	for (int i = 0; i < 200; i++)
		if (write(2, line, sizeof line) < 0)
			return;
}

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	(void)info;
	(void)err;
	*state = NULL;
	return 0;
}

GPUD_EXPORT int gpud_worker_process(void *state, struct gpud_task *task)
{
	(void)state;
	if (task->input_size > task->result.capacity)
		return gpud_fail(task->error, "result too small");
	memcpy(task->result.data, task->input, task->input_size);
	task->result.size = task->input_size;
	return 0;
}
