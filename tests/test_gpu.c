/* SPDX-License-Identifier: MIT */
/* The GPU-facing features, on the paths a machine without a GPU can check: device
 * discovery, pin_memory, batching, sticky errors, and the CUDA example failing setup
 * with one clear line. (The GPU paths themselves need a GPU: docs/benchmarks.md.) */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"

static char *job(const char *dir, const char *job_keys, const char *worker, const char *gen,
		 const char *sink)
{
	char *path = t_jobf(dir, "[job]\n%s\n[worker]\n%s\n[generator]\n%s\n[sink]\n%s\n", job_keys,
			    worker, gen, sink);
	return path;
}

Test(gpu, gpus_all_without_a_gpu_is_one_clear_line)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "gpus = all", "plugin = echo", "plugin = range\nstop = 10",
			 "plugin = null");
	cr_expect_eq(t_gpud(dir, "run '%s'", path), 2);
	char *err = t_read_in(dir, "err");
	cr_expect_eq(t_count_lines(err, ""), 1, "%s", err);
	/* No CUDA runtime at all, no driver, or a driver that finds no usable device; never
	 * a driver-version complaint on a machine without a driver. */
	cr_expect(strstr(err, "gpus = all: the CUDA runtime (libcudart) is not installed") ||
			  strstr(err, "gpus = all: this machine has no NVIDIA driver") ||
			  strstr(err, "gpus = all: the NVIDIA driver sees no GPU") ||
			  strstr(err, "gpus = all: no CUDA device usable: cuda"),
		  "%s", err);
	cr_expect(!strstr(err, "insufficient") || !strstr(err, "no NVIDIA driver"), "%s", err);
	free(err);
	free(path);
}

Test(gpu, pin_memory_on_without_cuda_fails_setup_clearly)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "gpus = 0\npin_memory = on", "plugin = echo",
			 "plugin = range\nstop = 10", "plugin = null");
	cr_expect_eq(t_gpud(dir, "run '%s'", path), 3);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "setup failed: pin_memory = on: "), "%s", err);
	free(err);
	/* auto: a plugin without CUDA runs on plain memory. */
	cr_expect_eq(t_gpud(dir, "run '%s' --set job.pin_memory=auto", path), 0);
	free(path);
}

Test(gpu, batching_delivers_every_task_once, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "gpus = 0,1\nbatch_size = 16\nbatch_wait_ms = 5\nqueue_size = 256",
			 "plugin = batcher", "plugin = range\nstop = 3000", "plugin = jsonl");
	cr_assert_eq(t_gpud(dir, "run '%s'", path), 0);
	char *out = t_read_in(dir, "out");
	static unsigned char seen[3000];
	int max_n = 0, batched = 0;
	for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
		long id, in;
		int n;
		char *r = strstr(l, "\"result\": \"");
		cr_assert(r, "%s", l);
		cr_assert_eq(sscanf(strstr(l, "\"task_id\": "), "\"task_id\": %ld", &id), 1);
		cr_assert_eq(sscanf(r, "\"result\": \"%ld n=%d", &in, &n), 2, "%s", l);
		cr_assert_eq(in, id, "each task got its own input and result: %s", l);
		cr_assert(id >= 0 && id < 3000);
		cr_assert_eq(seen[id]++, 0, "task %ld twice", id);
		cr_assert(n >= 1 && n <= 16, "a call of %d tasks", n);
		if (n > max_n)
			max_n = n;
		batched += n > 1;
	}
	for (int i = 0; i < 3000; i++)
		cr_assert_eq(seen[i], 1, "task %d missing", i);
	cr_expect_gt(batched, 1000, "most tasks came in batches (largest %d)", max_n);
	free(out);
	free(path);
}

Test(gpu, batch_failures_stay_per_task, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "gpus = 0\nbatch_size = 8", "plugin = batcher\nfail_on = 123",
			 "plugin = range\nstop = 500", "plugin = jsonl");
	cr_expect_eq(t_gpud(dir, "run '%s'", path), 1);
	char *out = t_read_in(dir, "out");
	cr_expect_eq(t_count_lines(out, "{"), 500);
	size_t errors = 0;
	for (const char *p = out; (p = strstr(p, "\"status\": \"error\"")); p++)
		errors++;
	cr_expect_eq(errors, 1, "only the refused task failed");
	cr_expect(strstr(out, "batcher: refused 123"), "%s", out);
	free(out);
	free(path);
}

/* Errors per line of the jsonl text, and how many of them name `what`. */
static size_t count_errors(const char *out, const char *what, size_t *named)
{
	size_t errors = 0;
	*named = 0;
	for (const char *p = out; (p = strstr(p, "\"status\": \"error\"")); p++) {
		const char *eol = strchr(p, '\n');
		const char *m = strstr(p, what);
		errors++;
		*named += m && (!eol || m < eol);
	}
	return errors;
}

/* A call that fails as a whole (process_batch returns -1, as a library that raises)
 * is split until each bad task fails alone with its own error; every other task of it
 * gets its result. isolate_failures = false keeps the call's failure for all of them. */
