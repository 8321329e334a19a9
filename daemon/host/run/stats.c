/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "run/stats.h"
#include "run/stages.h"
#include "util/textio.h"

#include <errno.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

#include "job/python.h"
#include "record/files.h"
#include "job/groups.h"
#include "host.h"
#include "workers/fit.h"
#include "workers/times.h"

void stats_print(const struct host *h, FILE *f)
{
	const struct gpud_stats *s = &h->stats;
	double rate = s->elapsed > 0 ? (double)(s->ok + s->failed + s->timed_out) / s->elapsed : 0;
	fprintf(f, "gpud: %llu tasks: %llu ok, %llu failed, %llu timed out, %llu not run",
		(unsigned long long)s->generated, (unsigned long long)s->ok,
		(unsigned long long)s->failed, (unsigned long long)s->timed_out,
		(unsigned long long)s->not_run);
	if (s->retried)
		fprintf(f, ", %llu retried", (unsigned long long)s->retried);
	if (s->worker_restarts)
		fprintf(f, ", %u worker restarts", s->worker_restarts);
	if (s->setup_failures)
		fprintf(f, ", %u setup failures", s->setup_failures);
	fprintf(f, " in %.3f s (%.0f tasks/s)\n", s->elapsed, rate);
	if (python_chosen()) {
		char py[2048];
		python_describe(python_chosen(), py, sizeof py);
		fprintf(f, "gpud: python: %s\n", py);
	}
}

int stats_write_json(const struct host *h, const char *path, int exit_status)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	stats_json(h, f, exit_status);
	if (ferror(f)) {
		int e = errno;
		fclose(f);
		errno = e;
		return -1;
	}
	return fclose(f);
}

double stats_wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double stats_cpu_now(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru); /* the host alone: workers are children */
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* Where worker w's time went (workers/times.h), as flat fields (a worker's entry has no
 * object inside): `, "time_wall": s, "time_setup": s, ... "cpu": s, "main_thread_cpu":
 * s, "user_cpu": s (of time_user), "calls": N, "call_min" .. "call_mean", "call_sizes": [[from, to,
 * calls], ...]`. The phases are printed to the nanosecond, so they add up to time_wall as the
 * worker counted them. */
static void stats_worker_times(FILE *f, const struct host_worker *w)
{
	struct worker_times t;
	times_of(w, &t);
	fprintf(f, ", \"time_wall\": %.9f", (double)t.wall_ns * 1e-9);
	for (unsigned p = 0; p < PH_COUNT; p++)
		fprintf(f, ", \"time_%s\": %.9f", times_phase_names[p],
			(double)t.phase_ns[p] * 1e-9);
	fprintf(f, ", \"cpu\": %.6f, \"main_thread_cpu\": %.6f, \"user_cpu\": %.6f",
		(double)t.cpu_ns * 1e-9, (double)t.main_cpu_ns * 1e-9,
		(double)t.user_cpu_ns * 1e-9);
	uint32_t median;
	uint64_t calls = times_calls(&t, &median);
	fprintf(f,
		", \"calls\": %llu, \"call_min\": %u, \"call_median\": %u, \"call_max\": %u, "
		"\"call_mean\": %.2f, \"call_sizes\": [",
		(unsigned long long)calls, t.call_min, median, t.call_max,
		calls ? (double)t.items / (double)calls : 0.0);
	bool first = true;
	for (unsigned k = 0; k < SHM_CALL_BUCKETS; k++) {
		if (!t.calls[k])
			continue;
		fprintf(f, "%s[%u, %u, %llu]", first ? "" : ", ",
			k < 2 ? k + 1 : (1u << (k - 1)) + 1, 1u << k,
			(unsigned long long)t.calls[k]);
		first = false;
	}
	fprintf(f, "]");
}

static double span_s(uint64_t from, uint64_t to)
{
	return from && to > from ? (double)(to - from) * 1e-9 : 0.0;
}

