/* SPDX-License-Identifier: MIT */
/* End to end: the real gpud binary on real job files. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"

#define N_TASKS 10000

/* A field of a jsonl line: the number after "key": or the string after "key": " */
static long num_field(const char *line, const char *key)
{
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\": ", key);
	const char *p = strstr(line, pat);
	cr_assert(p, "no %s in %.200s", key, line);
	return strtol(p + strlen(pat), NULL, 10);
}

static char *str_field(const char *line, const char *key)
{
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\": \"", key);
	const char *p = strstr(line, pat);
	if (!p)
		return NULL;
	p += strlen(pat);
	const char *e = strchr(p, '"');
	cr_assert(e);
	return strndup(p, (size_t)(e - p));
}

static char *job(const char *dir, const char *worker_extra, const char *gen, const char *sink,
		 const char *job_extra)
{
	char *text;
	cr_assert(asprintf(&text,
			   "[job]\ngpus = 0,1\nworkers_per_gpu = 2\nqueue_size = 64\n%s\n"
			   "[worker]\nplugin = probe\ngreeting = hello\n%s\n"
			   "[generator]\n%s\n[sink]\n%s\n",
			   job_extra, worker_extra, gen, sink) > 0);
	char *path = t_write(dir, "job.ini", text);
	free(text);
	return path;
}

Test(run, ten_thousand_tasks_on_two_gpus_by_two_workers, .timeout = 120)
{
	const char *dir = t_tmpdir();
	/* 100 us a task: long enough that every worker is set up before the work runs
	 * out, even on a loaded machine (each must show its seed and environment). */
	char *path =
		job(dir, "sleep_us = 100", "plugin = range\nstop = 10000", "plugin = jsonl", "");
	cr_assert_eq(t_gpud(dir, "run '%s'", path), 0, "%s", t_read_in(dir, "err"));

	char *out = t_read_in(dir, "out");
	cr_assert(out);
	static unsigned char seen[N_TASKS];
	unsigned long seeds_of[4] = {0};
	unsigned per_worker[4] = {0};
	size_t lines = 0;
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		lines++;
		long id = num_field(line, "task_id");
		long wid = num_field(line, "worker_id");
		long gpu = num_field(line, "gpu_id");
		cr_assert(id >= 0 && id < N_TASKS, "task id %ld", id);
		cr_assert_eq(seen[id]++, 0, "task %ld reported twice", id);
		char *status = str_field(line, "status");
		cr_assert_str_eq(status, "ok", "%s", line);
		free(status);
		cr_assert(wid >= 0 && wid < 4);
		cr_assert_eq(gpu, wid / 2, "worker %ld should be on GPU %ld", wid, wid / 2);
		per_worker[wid]++;

		char *res = str_field(line, "result");
		long rid, rin, rwid, rgpu, cvd, egpu, ewid;
		unsigned long seed;
		char greet[32];
		cr_assert_eq(sscanf(res,
				    "id=%ld in=%ld seed=%lu wid=%ld gpu=%ld cvd=%ld env_gpu=%ld "
				    "env_wid=%ld greeting=%31s",
				    &rid, &rin, &seed, &rwid, &rgpu, &cvd, &egpu, &ewid, greet),
			     9, "result: %s", res);
		cr_assert_eq(rid, id);
		cr_assert_eq(rin, id, "range yields the task's own number");
		cr_assert_eq(rwid, wid);
		cr_assert_eq(ewid, wid, "GPUD_WORKER_ID");
		cr_assert_eq(rgpu, gpu);
		cr_assert_eq(cvd, gpu, "CUDA_VISIBLE_DEVICES");
		cr_assert_eq(egpu, gpu, "GPUD_GPU_ID");
		cr_assert_eq(seed, 42 + (unsigned long)wid, "seed = base_seed + worker id");
		cr_assert_str_eq(greet, "hello", "setup arguments reach the worker");
		seeds_of[wid] = seed;
		free(res);
	}
	cr_expect_eq(lines, N_TASKS);
	for (int i = 0; i < N_TASKS; i++)
		cr_assert_eq(seen[i], 1, "task %d missing", i);
	for (int w = 0; w < 4; w++)
		cr_expect_gt(per_worker[w], 0, "worker %d ran nothing", w);
	for (int a = 0; a < 4; a++)
		for (int b = a + 1; b < 4; b++)
			cr_expect_neq(seeds_of[a], seeds_of[b], "seeds are distinct");
	free(out);
}

