/* SPDX-License-Identifier: MIT */
/* Tasks in flight (gpud_worker_submit/poll, max_in_flight): a worker that holds many
 * tasks and finishes them in any order, crashes or hangs with them in flight; and the
 * python worker's async def process. The fixture is tests/plugins/inflight.c. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"

/* The number after "key": in a jsonl line (-1 when absent). */
static long num_field(const char *line, const char *key)
{
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\": ", key);
	const char *p = strstr(line, pat);
	return p ? strtol(p + strlen(pat), NULL, 10) : -1;
}

/* The string after "key": " in a jsonl line (malloc'd), or NULL. */
static char *str_field(const char *line, const char *key)
{
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\": \"", key);
	const char *p = strstr(line, pat);
	if (!p)
		return NULL;
	p += strlen(pat);
	const char *e = strchr(p, '"');
	return e ? strndup(p, (size_t)(e - p)) : NULL;
}

/* What a run's out.jsonl held, task by task. */
struct outcomes {
	long n;                /* tasks expected: ids 0..n-1 */
	unsigned char *seen;   /* lines per id */
	char **status, **text; /* per id: status, and result or error (malloc'd) */
	long *attempt;
	long lines, ok, error, timeout;
	bool in_order;  /* every line's id one more than the last's */
	long most_held; /* the highest held= an inflight result reports */
};

/* Reads dir/out.jsonl, asserting that every line is for a task 0..n-1. */
static void read_outcomes(const char *dir, long n, struct outcomes *o)
{
	*o = (struct outcomes){.n = n, .in_order = true};
	o->seen = calloc((size_t)n, 1);
	o->status = calloc((size_t)n, sizeof *o->status);
	o->text = calloc((size_t)n, sizeof *o->text);
	o->attempt = calloc((size_t)n, sizeof *o->attempt);
	char *out = t_read_in(dir, "out.jsonl");
	cr_assert(out, "no out.jsonl; stderr: %s", t_read_in(dir, "err"));
	long last = -1;
	for (char *save = NULL, *line = strtok_r(out, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		long id = num_field(line, "task_id");
		cr_assert(id >= 0 && id < n, "task id %ld: %s", id, line);
		o->lines++;
		o->in_order &= id == last + 1;
		last = id;
		if (o->seen[id]++)
			continue; /* counted as a second outcome below */
		o->status[id] = str_field(line, "status");
		cr_assert(o->status[id], "%s", line);
		o->attempt[id] = num_field(line, "attempt");
		if (!strcmp(o->status[id], "ok")) {
			o->ok++;
			o->text[id] = str_field(line, "result");
			const char *h = o->text[id] ? strstr(o->text[id], "held=") : NULL;
			long held = h ? strtol(h + 5, NULL, 10) : 0;
			if (held > o->most_held)
				o->most_held = held;
		} else {
			o->text[id] = str_field(line, "error");
			o->error += !strcmp(o->status[id], "error");
			o->timeout += !strcmp(o->status[id], "timeout");
		}
	}
	free(out);
	for (long i = 0; i < n; i++)
		cr_assert_eq(o->seen[i], 1, "task %ld: %u outcomes, want exactly one", i,
			     o->seen[i]);
	cr_assert_eq(o->lines, n);
}

/* An inflight worker's result for task `id` (whose input is its id). */
static void expect_result(const struct outcomes *o, long id, unsigned max)
{
	char want[64];
	snprintf(want, sizeof want, "in=%ld id=%ld held=", id, id);
	cr_expect(o->text[id] && !strncmp(o->text[id], want, strlen(want)),
		  "task %ld: result %s, want %s...", id, o->text[id] ? o->text[id] : "(none)",
		  want);
	char tail[32];
	snprintf(tail, sizeof tail, " max=%u", max);
	cr_expect(o->text[id] && strstr(o->text[id], tail), "task %ld: %s", id,
		  o->text[id] ? o->text[id] : "(none)");
}

/* Writes a job: `workers` inflight workers on GPU 0 over range 0..n-1, out.jsonl. */
static void inflight_job(const char *dir, unsigned workers, long n, const char *job_extra,
			 const char *worker_extra)
{
	t_jobf(dir,
	       "[job]\ngpus = 0\nworkers_per_gpu = %u\n%s\n"
	       "[worker]\nplugin = inflight\ncrash_file = %s/crashed\n%s\n"
	       "[generator]\nplugin = range\nstop = %ld\n"
	       "[sink]\nplugin = jsonl\npath = out.jsonl\n",
	       workers, job_extra, dir, worker_extra, n);
}

/* A stats file's number after "key": (fails when absent). */
static long stat_of(const char *js, const char *key)
{
	long v = num_field(js, key);
	cr_assert(v >= 0, "no %s in %s", key, js);
	return v;
}

Test(inflight, thirty_two_finished_in_reverse_reach_an_ordered_sink_in_order, .timeout = 120)
{
	const char *dir = t_tmpdir();
	/* 94 rounds of 32: the engine finishes nothing before it holds 32. */
	inflight_job(dir, 1, 3008, "max_in_flight = 32\nordered = true", "linger_ms = 600000");
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json '%s/s.json'", dir, dir), 0,
		     "%s", t_read_in(dir, "err"));
	struct outcomes o;
	read_outcomes(dir, 3008, &o);
	cr_expect(o.in_order, "ordered = true delivered out of order");
	cr_expect_eq(o.ok, 3008);
	for (long i = 0; i < 3008; i++)
		expect_result(&o, i, 32);
	/* The engine really held 32 at once (and never more: it aborts). */
	cr_expect_eq(o.most_held, 32, "most tasks held at once: %ld", o.most_held);
	char *js = t_read_in(dir, "s.json");
	cr_expect_eq(stat_of(js, "worker_restarts"), 0, "%s", js);
	char *err = t_read_in(dir, "err");
	cr_expect(!strstr(err, "cleanup"), "cleanup ran with tasks in flight: %s", err);
}

