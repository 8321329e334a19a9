/* SPDX-License-Identifier: MIT */
/*
 * Test worker that misbehaves on chosen inputs (decimal numbers, as `range` yields).
 * Keys, each a comma list of input numbers: fail_on, crash_on (SIGSEGV), abort_on,
 * exit_on (exit(7) from the plugin), hang_on (loops forever), big_on (claims a result
 * larger than its buffer), fatal_on (gpud_task_fatal), reject_on (gpud_task_reject),
 * exit70_on (exit(70) from the plugin); crash_all = 1 crashes on every
 * task. first_attempt_only = 1
 * misbehaves only on attempt 0; only_gpu = G misbehaves only on GPU G. Periodic forms
 * for soak runs: fail_every, crash_every, abort_every, exit_every, hang_every = N
 * misbehave on inputs x with x % N == N - 1 (checked in that order). print_every = N
 * prints "faulty prints for input x" on standard output for those inputs.
 * setup_fail_gpu = G fails setup on GPU G; setup_crash_gpu = G crashes in setup;
 * setup_hang_gpu = G never finishes setup; cleanup_fail = 1 fails cleanup,
 * cleanup_hang = 1 never finishes it; sleep_us = N sleeps N us a task, and slow_us = M
 * sleeps M us instead on GPU slow_gpu. The result is the input.
 *
 * Built a second time as worker-interruptible (FAULTY_INTERRUPTIBLE, ABI 1.5): it exports
 * gpud_worker_interrupt, and a hang_on task then ends when interrupted, marked
 * gpud_task_timed_out; stuck_on = list loops on regardless (in either build).
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gpud/plugin.h>

#ifdef FAULTY_INTERRUPTIBLE
#include <stdatomic.h>
GPUD_PLUGIN("worker", "interruptible", "1.0");

static atomic_int interrupted;

/* From gpud's watcher thread while a call runs past task_timeout. */
GPUD_EXPORT void gpud_worker_interrupt(void *state)
{
	(void)state;
	atomic_store(&interrupted, 1);
}
#else
GPUD_PLUGIN("worker", "faulty", "1.0");
#endif

struct faulty {
	const struct gpud_args *args;
	bool first_only;
	long sleep_us;
	bool cleanup_fail;
	bool misbehave; /* not limited away by only_gpu */
	bool crash_all;
};

static bool every(const struct gpud_args *args, const char *key, long n)
{
	long period = gpud_arg_long(args, key, 0);
	return period > 0 && n % period == period - 1;
}

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

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	if (gpud_arg(info->args, "setup_fail_gpu", NULL) &&
	    gpud_arg_long(info->args, "setup_fail_gpu", -1) == info->gpu_id)
		return gpud_fail(err, "faulty: no model for GPU %d", info->gpu_id);
	if (gpud_arg(info->args, "setup_crash_gpu", NULL) &&
	    gpud_arg_long(info->args, "setup_crash_gpu", -1) == info->gpu_id)
		raise(SIGSEGV);
	if (gpud_arg(info->args, "setup_hang_gpu", NULL) &&
	    gpud_arg_long(info->args, "setup_hang_gpu", -1) == info->gpu_id)
		for (;;)
			pause();
	struct faulty *f = calloc(1, sizeof *f);
	if (!f)
		return gpud_fail(err, "faulty: out of memory");
	f->args = info->args;
	f->first_only = gpud_arg_long(info->args, "first_attempt_only", 0) != 0;
	f->sleep_us = gpud_arg_long(info->args, "sleep_us", 0);
	if (gpud_arg(info->args, "slow_gpu", NULL) &&
	    gpud_arg_long(info->args, "slow_gpu", -1) == info->gpu_id)
		f->sleep_us = gpud_arg_long(info->args, "slow_us", f->sleep_us);
	f->cleanup_fail = gpud_arg_long(info->args, "cleanup_fail", 0) != 0;
	f->crash_all = gpud_arg_long(info->args, "crash_all", 0) != 0;
	f->misbehave = !gpud_arg(info->args, "only_gpu", NULL) ||
		       gpud_arg_long(info->args, "only_gpu", -1) == info->gpu_id;
	*state = f;
	return 0;
}

GPUD_EXPORT int gpud_worker_process(void *state, struct gpud_task *task)
{
	struct faulty *f = state;
	char buf[32];
	size_t n = task->input_size < sizeof buf - 1 ? task->input_size : sizeof buf - 1;
	memcpy(buf, task->input, n);
	buf[n] = '\0';
	long x = strtol(buf, NULL, 10);

#ifdef FAULTY_INTERRUPTIBLE
	atomic_store(&interrupted, 0);
#endif
	if (f->sleep_us)
		usleep((useconds_t)f->sleep_us);
	if (every(f->args, "print_every", x)) {
		printf("faulty prints for input %ld\n", x);
		fflush(stdout);
	}
	if (f->misbehave && (!f->first_only || task->attempt == 0)) {
		if (f->crash_all)
			raise(SIGSEGV);
		if (every(f->args, "fail_every", x))
			return gpud_task_fail(task, "faulty: refused input %ld", x);
		if (every(f->args, "crash_every", x))
			raise(SIGSEGV);
		if (every(f->args, "abort_every", x))
			abort();
		if (every(f->args, "exit_every", x))
			exit(7);
		if (every(f->args, "hang_every", x))
			for (volatile int spin = 1; spin;)
				;
		if (listed(f->args, "fail_on", x))
			return gpud_task_fail(task, "faulty: refused input %ld", x);
		if (listed(f->args, "reject_on", x))
			return gpud_task_reject(task, "faulty: input %ld is malformed", x);
		if (listed(f->args, "exit70_on", x))
			exit(70);
		if (listed(f->args, "fatal_on", x))
			return gpud_task_fatal(task, "faulty: context lost at input %ld", x);
		if (listed(f->args, "crash_on", x))
			raise(SIGSEGV);
		if (listed(f->args, "abort_on", x))
			abort();
		if (listed(f->args, "exit_on", x))
			exit(7);
		if (listed(f->args, "hang_on", x))
			for (volatile int spin = 1; spin;) {
#ifdef FAULTY_INTERRUPTIBLE
				if (atomic_load(&interrupted))
					return gpud_task_timed_out(
						task, "faulty: stopped at input %ld", x);
#endif
			}
		if (listed(f->args, "stuck_on", x))
			for (volatile int spin = 1; spin;)
				;
		if (listed(f->args, "big_on", x)) {
			task->result.size = task->result.capacity + 1;
			return 0;
		}
	}
	memcpy(task->result.data, task->input, task->input_size);
	task->result.size = task->input_size;
	return 0;
}

GPUD_EXPORT int gpud_worker_cleanup(void *state, struct gpud_error *err)
{
	struct faulty *f = state;
	bool fail = f->cleanup_fail;
	if (gpud_arg_long(f->args, "cleanup_hang", 0))
		for (;;)
			pause();
	free(f);
	return fail ? gpud_fail(err, "faulty: cleanup refused") : 0;
}
