/* SPDX-License-Identifier: MIT */
/*
 * A host that never stalls and clocks that are honest: a slow generator does not hold
 * back timeouts, a setup that never returns is bounded by setup_timeout, a worker that
 * sits on tasks without starting them loses them to another, and stopping and
 * continuing the whole job times out nothing.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

/* Ten items a second from a pipe for 10 s; task 3 hangs and must time out about 1 s
 * after it starts (its line reaches out.jsonl within the sink's 1 s flush after), while
 * the generator still yields, not after it is done. (Not a bound on the time from
 * the start: a sanitizer on a loaded machine takes seconds to start.) */
Test(stalls, a_slow_generator_does_not_hold_back_timeouts, .timeout = 60)
{
	const char *dir = t_tmpdir();
	free(t_jobf(dir, "[job]\ngpus = 0,1\ntask_timeout = 1\n"
			 "[worker]\nplugin = faulty\nhang_on = 3\n"
			 "[generator]\nplugin = lines\npath = -\n"
			 "[sink]\nplugin = jsonl\npath = out.jsonl\n"));
	t_sh(dir, "(for i in $(seq 0 99); do echo $i; sleep 0.1; done; touch yielded) |"
		  " \"$GPUD\" run job.ini --ui plain 2>err &\n"
		  "w 'grep -q \"\\\"task_id\\\": 3,\" out.jsonl 2>/dev/null'\n"
		  "[ -e yielded ] && echo after >when || echo before >when\n"
		  "wait\n");
	char *when = t_read_in(dir, "when");
	cr_expect_str_eq(when, "before\n", "task 3's timeout came after the generator's end");
	free(when);
	char *out = t_read_in(dir, "out.jsonl");
	cr_expect(strstr(out, "\"task_id\": 3, \"status\": \"timeout\""), "%s", out);
	cr_expect_eq(t_count_lines(out, "{\"task_id\""), 100);
	free(out);
}

Test(stalls, setup_timeout_bounds_a_setup_that_never_returns, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *job = t_jobf(dir,
			   "[job]\ngpus = 0,1\nsetup_timeout = 1\n"
			   "[worker]\nplugin = faulty\nsetup_hang_gpu = 0\nsleep_us = 200000\n"
			   "[generator]\nplugin = range\nstop = 20\n"
			   "[sink]\nplugin = jsonl\npath = %s/out.jsonl\n",
			   dir);
	cr_expect_eq(t_gpud(dir, "run '%s' --ui plain", job), 0);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "setup did not finish within 1 s (setup_timeout)"), "%s", err);
	char *out = t_read_in(dir, "out.jsonl");
	cr_expect_eq(t_count_lines(out, "{\"task_id\""), 20, "the other GPU ran every task");
	free(out);
	free(err);
	free(job);
}

/* Worker 0 is stopped while idle, then tasks arrive: whatever it is given comes back
 * after the bound and runs on worker 1. Idle: set up (the tagger writes its pid at the
 * end of setup) and asleep on a futex, waiting for tasks; the tasks come through a
 * FIFO only then (not at fixed times: a slow machine's worker was not up after 1 s). */