/* Without ordered, results still arrive (in the order handed out) and are right; two
 * workers share them. */
Test(inflight, two_workers_unordered, .timeout = 120)
{
	const char *dir = t_tmpdir();
	inflight_job(dir, 2, 5000, "max_in_flight = 16", "");
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0, "%s", t_read_in(dir, "err"));
	struct outcomes o;
	read_outcomes(dir, 5000, &o);
	cr_expect_eq(o.ok, 5000);
	for (long i = 0; i < 5000; i++)
		expect_result(&o, i, 16);
}

/* A plugin with submit and poll alone runs with the default max_in_flight of 1. */
Test(inflight, submit_and_poll_alone_run_one_at_a_time, .timeout = 120)
{
	const char *dir = t_tmpdir();
	inflight_job(dir, 1, 500, "ordered = true", "");
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0, "%s", t_read_in(dir, "err"));
	struct outcomes o;
	read_outcomes(dir, 500, &o);
	cr_expect_eq(o.ok, 500);
	cr_expect_eq(o.most_held, 1);
	for (long i = 0; i < 500; i++)
		expect_result(&o, i, 1);
}

/* kill -9 of a worker holding 64 tasks in flight: each of them runs again (one retry
 * allowed) and every task ends ok, exactly once. */
/* Whether task id's inflight result says it ran alone (held=1 at its submit). */
static bool ran_alone(const struct outcomes *o, long id)
{
	return o->text[id] && strstr(o->text[id], " held=1 ");
}

Test(inflight, killed_with_64_in_flight_each_runs_again_alone, .timeout = 120)
{
	const char *dir = t_tmpdir();
	/* 31 rounds of 64, the engine finishing nothing before it holds 64 (or has had
	 * nothing new for 100 ms): the kill comes in the second round, with 64 in flight. */
	inflight_job(dir, 1, 1984, "max_in_flight = 64\nmax_retries = 1\nordered = true",
		     "crash_after = 100\nlinger_ms = 100");
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json '%s/s.json'", dir, dir), 0,
		     "%s", t_read_in(dir, "err"));
	cr_assert(t_read_in(dir, "crashed"), "the worker never crashed");
	struct outcomes o;
	read_outcomes(dir, 1984, &o);
	cr_expect(o.in_order);
	cr_expect_eq(o.ok, 1984);
	for (long i = 0; i < 1984; i++) {
		expect_result(&o, i, 64);
		cr_expect_eq(o.attempt[i], 0, "task %ld: no attempt used", i);
	}
	char *js = t_read_in(dir, "s.json");
	cr_expect_eq(stat_of(js, "worker_restarts"), 1, "%s", js);
	/* Which of the 64 in flight at the kill did it is not known (the 36 it had
	 * finished among them were not handed over): none is blamed, each runs again
	 * alone, with no attempt used. */
	cr_expect_eq(stat_of(js, "retried"), 0, "%s", js);
	for (long i = 64; i < 128; i++)
		cr_expect(ran_alone(&o, i), "task %ld of the second round: %s", i, o.text[i]);
}

/* The same kill without retries: the tasks in flight run again alone (none of them is
 * known to have done it) and, since none kills its worker alone, none fails. */