Test(run, every_event_reaches_the_sink_and_close_once, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char sink[256];
	snprintf(sink, sizeof sink, "plugin = recorder\npath = %s/events", dir);
	char *path = job(dir, "", "plugin = range\nstop = 3000", sink, "");
	cr_assert_eq(t_gpud(dir, "run '%s'", path), 0);
	char *text = t_read_in(dir, "events");
	cr_assert(text);
	cr_expect_eq(t_count_lines(text, "start "), 3000);
	cr_expect_eq(t_count_lines(text, "ok "), 3000);
	cr_expect_eq(t_count_lines(text, "close "), 1);
	cr_expect(strstr(text, "close 3000 3000 0 0 0 0 0 0\n"), "stats: %s",
		  strstr(text, "close"));
	/* A task's start comes before its outcome. */
	static long start_line[3000], ok_line[3000];
	long n = 0;
	for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n"), n++) {
		unsigned long id;
		if (sscanf(l, "start %lu", &id) == 1)
			start_line[id] = n + 1;
		else if (sscanf(l, "ok %lu", &id) == 1)
			ok_line[id] = n + 1;
	}
	for (int i = 0; i < 3000; i++)
		cr_assert(start_line[i] && start_line[i] < ok_line[i], "task %d: start after ok",
			  i);
	free(text);
}

Test(run, lines_generator_and_echo, .timeout = 60)
{
	const char *dir = t_tmpdir();
	t_write(dir, "in.txt", "alpha\r\nbeta\n\n\"quoted\" \\ back\nno newline at end");
	char *path = t_write(dir, "job.ini",
			     "[job]\ngpus = 3\n[worker]\nplugin = echo\n"
			     "[generator]\nplugin = lines\npath = in.txt\n"
			     "[sink]\nplugin = jsonl\ninclude_input = true\n");
	cr_assert_eq(t_gpud(dir, "run '%s'", path), 0);
	char *out = t_read_in(dir, "out");
	cr_expect(
		strstr(out, "\"task_id\": 0, \"status\": \"ok\", \"worker_id\": 0, \"gpu_id\": 3"),
		"%s", out);
	cr_expect(strstr(out, "\"result\": \"alpha\"}"), "CR stripped: %s", out);
	cr_expect(strstr(out, "\"result\": \"beta\"}"));
	cr_expect(strstr(out, "\"result\": \"\"}"), "empty line is an empty task");
	cr_expect(strstr(out, "\"result\": \"\\\"quoted\\\" \\\\ back\"}"), "escaped: %s", out);
	cr_expect(strstr(out, "\"input\": \"no newline at end\""), "include_input");
	cr_expect_eq(t_count_lines(out, "{"), 5);
	free(out);
}

/* Empty results are ok results on every path a C worker takes, mixed with others in the
 * same calls: process() (echo, on empty lines), process_batch() with one task a call and
 * with eight, and tasks in flight. Task i's result is empty when i is divisible by 3. */
Test(run, empty_results_are_ok_on_every_c_path, .timeout = 120)
{
	const char *dir = t_tmpdir();
	enum { N = 300 };
	char lines[N * 8] = "", *p = lines;
	for (int i = 0; i < N; i++)
		p += i % 3 ? sprintf(p, "%d\n", i) : sprintf(p, "\n");
	free(t_write(dir, "in.txt", lines));
	static const char *const cases[][3] = {
		{"", "plugin = echo", "plugin = lines\npath = in.txt"},
		{"batch_size = 1", "plugin = batcher\nempty_every = 3",
		 "plugin = range\nstop = 300"},
		{"batch_size = 8", "plugin = batcher\nempty_every = 3",
		 "plugin = range\nstop = 300"},
		{"max_in_flight = 8", "plugin = inflight\nempty_every = 3",
		 "plugin = range\nstop = 300"},
	};
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
		char *text;
		cr_assert(asprintf(&text,
				   "[job]\ngpus = 0\n%s\n[worker]\n%s\n[generator]\n%s\n"
				   "[sink]\nplugin = jsonl\n",
				   cases[c][0], cases[c][1], cases[c][2]) > 0);
		char *path = t_write(dir, "job.ini", text);
		int rc = t_gpud(dir, "run '%s' --stats-json '%s/s.json'", path, dir);
		char *err = t_read_in(dir, "err");
		cr_expect_eq(rc, 0, "%s: %s", cases[c][1], err);
		cr_expect(!strstr(err, "corrupted"), "%s: %s", cases[c][1], err);
		char *js = t_read_in(dir, "s.json");
		cr_expect(strstr(js, "\"generated\": 300, \"ok\": 300,"), "%s: %s", cases[c][1],
			  js);
		cr_expect(strstr(js, "\"worker_restarts\": 0,"), "%s: %s", cases[c][1], js);
		char *out = t_read_in(dir, "out");
		int seen = 0, empty = 0;
		for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n"), seen++) {
			long id = num_field(l, "task_id");
			cr_expect(strstr(l, "\"status\": \"ok\""), "%s: %s", cases[c][1], l);
			char *res = str_field(l, "result");
			cr_expect(res && (res[0] == '\0') == (id % 3 == 0), "%s: %s", cases[c][1],
				  l);
			empty += res && !res[0];
			free(res);
		}
		cr_expect_eq(seen, N, "%s: every task one line", cases[c][1]);
		cr_expect_eq(empty, N / 3, "%s", cases[c][1]);
		free(out);
		free(js);
		free(err);
		free(path);
		free(text);
	}
}

