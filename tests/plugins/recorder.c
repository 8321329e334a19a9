/* SPDX-License-Identifier: MIT */
/* Test sink: writes every event as one line to `path`, then "close" with the stats.
 *   start <id> <worker> <attempt> <t> | ok <id> <worker> <result> | error <id> <worker> <msg>
 *   timeout <id> <worker> <seconds> <t> | setup_failed <worker> <gpu> <msg>
 *   (<t>: CLOCK_MONOTONIC seconds when the event arrived)
 *   cleanup_failed <worker> <gpu> <msg> | close <generated> <ok> <failed> <timed_out>
 *   <not_run> <retried> <restarts> <setup_failures>
 * fail_after = N fails the event after N task outcomes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("sink", "recorder", "1.0");

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct rec {
	FILE *f;
	long fail_after, outcomes;
	int closed;
};

GPUD_EXPORT int gpud_sink_open(const struct gpud_args *args, void **state, struct gpud_error *err)
{
	const char *path = gpud_arg(args, "path", NULL);
	if (!path)
		return gpud_fail(err, "recorder: path is required");
	struct rec *r = calloc(1, sizeof *r);
	r->f = fopen(path, "w");
	if (!r->f) {
		free(r);
		return gpud_fail(err, "recorder: cannot open %s", path);
	}
	setvbuf(r->f, NULL, _IOLBF, 0); /* tests watch the file while the run goes on */
	r->fail_after = gpud_arg_long(args, "fail_after", -1);
	*state = r;
	return 0;
}

GPUD_EXPORT int gpud_sink_event(void *state, const struct gpud_event *ev, struct gpud_error *err)
{
	struct rec *r = state;
	switch (ev->kind) {
	case GPUD_TASK_START:
		fprintf(r->f, "start %llu %d %d %.6f\n", (unsigned long long)ev->task_id,
			ev->worker_id, ev->attempt, now());
		break;
	case GPUD_TASK_OK:
		if (r->fail_after >= 0 && r->outcomes >= r->fail_after)
			return gpud_fail(err, "recorder: refusing after %ld", r->fail_after);
		r->outcomes++;
		fprintf(r->f, "ok %llu %d %.*s\n", (unsigned long long)ev->task_id, ev->worker_id,
			(int)ev->result_size, (const char *)ev->result);
		break;
	case GPUD_TASK_ERROR:
		r->outcomes++;
		fprintf(r->f, "error %llu %d %s\n", (unsigned long long)ev->task_id, ev->worker_id,
			ev->message);
		break;
	case GPUD_TASK_TIMEOUT:
		r->outcomes++;
		fprintf(r->f, "timeout %llu %d %g %.6f\n", (unsigned long long)ev->task_id,
			ev->worker_id, ev->seconds, now());
		break;
	case GPUD_SETUP_FAILED:
		fprintf(r->f, "setup_failed %d %d %s\n", ev->worker_id, ev->gpu_id, ev->message);
		break;
	case GPUD_CLEANUP_FAILED:
		fprintf(r->f, "cleanup_failed %d %d %s\n", ev->worker_id, ev->gpu_id, ev->message);
		break;
	case GPUD_GPU_RETIRED:
		fprintf(r->f, "gpu_retired %d %d %s\n", ev->worker_id, ev->gpu_id, ev->message);
		break;
	default:
		break;
	}
	return 0;
}

GPUD_EXPORT int gpud_sink_close(void *state, const struct gpud_stats *s, struct gpud_error *err)
{
	struct rec *r = state;
	(void)err;
	fprintf(r->f, "close %llu %llu %llu %llu %llu %llu %u %u\n",
		(unsigned long long)s->generated, (unsigned long long)s->ok,
		(unsigned long long)s->failed, (unsigned long long)s->timed_out,
		(unsigned long long)s->not_run, (unsigned long long)s->retried, s->worker_restarts,
		s->setup_failures);
	fclose(r->f);
	free(r);
	return 0;
}
