/* SPDX-License-Identifier: MIT */
/* CPU stages before the GPU workers ([stage.NAME]): results handed on from stage to
 * stage, every task exactly one outcome through crashes, kill -9, timeouts and
 * rejections, ordered output, resume, backpressure, the figures, the job file. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"

/* A job: range 0..n-1, a [stage.decode] of the tagger (tag d:, with no GPU) then the
 * tagger as the GPU worker (tag g:), the jsonl sink to out.jsonl. `job`, `stage` and
 * `worker` are more keys for those sections. */
static void stage_job(const char *dir, unsigned n, const char *job, const char *stage,
		      const char *worker)
{
	free(t_jobf(dir,
		    "[job]\ngpus = 0\nworkers_per_gpu = 2\n%s\n"
		    "[stage.decode]\nplugin = tagger\ntag = d:\nno_gpu = 1\nworkers = 2\n%s\n"
		    "[worker]\nplugin = tagger\ntag = g:\n%s\n"
		    "[generator]\nplugin = range\nstop = %u\n"
		    "[sink]\nplugin = jsonl\npath = out.jsonl\n",
		    job, stage, worker, n));
}

/* Every id 0..n-1 has exactly one line in `out`; ok lines carry "g:d:<id>" (through
 * both stages). Returns the number of lines that are not ok (each must say `why`,
 * when not NULL). `in_order`: the lines come in id order. */
static unsigned check_once(const char *out, unsigned n, const char *why, bool in_order)
{
	unsigned char *seen = calloc(n, 1);
	unsigned lines = 0, failed = 0, bad = 0, twice = 0, missing = 0, disorder = 0;
	long last = -1;
	for (const char *p = out; p && *p;) {
		unsigned long id;
		const char *e = strchr(p, '\n');
		char *line = strndup(p, e ? (size_t)(e - p) : strlen(p));
		if (sscanf(line, "{\"task_id\": %lu,", &id) != 1 || id >= n) {
			bad++;
		} else {
			char want[64];
			snprintf(want, sizeof want, "\"result\": \"g:d:%lu\"", id);
			if (strstr(line, "\"status\": \"ok\"")) {
				if (!strstr(line, want))
					bad++;
			} else {
				failed++;
				if (why && !strstr(line, why))
					bad++;
			}
			if (seen[id]++)
				twice++;
			if ((long)id < last)
				disorder++;
			last = (long)id;
		}
		lines++;
		free(line);
		p = e ? e + 1 : NULL;
	}
	for (unsigned i = 0; i < n; i++)
		missing += !seen[i];
	cr_expect_eq(bad, 0, "%u lines are not what they should be", bad);
	cr_expect_eq(twice, 0, "%u ids more than once", twice);
	cr_expect_eq(missing, 0, "%u ids missing", missing);
	cr_expect_eq(lines, n);
	if (in_order)
		cr_expect_eq(disorder, 0, "%u lines out of order", disorder);
	free(seen);
	return failed;
}

static char *read_out(const char *dir)
{
	char *out = t_read_in(dir, "out.jsonl"), *err = t_read_in(dir, "err");
	cr_assert(out, "no output: %s", err ? err : "");
	free(err);
	return out;
}

Test(stages, a_stage_transforms_every_input_before_the_gpu_worker_with_no_gpu_of_its_own,
     .timeout = 120)
{
	const char *dir = t_tmpdir();
	stage_job(dir, 20000, "", "", "");
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini'", dir), 0);
	char *chk = t_read_in(dir, "out");
	cr_expect(chk && strstr(chk, "stage decode: 2 workers (workers = 2); "), "%s", chk);
	free(chk);
	/* Without workers =, check says how many the cores give and why. */
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini' --set stage.decode.workers=", dir), 2);
	free(t_jobf(dir, "[job]\ngpus = 0\n[stage.decode]\nplugin = tagger\n"
			 "[worker]\nplugin = tagger\n[generator]\nplugin = range\nstop = 5\n"));
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini'", dir), 0);
	chk = t_read_in(dir, "out");
	cr_expect(chk && strstr(chk, " core") &&
			  strstr(chk, " gpud may use, at least 1; "
				      "workers_per_gpu does not count: "
				      "set [stage.decode] workers = N to "
				      "choose); "),
		  "%s", chk);
	free(chk);
	stage_job(dir, 20000, "", "", "");
	/* no_gpu = 1: a stage worker whose CUDA_VISIBLE_DEVICES is not empty, or whose
	 * gpu_id is not -1, fails its setup and the run aborts. */
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	char *out = read_out(dir);
	cr_expect_eq(check_once(out, 20000, NULL, false), 0);
	free(out);
}

/* A stage's result larger than max_task_bytes cannot be the next stage's input: its task
 * fails, saying so, and never reaches the GPU worker; the others go on. */
/* The first two CPUs this process may run on, as taskset -c takes them ("3,5"), in buf;
 * skips the test on a single CPU. */
static const char *two_cpus(char *buf, size_t len)
{
	cpu_set_t set;
	int got[2], n = 0;
	cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
	for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
		if (CPU_ISSET(c, &set))
			got[n++] = c;
	if (n < 2)
		cr_skip_test("one CPU: the stage worker counts need two");
	snprintf(buf, len, "%d,%d", got[0], got[1]);
	return buf;
}

