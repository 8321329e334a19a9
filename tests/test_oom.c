/* SPDX-License-Identifier: MIT */
/* Batches that fit (ABI 1.4): a call that runs out of memory has its tasks run again in
 * halves on the same worker, down to single tasks; a task that does not fit alone fails
 * saying so; the worker's batch size adapts and is shown (--stats-json, the metrics, the
 * dashboard). The test workers run out of memory above a batch size given as a key
 * (tests/plugins/oomer.c, and Python classes here). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "helpers.h"

#define OOM_ALONE "out of memory: this task alone does not fit on the GPU (batch of 1)"

/* A job over range 0..n-1 with the jsonl sink (standard output: dir/out). */
static char *job(const char *dir, const char *job_keys, const char *worker, int n)
{
	return t_jobf(dir,
		      "[job]\n%s\n[worker]\n%s\n[generator]\nplugin = range\nstop = %d\n"
		      "[sink]\nplugin = jsonl\n",
		      job_keys, worker, n);
}

/* Counts the occurrences of `needle` in `text`. */
static size_t count(const char *text, const char *needle)
{
	size_t n = 0;
	for (const char *p = text; p && (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* Checks the jsonl output of n tasks run by a worker that answers "<input> n=<call>":
 * each task exactly once, with its own input, in a call of at most `most` tasks unless it
 * failed; returns how many succeeded. */
static int check_results(const char *out, int n, int most)
{
	unsigned char *seen = calloc((size_t)n, 1);
	int ok = 0;
	char *copy = strdup(out);
	for (char *l = strtok(copy, "\n"); l; l = strtok(NULL, "\n")) {
		long id = -1, in = -1;
		int calls = 0;
		cr_assert_eq(sscanf(strstr(l, "\"task_id\": "), "\"task_id\": %ld", &id), 1, "%s",
			     l);
		cr_assert(id >= 0 && id < n, "%s", l);
		cr_assert_eq(seen[id]++, 0, "task %ld twice", id);
		char *r = strstr(l, "\"result\": \"");
		if (!r)
			continue;
		cr_assert_eq(sscanf(r, "\"result\": \"%ld n=%d", &in, &calls), 2, "%s", l);
		cr_assert_eq(in, id, "each task got its own input and result slot: %s", l);
		cr_assert(calls >= 1 && calls <= most, "a result from a call of %d tasks: %s",
			  calls, l);
		ok++;
	}
	for (int i = 0; i < n; i++)
		cr_assert_eq(seen[i], 1, "task %d has no outcome", i);
	free(copy);
	free(seen);
	return ok;
}

/* The numbers after every `"key": ` in text, each checked to lie in [lo, hi]; returns
 * how many there were. */
static int each_in(const char *text, const char *key, long lo, long hi)
{
	char want[64];
	int n = 0;
	snprintf(want, sizeof want, "\"%s\": ", key);
	for (const char *p = text; (p = strstr(p, want)); p += strlen(want)) {
		long v = strtol(p + strlen(want), NULL, 10);
		cr_expect(v >= lo && v <= hi, "%s = %ld, not in [%ld, %ld]: %s", key, v, lo, hi,
			  text);
		n++;
	}
	return n;
}

static void fits_after_halving(const char *how)
{
	const char *dir = t_tmpdir();
	char worker[128];
	snprintf(worker, sizeof worker, "plugin = oomer\nfit = 5\nhow = %s", how);
	char *path = job(dir, "gpus = 0\nbatch_size = 64\nbatch_wait_ms = 20", worker, 4000);
	cr_assert_eq(t_gpud(dir, "run '%s' --stats-json '%s/s.json'", path, dir), 0);
	char *out = t_read_in(dir, "out"), *js = t_read_in(dir, "s.json");
	cr_assert(out && js);
	cr_expect_eq(check_results(out, 4000, 5), 4000, "every task ok");
	cr_expect(!strstr(out, "\"status\": \"error\""), "%s", out);
	cr_expect(strstr(js, "\"ok\": 4000,"), "%s", js);
	cr_expect(strstr(js, "\"retried\": 0,"), "a split is no retry: %s", js);
	/* The worker says the batch size it came down to, and the splits it made. (One
	 * worker: a second one might get no task at all on a loaded machine.) */
	cr_expect_eq(each_in(js, "batch_size", 1, 5), 1, "%s", js);
	long total = strtol(strstr(js, "\"oom_splits\": ") + 14, NULL, 10);
	cr_expect_geq(total, 1, "%s", js);
	free(out);
	free(js);
	free(path);
}

/* batch_size = 64, and every call of more than 5 tasks runs out: every task ok, none in
 * a call of more than 5, the adapted size reported. */
Test(oom, a_call_that_runs_out_is_split_until_it_fits, .timeout = 120)
{
	fits_after_halving("return"); /* process_batch returns GPUD_OOM */
	fits_after_halving("mark");   /* it marks every task with gpud_task_oom */
}

/* fit = 1: halved down to single tasks, all ok. fit = 0: every task runs out alone and
 * fails once (its retries too), saying why. */
Test(oom, down_to_single_tasks, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "gpus = 0\nbatch_size = 16\nbatch_wait_ms = 20\nmax_retries = 1",
			 "plugin = oomer\nfit = 1", 500);
	cr_assert_eq(t_gpud(dir, "run '%s' --stats-json '%s/s.json'", path, dir), 0);
	char *out = t_read_in(dir, "out"), *js = t_read_in(dir, "s.json");
	cr_expect_eq(check_results(out, 500, 1), 500);
	cr_expect(strstr(js, "\"batch_size\": 1,"), "%s", js);
	free(out);
	free(js);

	cr_assert_eq(t_gpud(dir,
			    "run '%s' --set worker.fit=0 --set job.journal=off "
			    "--stats-json '%s/s.json'",
			    path, dir),
		     1);
	out = t_read_in(dir, "out");
	js = t_read_in(dir, "s.json");
	cr_expect_eq(check_results(out, 500, 1), 0, "no task ok");
	cr_expect_eq(t_count_lines(out, "{"), 500, "one outcome each");
	cr_expect_eq(count(out, OOM_ALONE), 500, "each says why: %s", out);
	cr_expect_eq(count(out, "\"attempt\": 1"), 500, "retried once as any failure");
	cr_expect(strstr(js, "\"failed\": 500,"), "%s", js);
	free(out);
	free(js);
	free(path);
}

/* One task that does not fit even alone fails, saying so; the rest of its calls run. */
Test(oom, a_task_too_large_alone_fails_alone, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "gpus = 0\nbatch_size = 32\nbatch_wait_ms = 20\nmax_retries = 0",
			 "plugin = oomer\nfit = 8\nhow = mark\nhuge = 77", 1000);
	cr_assert_eq(t_gpud(dir, "run '%s'", path), 1);
	char *out = t_read_in(dir, "out");
	cr_expect_eq(check_results(out, 1000, 8), 999);
	cr_expect_eq(count(out, "\"status\": \"error\""), 1, "%s", out);
	cr_expect(strstr(out, "{\"task_id\": 77, \"status\": \"error\""), "%s", out);
	cr_expect(strstr(out, OOM_ALONE ": oomer: 1 tasks need more than the card has"), "%s", out);
	free(out);
	free(path);
}

/* In a CPU stage: the batch is split the same way, and the task too large alone says
 * it does not fit in memory (the stage's workers have no GPU). */
Test(oom, a_cpu_stage_splits_and_a_task_too_large_alone_says_memory, .timeout = 120)
{
	const char *dir = t_tmpdir();
	free(t_jobf(dir, "[job]\ngpus = 0\nbatch_size = 16\nbatch_wait_ms = 20\nmax_retries = 0\n"
			 "[stage.s]\nplugin = oomer\nfit = 4\nhow = mark\nhuge = 77\nworkers = 1\n"
			 "[worker]\nplugin = oomer\nfit = 16\n"
			 "[generator]\nplugin = range\nstop = 500\n"
			 "[sink]\nplugin = jsonl\n"));
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --stats-json '%s/s.json'", dir, dir), 1);
	char *out = t_read_in(dir, "out"), *s = t_read_in(dir, "s.json");
	cr_expect_eq(check_results(out, 500, 16), 499);
	cr_expect_eq(count(out, "\"status\": \"error\""), 1, "%s", out);
	cr_expect(strstr(out,
			 "\"error\": \"stage s: out of memory: this task alone does not "
			 "fit in memory (batch of 1): oomer: 1 tasks need more than the card has"),
		  "%s", out);
	cr_expect(s && !strstr(s, "\"oom_splits\": 0,"), "%s", s);
	free(out);
	free(s);
}

/* A crash in a part of a split call: as for any crash among several tasks, they run
 * again alone, only the task that crashes its worker alone fails, and every task gets
 * exactly one outcome. */
Test(oom, a_crash_while_split_loses_nothing, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "gpus = 0\nbatch_size = 64\nbatch_wait_ms = 20\nmax_retries = 1",
			 "plugin = oomer\nfit = 5\ncrash_on = 10", 2000);
	cr_assert_eq(t_gpud(dir, "run '%s' --stats-json '%s/s.json'", path, dir), 1);
	char *out = t_read_in(dir, "out"), *js = t_read_in(dir, "s.json");
	int ok = check_results(out, 2000, 5);
	cr_expect_eq(ok, 1999, "only the crashing task fails: %d ok", ok);
	const char *ten = strstr(out, "{\"task_id\": 10, \"status\": \"error\"");
	cr_assert(ten, "%s", out);
	const char *nl = strchr(ten, '\n');
	cr_expect(strstr(ten, "SIGSEGV") && strstr(ten, "SIGSEGV") < nl, "%.300s", ten);
	cr_expect(!strstr(js, "\"worker_restarts\": 0,"), "%s", js);
	free(out);
	free(js);
	free(path);
}