Test(run, non_utf8_results_are_base64)
{
	const char *dir = t_tmpdir();
	t_write(dir, "in.txt", "ok\n\xff\xfe\x01\n");
	char *path =
		t_write(dir, "job.ini",
			"[job]\ngpus = 0\n[worker]\nplugin = echo\n"
			"[generator]\nplugin = lines\npath = in.txt\n[sink]\nplugin = jsonl\n");
	cr_assert_eq(t_gpud(dir, "run '%s'", path), 0);
	char *out = t_read_in(dir, "out");
	cr_expect(strstr(out, "\"result_base64\": \"//4B\""), "%s", out);
	cr_expect(strstr(out, "\"result\": \"ok\""), "%s", out);
	free(out);
}

Test(run, sha256_demo_worker)
{
	const char *dir = t_tmpdir();
	t_write(dir, "in.txt", "abc\n");
	char *path =
		t_write(dir, "job.ini",
			"[job]\ngpus = 0\n[worker]\nplugin = sha256\n"
			"[generator]\nplugin = lines\npath = in.txt\n[sink]\nplugin = jsonl\n");
	cr_assert_eq(t_gpud(dir, "run '%s'", path), 0);
	char *out = t_read_in(dir, "out");
	/* FIPS 180-2's test vector for "abc". */
	cr_expect(strstr(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
		  "%s", out);
	free(out);
}

Test(run, oversized_input_fails_that_task_only)
{
	const char *dir = t_tmpdir();
	t_write(dir, "in.txt", "short\nthis line is far too long for the limit\nfine\n");
	char *path =
		t_write(dir, "job.ini",
			"[job]\ngpus = 0\nmax_task_bytes = 16\n[worker]\nplugin = echo\n"
			"[generator]\nplugin = lines\npath = in.txt\n[sink]\nplugin = jsonl\n");
	cr_assert_eq(t_gpud(dir, "run '%s'", path), 1, "some task failed: exit 1");
	char *out = t_read_in(dir, "out");
	cr_expect(strstr(out, "\"task_id\": 1, \"status\": \"error\""), "%s", out);
	cr_expect(strstr(out, "task input of 39 bytes exceeds max_task_bytes (16)"), "%s", out);
	cr_expect(strstr(out, "\"result\": \"fine\""), "the run went on");
	free(out);
}

Test(run, oversized_result_fails_that_task_only)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "", "plugin = range\nstop = 100", "plugin = jsonl",
			 "max_result_bytes = 32");
	cr_assert_eq(t_gpud(dir, "run '%s' --set worker.plugin=faulty --set worker.big_on=7", path),
		     1);
	char *out = t_read_in(dir, "out");
	cr_expect(strstr(out, "result of 33 bytes exceeds max_result_bytes (32)"), "%s", out);
	cr_expect_eq(t_count_lines(out, "{"), 100);
	free(out);
}

Test(run, check_command)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "", "plugin = range\nstop = 10", "plugin = null", "");
	cr_expect_eq(t_gpud(dir, "check '%s'", path), 0);
	char *out = t_read_in(dir, "out");
	cr_expect(strstr(out, ": OK: 2 GPUs x 2 workers"), "%s", out);
	free(out);
}

