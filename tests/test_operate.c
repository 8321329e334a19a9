/* SPDX-License-Identifier: MIT */
/* Operating gpud: `gpud check` without side effects, typos refused, retries that help
 * (reject, retry_on, another GPU, poison tasks), and the metrics file and endpoint. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "helpers.h"

/* The job file for `check`: the demo's plugins, with `extra` lines appended to the
 * section they follow. */
static void job(const char *dir, const char *worker, const char *gen, const char *sink)
{
	t_jobf(dir,
	       "[job]\ngpus = 0,1\n[worker]\nplugin = sha256\n%s[generator]\nplugin = %s\n"
	       "[sink]\n%s",
	       worker, gen, sink);
}

/* `gpud check` refuses with exit 2 and a message holding `needle`. */
static void refused(const char *dir, const char *needle)
{
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini'", dir), 2, "check passed; wanted '%s'",
		     needle);
	char *err = t_read_in(dir, "err");
	cr_expect(err && strstr(err, needle), "'%s' not in:\n%s", needle, err ? err : "");
	free(err);
}

Test(operate, check_finds_what_run_would_trip_on_and_touches_nothing, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *out = t_write(dir, "results.jsonl", "earlier results\n");
	struct stat before, after;
	cr_assert_eq(stat(out, &before), 0);

	/* A missing input file. */
	job(dir, "", "lines\npath = missing.txt\n", "plugin = jsonl\npath = results.jsonl\n");
	refused(dir, "lines: cannot open");
	refused(dir, "missing.txt");
	/* range without stop. */
	job(dir, "", "range\n", "plugin = jsonl\npath = results.jsonl\n");
	refused(dir, "'stop' is required");
	/* A sink path in a folder that does not exist. */
	job(dir, "", "range\nstop = 5\n", "plugin = jsonl\npath = no/such/dir/out.jsonl\n");
	refused(dir, "no folder");
	job(dir, "", "range\nstop = 5\n", "plugin = files\ndir = no/such/dir\n");
	refused(dir, "no folder");
	/* A bad log_dir and metrics file. */
	t_jobf(dir,
	       "[job]\ngpus = 0\nlog_dir = %s/no/such\n[worker]\nplugin = echo\n"
	       "[generator]\nplugin = range\nstop = 5\n[sink]\nplugin = null\n",
	       dir);
	refused(dir, "log_dir");
	t_jobf(dir,
	       "[job]\ngpus = 0\n[worker]\nplugin = echo\n[generator]\nplugin = range\n"
	       "stop = 5\n[sink]\nplugin = null\n[ui]\nmetrics_file = %s/no/m.prom\n",
	       dir);
	refused(dir, "metrics_file");
	/* A bad --stats-json, for check and for run (before any worker starts). */
	job(dir, "", "range\nstop = 5\n", "plugin = jsonl\npath = results.jsonl\n");
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini' --stats-json %s/no/s.json", dir, dir), 2);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --stats-json %s/no/s.json", dir, dir), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "--stats-json") && !strstr(err, "tasks:"), "%s", err);
	free(err);

	/* A good job checks OK, and says what it could not check. */
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini'", dir), 0);
	/* Standard input is never read by check: it would be consumed. */
	job(dir, "", "lines\npath = -\n", "plugin = jsonl\npath = results.jsonl\n");
	cr_expect_eq(t_sh(dir, "echo never-read | \"$GPUD\" check job.ini >out 2>err"), 0);

	/* The existing output is untouched by all of that. */
	char *text = t_read(out);
	cr_expect_str_eq(text, "earlier results\n");
	cr_assert_eq(stat(out, &after), 0);
	cr_expect(before.st_mtim.tv_sec == after.st_mtim.tv_sec &&
			  before.st_mtim.tv_nsec == after.st_mtim.tv_nsec,
		  "results.jsonl was written");
	struct stat st;
	cr_expect(stat("no", &st) < 0, "check created a folder");
	free(text);
	free(out);
}