/* On 2 cores with 2 GPUs, workers_per_gpu = 2 leaves a stage without `workers` the 2
 * workers it has with 1 (it once got 1: a core was taken per 4 GPU workers); a stage's
 * own `workers` is kept whatever the GPU workers; an automatic count below the cores is
 * said, with why, by check and at the run's start. */
Test(stages, stage_worker_counts_do_not_follow_workers_per_gpu, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char cpus[64], cmd[600];
	two_cpus(cpus, sizeof cpus);
	free(t_jobf(dir, "[job]\ngpus = 0,1\n[stage.decode]\nplugin = tagger\nno_gpu = 1\n"
			 "[worker]\nplugin = tagger\n[generator]\nplugin = range\nstop = 40\n"
			 "[sink]\nplugin = jsonl\npath = out.jsonl\n"));
	for (unsigned per_gpu = 1; per_gpu <= 4; per_gpu *= 2) {
		snprintf(cmd, sizeof cmd,
			 "taskset -c %s \"$GPUD\" check job.ini --set job.workers_per_gpu=%u "
			 ">out 2>err",
			 cpus, per_gpu);
		cr_expect_eq(t_sh(dir, cmd), 0);
		char *out = t_read_in(dir, "out");
		cr_expect(out && strstr(out, "  stage decode: 2 workers (no workers =: the 2 cores "
					     "gpud may use, at least 1; "),
			  "workers_per_gpu = %u:\n%s", per_gpu, out);
		free(out);
		snprintf(cmd, sizeof cmd,
			 "taskset -c %s \"$GPUD\" check job.ini --set job.workers_per_gpu=%u "
			 "--set stage.decode.workers=3 >out 2>err",
			 cpus, per_gpu);
		cr_expect_eq(t_sh(dir, cmd), 0);
		out = t_read_in(dir, "out");
		cr_expect(out && strstr(out, "  stage decode: 3 workers (workers = 3); "),
			  "workers_per_gpu = %u:\n%s", per_gpu, out);
		free(out);
	}
	/* The run: the stage's workers are the stats' (2), and nothing is said of a count
	 * that is every core. */
	snprintf(cmd, sizeof cmd,
		 "taskset -c %s \"$GPUD\" run job.ini --ui off --set job.workers_per_gpu=2 "
		 "--stats-json stats.json >out 2>err",
		 cpus);
	cr_expect_eq(t_sh(dir, cmd), 0);
	char *s = t_read_in(dir, "stats.json"), *err = t_read_in(dir, "err");
	cr_expect(s && strstr(s, "{\"name\": \"decode\", \"workers\": 2,"), "%s", s);
	cr_expect(err && !strstr(err, "stage decode: "), "%s", err);
	free(s);
	free(err);
	/* A named stage takes its core from the other: that one's 1 is said at the start. */
	free(t_jobf(dir, "[job]\ngpus = 0,1\nworkers_per_gpu = 2\n"
			 "[stage.a]\nplugin = tagger\nno_gpu = 1\nworkers = 1\n"
			 "[stage.b]\nplugin = tagger\nno_gpu = 1\n"
			 "[worker]\nplugin = tagger\n[generator]\nplugin = range\nstop = 40\n"
			 "[sink]\nplugin = jsonl\npath = out.jsonl\n"));
	snprintf(cmd, sizeof cmd, "taskset -c %s \"$GPUD\" run job.ini --ui off >out 2>err", cpus);
	cr_expect_eq(t_sh(dir, cmd), 0);
	err = t_read_in(dir, "err");
	cr_expect(err && strstr(err, "gpud: stage b: 1 worker (no workers =: the 2 cores gpud may "
				     "use, less 1 for the stages that name theirs, at least 1; "
				     "workers_per_gpu does not count: set [stage.b] workers = N "
				     "to choose)\n"),
		  "%s", err);
	cr_expect(err && !strstr(err, "stage a: "), "%s", err);
	free(err);
}

Test(stages, a_stage_result_too_large_for_the_next_input_fails_its_task, .timeout = 120)
{
	const char *dir = t_tmpdir();
	/* range's inputs are 1-3 bytes; "long-tag:" makes them 10-12: above 11 fails */
	free(t_jobf(dir, "[job]\ngpus = 0\nmax_task_bytes = 11\nmax_retries = 3\n"
			 "[stage.decode]\nplugin = tagger\ntag = long-tag:\nworkers = 1\n"
			 "[worker]\nplugin = tagger\ntag = g:\n"
			 "[generator]\nplugin = range\nstop = 200\n"
			 "[sink]\nplugin = jsonl\npath = out.jsonl\n"));
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 1);
	char *out = read_out(dir);
	unsigned ok = 0, failed = 0;
	for (char *p = out; (p = strstr(p, "\"status\": ")); p++) {
		if (strncmp(p, "\"status\": \"ok\"", 14) == 0)
			ok++;
		else
			failed++;
	}
	cr_expect_eq(ok, 100, "ids 0-99 (1-2 bytes) fit: %u ok", ok);
	cr_expect_eq(failed, 100, "ids 100-199 do not: %u failed", failed);
	cr_expect(strstr(out, "\"task_id\": 150, \"status\": \"error\"") &&
			  strstr(out, "stage decode: its result of 12 bytes exceeds "
				      "max_task_bytes (11), the next stage's input limit"),
		  "%s", out);
	cr_expect(!strstr(out, "g:long-tag:100"), "a failed task reached the GPU worker");
	free(out);
}