Test(inflight, killed_with_tasks_in_flight_and_no_retries, .timeout = 120)
{
	const char *dir = t_tmpdir();
	inflight_job(dir, 1, 1000, "max_in_flight = 32", "crash_after = 40");
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0, "%s", t_read_in(dir, "err"));
	struct outcomes o;
	read_outcomes(dir, 1000, &o);
	cr_expect_eq(o.ok, 1000);
	for (long i = 0; i < 1000; i++)
		expect_result(&o, i, 32);
}

/* Tasks that kill their worker whenever they run, among others in flight (32 at a
 * time): each of them alone is a poison task; every task in flight beside them, killed
 * with them up to three times, ends ok. */
Test(inflight, crashes_in_flight_blame_only_the_killers, .timeout = 120)
{
	const char *dir = t_tmpdir();
	inflight_job(dir, 1, 600, "max_in_flight = 32\nmax_retries = 2\nmax_worker_restarts = 100",
		     "crash_on = 40,41,333,599");
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json '%s/s.json'", dir, dir), 1,
		     "%s", t_read_in(dir, "err"));
	struct outcomes o;
	read_outcomes(dir, 600, &o);
	cr_expect_eq(o.ok, 596);
	for (long i = 0; i < 600; i++) {
		if (i == 40 || i == 41 || i == 333 || i == 599)
			cr_expect(!strcmp(o.status[i], "error") &&
					  strstr(o.text[i], "poison task: 3 workers died while "
							    "running it"),
				  "task %ld: %s %s", i, o.status[i], o.text[i]);
		else
			expect_result(&o, i, 32);
	}
	char *js = t_read_in(dir, "s.json");
	cr_expect_eq(stat_of(js, "failed"), 4, "%s", js);
	cr_expect_eq(stat_of(js, "ok"), 596, "%s", js);
}

/* One task that never finishes, with others in flight beside it: it alone times out;
 * the others (finished behind it, or not yet) run again and end ok. */
Test(inflight, a_hung_task_times_out_alone, .timeout = 120)
{
	const char *dir = t_tmpdir();
	inflight_job(dir, 1, 300, "max_in_flight = 8\ntask_timeout = 1\nordered = true",
		     "hang_on = 13");
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json '%s/s.json'", dir, dir), 1,
		     "%s", t_read_in(dir, "err"));
	struct outcomes o;
	read_outcomes(dir, 300, &o);
	cr_expect_str_eq(o.status[13], "timeout");
	cr_expect_eq(o.timeout, 1);
	cr_expect_eq(o.ok, 299);
	for (long i = 0; i < 300; i++)
		if (i != 13)
			expect_result(&o, i, 8);
	char *js = t_read_in(dir, "s.json");
	cr_expect_eq(stat_of(js, "timed_out"), 1, "%s", js);
}

/* gpud_worker_poll returning -1: the finished results are kept, every task in flight
 * runs again once, the worker is replaced with the plugin's message told. */
Test(inflight, a_failed_poll_runs_the_tasks_in_flight_again, .timeout = 120)
{
	const char *dir = t_tmpdir();
	inflight_job(dir, 1, 500, "max_in_flight = 16\nmax_retries = 1", "poll_fail_after = 40");
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui plain --stats-json '%s/s.json'", dir, dir),
		     0, "%s", t_read_in(dir, "err"));
	struct outcomes o;
	read_outcomes(dir, 500, &o);
	cr_expect_eq(o.ok, 500);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "gpud_worker_poll failed: inflight: the engine died after 40 tasks"),
		  "%s", err);
	char *js = t_read_in(dir, "s.json");
	cr_expect_eq(stat_of(js, "worker_restarts"), 1, "%s", js);
	/* Every task in flight is blamed by a failed poll: none of them known to have done
	 * it, each runs again alone, no attempt used. */
	cr_expect_eq(stat_of(js, "retried"), 0, "%s", js);
}

/* A task refused at submit (gpud_task_reject) fails at once and is not retried; one
 * failed at its finish is retried like any failure. */
Test(inflight, rejected_at_submit_and_failed_at_finish, .timeout = 120)
{
	const char *dir = t_tmpdir();
	inflight_job(dir, 1, 200, "max_in_flight = 8\nmax_retries = 2\nordered = true",
		     "reject_on = 7\nfail_on = 9");
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 1, "%s", t_read_in(dir, "err"));
	struct outcomes o;
	read_outcomes(dir, 200, &o);
	cr_expect(o.in_order);
	cr_expect_eq(o.ok, 198);
	cr_expect_str_eq(o.status[7], "error");
	cr_expect(strstr(o.text[7], "inflight: rejected 7 at submit"), "%s", o.text[7]);
	cr_expect_eq(o.attempt[7], 0, "a rejected task is not retried");
	cr_expect_str_eq(o.status[9], "error");
	cr_expect(strstr(o.text[9], "inflight: refused 9"), "%s", o.text[9]);
	cr_expect_eq(o.attempt[9], 2, "a failure is retried");
}