/* Each broken plugin: exit 2 and exactly one line naming the problem, from check and run. */
static void broken_plugin(const char *section, const char *file, const char *needle)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "", "plugin = range\nstop = 10", "plugin = null", "");
	const char *cmds[] = {"check", "run"};
	for (int i = 0; i < 2; i++) {
		int rc = t_gpud(dir, "%s '%s' --set %s.plugin='%s/%s'", cmds[i], path, section,
				t_env("FIXTURES"), file);
		cr_expect_eq(rc, 2, "%s with %s", cmds[i], file);
		char *err = t_read_in(dir, "err");
		cr_expect(strstr(err, needle), "%s: '%s' lacks '%s'", cmds[i], err, needle);
		cr_expect_eq(t_count_lines(err, ""), 1, "one line: %s", err);
		free(err);
	}
}

Test(run, broken_plugins_exit_2_with_one_line)
{
	broken_plugin("worker", "bad-abi.so", "built for plugin ABI 2.0");
	broken_plugin("worker", "wrong-kind.so", "is a 'sink' plugin, not a 'worker' plugin");
	broken_plugin("worker", "missing-sym.so", "exports neither gpud_worker_process nor");
	broken_plugin("worker", "unresolved.so", "undefined symbol");
	broken_plugin("worker", "not-a-plugin.so", "cannot load");
	broken_plugin("worker", "no-such.so", "No such file");
	broken_plugin("sink", "worker-probe.so", "is a 'worker' plugin, not a 'sink' plugin");
	broken_plugin("generator", "no-info.so", "not a gpud plugin");
}

Test(run, bad_job_file_exits_2)
{
	const char *dir = t_tmpdir();
	char *path = t_write(dir, "job.ini", "[job]\ngpus = 0\nqueue_size = lots\n");
	cr_expect_eq(t_gpud(dir, "run '%s'", path), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "job.ini:3:"), "%s", err);
	free(err);
	cr_expect_eq(t_gpud(dir, "run '%s/missing.ini'", dir), 2);
	cr_expect_eq(t_gpud(dir, "run"), 2);
	cr_expect_eq(t_gpud(dir, "frobnicate x.ini"), 2);
	cr_expect_eq(t_gpud(dir, "run '%s' --ui sideways", path), 2);
	cr_expect_eq(t_gpud(dir, "run '%s' --set", path), 2);
	cr_expect_eq(t_gpud(dir, "--help"), 0);
	cr_expect_eq(t_gpud(dir, "--version"), 0);
}

Test(run, generator_open_failure_exits_2)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "", "plugin = lines\npath = nope.txt", "plugin = null", "");
	cr_expect_eq(t_gpud(dir, "run '%s'", path), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "cannot open"), "%s", err);
	cr_expect(strstr(err, "nope.txt"), "%s", err);
	free(err);
}

Test(run, stats_json)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "", "plugin = range\nstop = 500", "plugin = null", "");
	cr_assert_eq(t_gpud(dir, "run '%s' --stats-json '%s/stats.json'", path, dir), 0);
	char *js = t_read_in(dir, "stats.json");
	cr_assert(js);
	cr_expect(strstr(js, "\"generated\": 500, \"ok\": 500, \"failed\": 0"), "%s", js);
	cr_expect_eq(t_count_lines(js, "{"), 1);
	free(js);
}

Test(run, plugins_command)
{
	const char *dir = t_tmpdir();
	cr_assert_eq(t_gpud(dir, "plugins"), 0);
	char *out = t_read_in(dir, "out");
	cr_expect(strstr(out, "(GPUD_PLUGIN_PATH):"), "%s", out);
	cr_expect(strstr(out, "worker     probe       1.0"), "fixtures via GPUD_PLUGIN_PATH: %s",
		  out);
	cr_expect(strstr(out, "(built-in):"), "%s", out);
	cr_expect(strstr(out, "generator  files       1.0     the paths of the files under dir"),
		  "%s", out);
	cr_expect(strstr(out, "sink       jsonl"), "%s", out);
	cr_expect(strstr(out, "worker     sha256"), "%s", out);
	free(out);
	cr_expect_eq(t_gpud(dir, "plugins extra"), 2);
}