Test(operate, typos_in_plugin_keys_are_refused_with_the_line_and_a_suggestion, .timeout = 60)
{
	const char *dir = t_tmpdir();
	job(dir, "", "range\nstop = 5\n", "plugin = jsonl\npth = out.jsonl\n");
	refused(dir,
		"job.ini:11: unknown key 'pth' in [sink] for plugin jsonl (did you mean 'path'?");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 2, "run took the typo");
	job(dir, "", "range\nstpo = 5\n", "plugin = null\n");
	refused(dir,
		"job.ini:7: unknown key 'stpo' in [generator] for plugin range (did you mean 'stop'?");
	job(dir, "roundz = 3\n", "range\nstop = 5\n", "plugin = null\n");
	refused(dir,
		"job.ini:5: unknown key 'roundz' in [worker] for plugin sha256 (did you mean 'rounds'?");
	/* A key nothing is near: the accepted ones are listed. */
	job(dir, "", "range\nstop = 5\n", "plugin = jsonl\ncolour = red\n");
	refused(dir,
		"unknown key 'colour' in [sink] for plugin jsonl (accepted: path, include_input, append)");
	/* A plugin that takes no keys. */
	job(dir, "", "range\nstop = 5\n", "plugin = null\npath = x\n");
	refused(dir, "plugin null takes no keys");
	/* --set is held to the same rule. */
	job(dir, "", "range\nstop = 5\n", "plugin = null\n");
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini' --set generator.strat=1", dir), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "--set generator.strat=1: unknown key 'strat' in [generator] for "
			      "plugin range (did you mean 'start'?"),
		  "%s", err);
	free(err);
	/* A plugin swapped with --set: the file's keys for the old one are only warned of. */
	cr_expect_eq(t_gpud(dir,
			    "check '%s/job.ini' --set generator.plugin=lines "
			    "--set generator.path='%s/job.ini'",
			    dir, dir),
		     0);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "job.ini:7: [generator] stop is not a key of plugin lines (put in "
			      "place by --set); ignored"),
		  "%s", err);
	free(err);
	/* [job], [ui] and section names get suggestions too. */
	t_jobf(dir, "[job]\ngpus = 0\nmax_retrys = 2\n");
	refused(dir, "job.ini:3: unknown key 'max_retrys' in [job] (did you mean 'max_retries'?");
	t_jobf(dir, "[job]\ngpus = 0\n[sinks]\nplugin = null\n");
	refused(dir, "unknown section [sinks] (did you mean [sink]?");
	/* A plugin that declares nothing gets every key, as before. */
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = faulty\nanything_goes = 1\n"
		    "[generator]\nplugin = range\nstop = 3\n[sink]\nplugin = null\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
}

/* The CPU seconds of the children waited for so far (gpud, through the shell t_gpud
 * runs it with): what a command cost, whatever else the machine runs meanwhile. */
