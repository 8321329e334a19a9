/* SPDX-License-Identifier: MIT */
/* Test worker with tasks in flight (gpud_worker_submit/poll), like an engine that
 * schedules its requests itself: it keeps the submitted tasks in a list and finishes
 * them all at once, in reverse order, when it holds `hold` of them (default: as many as
 * max_in_flight), or when the worker has had nothing new for it for `linger_ms` (default
 * 20) of polls. Each result is written at submit and handed back later:
 * "in=<input> id=<id> held=<tasks held after this one's submit> max=<max_in_flight>".
 * Keys taking one input number: hang_on (that task never finishes), fail_on
 * (gpud_task_fail at the finish), reject_on (submit refuses it at once), fatal_on (submit
 * fails it with gpud_task_fatal: this process is to be replaced). crash_after = K
 * kills the process (SIGKILL, as kill -9) after K tasks finished, once a run: only when
 * the file crash_file does not exist yet, and it is created first. poll_fail_after = K:
 * poll returns -1 after K tasks, once a run likewise (the same file). crash_on = a comma
 * list of input numbers: poll kills the process (SIGKILL) when it would finish one of
 * them, every time (the others held beside it never finish either). empty_every = K: the
 * result of every input divisible by K is empty. Built twice more
 * for the loader's tests: declared for ABI 1.3 (FIXTURE_MINOR), and without
 * gpud_worker_poll (FIXTURE_NO_POLL). */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <gpud/plugin.h>

#ifdef FIXTURE_MINOR /* the loader's tests: declared for an older minor */
GPUD_EXPORT const struct gpud_plugin_info gpud_plugin_info = {GPUD_ABI_MAJOR, FIXTURE_MINOR,
							      "worker", "inflight", "1"};
#else
GPUD_PLUGIN("worker", "inflight", "1.0");
#endif

struct engine {
	struct gpud_task **list, **kept;
	size_t n;
	unsigned cap, hold;
	long hang_on, fail_on, reject_on, fatal_on, crash_after, poll_fail_after;
	long finished, empty_every;
	const char *crash_file, *crash_on;
	long linger_ms, lingered_ms;
};

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	struct engine *e = calloc(1, sizeof *e);
	if (!e)
		return gpud_fail(err, "inflight: out of memory");
	e->cap = info->max_in_flight;
	e->list = calloc(e->cap ? e->cap : 1, sizeof *e->list);
	e->kept = calloc(e->cap ? e->cap : 1, sizeof *e->kept);
	e->hold = (unsigned)gpud_arg_long(info->args, "hold", (long)e->cap);
	e->hang_on = gpud_arg_long(info->args, "hang_on", -1);
	e->fail_on = gpud_arg_long(info->args, "fail_on", -1);
	e->reject_on = gpud_arg_long(info->args, "reject_on", -1);
	e->fatal_on = gpud_arg_long(info->args, "fatal_on", -1);
	e->crash_after = gpud_arg_long(info->args, "crash_after", -1);
	e->poll_fail_after = gpud_arg_long(info->args, "poll_fail_after", -1);
	e->crash_file = gpud_arg(info->args, "crash_file", "inflight.crashed");
	e->crash_on = gpud_arg(info->args, "crash_on", NULL);
	e->linger_ms = gpud_arg_long(info->args, "linger_ms", 20);
	e->empty_every = gpud_arg_long(info->args, "empty_every", 0);
	if (!e->list || !e->kept)
		return gpud_fail(err, "inflight: out of memory");
	*state = e;
	return 0;
}

static long input_number(const struct gpud_task *t)
{
	char in[32];
	size_t len = t->input_size < sizeof in - 1 ? t->input_size : sizeof in - 1;
	memcpy(in, t->input, len);
	in[len] = '\0';
	return strtol(in, NULL, 10);
}

GPUD_EXPORT int gpud_worker_submit(void *state, struct gpud_task *t)
{
	struct engine *e = state;
	if (e->n >= e->cap)
		abort(); /* gpud broke its promise: more than max_in_flight */
	long x = input_number(t);
	if (x == e->reject_on)
		return gpud_task_reject(t, "inflight: rejected %ld at submit", x);
	if (x == e->fatal_on)
		return gpud_task_fatal(t, "inflight: fatal at submit of %ld", x);
	e->list[e->n++] = t;
	int m = snprintf(t->result.data, t->result.capacity, "in=%ld id=%llu held=%zu max=%u", x,
			 (unsigned long long)t->id, e->n, e->cap);
	t->result.size = e->empty_every > 0 && x % e->empty_every == 0 ? 0 : (size_t)m;
	return 0;
}

#ifndef FIXTURE_NO_POLL /* the loader's tests: submit alone */
/* Once a run: true the first time, after creating the file. */
static int first_time(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
	if (fd < 0)
		return 0;
	close(fd);
	return 1;
}

GPUD_EXPORT int gpud_worker_poll(void *state, struct gpud_task **done, size_t max, int timeout_ms,
				 struct gpud_error *err)
{
	struct engine *e = state;
	size_t hung = 0;
	for (size_t i = 0; i < e->n; i++)
		hung += input_number(e->list[i]) == e->hang_on;
	if (e->n - hung < e->hold || e->n == hung) {
		/* Not full: wait, as an engine would for more requests. */
		if (!timeout_ms)
			return 0;
		struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
		nanosleep(&ts, NULL);
		e->lingered_ms += timeout_ms;
		if (e->lingered_ms < e->linger_ms || e->n == hung)
			return 0;
	}
	e->lingered_ms = 0;
	/* Everything it holds but a hung task, the last submitted first; what stays (a hung
	 * task, more than `max`) stays in submit order. */
	size_t k = 0, keep = 0;
	for (size_t i = e->n; i-- > 0;) {
		struct gpud_task *t = e->list[i];
		long x = input_number(t);
		if (x == e->hang_on || k == max) {
			e->kept[keep++] = t;
			continue;
		}
		if (x == e->fail_on)
			gpud_task_fail(t, "inflight: refused %ld", x);
		for (const char *v = e->crash_on; v && *v;) {
			char *end;
			long y = strtol(v, &end, 10);
			if (end == v)
				break;
			if (y == x)
				kill(getpid(), SIGKILL);
			v = *end == ',' ? end + 1 : end;
		}
		done[k++] = t;
		e->finished++;
		if (e->finished == e->crash_after && first_time(e->crash_file))
			kill(getpid(), SIGKILL);
		if (e->finished == e->poll_fail_after && first_time(e->crash_file))
			return gpud_fail(err, "inflight: the engine died after %ld tasks",
					 e->finished);
	}
	for (size_t i = 0; i < keep; i++)
		e->list[i] = e->kept[keep - 1 - i];
	e->n = keep;
	return (int)k;
}
#endif

GPUD_EXPORT int gpud_worker_cleanup(void *state, struct gpud_error *err)
{
	struct engine *e = state;
	if (e->n)
		return gpud_fail(err, "inflight: cleanup with %zu tasks in flight", e->n);
	free(e->list);
	free(e->kept);
	free(e);
	return 0;
}