/* `"first_result": {...}`: where the time from run_job's start to the first outcome
 * went (host.h struct host_startup). host, spawn, before_call and first_call follow
 * each other and add up to seconds; worker_start (the first result's worker: spawned
 * to seen ready) and first_window (every worker spawned to the first tasks written) run
 * side by side inside before_call, which ends when both have. All 0 without a result. */
static void stats_first_result(const struct host *h, FILE *f)
{
	const struct host_startup *st = &h->startup;
	uint64_t end = st->first_result_ns;
	if (!end || !st->spawn_to_ns) {
		fprintf(f, ", \"first_result\": {\"seconds\": 0, \"host\": 0, \"spawn\": 0, "
			   "\"before_call\": 0, \"first_call\": 0, \"worker_start\": 0, "
			   "\"first_window\": 0, \"worker\": -1}");
		return;
	}
	uint64_t ready = st->ready_ns ? st->ready_ns : st->spawn_to_ns;
	uint64_t call = ready > st->first_window_ns ? ready : st->first_window_ns;
	if (call < st->spawn_to_ns)
		call = st->spawn_to_ns;
	if (call > end)
		call = end;
	fprintf(f,
		", \"first_result\": {\"seconds\": %.6f, \"host\": %.6f, \"spawn\": %.6f, "
		"\"before_call\": %.6f, \"first_call\": %.6f, \"worker_start\": %.6f, "
		"\"first_window\": %.6f, \"worker\": %d, \"started_monotonic\": %.6f}",
		span_s(st->enter_ns, end), span_s(st->enter_ns, st->spawn_from_ns),
		span_s(st->spawn_from_ns, st->spawn_to_ns), span_s(st->spawn_to_ns, call),
		span_s(call, end), span_s(st->spawned_ns, st->ready_ns),
		span_s(st->spawn_to_ns, st->first_window_ns), st->first_worker,
		(double)st->enter_ns * 1e-9);
}