Test(stages, two_stages_in_file_order_then_the_gpu, .timeout = 120)
{
	const char *dir = t_tmpdir();
	free(t_jobf(dir, "[job]\ngpus = 0\n"
			 "[stage.first]\nplugin = tagger\ntag = a:\nworkers = 1\n"
			 "[stage.second]\nplugin = tagger\ntag = b:\nworkers = 3\n"
			 "[worker]\nplugin = tagger\ntag = g:\n"
			 "[generator]\nplugin = range\nstop = 3000\n"
			 "[sink]\nplugin = jsonl\npath = out.jsonl\n"
			 "[ui]\nmetrics_file = m.prom\n"));
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui plain", dir), 0);
	char *m = t_read_in(dir, "m.prom");
	cr_expect(m && strstr(m, "gpud_stage_workers{stage=\"second\"} ") &&
			  strstr(m, "gpud_stage_busy_ratio{stage=\"gpu\"} ") &&
			  strstr(m, "gpud_stage_queued{stage=\"first\"} 0\n") &&
			  strstr(m,
				 "gpud_stage_task_attempts_total{stage=\"first\",outcome=\"ok\"} "
				 "3000\n"),
		  "%s", m);
	free(m);
	char *out = read_out(dir), *err = t_read_in(dir, "err");
	/* Plain progress: a line per stage, then the GPU workers'. */
	const char *a = strstr(err, "gpud:   stage first "),
		   *b = strstr(err, "gpud:   stage second "),
		   *g = strstr(err, "gpud:         gpu ");
	cr_expect(a && b && g && a < b && b < g, "%s", err);
	cr_expect(b && strstr(b, "ok 3000"), "%s", err);
	free(err);
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 3000);
	cr_expect(strstr(out, "\"result\": \"g:b:a:2999\""), "%.300s", out);
	cr_expect(!strstr(out, "\"status\": \"error\""));
	free(out);
}

Test(stages, a_stage_worker_that_crashes_runs_its_task_again_and_nothing_else_is_lost,
     .timeout = 120)
{
	const char *dir = t_tmpdir();
	stage_job(dir, 5000, "max_retries = 1\nqueue_size = 64\nmax_worker_restarts = 10",
		  "crash_on = 5,100,2500,4999\nfirst_attempt_only = 1", "");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json '%s/s.json'", dir, dir),
		     0);
	char *out = read_out(dir), *s = t_read_in(dir, "s.json");
	cr_expect_eq(check_once(out, 5000, NULL, false), 0);
	cr_expect(s && strstr(s, "\"retried\": 4,"), "%s", s);
	cr_expect(s && strstr(s, "\"worker_restarts\": 4,"), "%s", s);
	free(out);
	free(s);
}

Test(stages, stage_workers_killed_with_kill_9_mid_run_lose_no_task, .timeout = 180)
{
	const char *dir = t_tmpdir();
	char *pids = NULL;
	if (asprintf(&pids, "sleep_us = 400\npid_file = %s/pids", dir) < 0)
		cr_assert_fail();
	stage_job(dir, 10000, "max_retries = 3\nmax_worker_restarts = 10", pids, "");
	free(pids);
	/* Each stage process writes its pid at setup: kill the first two once results
	 * come through them (each is replaced, and its successor's pid is added), then the
	 * next one once its successor's results do too: mid-run, by what was done, not
	 * after a fixed time. */
	t_sh(dir, WAIT_FOR "n() { cat out.jsonl 2>/dev/null | wc -l; }\n"
			   "\"$GPUD\" run job.ini --ui off 2>err & p=$!\n"
			   "w '[ $(cat pids 2>/dev/null | wc -l) -ge 2 ] && [ $(n) -ge 100 ]'\n"
			   "kill -9 $(sed -n 1p pids) $(sed -n 2p pids)\n"
			   "w '[ $(wc -l < pids) -ge 4 ]'; m=$(( $(n) + 100 ))\n"
			   "w '[ $(n) -ge $m ]'; kill -9 $(sed -n 3p pids)\n"
			   "wait $p; echo $? > rc\n");
	cr_expect_eq(t_read_long(dir, "rc"), 0);
	char *out = read_out(dir), *err = t_read_in(dir, "err");
	cr_expect_eq(check_once(out, 10000, NULL, false), 0);
	cr_expect(err && strstr(err, "killed by SIGKILL"), "%s", err);
	free(out);
	free(err);
}