/* The splits a process made before a part of the split call crashed it are counted:
 * 64 -> 32 -> 16 -> 8 -> 4, then the part holding task 10 crashes; no restart follows
 * (max_worker_restarts = 0), so only that process's report can say so. */
Test(oom, splits_before_a_crash_are_counted, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *path =
		job(dir, "gpus = 0\nbatch_size = 64\nbatch_wait_ms = 20\nmax_worker_restarts = 0",
		    "plugin = oomer\nfit = 5\ncrash_on = 10", 64);
	cr_assert_eq(t_gpud(dir, "run '%s' --stats-json '%s/s.json'", path, dir), 3, "%s",
		     t_read_in(dir, "err"));
	char *js = t_read_in(dir, "s.json");
	cr_expect(strstr(js, "\"oom_splits\": 4, \"workers\""), "%s", js);
	free(js);
	free(path);
}

/* Each call of a split has its own task_timeout: three calls of 0.4 s (one that runs
 * out, its two halves) under a timeout of 1 s time nothing out. */
Test(oom, each_part_has_its_own_timeout, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *path = job(dir,
			 "gpus = 0\nbatch_size = 32\nbatch_wait_ms = 200\ntask_timeout = 1\n"
			 "max_retries = 0",
			 "plugin = oomer\nfit = 16\nsleep_ms = 400", 32);
	cr_assert_eq(t_gpud(dir, "run '%s' --stats-json '%s/s.json'", path, dir), 0);
	char *out = t_read_in(dir, "out"), *js = t_read_in(dir, "s.json");
	cr_expect_eq(check_results(out, 32, 16), 32);
	cr_expect(strstr(js, "\"timed_out\": 0,"), "%s", js);
	free(out);
	free(js);
	free(path);
}

