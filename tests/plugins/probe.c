/* SPDX-License-Identifier: MIT */
/* Test worker: reports what it sees. Result:
 *   id=<task> in=<input> seed=<seed> wid=<worker_id> gpu=<gpu_id> cvd=<CUDA_VISIBLE_DEVICES>
 *   env_gpu=<GPUD_GPU_ID> env_wid=<GPUD_WORKER_ID> greeting=<[worker] greeting> pid=<pid>
 * sleep_us = N sleeps N us a task; clock = 1 appends mono=<CLOCK_MONOTONIC ns when
 * process() was called>. With PROBE_COUNT_FILE=PATH in the environment, each task appends
 * its id and a newline to PATH once its result is made (what ran, for a test to wait on;
 * not a key: a file a key names is an input of the job, and would make a resume another
 * job).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("worker", "probe", "1.0");

struct probe {
	struct gpud_worker_info info;
	const char *greeting;
	long sleep_us, clock;
	int count_fd;
	char env[256];
};

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	struct probe *p = calloc(1, sizeof *p);
	if (!p)
		return gpud_fail(err, "probe: out of memory");
	p->info = *info;
	/* Copied now: the args live as long as the worker, but be strict. */
	p->greeting = gpud_arg(info->args, "greeting", "none");
	p->sleep_us = gpud_arg_long(info->args, "sleep_us", 0);
	p->clock = gpud_arg_long(info->args, "clock", 0);
	const char *cf = getenv("PROBE_COUNT_FILE");
	p->count_fd = cf ? open(cf, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600) : -1;
	if (cf && p->count_fd < 0) {
		free(p);
		return gpud_fail(err, "probe: cannot open PROBE_COUNT_FILE %s", cf);
	}
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
	const char *g = getenv("GPUD_GPU_ID");
	const char *w = getenv("GPUD_WORKER_ID");
	snprintf(p->env, sizeof p->env, "cvd=%s env_gpu=%s env_wid=%s", cvd ? cvd : "unset",
		 g ? g : "unset", w ? w : "unset");
	*state = p;
	return 0;
}

GPUD_EXPORT int gpud_worker_process(void *state, struct gpud_task *task)
{
	struct probe *p = state;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (p->sleep_us)
		usleep((useconds_t)p->sleep_us);
	int n = snprintf(task->result.data, task->result.capacity,
			 "id=%llu in=%.*s seed=%llu wid=%d gpu=%d %s greeting=%s pid=%d",
			 (unsigned long long)task->id, (int)task->input_size,
			 (const char *)task->input, (unsigned long long)p->info.seed,
			 p->info.worker_id, p->info.gpu_id, p->env, p->greeting, (int)getpid());
	if (n >= 0 && p->clock && (size_t)n < task->result.capacity)
		n += snprintf((char *)task->result.data + n, task->result.capacity - (size_t)n,
			      " mono=%lld", (long long)now.tv_sec * 1000000000 + now.tv_nsec);
	if (n < 0 || (size_t)n >= task->result.capacity)
		return gpud_task_fail(task, "probe: result does not fit");
	task->result.size = (size_t)n;
	if (p->count_fd >= 0) {
		char line[32];
		int len = snprintf(line, sizeof line, "%llu\n", (unsigned long long)task->id);
		if (write(p->count_fd, line, (size_t)len) != len)
			return gpud_task_fail(task, "probe: cannot write PROBE_COUNT_FILE");
	}
	return 0;
}

GPUD_EXPORT int gpud_worker_cleanup(void *state, struct gpud_error *err)
{
	(void)err;
	struct probe *p = state;
	if (p->count_fd >= 0)
		close(p->count_fd);
	free(p);
	return 0;
}