Test(stages, a_stage_timeout_is_the_tasks_outcome_or_a_retry, .timeout = 120)
{
	const char *dir = t_tmpdir();
	/* The stage's own task_timeout and max_retries: the job has none. */
	stage_job(dir, 200, "max_retries = 0",
		  "task_timeout = 1\nmax_retries = 1\nhang_on = 7\nfirst_attempt_only = 1", "");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	char *out = read_out(dir);
	cr_expect_eq(check_once(out, 200, NULL, false), 0);
	free(out);

	dir = t_tmpdir();
	stage_job(dir, 200, "task_timeout = 1\nmax_retries = 0", "hang_on = 7", "");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 1);
	out = read_out(dir);
	cr_expect_eq(check_once(out, 200, "stage decode: timed out", false), 1);
	cr_expect(strstr(out, "{\"task_id\": 7, \"status\": \"timeout\""), "%s", out);
	free(out);
}

Test(stages, a_task_a_stage_rejects_fails_once_and_never_reaches_the_gpu, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *worker = NULL, *job = NULL;
	if (asprintf(&worker, "count_file = %s/gpu_ran", dir) < 0 ||
	    asprintf(&job, "max_retries = 3\nlog_dir = %s/logs", dir) < 0)
		cr_assert_fail();
	stage_job(dir, 1000, job, "reject_on = 3,500", worker);
	free(worker);
	free(job);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json '%s/s.json'", dir, dir),
		     1);
	char *out = read_out(dir), *s = t_read_in(dir, "s.json");
	cr_expect_eq(check_once(out, 1000, "stage decode: tagger: input", false), 2);
	cr_expect(s && strstr(s, "\"retried\": 0,"), "rejected: not retried: %s", s);
	/* What the GPU worker ran: every other id, once. */
	t_sh(dir, "sort -n gpu_ran | uniq | wc -l > ran; grep -cx '3\\|500' gpu_ran > bad;"
		  "cat logs/failures.jsonl > failures");
	cr_expect_eq(t_read_long(dir, "ran"), 998);
	cr_expect_eq(t_read_long(dir, "bad"), 0);
	char *f = t_read_in(dir, "failures");
	cr_expect(f && t_count_lines(f, "{\"task_id\": ") == 2, "%s", f);
	cr_expect(f && strstr(f, "stage decode: tagger: input 500 is malformed"), "%s", f);
	free(f);
	free(out);
	free(s);
}

Test(stages, ordered_output_holds_through_stages, .timeout = 120)
{
	const char *dir = t_tmpdir();
	/* Two stage workers and two GPU workers of different speeds finish out of order. */
	stage_job(dir, 3000, "ordered = true\nqueue_size = 32\nmax_retries = 1",
		  "crash_on = 10,1000\nfirst_attempt_only = 1", "sleep_us = 100");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	char *out = read_out(dir);
	cr_expect_eq(check_once(out, 3000, NULL, true), 0);
	free(out);
}

Test(stages, kill_9_of_the_host_then_resume_gives_every_id_once, .timeout = 240)
{
	const char *dir = t_tmpdir();
	stage_job(dir, 15000, "", "sleep_us = 200", "sleep_us = 300");
	/* Each run killed at a random moment once it is in the middle: the output holds 1 to
	 * 3000 lines more than when it began and the journal a DONE record (not after a
	 * fixed time: a slow machine's run would be killed before it did anything). */
	t_sh(dir, WAIT_FOR JOURNAL_DONE ALIVE
	     "n() { cat out.jsonl 2>/dev/null | wc -l; }\n"
	     "k=0; while [ $k -lt 3 ]; do\n"
	     "  want=$(( $(n) + 1 + $(od -An -N2 -tu2 /dev/urandom) % 3000 ))\n"
	     "  \"$GPUD\" run job.ini --ui off --resume 2>>err & p=$!\n"
	     "  while alive $p && ! { [ $(n) -ge $want ] && [ $(jdone job.journal) -ge 1 ]; }\n"
	     "  do sleep 0.02; done\n"
	     "  kill -9 $p 2>/dev/null; wait $p 2>/dev/null\n"
	     "  w '! pgrep -f \"gpud-worker --run [0-9]* $p( |$)\" >/dev/null'\n"
	     "  k=$((k+1))\n"
	     "done\n"
	     "\"$GPUD\" run job.ini --ui off --resume 2>>err; echo $? > rc\n");
	cr_expect_eq(t_read_long(dir, "rc"), 0);
	char *out = read_out(dir);
	cr_expect_eq(check_once(out, 15000, NULL, false), 0);
	free(out);
}

Test(stages, a_journal_of_a_job_with_other_stages_is_refused_on_resume, .timeout = 60)
{
	const char *dir = t_tmpdir();
	stage_job(dir, 100, "", "", "");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	cr_expect_eq(
		t_gpud(dir, "run '%s/job.ini' --ui off --resume --set stage.decode.tag=e:", dir),
		2);
	char *err = t_read_in(dir, "err");
	cr_expect(err && strstr(err, "was written by another job"), "%s", err);
	free(err);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 0);
	err = t_read_in(dir, "err");
	cr_expect(err && strstr(err, "100 tasks were already done"), "%s", err);
	free(err);
}

/* A number after "key": in text at or after `from`, or -1. */
static double json_num(const char *text, const char *from, const char *key)
{
	char want[64];
	const char *p = from ? strstr(text, from) : text;
	snprintf(want, sizeof want, "\"%s\": ", key);
	p = p ? strstr(p, want) : NULL;
	return p ? strtod(p + strlen(want), NULL) : -1;
}