Test(stalls, an_idle_worker_stopped_loses_its_tasks_to_another, .timeout = 60)
{
	const char *dir = t_tmpdir();
	free(t_jobf(dir,
		    "[job]\ngpus = 0,1\n"
		    "[worker]\nplugin = tagger\nsleep_us = 20000\npid_file = %s/pids\n"
		    "[generator]\nplugin = lines\npath = -\n"
		    "[sink]\nplugin = jsonl\npath = out.jsonl\n",
		    dir));
	t_sh(dir,
	     "mkfifo in\n"
	     "\"$GPUD\" run job.ini --ui plain 2>err <in & pid=$!\n"
	     "exec 3>in\n"
	     "w '[ -n \"$(pgrep -f \"gpud-worker --run 0 $pid\\$\")\" ]' || echo no worker 0 >>err\n"
	     "w0=$(pgrep -f \"gpud-worker --run 0 $pid\\$\")\n"
	     "w 'grep -qx \"$w0\" pids 2>/dev/null && grep -q futex /proc/$w0/wchan' ||\n"
	     "  echo worker 0 never idle >>err\n"
	     "kill -STOP $w0\n"
	     "seq 0 39 >&3; exec 3>&-\n"
	     "wait $pid\n"
	     "echo $? >rc\n"
	     "kill -KILL $w0 2>/dev/null; true\n");
	char *err = t_read_in(dir, "err"), *out = t_read_in(dir, "out.jsonl");
	cr_expect(strstr(err, "without starting one; giving them to another worker"), "%s", err);
	cr_expect_eq(t_count_lines(out, "{\"task_id\""), 40, "%s", out);
	cr_expect_eq(t_count_lines(out, "{\"task_id\": 0, \"status\": \"ok\""), 1);
	cr_expect_null(strstr(out, "error"), "%s", out);
	free(err);
	free(out);
}

/* Every process of the job stopped for 2.5 s while tasks run, then continued. */
Test(stalls, stopping_and_continuing_the_job_times_out_nothing, .timeout = 60)
{
	const char *dir = t_tmpdir();
	free(t_jobf(dir, "[job]\ngpus = 0,1\ntask_timeout = 1\n"
			 "[worker]\nplugin = faulty\nsleep_us = 400000\n"
			 "[generator]\nplugin = range\nstop = 8\n"
			 "[sink]\nplugin = jsonl\npath = out.jsonl\n"));
	t_sh(dir, "\"$GPUD\" run job.ini --ui plain 2>err & pid=$!\n"
		  "w '[ -s out.jsonl ]'\n"
		  "kids=$(pgrep -P $pid); kill -STOP $pid $kids; sleep 2.5; kill -CONT $kids $pid\n"
		  "wait $pid; echo $? >rc\n");
	char *out = t_read_in(dir, "out.jsonl");
	cr_expect_eq(t_read_long(dir, "rc"), 0, "%s", out);
	cr_expect_eq(t_count_lines(out, "{\"task_id\""), 8);
	cr_expect_null(strstr(out, "timeout"), "%s", out);
	free(out);
}

/* The generator yields five tasks, then its sixth call never returns (it sleeps
 * through signals, like a read that retries on EINTR). The five run while it blocks
 * (their outcomes come before the SIGTERM, the only thing that ends the block), the one
 * that hangs times out, its worker is replaced, and SIGTERM still ends the run with a
 * summary, the sink closed. The bounds only turn a run that never ends into a failure
 * that says so: nothing is left to run when SIGTERM comes. */
Test(stalls, a_blocked_generator_holds_back_nothing, .timeout = 60)
{
	const char *dir = t_tmpdir();
	free(t_jobf(dir, "[job]\ngpus = 0,1\ntask_timeout = 1\n"
			 "[worker]\nplugin = faulty\nhang_on = 2\n"
			 "[generator]\nplugin = failgen\nblock_after = 5\n"
			 "[sink]\nplugin = recorder\npath = rec\n"));
	t_sh(dir,
	     "start=$(date +%s%N)\n"
	     "\"$GPUD\" run job.ini --ui plain 2>err & pid=$!\n"
	     "w '[ \"$(grep -c \"^ok \\|^timeout \" rec 2>/dev/null)\" = 5 ]' && echo 1 >came || echo 0 >came\n"
	     "echo $(( ($(date +%s%N) - start) / 1000000 )) >ms\n"
	     "kill -TERM $pid\n"
	     "t=$(date +%s%N)\n"
	     "wait $pid; echo $? >rc\n"
	     "echo $(( ($(date +%s%N) - t) / 1000000 )) >term_ms\n");
	long ms = t_read_long(dir, "ms"), term_ms = t_read_long(dir, "term_ms");
	char *rec = t_read_in(dir, "rec"), *err = t_read_in(dir, "err");
	cr_expect_eq(t_read_long(dir, "came"), 1,
		     "the 5 outcomes did not come while the generator was blocked (%ld ms)", ms);
	cr_expect_eq(t_count_lines(rec, "ok "), 4, "%s", rec);
	cr_expect_eq(t_count_lines(rec, "timeout 2 "), 1, "%s", rec);
	cr_expect_lt(term_ms, 15000, "SIGTERM took %ld ms to end the run", term_ms);
	cr_expect_eq(t_read_long(dir, "rc"), 4, "%s", err);
	cr_expect_eq(t_count_lines(rec, "close 5 4 0 1 0 "), 1, "the sink was closed: %s", rec);
	cr_expect(strstr(err, "aborted: interrupted"), "%s", err);
	cr_expect(strstr(err, "generator's last call had not returned"), "%s", err);
	free(rec);
	free(err);
}

