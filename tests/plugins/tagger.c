/* SPDX-License-Identifier: MIT */
/*
 * Test worker for pipelines of stages: its result is `tag` then its input, so a task
 * that went through a stage tagged "d:" and a GPU worker tagged "g:" ends as "g:d:7".
 * The input's number is read after any tags (the part after the last ':'). Keys:
 * tag, sleep_us (each task), crash_on / reject_on / fail_on / hang_on (comma lists of
 * numbers), first_attempt_only = 1 (misbehave only on attempt 0), no_gpu = 1 (setup
 * fails unless CUDA_VISIBLE_DEVICES is set and empty and gpu_id is -1), pid_file (each
 * process appends its pid to it at setup), count_file (each task appends its number:
 * what ran, and where), pad (that many zero bytes after the result: a large one).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("worker", "tagger", "1.0");

struct tagger {
	const struct gpud_args *args;
	const char *tag;
	long sleep_us;
	bool first_only;
	int count_fd;
};

static bool listed(const struct gpud_args *args, const char *key, long n)
{
	const char *v = gpud_arg(args, key, NULL);
	while (v && *v) {
		char *end;
		long x = strtol(v, &end, 10);
		if (end == v)
			return false;
		if (x == n)
			return true;
		v = *end == ',' ? end + 1 : end;
	}
	return false;
}

static void append(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0) {
		if (write(fd, text, strlen(text)) < 0) {
			/* a test file: nothing to do */
		}
		close(fd);
	}
}

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	if (gpud_arg_long(info->args, "no_gpu", 0)) {
		const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
		if (!cvd || *cvd || info->gpu_id != -1)
			return gpud_fail(err, "tagger: CUDA_VISIBLE_DEVICES='%s', gpu_id %d",
					 cvd ? cvd : "(unset)", info->gpu_id);
	}
	long setup_us = gpud_arg_long(info->args, "setup_sleep_us", 0); /* a model loading */
	if (setup_us > 0)
		usleep((useconds_t)setup_us);
	struct tagger *t = calloc(1, sizeof *t);
	if (!t)
		return gpud_fail(err, "tagger: out of memory");
	t->args = info->args;
	t->tag = gpud_arg(info->args, "tag", "");
	t->sleep_us = gpud_arg_long(info->args, "sleep_us", 0);
	t->first_only = gpud_arg_long(info->args, "first_attempt_only", 0) != 0;
	t->count_fd = -1;
	const char *cf = gpud_arg(info->args, "count_file", NULL);
	if (cf)
		t->count_fd = open(cf, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	const char *pf = gpud_arg(info->args, "pid_file", NULL);
	if (pf) {
		char line[32];
		snprintf(line, sizeof line, "%ld\n", (long)getpid());
		append(pf, line);
	}
	*state = t;
	return 0;
}

GPUD_EXPORT int gpud_worker_process(void *state, struct gpud_task *task)
{
	struct tagger *t = state;
	char buf[64];
	size_t n = task->input_size < sizeof buf - 1 ? task->input_size : sizeof buf - 1;
	memcpy(buf, task->input, n);
	buf[n] = '\0';
	const char *num = strrchr(buf, ':');
	long x = strtol(num ? num + 1 : buf, NULL, 10);

	if (t->sleep_us)
		usleep((useconds_t)t->sleep_us);
	if (t->count_fd >= 0) {
		char line[32];
		int len = snprintf(line, sizeof line, "%ld\n", x);
		if (write(t->count_fd, line, (size_t)len) < 0) {
			/* a test file: nothing to do */
		}
	}
	if (!t->first_only || task->attempt == 0) {
		if (listed(t->args, "fail_on", x))
			return gpud_task_fail(task, "tagger: refused input %ld", x);
		if (listed(t->args, "reject_on", x))
			return gpud_task_reject(task, "tagger: input %ld is malformed", x);
		if (listed(t->args, "crash_on", x))
			raise(SIGKILL);
		if (listed(t->args, "hang_on", x))
			for (volatile int spin = 1; spin;)
				;
	}
	size_t tl = strlen(t->tag);
	long pad = gpud_arg_long(t->args, "pad", 0);
	size_t extra = pad > 0 ? (size_t)pad : 0;
	if (tl + task->input_size + extra > task->result.capacity)
		return gpud_task_fail(task, "tagger: result too large");
	memcpy(task->result.data, t->tag, tl);
	memcpy((char *)task->result.data + tl, task->input, task->input_size);
	memset((char *)task->result.data + tl + task->input_size, 0, extra);
	task->result.size = tl + task->input_size + extra;
	return 0;
}

GPUD_EXPORT int gpud_worker_cleanup(void *state, struct gpud_error *err)
{
	(void)err;
	struct tagger *t = state;
	if (t->count_fd >= 0)
		close(t->count_fd);
	free(t);
	return 0;
}