Test(stages, a_slow_gpu_behind_a_fast_stage_bounds_what_waits_and_the_figures_say_so,
     .timeout = 180)
{
	const char *dir = t_tmpdir();
	char *stage = NULL, *worker = NULL;
	if (asprintf(&stage, "count_file = %s/stage_ran", dir) < 0 ||
	    asprintf(&worker, "count_file = %s/gpu_ran\nsleep_us = 3000", dir) < 0)
		cr_assert_fail();
	free(t_jobf(dir,
		    "[job]\ngpus = 0\nqueue_size = 16\n"
		    "[stage.decode]\nplugin = tagger\ntag = d:\nworkers = 2\n%s\n"
		    "[worker]\nplugin = tagger\ntag = g:\n%s\n"
		    "[generator]\nplugin = range\nstop = 600\n"
		    "[sink]\nplugin = jsonl\npath = out.jsonl\n",
		    stage, worker));
	free(stage);
	free(worker);
	/* Mid-run, what the stage ran and the GPU did not start yet is at most queue_size:
	 * every such task is in flight. (The stage's count is read first; the GPU's only
	 * grows.) */
	t_sh(dir, WAIT_FOR "\"$GPUD\" run job.ini --ui off --stats-json s.json 2>err & p=$!\n"
			   "w '[ $(cat gpu_ran 2>/dev/null | wc -l) -ge 100 ]'\n"
			   "for k in 1 2 3 4 5; do s=$(wc -l < stage_ran); g=$(wc -l < gpu_ran);"
			   " echo $((s - g)) >> ahead; sleep 0.1; done\n"
			   "wait $p; echo $? > rc\n");
	cr_expect_eq(t_read_long(dir, "rc"), 0);
	char *ahead = t_read_in(dir, "ahead");
	cr_assert(ahead);
	int samples = 0;
	for (char *p = ahead; *p;) {
		long d = strtol(p, &p, 10);
		cr_expect(d >= 0 && d <= 16, "the stage ran %ld tasks ahead of the GPU", d);
		samples++;
		while (*p == '\n')
			p++;
	}
	cr_expect_eq(samples, 5);
	free(ahead);
	char *out = read_out(dir);
	cr_expect_eq(check_once(out, 600, NULL, false), 0);
	free(out);

	/* The figures. The GPU was the bottleneck: busier than the stage. Its busy share is
	 * its time in calls, at least the 600 x 3 ms it slept, over at most the run's
	 * elapsed time (with room for clocks): whatever the machine's load or a sanitizer
	 * does to the hand-overs, the share moves with the elapsed time. A blocked stage
	 * does not make the loop spin: a loop that spins uses its core for the whole run
	 * (a loaded machine gives it less, never more); this one waits on its doorbell
	 * (about 0.3 of the elapsed time quiet, 0.4 under ASan, less under TSan). */
	char *s = t_read_in(dir, "s.json");
	cr_assert(s);
	cr_expect(strstr(s, "\"stages\": [{\"name\": \"decode\", \"workers\": 2, "), "%s", s);
	double elapsed = json_num(s, NULL, "elapsed"), cpu = json_num(s, NULL, "host_cpu_seconds");
	double gpu = json_num(s, NULL, "gpu_busy"), busy = json_num(s, "\"stages\"", "busy");
	double floor = 0.9 * 600 * 3e-3 / elapsed;
	cr_expect(gpu >= floor && gpu <= 1, "gpu_busy %g in %g s (want at least %g)", gpu, elapsed,
		  floor);
	cr_expect(busy >= 0 && busy < gpu, "the stage's busy %g, the GPU's %g", busy, gpu);
	cr_expect_eq(json_num(s, "\"stages\"", "ok"), 600);
	cr_expect_eq(json_num(s, "\"stages\"", "queued"), 0);
	cr_expect(cpu < 0.6 * elapsed, "the host used %g s of CPU in %g s", cpu, elapsed);
	cr_expect(strstr(s, "\"gpu_id\": -1, \"gpu_ids\": [], \"ok\": "), "%s", s);
	cr_expect(strstr(s, "\"stage\": \"decode\"}"), "%s", s);
	free(s);
}

/* The busy fraction counts from a worker's finished setup: a GPU worker that spends
 * 1.5 s loading its model and is then fed without a gap reads busy, not idle for the
 * load (over the whole run it would be about half). */
Test(stages, busy_counts_from_a_workers_finished_setup, .timeout = 180)
{
	const char *dir = t_tmpdir();
	free(t_jobf(dir, "[job]\ngpus = 0\n"
			 "[stage.decode]\nplugin = tagger\ntag = d:\nworkers = 1\n"
			 "[worker]\nplugin = tagger\ntag = g:\nsleep_us = 20000\n"
			 "setup_sleep_us = 1500000\n"
			 "[generator]\nplugin = range\nstop = 100\n"
			 "[sink]\nplugin = jsonl\npath = out.jsonl\n"));
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json '%s/s.json'", dir, dir),
		     0);
	char *s = t_read_in(dir, "s.json");
	cr_assert(s);
	double elapsed = json_num(s, NULL, "elapsed"), gpu = json_num(s, NULL, "gpu_busy");
	cr_assert(elapsed > 3.4, "elapsed %g: the setup's 1.5 s and 100 x 20 ms", elapsed);
	/* At least 2 s in process(), over at most the time after the setup's 1.5 s (with
	 * room for clocks): the whole run's time would give 2 / elapsed, below this however
	 * slow the machine (a sanitizer) makes the hand-overs. */
	double floor = 0.9 * 2.0 / (elapsed - 1.5);
	cr_expect(gpu >= floor && gpu <= 1, "gpu_busy %g in %g s (want at least %g)", gpu, elapsed,
		  floor);
	free(s);
}