/* A generator call that takes a while (300 ms) and then goes on: the loop is handed
 * back, and every task runs once. */
Test(stalls, a_generator_call_that_returns_late_gives_the_loop_back, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *job = t_jobf(dir,
			   "[job]\ngpus = 0,1\n"
			   "[worker]\nplugin = faulty\n"
			   "[generator]\nplugin = failgen\nstop = 3000\nblock_after = 1000\n"
			   "block_ms = 300\n"
			   "[sink]\nplugin = recorder\npath = %s/rec\n",
			   dir);
	cr_expect_eq(t_gpud(dir, "run '%s' --ui plain", job), 0);
	char *rec = t_read_in(dir, "rec"), *err = t_read_in(dir, "err");
	cr_expect_eq(t_count_lines(rec, "ok "), 3000, "%s", err);
	cr_expect_eq(t_count_lines(rec, "close 3000 3000 0 0 0 "), 1, "%s", err);
	cr_expect_null(strstr(err, "not returned"), "%s", err);
	free(rec);
	free(err);
	free(job);
}

/* SIGHUP (the terminal went away) ends the run like SIGTERM: the running tasks finish,
 * the sink is closed, the summary adds up, exit status 3. */
Test(stalls, sighup_ends_the_run_like_sigterm, .timeout = 60)
{
	const char *dir = t_tmpdir();
	free(t_jobf(dir, "[job]\ngpus = 0,1\n"
			 "[worker]\nplugin = faulty\nsleep_us = 20000\n"
			 "[generator]\nplugin = range\nstop = 100000\n"
			 "[sink]\nplugin = recorder\npath = rec\n"));
	t_sh(dir, "\"$GPUD\" run job.ini --ui plain 2>err & pid=$!\n"
		  "w 'grep -q \"^ok \" rec 2>/dev/null'\n"
		  "kill -HUP $pid\n"
		  "wait $pid; echo $? >rc\n");
	char *rec = t_read_in(dir, "rec"), *err = t_read_in(dir, "err");
	cr_expect_eq(t_read_long(dir, "rc"), 4, "%s", err);
	cr_expect(strstr(err, "aborted: interrupted"), "%s", err);
	const char *close = strstr(rec, "close ");
	cr_assert(close, "the sink was closed: %s", rec);
	unsigned long long gen, ok, failed, timed_out, not_run;
	cr_assert_eq(sscanf(close, "close %llu %llu %llu %llu %llu", &gen, &ok, &failed, &timed_out,
			    &not_run),
		     5);
	cr_expect_eq(gen, ok + failed + timed_out + not_run, "%s", close);
	cr_expect_gt(ok, 0);
	cr_expect_lt(gen, 100000, "the run stopped early: %s", close);
	cr_expect_eq((unsigned long long)t_count_lines(rec, "ok "), ok);
	free(rec);
	free(err);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Tasks yielded by calls just before a call that blocks reach the idle workers at once,
 * not when the loop's stand-in next looks: items 5-9 and 10-14 are yielded in
 * succession, each run followed by a 1 s block. The delay from yield to process() is
 * measured on CLOCK_MONOTONIC, which both processes share. The stand-in's look is
 * lengthened to 1 s (GPUD_STANDIN_POLL_MS), so a task left to it would wait 1 s or
 * more: told apart from one handed over at once (a fraction of a millisecond) by a
 * bound of half that, which no loaded machine under a sanitizer comes near for one
 * wake-up. Each call takes 50 us (call_us), more than the 2 us below which the loop
 * hands a ring's tasks over before a call only while its worker sleeps (dispatcher.c,
 * generate()): that worker may still spin after its last task on a loaded machine,
 * and its tasks wait for the stand-in; a bound there would time the machine. */