static double children_cpu_s(void)
{
	struct rusage ru;
	cr_assert_eq(getrusage(RUSAGE_CHILDREN, &ru), 0);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* `gpud check` of a job whose [worker] has n keys: refused at check (not at run time in
 * the worker), naming the first key past the limit; the CPU seconds it took. */
static double check_keys_cpu(const char *dir, int n)
{
	char path[600];
	snprintf(path, sizeof path, "%s/job.ini", dir);
	FILE *f = fopen(path, "w");
	cr_assert(f);
	fprintf(f, "[job]\ngpus = 0\n[generator]\nplugin = range\nstop = 1\n[sink]\nplugin = null\n"
		   "[worker]\nplugin = faulty\n");
	for (int i = 0; i < n; i++)
		fprintf(f, "k%d = %d\n", i, i);
	fclose(f);
	double cpu0 = children_cpu_s();
	cr_expect_eq(t_gpud(dir, "check '%s'", path), 2);
	double cpu = children_cpu_s() - cpu0;
	char *err = t_read_in(dir, "err"), want[120];
	snprintf(want, sizeof want,
		 "[worker] has %d keys; at most 4096 are allowed (the 4097-th is at", n);
	cr_expect(strstr(err, want), "%s", err);
	free(err);
	return cpu;
}

/* 100,000 keys: a quadratic duplicate check took half a minute here. Linear: ten times
 * the keys cost about ten times the CPU, where quadratic costs a hundred. CPU time, not
 * the wall clock, and a ratio to a tenth of the keys in the same test: neither a loaded
 * machine nor a sanitizer moves it much. */
Test(operate, many_keys_are_read_in_linear_time_and_limited_at_check, .timeout = 60)
{
	const char *dir = t_tmpdir();
	double small = check_keys_cpu(dir, 10000);
	double large = check_keys_cpu(dir, 100000);
	cr_log_info("check: %.3f s of CPU for 10,000 keys, %.3f s for 100,000", small, large);
	/* The floor: a clock tick (getrusage counts in them) on the small one. */
	double ratio = large / (small > 0.01 ? small : 0.01);
	cr_expect_lt(ratio, 40, "10 times the keys took %.1f times the CPU (%.3f s, %.3f s)", ratio,
		     small, large);
}

/* The lines of the failures list for task `id`. */
static unsigned lines_for(const char *list, unsigned id)
{
	char want[64];
	snprintf(want, sizeof want, "{\"task_id\": %u, ", id);
	return (unsigned)t_count_lines(list, want);
}

Test(operate, rejected_tasks_are_not_retried_and_retry_on_chooses, .timeout = 60)
{
	const char *dir = t_tmpdir();
	t_jobf(dir,
	       "[job]\ngpus = 0,1\nmax_retries = 2\nlog_dir = %s/logs\n"
	       "[worker]\nplugin = faulty\nreject_on = 3\nfail_on = 7\n"
	       "[generator]\nplugin = range\nstop = 20\n[sink]\nplugin = jsonl\npath = out.jsonl\n",
	       dir);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json %s/s.json", dir, dir), 1);
	char *list = t_read_in(dir, "logs/failures.jsonl");
	cr_assert(list);
	cr_expect_eq(lines_for(list, 3), 1, "a rejected task ran again:\n%s", list);
	cr_expect(strstr(list, "faulty: input 3 is malformed"), "%s", list);
	cr_expect_eq(lines_for(list, 7), 3, "a failed task is tried 1 + max_retries times:\n%s",
		     list);
	char *stats = t_read_in(dir, "s.json");
	cr_expect(strstr(stats, "\"retried\": 2,"), "%s", stats);
	free(stats);
	free(list);

	/* retry_on = crash: errors are final at once, crashes still run again. */
	t_jobf(dir,
	       "[job]\ngpus = 0,1\nmax_retries = 1\nretry_on = crash\nlog_dir = %s/logs\n"
	       "[worker]\nplugin = faulty\nfail_on = 7\ncrash_on = 9\nfirst_attempt_only = 1\n"
	       "[generator]\nplugin = range\nstop = 20\n[sink]\nplugin = jsonl\npath = out.jsonl\n",
	       dir);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 1);
	list = t_read_in(dir, "logs/failures.jsonl");
	cr_expect_eq(lines_for(list, 7), 1, "%s", list);
	cr_expect_eq(lines_for(list, 9), 1, "%s", list);
	cr_expect(strstr(list, "{\"task_id\": 9, \"status\": \"error\", \"attempt\": 0,") &&
			  strstr(list, "\"retried\": true"),
		  "%s", list);
	char *out = t_read_in(dir, "out.jsonl");
	cr_expect(strstr(out, "{\"task_id\": 9, \"status\": \"ok\""), "%s", out);
	free(out);
	free(list);

	/* retry_on names only what it knows. */
	t_jobf(dir, "[job]\ngpus = 0\nretry_on = error,crsh\n");
	refused(dir,
		"job.ini:3: [job] retry_on = 'error,crsh': expected a list of error, timeout and crash");
}