Test(stages, no_gpu_worker_left_ends_the_run_instead_of_waiting, .timeout = 120)
{
	const char *dir = t_tmpdir();
	free(t_jobf(dir, "[job]\ngpus = 0\n"
			 "[stage.decode]\nplugin = tagger\ntag = d:\nworkers = 1\n"
			 "[worker]\nplugin = faulty\nsetup_fail_gpu = 0\n"
			 "[generator]\nplugin = range\nstop = 500\n"
			 "[sink]\nplugin = jsonl\npath = out.jsonl\n"));
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json '%s/s.json'", dir, dir),
		     3);
	char *s = t_read_in(dir, "s.json"), *err = t_read_in(dir, "err");
	cr_assert(s, "%s", err);
	cr_expect(strstr(err, "no GPU worker left") || strstr(err, "no worker"), "%s", err);
	/* Every task accounted for: generated = ok + failed + not run. */
	double gen = json_num(s, NULL, "generated"), ok = json_num(s, NULL, "ok"),
	       failed = json_num(s, NULL, "failed"), not_run = json_num(s, NULL, "not_run");
	cr_expect_eq(gen, ok + failed + not_run, "%s", s);
	free(s);
	free(err);
}

Test(stages, stage_sections_in_the_job_file_are_checked_with_file_and_line, .timeout = 60)
{
	static const struct {
		const char *text, *want;
	} cases[] = {
		{"[stage.]\nplugin = tagger\n", "job.ini:4: [stage.]: a stage section is"},
		{"[stage]\nplugin = tagger\n", "job.ini:4: [stage]: a stage section is"},
		{"[stage.a b]\nplugin = tagger\n", "job.ini:4: [stage.a b]"},
		{"[stage.x]\ntag = d:\n", "job.ini:4: [stage.x] plugin is required"},
		{"[stage.x]\nplugin = tagger\n[stage.x]\nworkers = 2\n",
		 "job.ini:6: section [stage.x] appears twice (first on line 4)"},
		{"[stage.x]\nplugin = tagger\nworkers = 0\n",
		 "job.ini:6: [stage.x] workers = '0': expected a count from 1"},
		{"[stage.x]\nplugin = no_such_plugin\n", "[stage.x]: "},
		{"[stage.x]\nplugin = tagger\ntask_timeout = soon\n",
		 "job.ini:6: [stage.x] task_timeout = 'soon': "},
		{"[stage.x]\nplugin = tagger\nmax_retries = -1\n",
		 "job.ini:6: [stage.x] max_retries = '-1': "},
		{"[stage.x]\nplugin = sha256\nrouns = 3\n",
		 "job.ini:6: unknown key 'rouns' in [stage.x] for plugin sha256 (did you mean "
		 "'rounds'?"},
		{"[stage.x]\nplugin = sha256\nwoker = 2\n",
		 "job.ini:6: unknown key 'woker' in [stage.x] (did you mean 'workers'? a stage "
		 "takes workers, task_timeout, max_retries and its plugin's keys)"},
		{"[stage.x]\nplugin = sha256\ntask_timout = 2\n",
		 "job.ini:6: unknown key 'task_timout' in [stage.x] (did you mean 'task_timeout'?"},
		{"[stage.gpu]\nplugin = tagger\n",
		 "job.ini:4: [stage.gpu]: the name gpu is the GPU workers'"},
		{"[stage.x]\nplugin = tagger\nlog_file = s.json\n",
		 "job.ini:6: [stage.x] log_file are the same file"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		const char *dir = t_tmpdir();
		free(t_jobf(dir,
			    "[job]\ngpus = 0\n\n%s[worker]\nplugin = tagger\n"
			    "[generator]\nplugin = range\nstop = 5\n",
			    cases[i].text));
		cr_expect_eq(t_gpud(dir, "check '%s/job.ini' --stats-json '%s/s.json'", dir, dir),
			     2, "%s", cases[i].text);
		char *err = t_read_in(dir, "err");
		cr_expect(err && strstr(err, cases[i].want), "want '%s' in: %s", cases[i].want,
			  err);
		free(err);
	}
	/* A plugin that takes any key gets the slip, and gpud says where it goes. */
	const char *dir = t_tmpdir();
	free(t_jobf(dir, "[job]\ngpus = 0\n[stage.x]\nplugin = tagger\nworker = 2\n"
			 "[worker]\nplugin = tagger\n[generator]\nplugin = range\nstop = 5\n"));
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini'", dir), 0);
	char *warned = t_read_in(dir, "err");
	cr_expect(warned && strstr(warned, "job.ini:5: [stage.x] worker is not the stage's "
					   "'workers': it goes to plugin tagger's setup()"),
		  "%s", warned);
	free(warned);
	/* --set reaches a stage's keys, the stage's own and its plugin's. */
	dir = t_tmpdir();
	stage_job(dir, 100, "", "", "");
	cr_expect_eq(t_gpud(dir,
			    "run '%s/job.ini' --ui off --set stage.decode.workers=1 "
			    "--set stage.decode.tag=d: --stats-json '%s/s.json'",
			    dir, dir),
		     0);
	char *s = t_read_in(dir, "s.json");
	cr_expect(s && strstr(s, "{\"name\": \"decode\", \"workers\": 1, "), "%s", s);
	free(s);
}

Test(stages, a_python_stage_in_front_of_a_c_gpu_worker, .timeout = 120)
{
	if (strcmp(t_env("HAVE_PYTHON"), "1") != 0)
		cr_skip_test("the python worker plugin was not built");
	const char *dir = t_tmpdir();
	free(t_write(dir, "prep.py",
		     "import os\n"
		     "class Decode:\n"
		     "    def setup(self, gpu_id, seed, **kw):\n"
		     "        self.ok = os.environ['CUDA_VISIBLE_DEVICES'] == '' and gpu_id == -1\n"
		     "    def process(self, data):\n"
		     "        if not self.ok:\n"
		     "            raise RuntimeError('a stage saw a GPU')\n"
		     "        if bytes(data) == b'13':\n"
		     "            raise ValueError('thirteen')\n"
		     "        return b'd:' + bytes(data)\n"));
	free(t_jobf(dir, "[job]\ngpus = 0\n"
			 "[stage.decode]\nplugin = python\nscript = prep.py\nclass = Decode\n"
			 "workers = 2\n"
			 "[worker]\nplugin = tagger\ntag = g:\n"
			 "[generator]\nplugin = range\nstop = 400\n"
			 "[sink]\nplugin = jsonl\npath = out.jsonl\n"));
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini' --import", dir), 0);
	char *chk = t_read_in(dir, "out");
	cr_expect(chk && strstr(chk, "import: [stage.decode] Decode in script = "), "%s", chk);
	free(chk);
	cr_expect_eq(
		t_gpud(dir, "check '%s/job.ini' --import --set stage.decode.class=Decoder", dir),
		2);
	chk = t_read_in(dir, "err");
	cr_expect(chk && strstr(chk, "[stage.decode] class = Decoder: "), "%s", chk);
	free(chk);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 1);
	char *out = read_out(dir);
	cr_expect_eq(check_once(out, 400, "stage decode: ValueError: thirteen", false), 1);
	cr_expect(strstr(out, "{\"task_id\": 13, \"status\": \"error\""), "%s", out);
	free(out);
}