Test(stalls, tasks_yielded_before_a_blocking_call_reach_idle_workers_at_once, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *job = t_jobf(dir,
			   "[job]\ngpus = 0,1\n"
			   "[worker]\nplugin = probe\nclock = 1\n"
			   "[generator]\nplugin = failgen\nstop = 15\nstamp = 1\n"
			   "block_every = 5\nblock_ms = 1000\ncall_us = 50\n"
			   "[sink]\nplugin = jsonl\npath = %s/out.jsonl\n",
			   dir);
	setenv("GPUD_STANDIN_POLL_MS", "1000", 1); /* this test's own process (Criterion's) */
	cr_assert_eq(t_gpud(dir, "run '%s' --ui plain", job), 0, "%s", t_read_in(dir, "err"));
	char *out = t_read_in(dir, "out.jsonl");
	double delay_ms[10];
	unsigned n = 0;
	for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
		unsigned long id;
		long long yielded, started;
		const char *in = strstr(l, " in="), *mono = strstr(l, " mono=");
		cr_assert(in && mono && sscanf(l, "{\"task_id\": %lu", &id) == 1, "%s", l);
		cr_assert(sscanf(in, " in=%lld", &yielded) == 1 &&
			  sscanf(mono, " mono=%lld", &started) == 1);
		if (id >= 5) /* 0-4 were yielded before any worker was ready */
			delay_ms[n++] = (double)(started - yielded) / 1e6;
	}
	cr_assert_eq(n, 10u, "%s", out);
	qsort(delay_ms, n, sizeof delay_ms[0], cmp_double);
	cr_log_info("delays %.3f %.3f %.3f ms (least, median, most)", delay_ms[0], delay_ms[n / 2],
		    delay_ms[n - 1]);
	cr_expect_lt(delay_ms[n - 1], 500.0, "a task started %.2f ms after it was yielded",
		     delay_ms[n - 1]);
	free(out);
	free(job);
}

/* Checks that `out` (jsonl) holds exactly tasks 0..n-1, each once, each ok, each with
 * its own input as its result (the worker echoes it; failgen's item i is "i" and, with
 * `pad`, i % pad copies of 'x' after it), byte for byte. Returns the wrong ones. */
static unsigned echo_mismatches(char *out, unsigned n, unsigned pad)
{
	unsigned char *seen = calloc(n, 1);
	unsigned bad = 0, lines = 0;
	char want[64 + 256];
	for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n"), lines++) {
		unsigned long id;
		const char *res = strstr(l, "\"result\": \"");
		if (sscanf(l, "{\"task_id\": %lu,", &id) != 1 || id >= n || seen[id]++ ||
		    !strstr(l, "\"status\": \"ok\"") || !res) {
			cr_log_error("wrong line: %s", l);
			bad++;
			continue;
		}
		int len = snprintf(want, sizeof want, "%lu", id);
		for (unsigned k = 0; pad && k < id % pad; k++)
			want[len++] = 'x';
		want[len++] = '"';
		want[len] = '\0';
		if (strncmp(res + 11, want, (size_t)len) != 0) {
			cr_log_error("task %lu got another result: %s", id, l);
			bad++;
		}
	}
	for (unsigned i = 0; i < n; i++)
		if (!seen[i])
			bad++;
	free(seen);
	return bad + (lines != n);
}