Test(operate, a_retry_goes_to_another_gpu, .timeout = 60)
{
	const char *dir = t_tmpdir();
	/* Every 5th task fails on its first attempt; once both GPUs' workers are up, each
	 * retry must land on the other GPU. (The first tasks may run before the second
	 * GPU's worker is set up: their retries go where a worker is.) */
	t_jobf(dir,
	       "[job]\ngpus = 0,1\nmax_retries = 1\nlog_dir = %s/logs\n"
	       "[worker]\nplugin = faulty\nfail_every = 5\nfirst_attempt_only = 1\n"
	       "sleep_us = 2000\n"
	       "[generator]\nplugin = range\nstop = 400\n[sink]\nplugin = jsonl\npath = out.jsonl\n",
	       dir);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	char *list = t_read_in(dir, "logs/failures.jsonl");
	char *out = t_read_in(dir, "out.jsonl");
	cr_assert(list && out);
	unsigned checked = 0;
	for (unsigned id = 204; id < 400; id += 5) {
		char want[64];
		snprintf(want, sizeof want, "{\"task_id\": %u, ", id);
		const char *f = strstr(list, want), *o = strstr(out, want);
		cr_assert(f && o, "task %u", id);
		const char *p = strstr(f, "\"gpu_id\": "), *q = strstr(o, "\"gpu_id\": ");
		cr_assert(p && q);
		int fg = atoi(p + 10), og = atoi(q + 10);
		cr_expect_neq(fg, og, "task %u failed on GPU %d and ran again there", id, fg);
		checked++;
	}
	cr_expect_eq(checked, 40);
	free(list);
	free(out);
}

Test(operate, a_poison_task_fails_without_retiring_the_gpus, .timeout = 90)
{
	const char *dir = t_tmpdir();
	/* Task 5 crashes every worker that runs it. With one restart allowed a GPU, the
	 * crashes it causes after its first must not count: no GPU is retired. */
	t_jobf(dir,
	       "[job]\ngpus = 0,1\nmax_retries = 2\nmax_worker_restarts = 1\n"
	       "log_dir = %s/logs\n"
	       "[worker]\nplugin = faulty\ncrash_on = 5\n"
	       "[generator]\nplugin = range\nstop = 100\n[sink]\nplugin = jsonl\npath = out.jsonl\n",
	       dir);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui plain --stats-json %s/s.json", dir, dir),
		     1);
	char *err = t_read_in(dir, "err");
	char *out = t_read_in(dir, "out.jsonl");
	cr_expect(!strstr(err, "retired"), "%s", err);
	cr_expect(strstr(out, "\"task_id\": 5, \"status\": \"error\"") &&
			  strstr(out, "poison task: 3 workers died while running it"),
		  "%s", err);
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 100);
	cr_expect_eq(t_count_lines(out, "{\"task_id\": 5, "), 1);
	char *stats = t_read_in(dir, "s.json");
	cr_expect(strstr(stats, "\"ok\": 99,") && strstr(stats, "\"worker_restarts\": 3,"), "%s",
		  stats);
	free(stats);
	free(err);
	free(out);
}

Test(operate, a_worker_may_export_only_process_batch, .timeout = 60)
{
	const char *dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = 0\nbatch_size = 8\n[worker]\nplugin = batch_only\n"
		    "[generator]\nplugin = range\nstop = 50\n[sink]\nplugin = jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	char *out = t_read_in(dir, "out");
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 50);
	cr_expect(strstr(out, " n="), "%s", out);
	free(out);
}

Test(operate, a_plugin_exit_70_is_an_exit, .timeout = 60)
{
	const char *dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = faulty\nexit70_on = 2\n"
		    "[generator]\nplugin = range\nstop = 5\n[sink]\nplugin = null\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui plain", dir), 1);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "worker 0 (GPU 0) exited with status 70"), "%s", err);
	cr_expect(!strstr(err, "plugin's request"), "%s", err);
	free(err);
}

/* The value of the sample `name` (with its labels) in Prometheus text. */
static long long sample(const char *text, const char *name)
{
	char want[200];
	snprintf(want, sizeof want, "\n%s ", name);
	const char *p = strstr(text, want);
	cr_assert(p, "no sample %s in:\n%s", name, text);
	return atoll(p + strlen(want));
}

/* A number field of the --stats-json object. */
static long long field(const char *json, const char *name)
{
	char want[64];
	snprintf(want, sizeof want, "\"%s\": ", name);
	const char *p = strstr(json, want);
	cr_assert(p, "no %s in %s", name, json);
	return atoll(p + strlen(want));
}