Test(stages, a_stage_worker_waiting_for_room_downstream_is_not_taken_for_wedged, .timeout = 180)
{
	/* Large results (500 KB each, in slots of 1000 KiB) fill the stage worker's
	 * result memory after two; it then holds tasks it cannot start while the GPU worker
	 * takes 3.3 s a task: longer than a worker may hold tasks without starting one
	 * (3 s), which is backpressure here, not a wedged worker. */
	const char *dir = t_tmpdir();
	t_sh(dir, "for k in 1 2 3 4 5 6; do head -c 500000 /dev/zero | tr '\\0' x; echo; done"
		  " > in.txt");
	free(t_jobf(dir, "[job]\ngpus = 0\nqueue_size = 8\nmax_task_bytes = 1M\n"
			 "max_result_bytes = 1000K\n"
			 "[stage.decode]\nplugin = tagger\ntag = d:\nworkers = 1\n"
			 "[worker]\nplugin = tagger\ntag = g:\nsleep_us = 3300000\n"
			 "[generator]\nplugin = lines\npath = in.txt\n"
			 "[sink]\nplugin = null\n"));
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json '%s/s.json'", dir, dir),
		     0);
	char *s = t_read_in(dir, "s.json"), *err = t_read_in(dir, "err");
	cr_assert(s, "%s", err);
	cr_expect(strstr(s, "\"ok\": 6,"), "%s", s);
	cr_expect(strstr(s, "\"worker_restarts\": 0,"), "%s\n%s", s, err);
	cr_expect(!strstr(err, "without starting"), "%s", err);
	free(s);
	free(err);
}