/* Retries beside a slow generator: every generator call takes 1-5 ms, so the loop's
 * stand-in takes the loop over during most of them, and places the tasks to run again
 * (odd inputs fail their first attempt) while the loop's thread is writing the next
 * item into a ring. Each result must be its own task's, byte for byte, in every run:
 * a retried task placed in the slot the stuck call fills came back `ok` with another
 * task's input. */
Test(stalls, retries_beside_a_slow_generator_return_their_own_results, .timeout = 240)
{
	static const struct {
		unsigned gpus, workers_per_gpu, block_ms, sleep_us, pad;
	} runs[] = {
		{2, 1, 5, 3000, 0},   {2, 1, 2, 1000, 0}, {2, 2, 1, 500, 37},
		{3, 1, 3, 2000, 200}, {2, 1, 5, 100, 0},  {1, 2, 2, 3000, 11},
	};
	for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
		const char *dir = t_tmpdir();
		unsigned n = 150;
		char gpus[16];
		snprintf(gpus, sizeof gpus, "%s",
			 runs[r].gpus == 1   ? "0"
			 : runs[r].gpus == 2 ? "0,1"
					     : "0,1,2");
		char *job = t_jobf(dir,
				   "[job]\ngpus = %s\nworkers_per_gpu = %u\nmax_retries = 1\n"
				   "journal = off\n"
				   "[worker]\nplugin = faulty\nsleep_us = %u\nfail_every = 2\n"
				   "first_attempt_only = 1\n"
				   "[generator]\nplugin = failgen\nstop = %u\nblock_every = 1\n"
				   "block_ms = %u\npad = %u\n"
				   "[sink]\nplugin = jsonl\npath = %s/out.jsonl\n",
				   gpus, runs[r].workers_per_gpu, runs[r].sleep_us, n,
				   runs[r].block_ms, runs[r].pad, dir);
		int rc = t_gpud(dir, "run '%s' --ui plain", job);
		char *out = t_read_in(dir, "out.jsonl"), *err = t_read_in(dir, "err");
		cr_assert(out, "run %zu: no output: %s", r, err);
		cr_expect_eq(rc, 0, "run %zu: %s", r, err);
		cr_expect_eq(echo_mismatches(out, n, runs[r].pad), 0u, "run %zu: wrong results", r);
		cr_expect_null(strstr(err, "corrupted"), "run %zu: %s", r, err);
		free(out);
		free(err);
		free(job);
	}
}

/* SIGCONT beside SIGINT/SIGTERM, in every order (Slurm sends SIGCONT with SIGTERM at a
 * time limit and on scancel): the running tasks (2 s each) finish ok inside a 20 s
 * drain_timeout. The job-control credit once moved the drain's start past now, so the
 * drain "passed" at once and the running tasks were killed. */
Test(stalls, sigcont_beside_an_interrupt_keeps_the_drain, .timeout = 120)
{
	static const char *const orders[] = {
		"kill -INT $pid; kill -CONT $pid",
		"kill -TERM $pid; kill -CONT $pid",
		"kill -CONT $pid; kill -TERM $pid",
		"kill -TERM $pid; sleep 0.3; kill -CONT $pid; sleep 0.3; kill -CONT $pid",
		"kill -CONT $pid; kill -INT $pid; kill -CONT $pid",
	};
	for (size_t i = 0; i < sizeof orders / sizeof orders[0]; i++) {
		const char *dir = t_tmpdir();
		free(t_jobf(dir, "[job]\ngpus = 0,1\ndrain_timeout = 20\n"
				 "[worker]\nplugin = faulty\nsleep_us = 2000000\n"
				 "[generator]\nplugin = range\nstop = 100\n"
				 "[sink]\nplugin = recorder\npath = rec\n"));
		char script[600];
		snprintf(script, sizeof script,
			 "\"$GPUD\" run job.ini --ui plain 2>err & pid=$!\n"
			 "w '[ \"$(grep -c \"^start \" rec 2>/dev/null)\" = 2 ]'\n"
			 "%s\n"
			 "wait $pid; echo $? >rc\n",
			 orders[i]);
		t_sh(dir, script);
		char *rec = t_read_in(dir, "rec"), *err = t_read_in(dir, "err");
		cr_expect_eq(t_read_long(dir, "rc"), 4, "%s: %s", orders[i], err);
		cr_expect_null(strstr(err, "drain_timeout"), "%s: %s", orders[i], err);
		cr_expect_eq(t_count_lines(rec, "ok "), 2, "%s: the running tasks finished: %s",
			     orders[i], rec);
		free(rec);
		free(err);
	}
}