/* Small rings wrapped thousands of times: task records, result records and pads. */
Test(run, rings_wrap_many_times, .timeout = 120)
{
	const char *dir = t_tmpdir();
	const char *workers[] = {"plugin = echo", "plugin = batcher"};
	for (int i = 0; i < 2; i++) {
		char *text;
		cr_assert(asprintf(&text,
				   "[job]\ngpus = 0,1\nmax_task_bytes = 100\n"
				   "max_result_bytes = 100\nbatch_size = 8\n[worker]\n%s\n"
				   "[generator]\nplugin = range\nstop = 300000\n"
				   "[sink]\nplugin = null\n",
				   workers[i]) > 0);
		char *path = t_write(dir, "job.ini", text);
		cr_expect_eq(t_gpud(dir, "run '%s' --stats-json '%s/s.json'", path, dir), 0, "%s",
			     workers[i]);
		char *js = t_read_in(dir, "s.json");
		cr_expect(strstr(js, "\"generated\": 300000, \"ok\": 300000,"), "%s: %s",
			  workers[i], js);
		cr_expect(strstr(js, "\"worker_restarts\": 0,"), "%s: %s", workers[i], js);
		free(js);
		free(text);
		free(path);
	}
}

/* Where each worker's time goes (--stats-json, the metrics): the phases add up to each
 * worker's wall time, the user's time holds the plugin's own sleeps, and the call-size
 * histogram is the calls the plugin saw (each result says its call's size). */
Test(run, each_workers_time_adds_up_and_its_call_sizes_are_the_calls_it_got, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *text;
	cr_assert(asprintf(&text,
			   "[job]\ngpus = 0\nworkers_per_gpu = 2\nbatch_size = 8\n"
			   "[worker]\nplugin = batcher\nsleep_us = 1000\n"
			   "[generator]\nplugin = range\nstop = 3000\n"
			   "[sink]\nplugin = jsonl\n"
			   "[ui]\nmetrics_file = %s/m.prom\n",
			   dir) > 0);
	char *path = t_write(dir, "job.ini", text);
	cr_assert_eq(t_gpud(dir, "run '%s' --stats-json '%s/s.json'", path, dir), 0, "%s",
		     t_read_in(dir, "err"));
	t_write(dir, "check.py",
		"import json, sys\n"
		"s = json.load(open('s.json'))\n"
		"phases = ['setup', 'waiting', 'unpacking', 'user', 'handing_back', 'idle']\n"
		"def name(b):\n"
		"    return [b + 1 if b < 2 else (1 << (b - 1)) + 1, 1 << b]\n"
		"def bucket(n):\n"
		"    b = 0\n"
		"    while n > (1 << b):\n"
		"        b += 1\n"
		"    return b\n"
		"seen = {}\n"
		"for line in open('out'):\n"
		"    r = json.loads(line)\n"
		"    n = int(r['result'].split('n=')[1])\n"
		"    w = seen.setdefault(r['worker_id'], {})\n"
		"    w[n] = w.get(n, 0) + 1\n"
		"prom = open('m.prom').read()\n"
		"for w in s['workers']:\n"
		"    t = {p: w['time_' + p] for p in phases + ['wall']}\n"
		"    total = sum(t[p] for p in phases)\n"
		"    # each figure is printed to the ns: 7 roundings of half a ns at most\n"
		"    assert abs(total - t['wall']) <= 7 * 0.5e-9 + 1e-12 * t['wall'], t\n"
		"    assert 0 < t['wall'] <= s['elapsed'], (t, s['elapsed'])\n"
		"    assert t['user'] >= w['calls'] * 1e-3, (t, w['calls'])\n"
		"    # the plugin sleeps: its CPU time is a small part of the wall time\n"
		"    assert 0 < w['main_thread_cpu'] <= w['cpu'] < t['wall'], w\n"
		"    calls = {n: c // n for n, c in seen[w['worker_id']].items()}\n"
		"    hist = {}\n"
		"    for n, c in calls.items():\n"
		"        hist[bucket(n)] = hist.get(bucket(n), 0) + c\n"
		"    hist = [name(b) + [hist[b]] for b in sorted(hist)]\n"
		"    assert w['call_sizes'] == hist, (w, calls)\n"
		"    assert w['calls'] == sum(calls.values()), (w['calls'], calls)\n"
		"    assert w['call_min'] == min(calls) and w['call_max'] == max(calls), (w, calls)\n"
		"    want = sum(n * c for n, c in calls.items()) / sum(calls.values())\n"
		"    assert abs(w['call_mean'] - want) < 0.01, (w, want)\n"
		"    lab = 'worker=\"%d\",gpu=\"0\"' % w['worker_id']\n"
		"    for p in phases:\n"
		"        assert 'gpud_worker_seconds_total{%s,phase=\"%s\"} ' % (lab, p) in prom, p\n"
		"    assert 'gpud_worker_call_size_count{%s} %d\\n' % (lab, w['calls']) in prom\n"
		"    assert 'gpud_worker_cpu_seconds_total{%s,thread=\"main\"} ' % lab in prom\n"
		"print('CHECKED')\n");
	cr_expect_eq(t_sh(dir, "/usr/bin/python3 check.py >check.out 2>&1"), 0, "%s",
		     t_read_in(dir, "check.out"));
	free(text);
	free(path);
}