void stats_json(const struct host *h, FILE *f, int exit_status)
{
	const struct gpud_stats *s = &h->stats;
	double end = stats_wall_now();
	double start = h->t_start_wall > 0 ? h->t_start_wall : end - s->elapsed;
	/* The run's share: in a library, the process ran before and may run again. */
	double host_cpu = stats_cpu_now() - h->cpu_start;
	double rate = s->elapsed > 0 ? (double)(s->ok + s->failed + s->timed_out) / s->elapsed : 0;
	fprintf(f,
		"{\"generated\": %llu, \"ok\": %llu, \"failed\": %llu, \"timed_out\": %llu, "
		"\"not_run\": %llu, \"retried\": %llu, \"setup_failures\": %u, "
		"\"worker_restarts\": %u, \"start_time\": %.3f, \"end_time\": %.3f, "
		"\"elapsed\": %.6f, \"throughput\": %.1f, \"host_cpu_seconds\": %.6f, ",
		(unsigned long long)s->generated, (unsigned long long)s->ok,
		(unsigned long long)s->failed, (unsigned long long)s->timed_out,
		(unsigned long long)s->not_run, (unsigned long long)s->retried, s->setup_failures,
		s->worker_restarts, start, end, s->elapsed, rate, host_cpu);
	fprintf(f, "\"oom_splits\": %llu, \"workers\": [",
		(unsigned long long)fit_oom_splits_total(h));
	char ids[2048]; /* 256 ids: never cut short */
	for (unsigned i = 0; i < h->pool.n; i++) {
		const struct host_worker *w = &h->pool.w[i];
		fprintf(f,
			"%s{\"worker_id\": %d, \"gpu_id\": %d, \"gpu_ids\": [%s], \"ok\": %llu, "
			"\"failed\": %llu, \"timed_out\": %llu, \"restarts\": %u, "
			"\"batch_size\": %u",
			i ? ", " : "", w->index, w->gpu_id,
			w->gpu_id < 0 ? "" : groups_label(h->cfg, w->gpu_id, ids, sizeof ids),
			(unsigned long long)w->ok, (unsigned long long)w->failed,
			(unsigned long long)w->timeouts, w->restarts, fit_batch_now(h, w));
		stats_worker_times(f, w);
		fprintf(f, ", \"oom_splits\": %llu", (unsigned long long)fit_oom_splits(w));
		if (w->stage < h->pool.n_stages) { /* a CPU stage's worker: its stage */
			fprintf(f, ", \"stage\": ");
			io_json_string(f, h->pool.stages[w->stage].name);
		}
		fprintf(f, "}");
	}
	/* One entry per group of gpus_per_worker GPUs (job/groups.h), named by its first. */
	fprintf(f, "], \"gpus\": [");
	for (size_t g = 0; g < groups_count(h->cfg); g++) {
		int first = h->cfg->gpus[groups_first(h->cfg, g)];
		uint64_t ok = 0, failed = 0, timed_out = 0;
		for (unsigned i = 0; i < h->pool.n; i++) {
			if (h->pool.w[i].gpu_id != first)
				continue;
			ok += h->pool.w[i].ok;
			failed += h->pool.w[i].failed;
			timed_out += h->pool.w[i].timeouts;
		}
		fprintf(f,
			"%s{\"gpu_id\": %d, \"gpu_ids\": [%s], \"ok\": %llu, \"failed\": %llu, "
			"\"timed_out\": %llu, \"restarts\": %u, \"retired\": %s}",
			g ? ", " : "", first, groups_ids(h->cfg, g, ids, sizeof ids),
			(unsigned long long)ok, (unsigned long long)failed,
			(unsigned long long)timed_out, h->pool.restarts ? h->pool.restarts[g] : 0,
			h->pool.retired && h->pool.retired[g] ? "true" : "false");
	}
	/* Which share of which job: `gpud merge` refuses duplicates and other jobs, and
	 * names the ranks it was not given. */
	fprintf(f, "]");
	stats_first_result(h, f);
	stages_json(h, f, s->elapsed);
	fprintf(f, ", \"rank\": %u, \"ranks\": %u, \"job_id\": \"%016llx\"", h->cfg->rank,
		h->cfg->ranks, (unsigned long long)h->cfg->job_id);
	/* Dynamic shares: this rank's share is what it claimed, known once the stream
	 * ended for it; and what claiming cost. */
	long long total = h->flow.total;
	if (h->claims) {
		const struct claims *cl = h->claims;
		if (h->flow.done && !h->flow.failed)
			total = (long long)claims_nth(cl, h->flow.next_id);
		fprintf(f,
			", \"shares\": \"dynamic\", \"claims\": %llu, \"claims_lost\": %llu, "
			"\"claim_seconds\": %.6f, \"claimed_tasks\": %llu",
			(unsigned long long)cl->claims, (unsigned long long)cl->collisions,
			(double)cl->claim_ns * 1e-9,
			(unsigned long long)claims_nth(cl, cl->total_ids));
	} else {
		fprintf(f, ", \"shares\": \"static\"");
	}
	fprintf(f,
		", \"total\": %lld, \"resumed\": %llu, \"first_new_task_seconds\": %.6f, "
		"\"journal\": ",
		total, (unsigned long long)h->resume.skipped,
		h->resume.first_new_ns ? (double)(h->resume.first_new_ns - h->t_start_ns) * 1e-9
				       : 0.0);
	io_json_string(f, h->journal.fd >= 0 ? h->journal.path : NULL);
	fprintf(f, ", \"exit_status\": %d, \"abort_reason\": ", exit_status);
	io_json_string(f, h->ctl.abort ? h->ctl.abort_msg : NULL);
	fprintf(f, ", \"failures_file\": ");
	char list[4200];
	if (h->files.log_dir && (h->files.failures_listed || h->files.not_run_listed))
		snprintf(list, sizeof list, "%s/%s", h->files.log_dir, FILES_FAILURES);
	io_json_string(f, h->files.log_dir && (h->files.failures_listed || h->files.not_run_listed)
				  ? list
				  : NULL);
	fprintf(f, "}\n");
}