/* A plugin with process() alone: a task it says ran out of memory fails with the same
 * message (a call of one task cannot be split); the others are untouched. */
Test(oom, process_that_runs_out_fails_its_task, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "gpus = 0,1\nbatch_size = 8\nmax_retries = 0",
			 "plugin = oomer_one\nfit = 1\nhuge = 5", 300);
	cr_assert_eq(t_gpud(dir, "run '%s'", path), 1);
	char *out = t_read_in(dir, "out");
	cr_expect_eq(check_results(out, 300, 1), 299);
	cr_expect(strstr(out, "{\"task_id\": 5, \"status\": \"error\""), "%s", out);
	cr_expect_eq(count(out, OOM_ALONE ": oomer: the card is full"), 1, "%s", out);
	free(out);

	cr_assert_eq(t_gpud(dir, "run '%s' --set worker.fit=0 --set job.journal=off", path), 1);
	out = t_read_in(dir, "out");
	cr_expect_eq(t_count_lines(out, "{"), 300);
	cr_expect_eq(count(out, OOM_ALONE ": oomer: the card is full"), 300, "%s", out);
	free(out);
	free(path);
}

/* A plugin built for ABI 1.3 that returns -12 (GPUD_OOM's value) meant a plain failure,
 * and still does: not out of memory. Such a failure of a whole call is isolated
 * (isolate_failures): its tasks run again in halves, and those that do not fail alone
 * end ok; without isolation nothing runs again. */