/* gpud_task_fatal at submit while older tasks are still with the engine: that task
 * alone fails, with its message (as from process()); the tasks in flight beside it
 * and those it would have been given next run again on a fresh process, with no
 * mark against them, and nothing more is submitted to the process it ended. */
Test(inflight, a_fatal_task_in_flight_fails_alone_the_others_run_again, .timeout = 120)
{
	const char *dir = t_tmpdir();
	inflight_job(dir, 1, 200, "max_in_flight = 8\nmax_retries = 0\nordered = true",
		     "fatal_on = 3\nlinger_ms = 50");
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json '%s/s.json'", dir, dir), 1,
		     "%s", t_read_in(dir, "err"));
	struct outcomes o;
	read_outcomes(dir, 200, &o);
	cr_expect(o.in_order);
	cr_expect_eq(o.error, 1);
	cr_expect_eq(o.ok, 199);
	cr_expect_str_eq(o.status[3], "error");
	cr_expect(strstr(o.text[3], "inflight: fatal at submit of 3"), "%s", o.text[3]);
	for (long i = 0; i < 200; i++)
		if (i != 3)
			expect_result(&o, i, 8);
	char *js = t_read_in(dir, "s.json"), *err = t_read_in(dir, "err");
	cr_expect_eq(stat_of(js, "worker_restarts"), 1, "%s", js);
	cr_expect(strstr(err, "restarted at its plugin's request: inflight: fatal at submit of 3"),
		  "%s", err);
}

/* That failure is an error, as from process(), not a crash: with retry_on = crash it
 * is not retried, and nothing else counts as retried (the tasks beside it run again
 * unmarked). */
Test(inflight, a_fatal_task_in_flight_is_an_error_not_a_crash, .timeout = 120)
{
	const char *dir = t_tmpdir();
	inflight_job(dir, 1, 100, "max_in_flight = 8\nmax_retries = 2\nretry_on = crash",
		     "fatal_on = 3\nlinger_ms = 50");
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json '%s/s.json'", dir, dir), 1,
		     "%s", t_read_in(dir, "err"));
	struct outcomes o;
	read_outcomes(dir, 100, &o);
	cr_expect_eq(o.error, 1);
	cr_expect_eq(o.attempt[3], 0, "%s", o.text[3]);
	cr_expect(strstr(o.text[3], "inflight: fatal at submit of 3"), "%s", o.text[3]);
	char *js = t_read_in(dir, "s.json");
	cr_expect_eq(stat_of(js, "retried"), 0, "%s", js);
}

/* The key is checked like any other. */
Test(inflight, max_in_flight_key_is_checked)
{
	const char *dir = t_tmpdir();
	inflight_job(dir, 1, 10, "max_in_flight = 0", "");
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini'", dir), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "job.ini:4: [job] max_in_flight"), "%s", err);

	inflight_job(dir, 1, 10, "queue_size = 16\nmax_in_flight = 32", "");
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini'", dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "job.ini:5: [job] max_in_flight = 32 is more than queue_size = 16"),
		  "%s", err);
	cr_expect_eq(t_count_lines(err, "gpud"), 1, "one line: %s", err);
	/* It says what queue_size to give, counted for this job's workers. */
	inflight_job(dir, 2, 10, "queue_size = 16\nmax_in_flight = 32", "");
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini'", dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "raise queue_size to at least 32, and to 192 (3 x max_in_flight x 2 "
			      "workers) to keep each engine fed"),
		  "%s", err);
}

/* ---- python: async def process ---- */

static const char async_worker[] = "import asyncio\n"
				   "class W:\n"
				   "    def setup(self, gpu_id, seed, **kw):\n"
				   "        self.now = self.most = 0\n"
				   "    async def process(self, data):\n"
				   "        n = int(bytes(data))\n"
				   "        self.now += 1\n"
				   "        self.most = max(self.most, self.now)\n"
				   "        try:\n"
				   "            await asyncio.sleep(0.001 * ((n * 7) % 5))\n"
				   "        finally:\n"
				   "            self.now -= 1\n"
				   "        if n == 5:\n"
				   "            raise ValueError('five is bad')\n"
				   "        return 'sq=%d most=%d' % (n * n, self.most)\n";