/* ...and no more than drain_timeout either: a task that never ends is stopped 1 s
 * after SIGTERM, whatever SIGCONTs come with it (one every 0.3 s, for 3 s). */
Test(stalls, sigcont_does_not_lengthen_the_drain, .timeout = 60)
{
	const char *dir = t_tmpdir();
	free(t_jobf(dir, "[job]\ngpus = 0,1\ndrain_timeout = 1\n"
			 "[worker]\nplugin = faulty\nhang_on = 0,1\n"
			 "[generator]\nplugin = range\nstop = 100\n"
			 "[sink]\nplugin = recorder\npath = rec\n"));
	t_sh(dir, "\"$GPUD\" run job.ini --ui plain 2>err & pid=$!\n"
		  "w '[ \"$(grep -c \"^start \" rec 2>/dev/null)\" = 2 ]'\n"
		  "s=$(date +%s%N); kill -TERM $pid\n"
		  "(for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.3; kill -CONT $pid 2>/dev/null;"
		  " done) & c=$!\n"
		  "w 'grep -q \"drain_timeout (1 s) passed\" err'\n"
		  "echo $(( ($(date +%s%N) - s) / 1000000 )) >ms\n"
		  "wait $pid; echo $? >rc; wait $c\n");
	long ms = t_read_long(dir, "ms");
	char *err = t_read_in(dir, "err");
	cr_expect_eq(t_read_long(dir, "rc"), 4, "%s", err);
	cr_expect(strstr(err, "drain_timeout (1 s) passed"), "%s", err);
	/* 1 s, and the 50 ms the wait looks every. Crediting each SIGCONT the time since
	 * the loop last looked (0.3 s here) pushed the end past every one of them: 4 s with
	 * SIGCONTs for 3 s. The bound leaves 1.8 s for a loaded machine under a sanitizer
	 * (a loop kept from its core 0.2 s or more is credited that as a stop). Timed to
	 * when the drain's end was said, not to the process's exit (which a sanitizer's
	 * leak check on a loaded machine lengthens). */
	cr_expect(ms >= 950 && ms < 2800, "the drain ended %ld ms after SIGTERM", ms);
	free(err);
}

/* Ctrl-Z during a drain (SIGTSTP, 1.5 s stopped, SIGCONT): the stop does not count
 * against drain_timeout (1.5 s), so the running tasks (1 s, 0.3 s of it before the
 * interrupt) still finish ok. */
Test(stalls, a_stop_during_a_drain_does_not_count_against_it, .timeout = 60)
{
	const char *dir = t_tmpdir();
	free(t_jobf(dir, "[job]\ngpus = 0,1\ndrain_timeout = 1.5\n"
			 "[worker]\nplugin = faulty\nsleep_us = 1000000\n"
			 "[generator]\nplugin = range\nstop = 100\n"
			 "[sink]\nplugin = recorder\npath = rec\n"));
	t_sh(dir,
	     "\"$GPUD\" run job.ini --ui plain 2>err & pid=$!\n"
	     "w '[ \"$(grep -c \"^start \" rec 2>/dev/null)\" = 2 ]'\n"
	     "sleep 0.3; kill -TERM $pid; sleep 0.2; kill -TSTP $pid; sleep 1.5; kill -CONT $pid\n"
	     "wait $pid; echo $? >rc\n");
	char *rec = t_read_in(dir, "rec"), *err = t_read_in(dir, "err");
	cr_expect_eq(t_read_long(dir, "rc"), 4, "%s", err);
	cr_expect_null(strstr(err, "drain_timeout"), "%s", err);
	cr_expect_eq(t_count_lines(rec, "ok "), 2, "the running tasks finished: %s", rec);
	free(rec);
	free(err);
}