Test(oom, a_1_3_plugin_keeps_its_meaning, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "gpus = 0\nbatch_size = 16\nmax_retries = 0",
			 "plugin = oomer13\nfit = 5", 200);
	cr_assert_eq(t_gpud(dir, "run '%s' --stats-json '%s/s.json'", path, dir), 0);
	char *split = t_read_in(dir, "out"), *sjs = t_read_in(dir, "s.json");
	cr_expect_eq(count(split, "\"status\": \"ok\""), 200, "%s", split);
	cr_expect(strstr(sjs, "\"oom_splits\": 0,"), "%s", sjs);
	free(split);
	free(sjs);
	cr_assert_eq(t_gpud(dir,
			    "run '%s' --force --set job.isolate_failures=false --stats-json "
			    "'%s/s.json'",
			    path, dir),
		     1);
	char *out = t_read_in(dir, "out"), *js = t_read_in(dir, "s.json");
	cr_expect_eq(t_count_lines(out, "{"), 200);
	cr_expect(strstr(out, "process_batch() returned -12 without a message"), "%s", out);
	cr_expect(!strstr(out, "out of memory"), "%s", out);
	cr_expect(strstr(js, "\"oom_splits\": 0,"), "%s", js);
	free(out);
	free(js);
	free(path);
}

/* The metrics: the splits and each worker's batch size. */
Test(oom, metrics_show_the_batch_size, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *path = t_jobf(dir,
			    "[job]\ngpus = 0\nbatch_size = 64\nbatch_wait_ms = 20\n"
			    "[worker]\nplugin = oomer\nfit = 3\n"
			    "[generator]\nplugin = range\nstop = 2000\n[sink]\nplugin = null\n"
			    "[ui]\nmetrics_file = %s/m.prom\n",
			    dir);
	cr_assert_eq(t_gpud(dir, "run '%s'", path), 0);
	char *prom = t_read_in(dir, "m.prom");
	cr_assert(prom);
	const char *b = strstr(prom, "gpud_worker_batch_size{worker=\"0\",gpu=\"0\"} ");
	cr_assert(b, "%s", prom);
	long size = strtol(strchr(b, '}') + 2, NULL, 10);
	cr_expect(size >= 1 && size <= 3, "%s", prom);
	const char *s = strstr(prom, "\ngpud_oom_splits_total ");
	cr_assert(s, "%s", prom);
	cr_expect_geq(strtol(s + 23, NULL, 10), 1, "%s", prom);
	free(prom);
	free(path);
}

/* gpud merge adds the ranks' splits up. */
Test(oom, merge_adds_the_splits, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "gpus = 0\nbatch_size = 64\nbatch_wait_ms = 20\njournal = off",
			 "plugin = oomer\nfit = 5", 2000);
	long splits = 0;
	for (int k = 0; k < 2; k++) {
		cr_assert_eq(t_gpud(dir, "run '%s' --rank %d/2 --stats-json '%s/s-{rank}.json'",
				    path, k, dir),
			     0);
		char name[16];
		snprintf(name, sizeof name, "s-%d.json", k);
		char *js = t_read_in(dir, name);
		splits += strtol(strstr(js, "\"oom_splits\": ") + 14, NULL, 10);
		free(js);
	}
	cr_assert_eq(t_gpud(dir, "merge '%s/s-0.json' '%s/s-1.json'", dir, dir), 0);
	char *out = t_read_in(dir, "out"), want[48];
	snprintf(want, sizeof want, "\"oom_splits\": %ld,", splits);
	cr_expect_geq(splits, 2, "each rank split calls");
	cr_expect(strstr(out, want), "want %s in %s", want, out);
	free(out);
	free(path);
}

/* The dashboard's BATCH column (in a real terminal, tmux): the final frame shows the
 * size the worker came down to. */
Test(oom, dashboard_shows_the_batch_size, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "gpus = 0\nbatch_size = 64\nbatch_wait_ms = 20",
			 "plugin = oomer\nfit = 4", 3000);
	char sock[64], *cmd;
	snprintf(sock, sizeof sock, "gpud-oom-%d", (int)getpid());
	cr_assert(asprintf(&cmd,
			   "tmux -L %s new-session -d -s ui -x 120 -y 30 \"cd '%s' && "
			   "GPUD_PLUGIN_PATH='%s' '%s' run '%s' --ui dashboard > /dev/null; "
			   "echo exit=\\$? > '%s/exit'; sleep 60\"",
			   sock, dir, t_env("FIXTURES"), t_env("GPUD"), path, dir) > 0);
	cr_assert_eq(system(cmd), 0, "tmux would not start");
	free(cmd);
	char *e = NULL;
	for (int i = 0; i < 600 && !(e = t_read_in(dir, "exit")); i++)
		usleep(100000);
	cr_assert(e, "the run did not end");
	cr_expect(strstr(e, "exit=0"), "%s", e);
	free(e);
	/* The final frame and the summary, once tmux has drawn them (asked again for up to
	 * 10 s, not given 0.3 s). */
	cr_assert(asprintf(&cmd, "tmux -L %s capture-pane -p -t ui > '%s/pane'", sock, dir) > 0);
	char *pane = NULL;
	for (int i = 0; i < 100; i++) {
		free(pane);
		cr_expect_eq(system(cmd), 0);
		pane = t_read_in(dir, "pane");
		if (pane && strstr(pane, "RESTARTS BATCH") && strstr(pane, " tasks: "))
			break;
		usleep(100000);
	}
	free(cmd);
	cr_assert(asprintf(&cmd, "tmux -L %s kill-server 2>/dev/null", sock) > 0);
	(void)!system(cmd);
	free(cmd);
	cr_assert(pane);
	const char *head = strstr(pane, "RESTARTS BATCH");
	cr_assert(head, "%s", pane);
	/* The worker's row is the next line; its last figure is the batch size. */
	const char *row = strchr(head, '\n');
	cr_assert(row, "%s", pane);
	const char *end = strchr(row + 1, '\n');
	cr_assert(end, "%s", pane);
	const char *last = end;
	while (last > row && last[-1] == ' ')
		last--;
	while (last > row && last[-1] != ' ')
		last--;
	long size = strtol(last, NULL, 10);
	cr_expect(size >= 1 && size <= 4, "batch %ld in: %s", size, pane);
	free(pane);
	free(path);
}