Test(operate, metrics_file_and_endpoint_agree_with_stats_json, .timeout = 90)
{
	const char *dir = t_tmpdir();
	unsigned port = t_free_port();
	/* 1200 tasks in calls of up to 4 that take 8 ms, on 2 GPUs: long enough to scrape
	 * while it runs. Task 49 fails twice. */
	t_jobf(dir,
	       "[job]\ngpus = 0,1\nbatch_size = 4\nmax_retries = 1\n"
	       "[worker]\nplugin = batcher\nsleep_us = 8000\nfail_on = 49\n"
	       "[generator]\nplugin = range\nstop = 1200\n[sink]\nplugin = null\n"
	       "[ui]\nmetrics_file = %s/gpud.prom\nmetrics_interval = 0.2\n"
	       "metrics_listen = 127.0.0.1:%u\n",
	       dir, port);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0)
		_exit(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json %s/s.json", dir, dir));
	char *live = NULL;
	for (int i = 0; i < 400 && !live; i++) {
		live = t_http_get(port, "/metrics");
		if (!live)
			usleep(25000);
	}
	cr_assert(live, "nothing listened on port %u", port);
	char *missing = t_http_get(port, "/nothing");
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);

	cr_expect(strncmp(live, "HTTP/1.0 200 OK\r\n", 17) == 0, "%.200s", live);
	cr_expect(strstr(live, "Content-Type: text/plain; version=0.0.4"), "%.300s", live);
	cr_expect(strstr(live, "# TYPE gpud_tasks_total counter\n"), "%s", live);
	cr_expect(strstr(live, "# TYPE gpud_task_seconds histogram\n"), "%s", live);
	cr_expect(strstr(live, "# TYPE gpud_batch_size histogram\n"), "%s", live);
	cr_expect(strstr(live, "gpud_gpu_task_attempts_total{gpu=\"1\",outcome=\"ok\"}"), "%s",
		  live);
	cr_expect(strstr(live, "\ngpud_run_finished 0\n"), "%s", live);
	cr_expect(missing && strncmp(missing, "HTTP/1.0 404", 12) == 0, "%s", missing);

	/* The last file is the final figures, and they are the --stats-json ones. */
	char *text = t_read_in(dir, "gpud.prom");
	char *json = t_read_in(dir, "s.json");
	cr_assert(text && json);
	cr_expect_eq(sample(text, "gpud_tasks_total{outcome=\"ok\"}"), field(json, "ok"));
	cr_expect_eq(sample(text, "gpud_tasks_total{outcome=\"error\"}"), field(json, "failed"));
	cr_expect_eq(sample(text, "gpud_tasks_total{outcome=\"error\"}"), 1);
	cr_expect_eq(sample(text, "gpud_tasks_total{outcome=\"timeout\"}"),
		     field(json, "timed_out"));
	cr_expect_eq(sample(text, "gpud_tasks_total{outcome=\"not_run\"}"), field(json, "not_run"));
	cr_expect_eq(sample(text, "gpud_tasks_generated_total"), field(json, "generated"));
	cr_expect_eq(sample(text, "gpud_retries_total"), field(json, "retried"));
	cr_expect_eq(sample(text, "gpud_retries_total"), 1);
	cr_expect_eq(sample(text, "gpud_worker_restarts_total"), field(json, "worker_restarts"));
	cr_expect_eq(sample(text, "gpud_run_finished"), 1);
	cr_expect_eq(sample(text, "gpud_exit_status"), field(json, "exit_status"));
	cr_expect_eq(sample(text, "gpud_tasks_in_flight"), 0);
	/* Every run of a task is in the histograms: 1200 tasks and one retry. */
	cr_expect_eq(sample(text, "gpud_task_seconds_count"), 1201);
	cr_expect_eq(sample(text, "gpud_task_seconds_bucket{le=\"+Inf\"}"), 1201);
	cr_expect_eq(sample(text, "gpud_batch_size_sum"), 1201);
	cr_expect(sample(text, "gpud_batch_size_bucket{le=\"4\"}") ==
			  sample(text, "gpud_batch_size_count"),
		  "a call of more than batch_size");
	long long per_gpu = sample(text, "gpud_gpu_task_attempts_total{gpu=\"0\",outcome=\"ok\"}") +
			    sample(text, "gpud_gpu_task_attempts_total{gpu=\"1\",outcome=\"ok\"}");
	cr_expect_eq(per_gpu, field(json, "ok"));
	/* Written whole: no temporary file is left beside it. */
	cr_expect_eq(t_sh(dir, "! ls -a | grep -q 'gpud.prom.tmp'"), 0);
	free(text);
	free(json);
	free(live);
	free(missing);
}

