/* SPDX-License-Identifier: MIT */
/* Test worker: says which GPUs it was given. Result:
 *   wid=<worker_id> gpu=<gpu_id> n=<n_gpus> ids=<gpu_ids, comma-separated>
 *   cvd=<CUDA_VISIBLE_DEVICES> env_ids=<GPUD_GPU_IDS>
 * sleep_us = N sleeps N us a task. Built with FIXTURE_MINOR=3 (worker-gpus13), a 1.3
 * plugin that cannot know gpu_ids: n=0 ids=old. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <gpud/plugin.h>

#ifdef FIXTURE_MINOR
/* Built for ABI 1.FIXTURE_MINOR, before gpu_ids: it reads gpu_id alone. */
GPUD_EXPORT const struct gpud_plugin_info gpud_plugin_info = {GPUD_ABI_MAJOR, FIXTURE_MINOR,
							      "worker", "gpus-old", "1.0"};
#else
GPUD_PLUGIN("worker", "gpus", "1.0");
#endif
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
#ifdef FIXTURE_MINOR
	snprintf(ids, sizeof ids, "old");
	unsigned n_gpus = 0;
#else
	size_t at = 0;
	unsigned n_gpus = info->n_gpus;
	for (unsigned i = 0; i < info->n_gpus && at + 16 < sizeof ids; i++)
		at += (size_t)snprintf(ids + at, sizeof ids - at, "%s%d", i ? "," : "",
				       info->gpu_ids[i]);
#endif
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES"), *env = getenv("GPUD_GPU_IDS");
	snprintf(g->text, sizeof g->text, "wid=%d gpu=%d n=%u ids=%s cvd=%s env_ids=%s",
		 info->worker_id, info->gpu_id, n_gpus, ids, cvd ? cvd : "unset",
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