/* ---- the python worker ---- */

static void need_python(void)
{
	if (strcmp(t_env("HAVE_PYTHON"), "1") != 0)
		cr_skip_test(
			"the python worker plugin was not built (meson found no python3-embed; "
			"Debian: libpython3.11-dev)");
}

/* Runs out of memory above `fit` items a call, with MemoryError, or with a class named
 * OutOfMemoryError (torch.cuda.OutOfMemoryError's name, here without torch). */
static const char py_script[] =
	"class OutOfMemoryError(RuntimeError):\n"
	"    pass\n"
	"class CudaOOM(OutOfMemoryError):\n"
	"    pass\n"
	"class W:\n"
	"    def setup(self, gpu_id, seed, fit, kind):\n"
	"        self.fit = int(fit)\n"
	"        self.kind = kind\n"
	"    def full(self, n):\n"
	"        if self.kind == 'memory':\n"
	"            raise MemoryError('%d items' % n)\n"
	"        raise CudaOOM('CUDA out of memory: %d items' % n)\n"
	"    def process_batch(self, items):\n"
	"        if len(items) > self.fit:\n"
	"            self.full(len(items))\n"
	"        return [b'%s n=%d' % (bytes(x), len(items)) for x in items]\n"
	"    def process(self, data):\n"
	"        if self.fit < 1:\n"
	"            self.full(1)\n"
	"        return b'%s n=1' % bytes(data)\n";

static void py_case(const char *kind)
{
	const char *dir = t_tmpdir();
	free(t_write(dir, "w.py", py_script));
	char worker[160];
	snprintf(worker, sizeof worker,
		 "plugin = python\nscript = w.py\nclass = W\nfit = 5\nkind = %s", kind);
	char *path = job(dir, "gpus = 0\nbatch_size = 64\nbatch_wait_ms = 20\nmax_retries = 0",
			 worker, 2000);
	cr_assert_eq(t_gpud(dir, "run '%s' --stats-json '%s/s.json'", path, dir), 0);
	char *out = t_read_in(dir, "out"), *js = t_read_in(dir, "s.json");
	cr_assert(out && js);
	cr_expect_eq(check_results(out, 2000, 5), 2000, "every task ok");
	cr_expect_eq(each_in(js, "batch_size", 1, 5), 1, "%s", js);
	cr_expect(!strstr(js, "\"oom_splits\": 0,"), "%s", js);
	free(out);
	free(js);

	/* Nothing fits: every task fails alone, once, with Python's message. */
	cr_assert_eq(t_gpud(dir, "run '%s' --set worker.fit=0 --set job.journal=off", path), 1);
	out = t_read_in(dir, "out");
	cr_expect_eq(t_count_lines(out, "{"), 2000);
	cr_expect_eq(count(out, OOM_ALONE ": "), 2000, "%s", out);
	cr_expect(strstr(out, strcmp(kind, "memory") ? "CudaOOM: CUDA out of memory: 1 items"
						     : "MemoryError: 1 items"),
		  "%s", out);
	free(out);
	free(path);
}

Test(oom, python_memory_error_splits_the_batch, .timeout = 180)
{
	need_python();
	py_case("memory");
}

Test(oom, python_out_of_memory_error_by_name_splits_the_batch, .timeout = 180)
{
	need_python();
	py_case("torch");
}