Test(operate, metrics_listen_on_a_taken_port_stops_the_run_before_it_starts, .timeout = 60)
{
	const char *dir = t_tmpdir();
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	cr_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 1) == 0 &&
		  getsockname(fd, (struct sockaddr *)&a, &len) == 0);
	t_jobf(dir,
	       "[job]\ngpus = 0\n[worker]\nplugin = echo\n[generator]\nplugin = range\n"
	       "stop = 5\n[sink]\nplugin = jsonl\npath = out.jsonl\n[ui]\nmetrics_listen = %u\n",
	       ntohs(a.sin_port));
	refused(dir, "[ui] metrics_listen: cannot listen on 127.0.0.1:");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "Address already in use") && !strstr(err, "tasks:"), "%s", err);
	free(err);
	close(fd);
	t_jobf(dir, "[job]\ngpus = 0\n[ui]\nmetrics_listen = 10.0.0:80\n");
	refused(dir, "job.ini:4: [ui] metrics_listen = '10.0.0:80': expected PORT or ADDRESS:PORT");
}

/* `check` and `run` both refuse with exit 2 and `needle` in the one line said; nothing
 * ran (no summary line). */
static void both_refuse(const char *dir, const char *extra, const char *needle, const char *also)
{
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini' %s", dir, extra), 2, "check passed: %s",
		     needle);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off %s", dir, extra), 2, "run: %s", needle);
	char *err = t_read_in(dir, "err");
	cr_expect(err && strstr(err, needle) && (!also || strstr(err, also)) &&
			  !strstr(err, "tasks:") && t_count_lines(err, "gpud:") == 1,
		  "wanted one line with '%s' and '%s':\n%s", needle, also ? also : "", err);
	free(err);
}

Test(operate, one_file_named_by_two_keys_is_refused_before_anything_is_touched, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *res = t_write(dir, "results.jsonl", "earlier results\n");
	static const char head[] =
		"[job]\ngpus = 0\n%s[worker]\nplugin = echo\n[generator]\n"
		"plugin = range\nstop = 5\n[sink]\nplugin = jsonl\npath = %s\n%s";
	/* The journal and the sink, spelled differently: ./x and x. */
	t_jobf(dir, head, "journal = ./results.jsonl\n", "results.jsonl", "");
	both_refuse(dir, "", "job.ini:3: [job] journal", "job.ini:11: [sink] path");
	/* The default journal beside the job file, written as the sink's path. */
	t_jobf(dir, head, "", "job.journal", "");
	both_refuse(dir, "", "[job] journal (the default", "job.ini:10: [sink] path");
	/* --stats-json through a hard link, an absolute path and a symlink. */
	t_jobf(dir, head, "", "results.jsonl", "");
	cr_assert_eq(t_sh(dir, "ln results.jsonl hard.json && ln -s results.jsonl sym.json"), 0);
	char arg[600];
	snprintf(arg, sizeof arg, "--stats-json %s/hard.json", dir);
	both_refuse(dir, arg, arg, "job.ini:10: [sink] path");
	snprintf(arg, sizeof arg, "--stats-json %s/sym.json", dir);
	both_refuse(dir, arg, "--stats-json", "job.ini:10: [sink] path");
	snprintf(arg, sizeof arg, "--stats-json %s/./results.jsonl", dir);
	both_refuse(dir, arg, "--stats-json", "job.ini:10: [sink] path");
	/* The metrics file, by --set, against the journal; a symlink to a file not made yet. */
	cr_assert_eq(t_sh(dir, "ln -s new.prom link.journal"), 0);
	t_jobf(dir, head, "journal = link.journal\n", "out.jsonl",
	       "[ui]\nmetrics_file = new.prom\n");
	both_refuse(dir, "", "job.ini:3: [job] journal", "job.ini:13: [ui] metrics_file");
	/* log_dir's files, and a sink writing over the job file or the generator's input. */
	t_jobf(dir, head, "log_dir = logs\n", "logs/failures.jsonl", "");
	both_refuse(dir, "", "log_dir's failures.jsonl", "[sink] path");
	t_jobf(dir, head, "log_dir = logs\n", "logs/worker-0.log", "");
	both_refuse(dir, "", "worker log", "job.ini:3: [job] log_dir");
	t_jobf(dir, head, "", "job.ini", "");
	both_refuse(dir, "", "the job file", "[sink] path");
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = echo\n[generator]\nplugin = lines\n"
		    "path = results.jsonl\n[sink]\nplugin = jsonl\npath = results.jsonl\n");
	both_refuse(dir, "", "job.ini:7: [generator] path", "job.ini:10: [sink] path");
	/* {rank} paths: the same once the rank is put in. */
	t_jobf(dir, head, "journal = out{rank}.txt\n", "./out{rank}.txt", "");
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini' --rank 1/2", dir), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "[job] journal") && strstr(err, "out1.txt"), "%s", err);
	free(err);

	/* Nothing was touched: no journal, no output, the results as they were. */
	char *text = t_read(res);
	cr_expect_str_eq(text, "earlier results\n");
	struct stat st;
	char path[600];
	snprintf(path, sizeof path, "%s/new.prom", dir);
	cr_expect(stat(path, &st) < 0, "the metrics file was written");
	snprintf(path, sizeof path, "%s/out.jsonl", dir);
	cr_expect(stat(path, &st) < 0, "the sink's output was written");
	free(text);
	free(res);
}