Test(stages, a_process_stage_is_not_given_an_engines_window_by_max_in_flight, .timeout = 120)
{
	/* The GPU worker is an engine (max_in_flight = 4); the stage's plugin calls
	 * process(), 0.5 s a task. Each stage worker holds what keeps it busy, so the 8
	 * tasks spread over the 4 stage workers, not 4 each over two while two idle (as
	 * when every worker got an engine's window of 3 x max_in_flight). */
	const char *dir = t_tmpdir();
	free(t_jobf(dir, "[job]\ngpus = 0\nqueue_size = 16\nmax_in_flight = 4\n"
			 "[stage.decode]\nplugin = tagger\ntag = d:\nworkers = 4\n"
			 "sleep_us = 500000\n"
			 "[worker]\nplugin = inflight\nlinger_ms = 1\n"
			 "[generator]\nplugin = range\nstop = 8\n"
			 "[sink]\nplugin = null\n"));
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json '%s/s.json'", dir, dir),
		     0);
	char *s = t_read_in(dir, "s.json"), *err = t_read_in(dir, "err");
	cr_assert(s, "%s", err);
	const char *p = strstr(s, "\"workers\": [");
	unsigned stage_workers = 0, idle = 0;
	while (p && (p = strstr(p, "{\"worker_id\"")) != NULL) {
		const char *end = strchr(p, '}');
		cr_assert(end, "%s", s);
		const char *st = strstr(p, "\"stage\": \"decode\"");
		if (st && st < end) {
			stage_workers++;
			idle += json_num(p, NULL, "ok") == 0;
		}
		p = end;
	}
	cr_expect_eq(stage_workers, 4, "%s", s);
	cr_expect_eq(idle, 0, "stage workers that ran nothing: %u\n%s", idle, s);
	free(s);
	free(err);
}

/* Behind a CPU stage, a batching GPU worker's calls get batch_size tasks: a queue_size
 * that cannot hold two batches a worker (the stage's tasks then take the rest, and the
 * next call gets half a batch) is refused in one line saying what to give. */
Test(stages, a_batching_gpu_worker_behind_a_stage_gets_whole_batches, .timeout = 120)
{
	const char *dir = t_tmpdir();
	const char *text = "[job]\ngpus = 0\nbatch_size = 64\nbatch_wait_ms = 50\n"
			   "queue_size = %u\n"
			   "[stage.decode]\nplugin = tagger\ntag = d:\nno_gpu = 1\nworkers = 1\n"
			   "[worker]\nplugin = batcher\n"
			   "[generator]\nplugin = range\nstop = 6400\n"
			   "[sink]\nplugin = jsonl\npath = out.jsonl\n";
	free(t_jobf(dir, text, 96u));
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(err && strstr(err, "job.ini:5: [job] queue_size = 96 cannot hold 2 batches of "
				     "batch_size = 64 for each of 1 worker, so calls would get "
				     "fewer tasks: raise queue_size to 128"),
		  "%s", err);
	free(err);
	free(t_jobf(dir, text, 128u));
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	char *out = read_out(dir);
	unsigned whole = 0, lines = 0;
	for (const char *p = out; (p = strstr(p, "\"status\": \"ok\"")); p++)
		lines++;
	for (const char *p = out; (p = strstr(p, " n=64\"")); p++)
		whole++;
	cr_expect_eq(lines, 6400);
	/* At most one call short (the stream's first or last). */
	cr_expect_geq(whole, 6400 - 64, "%u of 6400 tasks came in calls of 64", whole);
	free(out);
}

/* Behind a CPU stage that is the bottleneck, a batching GPU worker waits for its batch
 * to fill by default (no batch_wait_ms: the time the batch takes at the stage's rate,
 * capped), and its last batch goes at once when the stage has nothing more: at least
 * 95% of the calls of both GPU workers are whole batches, counted by the stats and by
 * the calls' own sizes. */
Test(stages, behind_a_stage_batches_are_whole_by_default, .timeout = 180)
{
	const char *dir = t_tmpdir();
	free(t_jobf(dir, "[job]\ngpus = 0,1\nbatch_size = 64\n"
			 "[stage.decode]\nplugin = tagger\ntag = d:\nno_gpu = 1\nworkers = 1\n"
			 "sleep_us = 50\n"
			 "[worker]\nplugin = batcher\n"
			 "[generator]\nplugin = range\nstop = 12800\n"
			 "[sink]\nplugin = jsonl\npath = out.jsonl\n"));
	cr_expect_eq(
		t_gpud(dir, "run '%s/job.ini' --ui off --stats-json '%s/stats.json'", dir, dir), 0);
	char *out = read_out(dir), *s = t_read_in(dir, "stats.json");
	cr_assert(s);
	unsigned whole = 0;
	for (const char *p = out; (p = strstr(p, " n=64\"")); p++)
		whole++;
	cr_expect_eq(whole % 64, 0);
	double calls = 0, top = 0;
	for (int k = 0; k < 2; k++) {
		char at[32];
		snprintf(at, sizeof at, "{\"worker_id\": %d,", k);
		double n = json_num(s, at, "calls");
		const char *sizes = strstr(strstr(s, at), "\"call_sizes\": ");
		cr_assert(n > 0 && sizes, "%s", s);
		/* calls of 33..64 tasks, batch_size 64: the bucket [33, 64, N] */
		const char *b = strstr(sizes, "[33, 64, ");
		double in_top = b && b < strstr(sizes, "]]") ? strtod(b + 9, NULL) : 0;
		cr_expect_geq(in_top, 0.95 * n, "worker %d: %g of %g calls of 33..64 tasks: %s", k,
			      in_top, n, sizes);
		calls += n;
		top += in_top;
	}
	cr_expect_geq(whole / 64.0, 0.95 * calls, "%u calls of 64 tasks out of %g", whole / 64,
		      calls);
	cr_expect_geq(top, whole / 64.0);
	free(out);
	free(s);
}
