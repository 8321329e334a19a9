/* SPDX-License-Identifier: MIT */
/*
 * A host that never stalls and clocks that are honest: a slow generator does not hold
 * back timeouts, a setup
 * that never returns is bounded by setup_timeout, and stopping and continuing the
 * whole job times out nothing.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

/* Runs `script` in dir with $GPUD and $GPUD_PLUGIN_PATH set; returns its exit status. */
static int sh(const char *dir, const char *script)
{
	char *cmd;
	cr_assert(asprintf(&cmd, "cd '%s' && export GPUD='%s' GPUD_PLUGIN_PATH='%s'; %s", dir,
			   t_env("GPUD"), t_env("FIXTURES"), script) > 0);
	int rc = system(cmd);
	free(cmd);
	return WEXITSTATUS(rc);
}

static long file_long(const char *dir, const char *name)
{
	char *s = t_read_in(dir, name);
	cr_assert(s, "no %s", name);
	long v = atol(s);
	free(s);
	return v;
}

Test(stalls, a_slow_generator_does_not_hold_back_timeouts, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *job = t_jobf(dir, "[job]\ngpus = 0,1\ntask_timeout = 1\n"
				"[worker]\nplugin = faulty\nhang_on = 3\n"
				"[generator]\nplugin = lines\npath = -\n"
				"[sink]\nplugin = jsonl\npath = out.jsonl\n");
	free(job);
	/* Ten items a second for 3 s; task 3 hangs and must time out about 1 s after it
	 * starts, not after the generator is done. */
	sh(dir, "start=$(date +%s%N); "
		"(for i in $(seq 0 29); do echo $i; sleep 0.1; done) | "
		"$GPUD run job.ini --ui plain 2>err & "
		"until grep -q '\"task_id\": 3,' out.jsonl 2>/dev/null; do sleep 0.02; done; "
		"echo $(( ($(date +%s%N) - start) / 1000000 )) >ms; wait");
	long ms = file_long(dir, "ms");
	cr_expect_lt(ms, 2500, "task 3 (yielded at ~0.3 s) timed out at %ld ms", ms);
	char *out = t_read_in(dir, "out.jsonl");
	cr_expect(strstr(out, "\"task_id\": 3, \"status\": \"timeout\""), "%s", out);
	cr_expect_eq(t_count_lines(out, "{\"task_id\""), 30);
	free(out);
}

Test(stalls, setup_timeout_bounds_a_setup_that_never_returns, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *job = t_jobf(dir, "[job]\ngpus = 0,1\nsetup_timeout = 1\n"
				"[worker]\nplugin = faulty\nsetup_hang_gpu = 0\nsleep_us = 200000\n"
				"[generator]\nplugin = range\nstop = 20\n"
				"[sink]\nplugin = jsonl\npath = out.jsonl\n");
	free(job);
	sh(dir, "start=$(date +%s%N); $GPUD run job.ini --ui plain 2>err; echo $? >rc; "
		"echo $(( ($(date +%s%N) - start) / 1000000 )) >ms");
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "setup did not finish within 1 s (setup_timeout)"), "%s", err);
	cr_expect_lt(file_long(dir, "ms"), 10000);
	char *out = t_read_in(dir, "out.jsonl");
	cr_expect_eq(t_count_lines(out, "{\"task_id\""), 20, "the other GPU ran every task");
	free(out);
	free(err);
}

Test(stalls, stopping_and_continuing_the_job_times_out_nothing, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *job = t_jobf(dir, "[job]\ngpus = 0,1\ntask_timeout = 1\n"
				"[worker]\nplugin = faulty\nsleep_us = 400000\n"
				"[generator]\nplugin = range\nstop = 8\n"
				"[sink]\nplugin = jsonl\npath = out.jsonl\n");
	free(job);
	/* Every process of the job stopped for 2.5 s while tasks run, then continued. */
	sh(dir, "$GPUD run job.ini --ui plain 2>err & pid=$!; "
		"until [ -s out.jsonl ]; do sleep 0.02; done; "
		"kids=$(pgrep -P $pid); kill -STOP $pid $kids; sleep 2.5; kill -CONT $kids $pid; "
		"wait $pid; echo $? >rc");
	char *out = t_read_in(dir, "out.jsonl");
	cr_expect_eq(file_long(dir, "rc"), 0, "%s\n%s", out, t_read_in(dir, "err"));
	cr_expect_eq(t_count_lines(out, "{\"task_id\""), 8);
	cr_expect_null(strstr(out, "timeout"), "%s", out);
	free(out);
}