Test(operate, job_files_that_are_not_regular_or_huge_are_refused, .timeout = 60)
{
	const char *dir = t_tmpdir();
	/* /dev/zero was read without bound; a job file larger than the cap is refused
	 * without being read. */
	cr_expect_eq(t_gpud(dir, "run /dev/zero"), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "/dev/zero: not a regular file") && t_count_lines(err, "gpud:") == 1,
		  "%s", err);
	free(err);
	cr_expect_eq(t_gpud(dir, "check /dev/zero"), 2);
	/* A FIFO: refused without waiting for a writer. */
	cr_expect_eq(t_sh(dir, "mkfifo job.fifo && timeout 10 \"$GPUD\" check job.fifo 2>err"), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "job.fifo: not a regular file"), "%s", err);
	free(err);
	cr_assert_eq(t_sh(dir, "truncate -s 100M big.ini"), 0);
	cr_expect_eq(t_gpud(dir, "check %s/big.ini", dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "big.ini: 104857600 bytes, larger than the 8 MiB"), "%s", err);
	free(err);
	cr_expect_eq(t_gpud(dir, "run %s/big.ini", dir), 2);
}

Test(operate, what_the_machine_cannot_give_is_refused_up_front, .timeout = 120)
{
	const char *dir = t_tmpdir();
	static const char text[] =
		"[job]\ngpus = 0\nworkers_per_gpu = %u\n%s[worker]\nplugin = echo\n"
		"[generator]\nplugin = range\nstop = 100\n[sink]\nplugin = null\n";
	/* 256 workers and 256 open files: not enough, and the hard limit says so. */
	t_jobf(dir, text, 256, "");
	cr_expect_eq(t_sh(dir, "ulimit -n 256; \"$GPUD\" check job.ini >out 2>err"), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "need about 576 open files") && strstr(err, "workers_per_gpu"), "%s",
		  err);
	free(err);
	cr_expect_eq(t_sh(dir, "ulimit -n 256; \"$GPUD\" run job.ini --ui off >out 2>err"), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "workers_per_gpu") && !strstr(err, "tasks:"), "%s", err);
	free(err);
	/* A soft limit below what is needed, under a hard one that suffices: raised. */
	t_jobf(dir, text, 40, "");
	cr_expect_eq(t_sh(dir,
			  "ulimit -S -n 100; ulimit -H -n 1024; \"$GPUD\" run job.ini --ui off "
			  ">out 2>err"),
		     0);
	/* Shared memory no machine has: refused, naming the key, before a worker starts. */
	t_jobf(dir, text, 4, "max_task_bytes = 1G\nbatch_size = 65536\n");
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini'", dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "shared memory") && strstr(err, "max_task_bytes (1.0 GiB)") &&
			  strstr(err, "batch_size (65536)"),
		  "%s", err);
	free(err);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 2);
	t_jobf(dir, text, 4, "max_result_bytes = 1G\nbatch_size = 65536\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "max_result_bytes (1.0 GiB)") && !strstr(err, "tasks:"), "%s", err);
	free(err);
}