Test(gpu, a_batch_that_fails_whole_fails_only_its_bad_tasks, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "gpus = 0\nbatch_size = 64\nbatch_wait_ms = 50",
			 "plugin = batcher\nwhole_fail_on = 123,321", "plugin = range\nstop = 3551",
			 "plugin = jsonl");
	cr_expect_eq(t_gpud(dir, "run '%s'", path), 1);
	char *out = t_read_in(dir, "out");
	cr_expect_eq(t_count_lines(out, "{"), 3551);
	size_t named;
	cr_expect_eq(count_errors(out, "batcher: a call holding ", &named), 2, "%s", out);
	cr_expect_eq(named, 2);
	cr_expect(strstr(out, "{\"task_id\": 123, \"status\": \"error\"") &&
			  strstr(out, "{\"task_id\": 321, \"status\": \"error\"") &&
			  strstr(out, "\"error\": \"batcher: a call holding 123\"}") &&
			  strstr(out, "\"error\": \"batcher: a call holding 321\"}"),
		  "each fails with its own error: %s", out);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "gpud: 3551 tasks: 3549 ok, 2 failed"), "%s", err);
	free(err);
	free(out);
	cr_expect_eq(t_gpud(dir, "run '%s' --force --set job.isolate_failures=false", path), 1);
	out = t_read_in(dir, "out");
	cr_expect_gt(count_errors(out, "batcher: a call holding ", &named), 2,
		     "without isolation the whole calls fail");
	free(out);
	free(path);
}

/* A crash inside a batch: the call's tasks run again alone, and only the one that
 * crashes its worker alone is reported; every other task ends ok. */
Test(gpu, crash_in_a_batch_blames_only_its_task, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "gpus = 0\nbatch_size = 8\nbatch_wait_ms = 20",
			 "plugin = batcher\ncrash_on = 200", "plugin = range\nstop = 600",
			 "plugin = jsonl");
	cr_expect_eq(t_gpud(dir, "run '%s'", path), 1);
	char *out = t_read_in(dir, "out");
	cr_expect_eq(t_count_lines(out, "{"), 600, "every task exactly once");
	size_t blamed = 0;
	for (const char *p = out; (p = strstr(p, "killed by SIGSEGV while running task")); p++)
		blamed++;
	cr_expect_eq(blamed, 1, "the crashed call's tasks: %zu", blamed);
	cr_expect(strstr(out, "killed by SIGSEGV while running task 200"), "%s", out);
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 600, "%s", out);
	free(out);
	free(path);
}

/* Tasks that crash their worker whenever they run, inside batches of 8 (two in one
 * batch): each of them alone is a poison task, every task beside them ends ok, and the
 * stats say so. */
Test(gpu, crashes_in_batches_blame_only_the_killers, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *path = job(dir,
			 "gpus = 0\nbatch_size = 8\nbatch_wait_ms = 20\nmax_retries = 2\n"
			 "max_worker_restarts = 100",
			 "plugin = batcher\ncrash_on = 100,101,205,599",
			 "plugin = range\nstop = 600", "plugin = jsonl");
	cr_assert_eq(t_gpud(dir, "run '%s' --stats-json '%s/s.json'", path, dir), 1, "%s",
		     t_read_in(dir, "err"));
	char *out = t_read_in(dir, "out"), *js = t_read_in(dir, "s.json");
	cr_expect_eq(t_count_lines(out, "{"), 600, "every task exactly once");
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 600, "%s", out);
	size_t poison = 0;
	for (const char *p = out; (p = strstr(p, "poison task: 3 workers died while running it"));
	     p++)
		poison++;
	cr_expect_eq(poison, 4, "%s", out);
	const long killers[] = {100, 101, 205, 599};
	for (size_t i = 0; i < 4; i++) {
		char want[64];
		snprintf(want, sizeof want, "{\"task_id\": %ld, \"status\": \"error\"", killers[i]);
		cr_expect(strstr(out, want), "task %ld: %s", killers[i], out);
	}
	cr_expect(strstr(js, "\"ok\": 596, \"failed\": 4,"), "%s", js);
	free(out);
	free(js);
	free(path);
}

/* gpud_task_fatal: the task fails, the worker is replaced, the run goes on. */
static void fatal_case(const char *worker)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "gpus = 0\nbatch_size = 4", worker, "plugin = range\nstop = 300",
			 "plugin = jsonl");
	cr_expect_eq(t_gpud(dir, "run '%s' --stats-json '%s/s.json'", path, dir), 1);
	char *out = t_read_in(dir, "out"), *err = t_read_in(dir, "err"),
	     *js = t_read_in(dir, "s.json");
	cr_expect_eq(t_count_lines(out, "{"), 300);
	cr_expect(strstr(out, "context lost at"), "%s", out);
	cr_expect(strstr(err, "restarted at its plugin's request"), "%s", err);
	cr_expect(strstr(js, "\"worker_restarts\": 1,"), "%s", js);
	cr_expect(strstr(js, "\"ok\": 299,"), "%s", js);
	free(out);
	free(err);
	free(js);
	free(path);
}

Test(gpu, sticky_error_restarts_the_worker, .timeout = 60)
{
	fatal_case("plugin = batcher\nfatal_on = 150");
	fatal_case("plugin = faulty\nfatal_on = 150");
}

Test(gpu, cuda_example_without_a_gpu_fails_setup_clearly, .timeout = 60)
{
	if (strcmp(t_env("HAVE_GPU_EXAMPLE"), "1") != 0)
		cr_skip_test("the CUDA example was not built (no nvcc)");
	const char *dir = t_tmpdir();
	char *cmd;
	cr_assert(asprintf(&cmd,
			   "run '%s/config/cuda-demo.ini' --set job.gpus=0,1 "
			   "--set generator.count=100 --set sink.dir='%s/res' "
			   "--set job.journal='%s/j'",
			   t_env("SRCDIR"), dir, dir) > 0);
	cr_expect_eq(t_gpud(dir, "%s", cmd), 3, "no worker could be set up");
	char *err = t_read_in(dir, "err");
	cr_expect_eq(t_count_lines(err, "gpud: worker "), 2, "one line per worker: %s", err);
	cr_expect(strstr(err, "setup failed: dense: cannot use the GPU: cuda"), "%s", err);
	cr_expect(strstr(err, "no worker could be set up"), "%s", err);
	free(err);
	free(cmd);
}