/* The CPU time in the user's calls (--stats-json `user_cpu`, `gpu_busy_cpu`, the metrics):
 * never more than the time in the calls; for calls that work the CPU (spin_us) most of
 * it, for calls that sleep (sleep_us, as on a GPU) a small part: ordering, not speed. */
Test(run, the_cpu_time_in_the_users_calls_is_part_of_their_time, .timeout = 120)
{
	const char *dir = t_tmpdir();
	const char *how[] = {"spin_us", "sleep_us"};
	for (int k = 0; k < 2; k++) {
		char *text;
		cr_assert(asprintf(&text,
				   "[job]\ngpus = 0\nbatch_size = 4\n"
				   "[worker]\nplugin = batcher\n%s = 3000\n"
				   "[generator]\nplugin = range\nstop = 400\n"
				   "[sink]\nplugin = null\n"
				   "[ui]\nmetrics_file = %s/m%d.prom\n",
				   how[k], dir, k) > 0);
		free(t_write(dir, "job.ini", text));
		free(text);
		cr_assert_eq(
			t_gpud(dir, "run '%s/job.ini' --stats-json '%s/s%d.json'", dir, dir, k), 0,
			"%s", t_read_in(dir, "err"));
	}
	t_write(dir, "check.py",
		"import json\n"
		"share = []\n"
		"for k in range(2):\n"
		"    s = json.load(open('s%d.json' % k))\n"
		"    w = s['workers'][0]\n"
		"    assert 0 < w['user_cpu'] <= w['time_user'], w\n"
		"    assert w['user_cpu'] <= w['main_thread_cpu'] + 1e-3, w\n"
		"    assert 0 < s['gpu_busy_cpu'] <= s['gpu_busy'], s\n"
		"    share.append(w['user_cpu'] / w['time_user'])\n"
		"    prom = open('m%d.prom' % k).read()\n"
		"    assert 'gpud_worker_user_cpu_seconds_total{worker=\"0\",gpu=\"0\"} ' in prom\n"
		"# the spinning calls are CPU work, the sleeping ones are not (a spinning call\n"
		"# that is preempted takes longer than its CPU time: ordering, not levels)\n"
		"assert share[1] < 0.5 and share[0] > 4 * share[1], share\n"
		"print('CHECKED', share)\n");
	cr_expect_eq(t_sh(dir, "/usr/bin/python3 check.py >check.out 2>&1"), 0, "%s",
		     t_read_in(dir, "check.out"));
}

/* A worker that crashed and was started again: its figures are its processes' together
 * (the crashed one's kept), still adding up to its wall time. */
Test(run, a_restarted_workers_time_keeps_its_crashed_process, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *path = t_write(dir, "job.ini",
			     "[job]\ngpus = 0\nbatch_size = 8\nmax_retries = 0\n"
			     "[worker]\nplugin = batcher\ncrash_on = 2500\n"
			     "[generator]\nplugin = range\nstop = 3000\n"
			     "[sink]\nplugin = jsonl\n");
	cr_assert_eq(t_gpud(dir, "run '%s' --stats-json '%s/s.json'", path, dir), 1, "%s",
		     t_read_in(dir, "err"));
	t_write(dir, "check.py",
		"import json\n"
		"s = json.load(open('s.json'))\n"
		"phases = ['setup', 'waiting', 'unpacking', 'user', 'handing_back', 'idle']\n"
		"(w,) = s['workers']\n"
		"assert w['restarts'] >= 1, w\n"
		"total = sum(w['time_' + p] for p in phases)\n"
		"assert abs(total - w['time_wall']) <= 7 * 0.5e-9 + 1e-12 * w['time_wall'], w\n"
		"# every ok result came from a counted call, the crashed process's too\n"
		"items = w['calls'] * w['call_mean']\n"
		"assert items >= w['ok'] - 0.005 * w['calls'], (items, w)\n"
		"print('CHECKED')\n");
	cr_expect_eq(t_sh(dir, "/usr/bin/python3 check.py >check.out 2>&1"), 0, "%s",
		     t_read_in(dir, "check.out"));
	free(path);
}

