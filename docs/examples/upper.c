/* SPDX-License-Identifier: MIT */
/* upper.c: a worker that upper-cases its input, after a prefix from the job file. */
#include <ctype.h>
#include <stdlib.h>
#include <gpud/plugin.h>

GPUD_PLUGIN("worker", "upper", "1.0");
GPUD_PLUGIN_KEYS("prefix"); /* any other [worker] key is a typo gpud refuses */

struct state {
	long tasks;
	const char *prefix;
};

int gpud_worker_setup(const struct gpud_worker_info *info, void **state, struct gpud_error *err)
{
	struct state *s = calloc(1, sizeof *s);
	if (!s)
		return gpud_fail(err, "out of memory");
	s->prefix = gpud_arg(info->args, "prefix", ""); /* [worker] prefix = ... */
	*state = s;                                     /* load your model here */
	return 0;
}

int gpud_worker_process(void *state, struct gpud_task *task)
{
	struct state *s = state;
	const char *in = task->input;
	char *out = task->result.data; /* shared memory: write in place */
	size_t n = 0;
	for (const char *p = s->prefix; *p && n < task->result.capacity; p++)
		out[n++] = *p;
	if (n + task->input_size > task->result.capacity)
		return gpud_task_fail(task, "input of %zu bytes is too long", task->input_size);
	for (size_t i = 0; i < task->input_size; i++)
		out[n++] = (char)toupper((unsigned char)in[i]);
	task->result.size = n;
	s->tasks++;
	return 0;
}

int gpud_worker_cleanup(void *state, struct gpud_error *err)
{
	(void)err;
	free(state);
	return 0;
}