/* Runs `cmd` (check or run) on job.ini with `set` (--set ... or --stats-json ...) and
 * expects exit 2 with the line naming `first` and `second`. */
static void refused_inside(const char *dir, const char *cmd, const char *set, const char *first,
			   const char *second)
{
	cr_expect_eq(t_gpud(dir, "%s '%s/job.ini' --ui off %s", cmd, dir, set), 2, "%s %s passed",
		     cmd, set);
	char *err = t_read_in(dir, "err");
	cr_expect(err && strstr(err, first) && strstr(err, second) &&
			  strstr(err, "names: the run would change the generator's input") &&
			  t_count_lines(err, "gpud: ") == 1,
		  "%s %s: wanted '%s' and '%s' in one line:\n%s", cmd, set, first, second,
		  err ? err : "");
	free(err);
}

Test(operate, an_output_inside_the_generators_input_folder_is_refused, .timeout = 60)
{
	/* It passed check, and after a kill every --resume failed: "the folder in changed". */
	const char *dir = t_tmpdir();
	cr_assert_eq(t_sh(dir, "mkdir in && echo a > in/a && echo b > in/b"), 0);
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = faulty\n[generator]\nplugin = files\n"
		    "dir = in\n[sink]\nplugin = jsonl\npath = in/out.jsonl\n");
	const char *gen = "job.ini:7: [generator] dir";
	refused_inside(dir, "check", "", "job.ini:10: [sink] path = ", gen);
	refused_inside(dir, "run", "", "job.ini:10: [sink] path = ", gen);
	/* (--set and --stats-json paths are from the working folder: given whole.) */
	char ok[300], set[900];
	snprintf(ok, sizeof ok, "--set sink.path=%s/out.jsonl", dir);
	snprintf(set, sizeof set, "%s --set job.journal=%s/in/j.journal", ok, dir);
	refused_inside(dir, "run", set, "/in/j.journal: [job] journal = ", gen);
	snprintf(set, sizeof set, "%s --set ui.metrics_file=%s/in/m.prom", ok, dir);
	refused_inside(dir, "check", set, "[ui] metrics_file = ", gen);
	snprintf(set, sizeof set, "%s --stats-json %s/in/s.json", ok, dir);
	refused_inside(dir, "run", set, "/in/s.json lies in the folder", gen);
	snprintf(set, sizeof set, "%s --set job.log_dir=%s/in", ok, dir);
	refused_inside(dir, "check", set, "[job] log_dir", gen);
	snprintf(set, sizeof set, "%s --set job.log_dir=%s/./in/ --ui dashboard", ok, dir);
	refused_inside(dir, "run", set, "[job] log_dir", gen);
	/* A folder below is not listed unless recursive = true. */
	snprintf(set, sizeof set, "%s --set job.log_dir=%s/in/logs", ok, dir);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off %s", dir, set), 0);
	snprintf(set, sizeof set, "%s --set job.log_dir=%s/in/logs2 --set generator.recursive=true",
		 ok, dir);
	refused_inside(dir, "check", set, "[job] log_dir", gen);
	/* The files sink writes in its dir. */
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = faulty\n[generator]\nplugin = files\n"
		    "dir = in\n[sink]\nplugin = files\ndir = in\n");
	refused_inside(dir, "check", "", "job.ini:10: [sink] dir = ", gen);
	refused_inside(dir, "run", "", "job.ini:10: [sink] dir = ", gen);
	cr_expect_eq(t_sh(dir, "ls in | tr '\\n' ' ' > ls"), 0);
	char *ls = t_read_in(dir, "ls");
	cr_expect_str_eq(ls, "a b logs ", "a refused run wrote in the input folder");
	free(ls);
}
