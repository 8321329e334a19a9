/* SPDX-License-Identifier: MIT */
/* Test worker that runs out of memory: a call of more than `fit` tasks returns GPUD_OOM
 * (how = return) or marks each of its tasks with gpud_task_oom (how = mark); a task whose
 * input number is `huge` runs out even alone; a call that fits and holds `crash_on`
 * crashes (SIGSEGV), as a rerun part of a split call can; every call sleeps sleep_ms. Each result
 * is "<input> n=<n>", n the size of the call it came in; calls larger than `fit` write garbage
 * first, as a real one might. Built three times: worker-oomer with gpud_worker_process_batch; with
 * OOMER_PROCESS_ONLY, worker-oomer_one with gpud_worker_process alone; with OOMER_ABI13,
 * worker-oomer13, declared for ABI 1.3. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gpud/plugin.h>

#if defined(OOMER_ABI13)
/* Built for ABI 1.3, where -12 was any failure's return value. */
GPUD_EXTERN_C GPUD_EXPORT const struct gpud_plugin_info gpud_plugin_info = {
	GPUD_ABI_MAJOR, 3, "worker", "oomer13", "1.0"};
#elif defined(OOMER_PROCESS_ONLY)
GPUD_PLUGIN("worker", "oomer_one", "1.0");
#else
GPUD_PLUGIN("worker", "oomer", "1.0");
#endif
GPUD_PLUGIN_KEYS("fit", "how", "huge", "crash_on", "sleep_ms");

struct oomer {
	long fit, huge, crash_on, sleep_ms;
	int mark;
	unsigned max;
};

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	struct oomer *o = calloc(1, sizeof *o);
	if (!o)
		return gpud_fail(err, "oomer: out of memory");
	o->fit = gpud_arg_long(info->args, "fit", 1000000);
	o->huge = gpud_arg_long(info->args, "huge", -1);
	o->crash_on = gpud_arg_long(info->args, "crash_on", -1);
	o->sleep_ms = gpud_arg_long(info->args, "sleep_ms", 0);
	o->mark = strcmp(gpud_arg(info->args, "how", "return"), "mark") == 0;
	o->max = info->batch_size;
	*state = o;
	return 0;
}

static long number(const struct gpud_task *t)
{
	char in[32];
	size_t len = t->input_size < sizeof in - 1 ? t->input_size : sizeof in - 1;
	memcpy(in, t->input, len);
	in[len] = '\0';
	return strtol(in, NULL, 10);
}

static int run(struct oomer *o, struct gpud_task *t, size_t n)
{
	if (n == 0 || n > o->max)
		abort(); /* the host broke its promise */
	if (o->sleep_ms)
		usleep((useconds_t)o->sleep_ms * 1000);
	int huge = 0;
	for (size_t i = 0; i < n; i++)
		huge |= number(&t[i]) == o->huge;
	if ((long)n > o->fit || huge) {
		for (size_t i = 0; i < n; i++) {
			memset(t[i].result.data, 'x', 8); /* half-done work, to be dropped */
			t[i].result.size = 8;
			if (o->mark)
				gpud_task_oom(&t[i], "oomer: %zu tasks need more than the card has",
					      n);
		}
		return o->mark ? 0 : GPUD_OOM;
	}
	for (size_t i = 0; i < n; i++)
		if (number(&t[i]) == o->crash_on)
			raise(SIGSEGV);
	for (size_t i = 0; i < n; i++) {
		int m = snprintf(t[i].result.data, t[i].result.capacity, "%ld n=%zu", number(&t[i]),
				 n);
		t[i].result.size = (size_t)m;
	}
	return 0;
}

#ifdef OOMER_PROCESS_ONLY
GPUD_EXPORT int gpud_worker_process(void *state, struct gpud_task *task)
{
	struct oomer *o = state;
	if (o->fit < 1 || number(task) == o->huge)
		return gpud_task_oom(task, "oomer: the card is full");
	return run(o, task, 1);
}
#else
GPUD_EXPORT int gpud_worker_process_batch(void *state, struct gpud_task *t, size_t n)
{
	return run(state, t, n);
}
#endif

GPUD_EXPORT int gpud_worker_cleanup(void *state, struct gpud_error *err)
{
	(void)err;
	free(state);
	return 0;
}
