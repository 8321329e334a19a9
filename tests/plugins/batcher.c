/* SPDX-License-Identifier: MIT */
/* Test worker with gpud_worker_process_batch: each result is "<input> n=<n>", n the size
 * of the call it came in. fail_on, fatal_on (gpud_task_fatal) take one input number
 * each, crash_on (SIGSEGV, the whole call) a comma list of them; sleep_us sleeps once a
 * call, spin_us works the CPU once a call until its thread has used that much CPU time
 * (a call that is CPU work, like Python and NumPy's); empty_every = K gives an empty result for
 * every input divisible by K; whole_fail_on (a comma list) fails the whole call holding any
 * of them (returns -1, every task marked with the first such input), as a library that
 * raises would; meet = N with meet_dir = DIR: setup returns once N workers have begun
 * theirs (each leaves a file in DIR), so that none is set up long before another. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("worker", "batcher", "1.0");

struct batcher {
	long fail_on, fatal_on, sleep_us, spin_us, empty_every;
	const char *crash_on, *whole_fail_on;
	unsigned max;
};

/* Whether x is in the comma list v. */
static int listed(const char *v, long x)
{
	while (v && *v) {
		char *end;
		long y = strtol(v, &end, 10);
		if (end == v)
			return 0;
		if (y == x)
			return 1;
		v = *end == ',' ? end + 1 : end;
	}
	return 0;
}

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	struct batcher *b = calloc(1, sizeof *b);
	if (!b)
		return gpud_fail(err, "batcher: out of memory");
	b->fail_on = gpud_arg_long(info->args, "fail_on", -1);
	b->fatal_on = gpud_arg_long(info->args, "fatal_on", -1);
	b->crash_on = gpud_arg(info->args, "crash_on", NULL);
	b->whole_fail_on = gpud_arg(info->args, "whole_fail_on", NULL);
	b->sleep_us = gpud_arg_long(info->args, "sleep_us", 0);
	b->spin_us = gpud_arg_long(info->args, "spin_us", 0);
	b->empty_every = gpud_arg_long(info->args, "empty_every", 0);
	b->max = info->batch_size;
	long meet = gpud_arg_long(info->args, "meet", 0);
	const char *meet_dir = gpud_arg(info->args, "meet_dir", NULL);
	if (meet > 0 && meet_dir) {
		char path[4096];
		snprintf(path, sizeof path, "%s/worker-%ld", meet_dir, (long)getpid());
		FILE *f = fopen(path, "w");
		if (!f || fclose(f) != 0) {
			free(b);
			return gpud_fail(err, "batcher: cannot write %s", path);
		}
		for (int tries = 0;; tries++) {
			long n = 0;
			DIR *d = opendir(meet_dir);
			for (struct dirent *e; d && (e = readdir(d));)
				n += strncmp(e->d_name, "worker-", 7) == 0;
			if (d)
				closedir(d);
			if (n >= meet)
				break;
			if (tries > 12000) { /* 60 s */
				free(b);
				return gpud_fail(err, "batcher: %ld of %ld workers met", n, meet);
			}
			usleep(5000);
		}
	}
	*state = b;
	return 0;
}

GPUD_EXPORT int gpud_worker_process_batch(void *state, struct gpud_task *t, size_t n)
{
	struct batcher *b = state;
	if (n == 0 || n > b->max)
		abort(); /* the host broke its promise */
	if (b->sleep_us)
		usleep((useconds_t)b->sleep_us);
	if (b->spin_us) {
		struct timespec ts;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
		double until =
			(double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + (double)b->spin_us * 1e-6;
		do
			clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
		while ((double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 < until);
	}
	for (size_t i = 0; i < n; i++) {
		char in[32];
		size_t len = t[i].input_size < sizeof in - 1 ? t[i].input_size : sizeof in - 1;
		memcpy(in, t[i].input, len);
		in[len] = '\0';
		long x = strtol(in, NULL, 10);
		if (listed(b->crash_on, x))
			raise(SIGSEGV);
		if (listed(b->whole_fail_on, x)) {
			for (size_t j = 0; j < n; j++)
				gpud_task_fail(&t[j], "batcher: a call holding %ld", x);
			return -1;
		}
	}
	for (size_t i = 0; i < n; i++) {
		char in[32];
		size_t len = t[i].input_size < sizeof in - 1 ? t[i].input_size : sizeof in - 1;
		memcpy(in, t[i].input, len);
		in[len] = '\0';
		long x = strtol(in, NULL, 10);
		if (x == b->fail_on) {
			gpud_task_fail(&t[i], "batcher: refused %ld", x);
			continue;
		}
		if (x == b->fatal_on) {
			gpud_task_fatal(&t[i], "batcher: context lost at %ld", x);
			continue;
		}
		if (b->empty_every > 0 && x % b->empty_every == 0) {
			t[i].result.size = 0;
			continue;
		}
		int m = snprintf(t[i].result.data, t[i].result.capacity, "%s n=%zu", in, n);
		t[i].result.size = (size_t)m;
	}
	return 0;
}

GPUD_EXPORT int gpud_worker_process(void *state, struct gpud_task *task)
{
	return gpud_worker_process_batch(state, task, 1);
}

GPUD_EXPORT int gpud_worker_cleanup(void *state, struct gpud_error *err)
{
	(void)err;
	free(state);
	return 0;
}
