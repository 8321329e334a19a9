/* SPDX-License-Identifier: MIT */
/*
 * Isolation: hostile worker plugins (tests/plugins/hostile.c) over thousands of tasks.
 * Whatever a poison task does, every task id ends in exactly one outcome, every
 * innocent task is ok with its own result, and the host does not crash.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

#define N 3000
#define EVERY 100

/* Parses dir/out.jsonl: every id 0..n-1 exactly once; innocent ids ok with "r<id>";
 * returns how many poison tasks failed. */
static unsigned check_output(const char *dir, unsigned n, unsigned every)
{
	char *text = t_read_in(dir, "out.jsonl");
	cr_assert(text, "no output:\n%s", t_read_in(dir, "err"));
	unsigned char *seen = calloc(n, 1);
	unsigned poison_failed = 0;
	for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
		unsigned long id;
		char status[16];
		cr_assert_eq(sscanf(l, "{\"task_id\": %lu, \"status\": \"%15[a-z]\"", &id, status), 2,
			     "malformed line: %s", l);
		cr_assert_lt(id, n, "%s", l);
		cr_assert_eq(seen[id]++, 0, "task %lu has two outcomes", id);
		bool poison = id % every == every - 1;
		if (!poison) {
			char want[64];
			snprintf(want, sizeof want, "\"result\": \"r%lu\"}", id);
			cr_assert_str_eq(status, "ok", "innocent task %lu: %s", id, l);
			cr_assert(strstr(l, want), "innocent task %lu has a wrong result: %s", id, l);
		} else if (strcmp(status, "ok") != 0) {
			poison_failed++;
		}
	}
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(seen[i], 1, "task %u has no outcome", i);
	free(seen);
	free(text);
	return poison_failed;
}

static int run_hostile(const char *dir, const char *mode, unsigned n)
{
	char *job = t_jobf(dir,
			   "[job]\ngpus = 0,1\nworkers_per_gpu = 2\nqueue_size = 64\n"
			   "max_worker_restarts = 1000\nmax_result_bytes = 4K\n"
			   "[worker]\nplugin = hostile\nmode = %s\nevery = %d\n"
			   "[generator]\nplugin = range\nstop = %u\n"
			   "[sink]\nplugin = jsonl\npath = %s/out.jsonl\n",
			   mode, EVERY, n, dir);
	int rc = t_gpud(dir, "run '%s' --ui plain", job);
	free(job);
	return rc;
}

Test(isolation, overflow_past_the_result_buffer, .timeout = 120)
{
	const char *dir = t_tmpdir();
	int rc = run_hostile(dir, "overflow", N);
	cr_expect_eq(rc, 1, "exit 1: some tasks failed\n%s", t_read_in(dir, "err"));
	cr_expect_eq(check_output(dir, N, EVERY), N / EVERY, "every poison task failed");
	char *out = t_read_in(dir, "out.jsonl");
	cr_expect(strstr(out, "wrote past the end of its result buffer"), "the message says what");
	free(out);
}

Test(isolation, underflow_before_the_result_buffer, .timeout = 120)
{
	const char *dir = t_tmpdir();
	int rc = run_hostile(dir, "underflow", N);
	cr_expect_eq(rc, 1, "%s", t_read_in(dir, "err"));
	cr_expect_eq(check_output(dir, N, EVERY), N / EVERY, "every poison task failed");
	char *out = t_read_in(dir, "out.jsonl");
	cr_expect(strstr(out, "wrote before the start of its result buffer"), "the message says what");
	free(out);
}

Test(isolation, writes_to_the_input_fault_in_the_worker, .timeout = 120)
{
	const char *dir = t_tmpdir();
	int rc = run_hostile(dir, "input", N);
	cr_expect_eq(rc, 1, "%s", t_read_in(dir, "err"));
	cr_expect_eq(check_output(dir, N, EVERY), N / EVERY, "every poison task failed");
	char *out = t_read_in(dir, "out.jsonl");
	cr_expect(strstr(out, "killed by SIGSEGV"), "the task ring is read-only in workers");
	free(out);
}

Test(isolation, scribbling_every_writable_shared_mapping, .timeout = 180)
{
	const char *dir = t_tmpdir();
	int rc = run_hostile(dir, "scribble", N);
	cr_expect(rc == 0 || rc == 1, "the host survives (exit %d)\n%s", rc, t_read_in(dir, "err"));
	check_output(dir, N, EVERY);
}

/* A child forked by a worker neither outlives the run nor holds its output open. */
Test(isolation, forked_children_end_with_the_run, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *job = t_jobf(dir,
			   "[job]\ngpus = 0,1\n"
			   "[worker]\nplugin = hostile\nmode = fork\nevery = 5\npidfile = %s/pids\n"
			   "[generator]\nplugin = range\nstop = 20\n"
			   "[sink]\nplugin = jsonl\n", dir);
	char full[8192];
	snprintf(full, sizeof full,
		 "cd '%s' && export GPUD_PLUGIN_PATH='%s'; start=$(date +%%s%%N); "
		 "'%s' run '%s' --ui plain 2>err | cat >/dev/null; "
		 "echo $(( ($(date +%%s%%N) - start) / 1000000 )) >ms; "
		 "sleep 0.3; for p in $(cat pids); do kill -0 $p 2>/dev/null && echo $p; done >left; true",
		 dir, t_env("FIXTURES"), t_env("GPUD"), job);
	cr_assert_eq(system(full), 0);
	char *ms = t_read_in(dir, "ms"), *left = t_read_in(dir, "left");
	cr_expect_lt(atol(ms), 10000, "the pipe closed with the run, not 30 s later (%s ms)", ms);
	char *pids = t_read_in(dir, "pids");
	cr_assert(pids && *pids, "the plugin forked");
	cr_expect_str_eq(left, "", "no forked child left: %s", left);
	free(pids);
	free(ms);
	free(left);
	free(job);
}