/* Runs a batcher job (batch_size 8, `workers` workers on GPU 0, range 0..stop) with
 * --stats-json, then check.py (CHECK) over its `out` and `s.json`. */
static void startup_job(int workers, int stop, const char *check)
{
	const char *dir = t_tmpdir();
	char *text;
	cr_assert(asprintf(&text,
			   "[job]\ngpus = 0\nworkers_per_gpu = %d\nbatch_size = 8\n"
			   "[worker]\nplugin = batcher\nsleep_us = 2000\nmeet = %d\nmeet_dir = %s\n"
			   "[generator]\nplugin = range\nstop = %d\n"
			   "[sink]\nplugin = jsonl\n",
			   workers, workers, dir, stop) > 0);
	char *path = t_write(dir, "job.ini", text);
	cr_assert_eq(t_gpud(dir, "run '%s' --stats-json '%s/s.json'", path, dir), 0, "%s",
		     t_read_in(dir, "err"));
	t_write(dir, "check.py", check);
	cr_expect_eq(t_sh(dir, "/usr/bin/python3 check.py >check.out 2>&1"), 0, "%s",
		     t_read_in(dir, "check.out"));
	free(text);
	free(path);
}

/* The stats' first_result: each part >= 0, the four in a row adding up to its seconds,
 * the two side by side inside it, the worker one of the run's. */
Test(run, first_result_says_where_the_time_before_it_went, .timeout = 60)
{
	startup_job(
		2, 64,
		"import json\n"
		"s = json.load(open('s.json'))\n"
		"f = s['first_result']\n"
		"parts = ['host', 'spawn', 'before_call', 'first_call']\n"
		"for k in parts + ['seconds', 'worker_start', 'first_window']:\n"
		"    assert f[k] >= 0, (k, f)\n"
		"assert f['seconds'] > 0, f\n"
		"assert abs(sum(f[k] for k in parts) - f['seconds']) <= 5e-6, f\n"
		"assert f['worker_start'] <= f['seconds'] and f['first_window'] <= f['seconds'], f\n"
		"# elapsed counts from after the plugins opened, inside host\n"
		"assert f['seconds'] - f['host'] <= s['elapsed'], (f, s['elapsed'])\n"
		"assert f['worker'] in [w['worker_id'] for w in s['workers']], f\n"
		"print('CHECKED')\n");
}

/* A batching worker's first call is a whole batch when the generator has that many
 * items: written while the worker sets up and handed over whole (every call's size is
 * in its results). Only the first: later calls take what the ring holds when they
 * begin (batch_wait_ms 0), which on a loaded machine may be less than a batch. */
Test(run, a_batching_workers_first_call_is_a_whole_batch, .timeout = 60)
{
	startup_job(1, 64,
		    "import json\n"
		    "s = json.load(open('s.json'))\n"
		    "first = None\n"
		    "for line in open('out'):\n"
		    "    r = json.loads(line)\n"
		    "    if r['task_id'] == 0:\n"
		    "        first = int(r['result'].split('n=')[1])\n"
		    "assert first == 8, ('task 0 came in a call of', first)\n"
		    "w = s['workers'][0]\n"
		    "assert w['ok'] == 64 and w['call_max'] == 8, w\n"
		    "print('CHECKED')\n");
}

/* Two workers: each one's first batch is handed out before either's second (task ids
 * are given in the order tasks are generated), so neither starts behind the other. The
 * workers' setups meet (batcher's meet): one set up long before the other would run
 * out of work and take the other's first batch back, as it should, and the test would
 * time the machine. */
Test(run, two_workers_get_their_first_batches_before_either_gets_a_second, .timeout = 60)
{
	startup_job(2, 64,
		    "import json\n"
		    "got = {}\n"
		    "for line in open('out'):\n"
		    "    r = json.loads(line)\n"
		    "    got.setdefault(r['worker_id'], []).append(r['task_id'])\n"
		    "assert len(got) == 2, got\n"
		    "firsts = sorted(sorted(ids)[:8] for ids in got.values())\n"
		    "assert sorted(firsts[0] + firsts[1]) == list(range(16)), firsts\n"
		    "print('CHECKED')\n");
}
