/* SPDX-License-Identifier: MIT */
/* Test worker: says which GPUs it was given. Result:
 *   wid=<worker_id> gpu=<gpu_id> n=<n_gpus> ids=<gpu_ids, comma-separated>
 *   cvd=<CUDA_VISIBLE_DEVICES> env_ids=<GPUD_GPU_IDS>
 * sleep_us = N sleeps N us a task (so every worker gets some). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("worker", "gpus", "1.0");
GPUD_PLUGIN_KEYS("sleep_us");

struct gpus {
	char text[512];
	long sleep_us;
};

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	struct gpus *g = calloc(1, sizeof *g);
	if (!g)
		return gpud_fail(err, "gpus: out of memory");
	g->sleep_us = gpud_arg_long(info->args, "sleep_us", 0);
	char ids[256] = "";
	size_t at = 0;
	for (unsigned i = 0; i < info->n_gpus && at + 16 < sizeof ids; i++)
		at += (size_t)snprintf(ids + at, sizeof ids - at, "%s%d", i ? "," : "",
				       info->gpu_ids[i]);
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES"), *env = getenv("GPUD_GPU_IDS");
	snprintf(g->text, sizeof g->text, "wid=%d gpu=%d n=%u ids=%s cvd=%s env_ids=%s",
		 info->worker_id, info->gpu_id, info->n_gpus, ids, cvd ? cvd : "unset",
		 env ? env : "unset");
	*state = g;
	return 0;
}

GPUD_EXPORT int gpud_worker_process(void *state, struct gpud_task *task)
{
	struct gpus *g = state;
	if (g->sleep_us)
		usleep((useconds_t)g->sleep_us);
	int n = snprintf(task->result.data, task->result.capacity, "%s", g->text);
	if (n < 0 || (size_t)n >= task->result.capacity)
		return gpud_task_fail(task, "gpus: result does not fit");
	task->result.size = (size_t)n;
	return 0;
}

GPUD_EXPORT int gpud_worker_cleanup(void *state, struct gpud_error *err)
{
	(void)err;
	free(state);
	return 0;
}
