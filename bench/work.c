/* SPDX-License-Identifier: MIT */
/*
 * Benchmark worker `work`: CPU work and a simulated GPU step, either or both.
 *   cpu_us = N    N microseconds of this thread's CPU time per task (hashing the input
 *                 over and over); the result is the input followed by its hash in 16
 *                 hex digits, so a later step can check it was done.
 *   sleep_us = N  then N microseconds asleep: a GPU kernel's time, which leaves the CPU
 *                 free as a real one does.
 *   busy_file = PATH
 *                 at cleanup, one line appended: the worker's id, the nanoseconds it
 *                 slept, and the span from its first task's start to its last task's
 *                 end; bench/stages.sh reads the GPU's busy fraction from it.
 * With neither key it is an echo.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("worker", "work", "1.0");
GPUD_PLUGIN_DESCRIPTION("benchmark: CPU work (cpu_us) and a simulated GPU step (sleep_us)");
GPUD_PLUGIN_KEYS("cpu_us", "sleep_us", "busy_file");

struct work {
	long cpu_us, sleep_us;
	int id;
	char *busy_file;
	uint64_t slept_ns, first_ns, last_ns;
};

static uint64_t clock_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	struct work *w = calloc(1, sizeof *w);
	if (!w) {
		snprintf(err->message, sizeof err->message, "work: out of memory");
		return -1;
	}
	if (gpud_arg_parse_long(info->args, "cpu_us", 0, &w->cpu_us, err) < 0 ||
	    gpud_arg_parse_long(info->args, "sleep_us", 0, &w->sleep_us, err) < 0) {
		free(w);
		return -1;
	}
	const char *f = gpud_arg(info->args, "busy_file", NULL);
	w->busy_file = f ? strdup(f) : NULL;
	w->id = info->worker_id;
	*state = w;
	return 0;
}

static uint64_t fnv(const uint8_t *p, size_t n, uint64_t h)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3u;
	return h;
}

GPUD_EXPORT int gpud_worker_process(void *state, struct gpud_task *task)
{
	struct work *w = state;
	uint64_t start = clock_ns(CLOCK_MONOTONIC);
	if (!w->first_ns)
		w->first_ns = start;
	size_t n = task->input_size;
	if (n + (w->cpu_us > 0 ? 16 : 0) > task->result.capacity)
		return gpud_task_fail(task, "work: result larger than max_result_bytes");
	memcpy(task->result.data, task->input, n);
	if (w->cpu_us > 0) {
		uint64_t h = 0xcbf29ce484222325u;
		uint64_t until = clock_ns(CLOCK_THREAD_CPUTIME_ID) + (uint64_t)w->cpu_us * 1000u;
		do
			h = fnv(task->input, n, h ^ 0x9e3779b97f4a7c15u);
		while (clock_ns(CLOCK_THREAD_CPUTIME_ID) < until);
		char hex[17];
		snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
		memcpy((char *)task->result.data + n, hex, 16);
		n += 16;
	}
	if (w->sleep_us > 0) {
		uint64_t a = clock_ns(CLOCK_MONOTONIC);
		struct timespec ts = {w->sleep_us / 1000000, (w->sleep_us % 1000000) * 1000};
		while (nanosleep(&ts, &ts) != 0)
			;
		w->slept_ns += clock_ns(CLOCK_MONOTONIC) - a;
	}
	task->result.size = n;
	w->last_ns = clock_ns(CLOCK_MONOTONIC);
	return 0;
}

GPUD_EXPORT int gpud_worker_cleanup(void *state, struct gpud_error *err)
{
	(void)err;
	struct work *w = state;
	if (w->busy_file && w->sleep_us > 0) {
		int fd = open(w->busy_file, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dprintf(fd, "%d %llu %llu\n", w->id, (unsigned long long)w->slept_ns,
				(unsigned long long)(w->last_ns - w->first_ns));
			close(fd);
		}
	}
	free(w->busy_file);
	free(w);
	return 0;
}