static void python_job(const char *dir, const char *script, long n, const char *job_extra)
{
	free(t_write(dir, "w.py", script));
	t_jobf(dir,
	       "[job]\ngpus = 0\nordered = true\n%s\n"
	       "[worker]\nplugin = python\nscript = w.py\nclass = W\n"
	       "[generator]\nplugin = range\nstop = %ld\n"
	       "[sink]\nplugin = jsonl\npath = out.jsonl\n",
	       job_extra, n);
}

static void need_python(void)
{
	if (strcmp(t_env("HAVE_PYTHON"), "1") != 0)
		cr_skip_test("the python worker plugin was not built (no python3-embed)");
}

/* Up to max_in_flight coroutines at once on the worker's event loop, finishing in any
 * order; an exception fails its own task only; ordered output holds. */
Test(inflight, python_async_process_runs_many_at_once, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	python_job(dir, async_worker, 400, "max_in_flight = 16");
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 1, "%s", t_read_in(dir, "err"));
	struct outcomes o;
	read_outcomes(dir, 400, &o);
	cr_expect(o.in_order);
	cr_expect_eq(o.ok, 399);
	cr_expect_str_eq(o.status[5], "error");
	cr_expect(strstr(o.text[5], "ValueError: five is bad"), "%s", o.text[5]);
	long most = 0;
	for (long i = 0; i < 400; i++) {
		if (i == 5)
			continue;
		char want[48];
		snprintf(want, sizeof want, "sq=%ld most=", i * i);
		cr_expect(o.text[i] && !strncmp(o.text[i], want, strlen(want)), "task %ld: %s", i,
			  o.text[i]);
		long m = o.text[i] ? strtol(strstr(o.text[i], "most=") + 5, NULL, 10) : 0;
		most = m > most ? m : most;
	}
	cr_expect(most > 1 && most <= 16, "most coroutines at once: %ld", most);
}

/* max_in_flight = 1 (the default): each coroutine runs to its end, one at a time; and a
 * plain process with max_in_flight > 1 runs as it always did. */
Test(inflight, python_async_one_at_a_time_and_plain_with_many, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	python_job(dir, async_worker, 50, "");
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 1, "%s", t_read_in(dir, "err"));
	struct outcomes o;
	read_outcomes(dir, 50, &o);
	cr_expect_eq(o.ok, 49);
	cr_expect(strstr(o.text[7], "sq=49 most=1"), "%s", o.text[7]);
	cr_expect(strstr(o.text[5], "ValueError: five is bad"), "%s", o.text[5]);

	const char *dir2 = t_tmpdir();
	python_job(dir2,
		   "class W:\n"
		   "    def setup(self, gpu_id, seed, **kw):\n"
		   "        pass\n"
		   "    def process(self, data):\n"
		   "        return b'p' + bytes(data)\n",
		   300, "max_in_flight = 8");
	cr_assert_eq(t_gpud(dir2, "run '%s/job.ini' --ui off", dir2), 0, "%s",
		     t_read_in(dir2, "err"));
	read_outcomes(dir2, 300, &o);
	cr_expect(o.in_order);
	cr_expect_eq(o.ok, 300);
	cr_expect_str_eq(o.text[123], "p123");
}

/* A worker running coroutines killed part way: each task it held runs again. */
Test(inflight, python_async_worker_killed_mid_run, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	char script[1024];
	snprintf(script, sizeof script,
		 "import asyncio, os, signal\n"
		 "class W:\n"
		 "    def setup(self, gpu_id, seed, **kw):\n"
		 "        self.done = 0\n"
		 "    async def process(self, data):\n"
		 "        await asyncio.sleep(0.002)\n"
		 "        self.done += 1\n"
		 "        if self.done == 60 and not os.path.exists('%s/killed'):\n"
		 "            open('%s/killed', 'w').close()\n"
		 "            os.kill(os.getpid(), signal.SIGKILL)\n"
		 "        return bytes(data)\n",
		 dir, dir);
	python_job(dir, script, 300, "max_in_flight = 32\nmax_retries = 1");
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json '%s/s.json'", dir, dir), 0,
		     "%s", t_read_in(dir, "err"));
	cr_assert(t_read_in(dir, "killed"));
	struct outcomes o;
	read_outcomes(dir, 300, &o);
	cr_expect_eq(o.ok, 300);
	for (long i = 0; i < 300; i++) {
		char want[24];
		snprintf(want, sizeof want, "%ld", i);
		cr_expect_str_eq(o.text[i], want);
	}
	char *js = t_read_in(dir, "s.json");
	cr_expect_eq(stat_of(js, "worker_restarts"), 1, "%s", js);
	/* The tasks in flight at the kill ran again alone, with no attempt used. */
	cr_expect_eq(stat_of(js, "retried"), 0, "%s", js);
}