/* A stop during a drain with tasks longer than the drain, by Ctrl-Z and from outside
 * (SIGSTOP to the host): the drain ends drain_timeout plus the stop after SIGTERM, not
 * when the job is continued (the loop looked at its clocks before the SIGCONT handler,
 * on another thread, had said the job was continued). */
Test(stalls, a_drain_ends_on_time_after_a_stop, .timeout = 90)
{
	static const char *const stops[] = {"kill -TSTP $pid", "kill -STOP $pid"};
	for (size_t i = 0; i < 2; i++) {
		const char *dir = t_tmpdir();
		free(t_jobf(dir, "[job]\ngpus = 0,1\njournal = off\ndrain_timeout = 1.5\n"
				 "[worker]\nplugin = faulty\nsleep_us = 6000000\n"
				 "[generator]\nplugin = range\nstop = 10\n"
				 "[sink]\nplugin = recorder\npath = rec\n"));
		char script[700];
		snprintf(
			script, sizeof script,
			"\"$GPUD\" run job.ini --ui plain 2>err & pid=$!\n"
			"w '[ \"$(grep -c \"^start \" rec 2>/dev/null)\" = 2 ]'\n"
			"s=$(date +%%s%%N); kill -TERM $pid; sleep 0.3; %s; sleep 1.5; kill -CONT $pid\n"
			"w 'grep -q \"drain_timeout (1.5 s) passed\" err'\n"
			"echo $(( ($(date +%%s%%N) - s) / 1000000 )) >ms\n"
			"wait $pid; echo $? >rc\n",
			stops[i]);
		t_sh(dir, script);
		long ms = t_read_long(dir, "ms");
		char *err = t_read_in(dir, "err");
		cr_expect_eq(t_read_long(dir, "rc"), 3, "%s: %s", stops[i], err);
		/* 1.5 s of drain and 1.5 s stopped; the end at SIGCONT was 1.8 s. Timed to when
		 * the drain's end was said, not to the process's exit. */
		cr_expect(ms >= 2800 && ms < 4500, "%s: the drain ended %ld ms after SIGTERM",
			  stops[i], ms);
		free(err);
	}
}

/* timeout(1) sends its SIGTERM to gpud and then to its process group: two interrupts a
 * moment apart are one, so the running tasks still get their drain (they were killed
 * at once, as by a second Ctrl-C). */
Test(stalls, one_sigterm_sent_twice_still_drains, .timeout = 60)
{
	const char *dir = t_tmpdir();
	free(t_jobf(dir, "[job]\ngpus = 0,1\ndrain_timeout = 10\n"
			 "[worker]\nplugin = faulty\nsleep_us = 2000000\n"
			 "[generator]\nplugin = range\nstop = 100\n"
			 "[sink]\nplugin = recorder\npath = rec\n"));
	/* As timeout does: the same signal twice, 10 ms apart (sent at the same moment, the
	 * two often merge into one pending signal; these never do). */
	t_sh(dir, "\"$GPUD\" run job.ini --ui plain 2>err & pid=$!\n"
		  "w '[ \"$(grep -c \"^start \" rec 2>/dev/null)\" = 2 ]'\n"
		  "kill -TERM $pid; sleep 0.01; kill -TERM $pid\n"
		  "wait $pid; echo $? >rc\n");
	char *rec = t_read_in(dir, "rec"), *err = t_read_in(dir, "err");
	cr_expect_eq(t_read_long(dir, "rc"), 4, "%s", err);
	cr_expect_eq(t_count_lines(rec, "ok "), 2, "the running tasks finished:\n%s\n%s", rec, err);
	free(rec);
	free(err);
}
