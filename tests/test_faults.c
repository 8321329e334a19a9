/* SPDX-License-Identifier: MIT */
/* Faults: crashing, hanging, failing and exiting workers, failed setups and cleanups,
 * failing generators and sinks. Each task must end in exactly one outcome and the
 * stats must add up. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "helpers.h"

struct outcome {
	unsigned long generated, ok, failed, timed_out, not_run, retried, restarts, setup_fail;
	char *events;
};

/* Reads the recorder's events from dir/events into o, with the stats of its close line
 * (which must be there: the sink is closed on every run). */
static void read_close(const char *dir, struct outcome *o)
{
	o->events = t_read_in(dir, "events");
	cr_assert(o->events, "no events file");
	const char *close = strstr(o->events, "close ");
	cr_assert(close, "the sink was not closed:\n%s", o->events);
	cr_assert_eq(sscanf(close, "close %lu %lu %lu %lu %lu %lu %lu %lu", &o->generated, &o->ok,
			    &o->failed, &o->timed_out, &o->not_run, &o->retried, &o->restarts,
			    &o->setup_fail),
		     8);
}

/* Runs a job with the faulty worker and the recorder sink; returns gpud's exit status.
 * A test that counts events of every worker gives its tasks some duration (sleep_us):
 * a worker still in setup when the last task ends is cancelled, not waited for. */
static int run_plugin(const char *dir, const char *plugin, const char *worker_keys,
		      const char *job_keys, unsigned long stop, struct outcome *o)
{
	char *path = t_jobf(dir,
			    "[job]\n%s\nqueue_size = 32\n%s\n%s\n"
			    "[worker]\nplugin = %s\n%s\n"
			    "[generator]\nplugin = range\nstop = %lu\n"
			    "[sink]\nplugin = recorder\npath = %s/events\n",
			    strstr(job_keys, "gpus") ? "" : "gpus = 0,1",
			    strstr(job_keys, "workers_per_gpu") ? "" : "workers_per_gpu = 2",
			    job_keys, plugin, worker_keys, stop, dir);
	int rc = t_gpud(dir, "run '%s'", path);
	read_close(dir, o);
	cr_expect_eq(t_count_lines(o->events, "close "), 1, "closed once");
	free(path);
	return rc;
}

static int run_faulty(const char *dir, const char *worker_keys, const char *job_keys,
		      unsigned long stop, struct outcome *o)
{
	return run_plugin(dir, "faulty", worker_keys, job_keys, stop, o);
}

/* Every task 0..n-1 has exactly one outcome line, and the stats agree with them. */
static void exactly_once(const struct outcome *o, unsigned long n)
{
	unsigned char *seen = calloc(n, 1);
	unsigned long ok = 0, failed = 0, timed_out = 0;
	char *copy = strdup(o->events);
	for (char *l = strtok(copy, "\n"); l; l = strtok(NULL, "\n")) {
		unsigned long id;
		char kind[16];
		if (sscanf(l, "%15s %lu", kind, &id) != 2)
			continue;
		if (strcmp(kind, "ok") && strcmp(kind, "error") && strcmp(kind, "timeout"))
			continue;
		cr_assert_lt(id, n, "%s", l);
		cr_assert_eq(seen[id]++, 0, "task %lu has two outcomes", id);
		ok += kind[0] == 'o';
		failed += kind[0] == 'e';
		timed_out += kind[0] == 't';
	}
	cr_expect_eq(o->generated, n);
	cr_expect_eq(o->ok, ok);
	cr_expect_eq(o->failed, failed);
	cr_expect_eq(o->timed_out, timed_out);
	cr_expect_eq(o->ok + o->failed + o->timed_out + o->not_run, o->generated, "stats add up");
	for (unsigned long i = 0; i < n && o->not_run == 0; i++)
		cr_assert_eq(seen[i], 1, "task %lu has no outcome", i);
	free(seen);
	free(copy);
}

Test(faults, plugin_failures_are_errors, .timeout = 60)
{
	struct outcome o;
	const char *dir = t_tmpdir();
	cr_expect_eq(run_faulty(dir, "fail_on = 3,400,999", "", 1000, &o), 1);
	exactly_once(&o, 1000);
	cr_expect_eq(o.failed, 3);
	cr_expect(strstr(o.events, "error 400 "), "%s", o.events);
	cr_expect(strstr(o.events, "faulty: refused input 400"));
	cr_expect_eq(o.restarts, 0, "a failed task is not a crash");
}

Test(faults, segfault_abort_and_exit_are_reported_and_workers_replaced, .timeout = 60)
{
	struct outcome o;
	const char *dir = t_tmpdir();
	cr_expect_eq(
		run_faulty(dir, "crash_on = 100\nabort_on = 700\nexit_on = 1500", "", 2000, &o), 1);
	exactly_once(&o, 2000);
	cr_expect_eq(o.failed, 3, "%s", o.events);
	cr_expect_eq(o.ok, 1997);
	cr_expect_eq(o.restarts, 3);
	cr_expect(strstr(o.events, "killed by SIGSEGV while running task 100"), "%s", o.events);
	cr_expect(strstr(o.events, "killed by SIGABRT while running task 700"));
	cr_expect(strstr(o.events, "exited with status 7 while running task 1500"));
}

/* (ABI 1.5) A plugin that exports gpud_worker_interrupt ends a call past task_timeout
 * itself: its task times out and the worker goes on, no restart, three times in one slot
 * (more than max_worker_restarts allows). A call that ignores the interrupt is killed
 * timeout_grace later and replaced, as without it; a plugin without it is killed at
 * task_timeout (host_enforced_timeout). */
Test(faults, an_interrupted_call_keeps_its_worker, .timeout = 60)
{
	struct outcome o;
	const char *dir = t_tmpdir();
	cr_expect_eq(run_plugin(dir, "interruptible", "hang_on = 3,7,11,15",
				"gpus = 0\nworkers_per_gpu = 1\ntask_timeout = 0.2\n"
				"max_worker_restarts = 2",
				20, &o),
		     1);
	exactly_once(&o, 20);
	cr_expect_eq(o.timed_out, 4, "%s", o.events);
	cr_expect_eq(o.ok, 16);
	cr_expect_eq(o.restarts, 0, "the worker was never replaced");
	const char *tl = strstr(o.events, "timeout 7 ");
	double limit;
	int wk;
	cr_assert(tl, "%s", o.events);
	cr_assert_eq(sscanf(tl, "timeout 7 %d %lf", &wk, &limit), 2);
	cr_expect_float_eq(limit, 0.2, 1e-9, "the event carries the limit");
	free(o.events);

	cr_expect_eq(run_plugin(dir, "interruptible", "stuck_on = 5",
				"gpus = 0\nworkers_per_gpu = 1\ntask_timeout = 0.2\n"
				"timeout_grace = 0.3",
				10, &o),
		     1);
	exactly_once(&o, 10);
	cr_expect_eq(o.timed_out, 1, "%s", o.events);
	cr_expect_eq(o.restarts, 1, "killed after the grace, replaced");
	free(o.events);
}

/* A task that never returns, in a plugin that cannot be interrupted: the host kills its
 * worker at task_timeout, the task times out (once, with the limit) and a fresh worker
 * takes the slot. The host looks every TIMEOUT_POLL_NS (20 ms): the timeout comes near
 * the limit, but a loaded machine (a sanitizer, other processes on the cores) may let
 * gpud wait for a core. So the bound is 25 times the limit: what it catches is a
 * timeout that waits for something else (the run's end, drain_timeout, a worker's
 * heartbeat), not a slow machine; a timeout that never comes is the test's timeout. */
Test(faults, host_enforced_timeout, .timeout = 60)
{
	struct outcome o;
	const char *dir = t_tmpdir();
	const double limit_s = 0.2;
	char job[64];
	snprintf(job, sizeof job, "task_timeout = %g", limit_s);
	cr_expect_eq(run_faulty(dir, "hang_on = 50", job, 400, &o), 1);
	exactly_once(&o, 400);
	cr_expect_eq(o.timed_out, 1);
	const char *tl = strstr(o.events, "timeout 50 ");
	cr_assert(tl, "%s", o.events);
	/* From the start event (which the host reports no earlier than the task began) to
	 * the timeout event: in that order. */
	const char *sl = strstr(o.events, "start 50 ");
	cr_assert(sl && sl < tl, "%s", o.events);
	double t_start, t_out, limit;
	int w1, w2, attempt;
	cr_assert_eq(sscanf(sl, "start 50 %d %d %lf", &w1, &attempt, &t_start), 3);
	cr_assert_eq(sscanf(tl, "timeout 50 %d %lf %lf", &w2, &limit, &t_out), 3);
	cr_expect_eq(w1, w2, "the worker that ran it timed it out");
	cr_expect_float_eq(limit, limit_s, 1e-9, "the event carries the limit");
	cr_log_info("the timeout came %.3f s after the start (limit %g s)", t_out - t_start,
		    limit_s);
	cr_expect_lt(t_out - t_start, 25 * limit_s, "the timeout came %.3f s after the start",
		     t_out - t_start);
	cr_expect_eq(o.restarts, 1, "a fresh worker took the slot");
	free(o.events);
}

Test(faults, retries_rerun_crashed_tasks, .timeout = 60)
{
	struct outcome o;
	const char *dir = t_tmpdir();
	cr_expect_eq(run_faulty(dir, "crash_on = 10,20\nfail_on = 30\nfirst_attempt_only = 1",
				"max_retries = 1", 300, &o),
		     0);
	exactly_once(&o, 300);
	cr_expect_eq(o.ok, 300);
	cr_expect_eq(o.retried, 3);
}

Test(faults, poison_task_does_not_take_the_run_down, .timeout = 60)
{
	struct outcome o;
	const char *dir = t_tmpdir();
	cr_expect_eq(run_faulty(dir, "crash_on = 5", "max_retries = 2", 200, &o), 1);
	exactly_once(&o, 200);
	cr_expect_eq(o.failed, 1);
	cr_expect_eq(o.retried, 2);
	cr_expect_eq(o.restarts, 3);
}

Test(faults, setup_failure_on_one_gpu, .timeout = 60)
{
	struct outcome o;
	const char *dir = t_tmpdir();
	cr_expect_eq(run_faulty(dir, "setup_fail_gpu = 1\nsleep_us = 2000", "", 500, &o), 0);
	exactly_once(&o, 500);
	cr_expect_eq(o.ok, 500, "the other GPU ran everything");
	cr_expect_eq(o.setup_fail, 2);
	cr_expect_eq(t_count_lines(o.events, "setup_failed "), 2);
	cr_expect(strstr(o.events, "setup_failed 2 1 faulty: no model for GPU 1"), "%s", o.events);
}

Test(faults, setup_crash_is_a_setup_failure, .timeout = 60)
{
	struct outcome o;
	const char *dir = t_tmpdir();
	/* Tasks long enough that the run does not end before GPU 0's setups crash. */
	cr_expect_eq(run_faulty(dir, "setup_crash_gpu = 0\nsleep_us = 5000", "", 100, &o), 0);
	exactly_once(&o, 100);
	cr_expect_eq(o.setup_fail, 2);
	cr_expect(strstr(o.events, "killed by SIGSEGV during setup"), "%s", o.events);
}

Test(faults, every_setup_failing_ends_the_run, .timeout = 30)
{
	struct outcome o;
	const char *dir = t_tmpdir();
	cr_expect_eq(run_faulty(dir, "setup_fail_gpu = 0\nsetup_crash_gpu = 1", "", 100, &o), 3);
	cr_expect_eq(o.setup_fail, 4);
	/* Each start of a worker has its first task written while it sets up (tasks to
	 * run again wait for a worker that is set up): one a start at most, and not run. */
	cr_expect_leq(o.generated, o.setup_fail, "the generator was not drained");
	cr_expect_eq(o.not_run, o.generated, "the tasks written while setting up: not run");
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "no worker could be set up"), "%s", err);
	cr_expect(strstr(err, "worker 0 (GPU 0) setup failed: faulty: no model for GPU 0"), "%s",
		  err);
	free(err);
}

Test(faults, cleanup_failure_is_reported, .timeout = 30)
{
	struct outcome o;
	const char *dir = t_tmpdir();
	cr_expect_eq(run_faulty(dir, "cleanup_fail = 1\nsleep_us = 5000", "", 100, &o), 0);
	exactly_once(&o, 100);
	cr_expect_eq(t_count_lines(o.events, "cleanup_failed "), 4);
	cr_expect(strstr(o.events, "faulty: cleanup refused"));
}

Test(faults, generator_failure_mid_stream, .timeout = 30)
{
	const char *dir = t_tmpdir();
	char *path = t_write(dir, "job.ini",
			     "[job]\ngpus = 0,1\n[worker]\nplugin = echo\n"
			     "[generator]\nplugin = failgen\nfail_after = 250\nstop = 1000\n"
			     "[sink]\nplugin = jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s'", path), 3);
	char *out = t_read_in(dir, "out");
	cr_expect_eq(t_count_lines(out, "{"), 250, "the tasks already generated finished");
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "the generator failed after 250 tasks: failgen: the input went away"),
		  "%s", err);
	free(out);
	free(err);
}

Test(faults, oversized_generator_items, .timeout = 30)
{
	const char *dir = t_tmpdir();
	char *path = t_write(dir, "job.ini",
			     "[job]\ngpus = 0\nmax_task_bytes = 1K\n[worker]\nplugin = echo\n"
			     "[generator]\nplugin = failgen\nhuge_every = 10\nstop = 100\n"
			     "[sink]\nplugin = jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s'", path), 1);
	char *out = t_read_in(dir, "out");
	cr_expect_eq(t_count_lines(out, "{"), 100);
	cr_expect(strstr(out, "task input of 1124 bytes exceeds max_task_bytes (1024)"), "%s", out);
	free(out);
}

/* (ABI 1.7) A generator fails one task and goes on: that task fails with its message,
 * journaled (resume does not ask for it again), the others run. */
Test(faults, a_generator_fails_one_task_and_goes_on, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *path = t_write(dir, "job.ini",
			     "[job]\ngpus = 0\n[worker]\nplugin = echo\n"
			     "[generator]\nplugin = failgen\ntask_fail_every = 10\nstop = 100\n"
			     "[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s' --ui off", path), 1);
	char *out = t_read_in(dir, "out.jsonl");
	cr_expect_eq(t_count_lines(out, "{"), 100);
	size_t errors = 0;
	for (const char *p = out; (p = strstr(p, "\"status\": \"error\"")); p++)
		errors++;
	cr_expect_eq(errors, 10, "%s", out);
	cr_expect(strstr(out, "\"task_id\": 19, \"status\": \"error\", \"worker_id\": -1"), "%s",
		  out);
	cr_expect(strstr(out, "failgen: item 19 cannot be made"), "%s", out);
	cr_expect(strstr(out, "\"task_id\": 18, \"status\": \"ok\""), "%s", out);
	free(out);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "100 tasks: 90 ok, 10 failed"), "%s", err);
	free(err);
	/* Exit 1: the job's failures stand; none of its tasks runs again. */
	cr_expect_eq(t_gpud(dir, "run '%s' --ui off --resume", path), 1);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "0 tasks: 0 ok, 0 failed"), "%s", err);
	cr_expect(strstr(err, "resumed: 100 tasks were already done"), "%s", err);
	free(err);
}

Test(faults, sink_failure_aborts_and_counts_lost_results, .timeout = 30)
{
	struct outcome o;
	const char *dir = t_tmpdir();
	char *path = t_jobf(dir,
			    "[job]\ngpus = 0\n[worker]\nplugin = echo\n"
			    "[generator]\nplugin = range\nstop = 100000\n"
			    "[sink]\nplugin = recorder\npath = %s/events\nfail_after = 100\n",
			    dir);
	cr_expect_eq(t_gpud(dir, "run '%s'", path), 3);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "the sink failed: recorder: refusing after 100"), "%s", err);
	cr_expect(strstr(err, "results could not be written"), "%s", err);
	read_close(dir, &o); /* closed even so */
	free(o.events);
	free(err);
}

Test(faults, full_disk_sink, .timeout = 30)
{
	const char *dir = t_tmpdir();
	char *path = t_write(dir, "job.ini",
			     "[job]\ngpus = 0\n[worker]\nplugin = echo\n"
			     "[generator]\nplugin = range\nstop = 200000\n"
			     "[sink]\nplugin = jsonl\npath = /dev/full\n");
	cr_expect_eq(t_gpud(dir, "run '%s'", path), 3);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "No space left on device"), "%s", err);
	free(err);
}

/* kill -9 from outside, mid-run: the victim's task is an error, nothing is lost. A
 * worker caught between two tasks had nothing running: then nothing is blamed and
 * every task ends ok. Either way one restart, and every task exactly once. */
Test(faults, kill_9_from_outside, .timeout = 60)
{
	struct outcome o;
	const char *dir = t_tmpdir();
	char *path = t_jobf(dir,
			    "[job]\ngpus = 0,1\n[worker]\nplugin = faulty\nsleep_us = 20000\n"
			    "[generator]\nplugin = range\nstop = 150\n"
			    "[sink]\nplugin = recorder\npath = %s/events\n",
			    dir);
	char *cmd;
	cr_assert(asprintf(&cmd,
			   WAIT_FOR "GPUD_PLUGIN_PATH='%s' '%s' run '%s' 2>'%s/err' & gp=$!; "
				    "w \"grep -q '^ok 20 ' '%s/events'\"; "
				    "pkill -9 -P $gp -f gpud-worker -n; wait $gp",
			   t_env("FIXTURES"), t_env("GPUD"), path, dir, dir) > 0);
	int st = system(cmd);
	read_close(dir, &o);
	exactly_once(&o, 150);
	cr_expect_eq(o.restarts, 1, "a fresh worker replaced the killed one");
	cr_expect_leq(o.failed, 1);
	if (o.failed) {
		cr_expect(strstr(o.events, "killed by SIGKILL while running task"), "%s", o.events);
		cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 1, "exit %d", WEXITSTATUS(st));
	} else {
		cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit %d", WEXITSTATUS(st));
	}
	free(o.events);
	free(cmd);
}

/* SIGINT: stop feeding, finish what runs, close the sink, exit 3, stats add up. */
Test(faults, interrupt_finishes_running_tasks, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *path = t_jobf(dir,
			    "[job]\ngpus = 0,1\n[worker]\nplugin = faulty\nsleep_us = 1000\n"
			    "[generator]\nplugin = range\nstop = 100000\n"
			    "[sink]\nplugin = recorder\npath = %s/events\n",
			    dir);
	char *cmd;
	cr_assert(asprintf(&cmd,
			   WAIT_FOR "GPUD_PLUGIN_PATH='%s' '%s' run '%s' 2>'%s/err' & gp=$!; "
				    "w \"grep -q '^ok ' '%s/events'\"; kill -INT $gp; wait $gp",
			   t_env("FIXTURES"), t_env("GPUD"), path, dir, dir) > 0);
	int st = system(cmd);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 4, "exit %d (interrupted, resumable)",
		  WEXITSTATUS(st));
	struct outcome o;
	read_close(dir, &o);
	cr_expect_eq(o.generated, o.ok + o.failed + o.timed_out + o.not_run, "stats add up");
	cr_expect_lt(o.generated, 100000, "it stopped feeding");
	cr_expect_eq(t_count_lines(o.events, "ok "), o.ok);
	free(o.events);
	free(cmd);
}

/* SIGTERM (a batch system's first signal): the running tasks get drain_timeout, then
 * are stopped, and the run still closes its sink and says what did not run. */
Test(faults, sigterm_drain_is_bounded_by_drain_timeout, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *path = t_jobf(dir,
			    "[job]\ngpus = 0,1\ndrain_timeout = 1\n"
			    "[worker]\nplugin = faulty\nhang_on = 5\nsleep_us = 50000\n"
			    "[generator]\nplugin = range\nstop = 1000\n"
			    "[sink]\nplugin = recorder\npath = %s/events\n",
			    dir);
	char *cmd;
	cr_assert(
		asprintf(
			&cmd,
			WAIT_FOR
			"GPUD_PLUGIN_PATH='%s' '%s' run '%s' --ui plain 2>'%s/err' & gp=$!; "
			"w \"grep -q '^start 5 ' '%s/events'\"; s=$(date +%%s%%N); kill -TERM $gp; "
			"wait $gp; rc=$?; echo $(( ($(date +%%s%%N) - s) / 1000000 )) > '%s/ms'; "
			"exit $rc",
			t_env("FIXTURES"), t_env("GPUD"), path, dir, dir, dir) > 0);
	int st = system(cmd);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 4, "exit %d (interrupted, resumable)",
		  WEXITSTATUS(st));
	long ms = t_read_long(dir, "ms");
	/* Generous for a loaded machine; without the bound it would wait forever. */
	cr_expect(ms >= 900 && ms < 10000, "ended %ld ms after SIGTERM", ms);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "drain_timeout (1 s) passed: stopping the running tasks"), "%s", err);
	free(err);
	struct outcome o;
	read_close(dir, &o);
	cr_expect_eq(o.generated, o.ok + o.failed + o.timed_out + o.not_run, "stats add up");
	cr_expect_geq(o.not_run, 1, "the hung task did not run");
	free(o.events);
	free(cmd);
}

/* A drain waits, it does not spin: SIGTERM with two tasks that run 3 s more (drain_timeout
 * 10 s), and the host's CPU time for the whole run stays far below the drain's length.
 * (The loop took a signal seen long ago for news, so it never slept until the end: 3 s
 * of CPU for a 3 s drain.) */
Test(faults, a_drain_waits_without_spinning, .timeout = 60)
{
	const char *dir = t_tmpdir();
	free(t_jobf(dir, "[job]\ngpus = 0,1\ndrain_timeout = 10\n"
			 "[worker]\nplugin = faulty\nsleep_us = 3000000\n"
			 "[generator]\nplugin = range\nstop = 100\n"
			 "[sink]\nplugin = recorder\npath = events\n"));
	t_sh(dir, "\"$GPUD\" run job.ini --ui plain --stats-json s.json 2>err & pid=$!\n"
		  "w '[ \"$(grep -c \"^start \" events 2>/dev/null)\" = 2 ]'\n"
		  "kill -TERM $pid\n"
		  "wait $pid; echo $? >rc\n");
	char *err = t_read_in(dir, "err"), *stats = t_read_in(dir, "s.json");
	cr_assert_eq(t_read_long(dir, "rc"), 4, "%s", err);
	const char *cpu = stats ? strstr(stats, "\"host_cpu_seconds\": ") : NULL;
	const char *elapsed = stats ? strstr(stats, "\"elapsed\": ") : NULL;
	cr_assert(cpu && elapsed, "%s", stats ? stats : err);
	double cpu_s = strtod(cpu + 20, NULL), elapsed_s = strtod(elapsed + 11, NULL);
	cr_log_info("host CPU %.3f s in a run of %.3f s", cpu_s, elapsed_s);
	cr_expect_geq(elapsed_s, 2.5, "the drain waited for the running tasks");
	/* Start-up (plugins, sanitizers) is well under this; a spin is the drain's length. */
	cr_expect_lt(cpu_s, 1.0, "the host used %.2f s of CPU in a %.2f s run, mostly a drain",
		     cpu_s, elapsed_s);
	char *ev = t_read_in(dir, "events");
	cr_expect_eq(t_count_lines(ev, "ok "), 2, "the two running tasks finished: %s", ev);
	free(ev);
	free(err);
	free(stats);
}

/* Load balancing: a worker whose tasks are slow holds few, so the fast one runs the
 * rest instead of waiting at the end for tasks queued behind a slow one. */
Test(faults, slow_worker_does_not_hoard_tasks, .timeout = 60)
{
	struct outcome o;
	const char *dir = t_tmpdir();
	cr_expect_eq(run_faulty(dir, "sleep_us = 200\nslow_gpu = 1\nslow_us = 300000",
				"workers_per_gpu = 1", 3000, &o),
		     0);
	exactly_once(&o, 3000);
	size_t slow = 0;
	for (const char *p = o.events; (p = strstr(p, "\nok ")); p++) {
		unsigned long id;
		int wid;
		if (sscanf(p, "\nok %lu %d", &id, &wid) == 2 && wid == 1)
			slow++;
	}
	/* The fast worker needs about 0.6 s for everything; the slow one takes 0.3 s a
	 * task, so it should get a task only when it has finished one: two to four in
	 * all, up to 9 on a machine so loaded that the fast one takes 2 s. A worker given a
	 * burst (up to queue_size / 2 = 16) would show here. */
	cr_expect_leq(slow, 12, "the slow worker ran %zu of 3000 tasks", slow);
}

/* The host killed outright: no worker goes on running (they die with it). */
Test(faults, no_worker_outlives_a_killed_host, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *cmd;
	char *path =
		t_jobf(dir, "[job]\ngpus = 0,1\nworkers_per_gpu = 2\n[worker]\nplugin = faulty\n"
			    "sleep_us = 100000\n[generator]\nplugin = range\nstop = 1000\n"
			    "[sink]\nplugin = null\n");
	/* Alive means any state but Z (zombie: dead, waiting for its new parent). A dying
	 * worker takes its time on a loaded machine: each is waited for (WAIT_FOR's bound),
	 * not given a fixed half second. */
	cr_assert(asprintf(&cmd,
			   WAIT_FOR ALIVE
			   "GPUD_PLUGIN_PATH='%s' '%s' run '%s' 2>/dev/null & gp=$!; "
			   "w '[ $(pgrep -P $gp | wc -l) -eq 4 ]' || exit 2; sleep 0.3; "
			   "kids=$(pgrep -P $gp); "
			   "kill -9 $gp; for k in $kids; do w '! alive $k' || exit 1; done; exit 0",
			   t_env("FIXTURES"), t_env("GPUD"), path) > 0);
	int st = system(cmd);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "status %d: 2 = not 4 workers seen, 1 = a worker still runs", WEXITSTATUS(st));
	free(cmd);
	free(path);
}

/* A second interrupt kills the workers at once; the sink is still closed, the stats
 * still add up, and the tasks that were running are counted not run. */
Test(faults, second_interrupt_stops_at_once, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *cmd;
	char *path = t_jobf(dir,
			    "[job]\ngpus = 0,1\n[worker]\nplugin = faulty\nsleep_us = 5000000\n"
			    "[generator]\nplugin = range\nstop = 100\n"
			    "[sink]\nplugin = recorder\npath = %s/events\n",
			    dir);
	cr_assert(asprintf(&cmd,
			   WAIT_FOR "GPUD_PLUGIN_PATH='%s' '%s' run '%s' 2>'%s/err' & gp=$!; "
				    "w \"grep -q '^start ' '%s/events'\"; kill -INT $gp; "
				    /* The second once gpud took the first (before, on a loaded
				     * machine both could be pending at once, one signal), and
				     * more than 50 ms later: one sooner is taken for the same
				     * one sent twice (dispatcher.c, SAME_INTERRUPT_NS). */
				    "w \"grep -q 'interrupt again' '%s/err'\"; sleep 0.2; "
				    "kill -INT $gp; wait $gp",
			   t_env("FIXTURES"), t_env("GPUD"), path, dir, dir, dir) > 0);
	int st = system(cmd);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 4, "exit %d (interrupted, resumable)",
		  WEXITSTATUS(st));
	struct outcome o;
	read_close(dir, &o);
	cr_expect_eq(o.ok, 0, "5 s tasks cannot have finished");
	cr_expect_gt(o.not_run, 0, "the running tasks did not run to the end");
	cr_expect_eq(o.generated, o.ok + o.failed + o.timed_out + o.not_run, "stats add up");
	free(o.events);
	free(cmd);
	free(path);
}

/* A retry runs on another worker when there is one. */
Test(faults, retries_go_to_another_worker, .timeout = 60)
{
	struct outcome o;
	const char *dir = t_tmpdir();
	/* Late tasks, when every worker is up: with one ready worker, a retry may well go
	 * back to the same one. */
	cr_expect_eq(run_faulty(dir,
				"fail_on = 300,400,500\nfirst_attempt_only = 1\nsleep_us = 5000",
				"max_retries = 1", 600, &o),
		     0);
	exactly_once(&o, 600);
	cr_expect_eq(o.retried, 3);
	const char *ids[] = {"300", "400", "500"};
	for (int i = 0; i < 3; i++) {
		char pat[32];
		int w0, w1, a0, a1;
		snprintf(pat, sizeof pat, "start %s ", ids[i]);
		const char *first = strstr(o.events, pat);
		cr_assert(first);
		const char *second = strstr(first + 1, pat);
		cr_assert(second, "task %s started twice", ids[i]);
		cr_assert_eq(sscanf(first + strlen(pat), "%d %d", &w0, &a0), 2);
		cr_assert_eq(sscanf(second + strlen(pat), "%d %d", &w1, &a1), 2);
		cr_expect_eq(a0, 0);
		cr_expect_eq(a1, 1);
		cr_expect_neq(w0, w1, "task %s retried on the worker that failed it", ids[i]);
	}
}

/* A GPU whose workers keep crashing is retired; the run goes on with the others. */
Test(faults, crash_loop_retires_the_gpu, .timeout = 60)
{
	struct outcome o;
	const char *dir = t_tmpdir();
	cr_expect_eq(run_faulty(dir, "crash_all = 1\nonly_gpu = 1\nsleep_us = 2000",
				"workers_per_gpu = 1\nmax_worker_restarts = 2", 500, &o),
		     1);
	exactly_once(&o, 500);
	cr_expect_eq(o.restarts, 2);
	cr_expect_eq(o.failed, 3, "one task for each of the three workers that crashed");
	cr_expect_eq(o.ok, 497);
	cr_expect_eq(t_count_lines(o.events, "gpu_retired "), 1);
	cr_expect(strstr(o.events,
			 "gpu_retired 1 1 GPU 1 retired: its workers were restarted 2 times"),
		  "%s", o.events);
}

/* Every GPU retired: exit 3, and the tasks without an outcome are counted not run. */
Test(faults, no_worker_left_ends_the_run, .timeout = 60)
{
	struct outcome o;
	const char *dir = t_tmpdir();
	cr_expect_eq(run_faulty(dir, "crash_all = 1", "max_worker_restarts = 1", 1000, &o), 3);
	cr_expect_eq(o.failed + o.ok + o.timed_out + o.not_run, o.generated, "stats add up");
	cr_expect_lt(o.generated, 1000, "the generator was not drained");
	cr_expect_eq(o.restarts, 2, "one restart on each GPU");
	cr_expect_eq(t_count_lines(o.events, "gpu_retired "), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "no worker left to run the remaining tasks"), "%s", err);
	free(err);
}

/* A closed standard output (gpud | head): the run stops, exit 3, one line saying so. */
Test(faults, sigpipe_on_standard_output, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *cmd;
	char *path = t_jobf(
		dir, "[job]\ngpus = 0\n[worker]\nplugin = echo\n"
		     "[generator]\nplugin = range\nstop = 5000000\n[sink]\nplugin = jsonl\n");
	cr_assert(
		asprintf(&cmd,
			 "('%s' run '%s' 2>'%s/err'; echo $? >'%s/status') | head -n 1 >/dev/null",
			 t_env("GPUD"), path, dir, dir) > 0);
	cr_assert_eq(system(cmd), 0);
	char *status = t_read_in(dir, "status");
	cr_expect_str_eq(status, "3\n");
	char *err = t_read_in(dir, "err");
	/* One calm line, like a filter whose reader left; no "aborted" story. */
	cr_expect(strstr(err, "gpud: stopped: the reader of standard output went away; ") &&
			  strstr(err, "results were not written, tasks from "),
		  "%s", err);
	cr_expect(!strstr(err, "aborted"), "%s", err);
	free(status);
	free(err);
	free(cmd);
	free(path);
}

/* A file size limit (ulimit -f) smaller than the output: the write past it is an error
 * (EFBIG) said naming the file, not a death by SIGXFSZ with nothing said and an empty
 * journal; exit 3, and --resume with the limit lifted finishes every task once. */
Test(faults, file_size_limit_is_a_write_error_and_resume_is_exact, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *path = t_jobf(dir,
			    "[job]\ngpus = 0\n[worker]\nplugin = echo\n"
			    "[generator]\nplugin = range\nstop = 300000\n"
			    "[sink]\nplugin = jsonl\npath = %s/out.jsonl\n",
			    dir);
	/* The default disposition, as a shell gives it: the run must ignore it itself. */
	signal(SIGXFSZ, SIG_DFL);
	struct rlimit was, small;
	cr_assert_eq(getrlimit(RLIMIT_FSIZE, &was), 0);
	small = was;
	small.rlim_cur = 8u << 20; /* above the run's shared memory, below its output */
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
	int rc = t_gpud(dir, "run '%s' --ui off", path);
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &was), 0);
	char *err = t_read_in(dir, "err");
	cr_expect_eq(rc, 3, "%s", err);
	cr_expect(strstr(err, "/out.jsonl: File too large"), "%s", err);
	free(err);
	cr_expect_eq(t_gpud(dir, "status '%s'", path), 0);
	char *st = t_read_in(dir, "out");
	cr_expect(strstr(st, "not finished") && !strstr(st, "tasks with an outcome: 0 "), "%s", st);
	free(st);
	cr_expect_eq(t_gpud(dir, "run '%s' --ui off --resume", path), 0);
	unsigned char *seen = calloc(300000, 1);
	unsigned long lines = 0, twice = 0, missing = 0;
	char *out = t_read_in(dir, "out.jsonl");
	for (const char *p = out; p && *p; lines++) {
		/* Not sscanf: it takes the length of the rest of the file each time. */
		static const char key[] = "{\"task_id\": ";
		if (!strncmp(p, key, sizeof key - 1)) {
			unsigned long id = strtoul(p + sizeof key - 1, NULL, 10);
			if (id < 300000 && seen[id]++)
				twice++;
		}
		p = strchr(p, '\n');
		p = p ? p + 1 : NULL;
	}
	for (unsigned long i = 0; i < 300000; i++)
		missing += !seen[i];
	cr_expect_eq(lines, 300000);
	cr_expect_eq(twice, 0);
	cr_expect_eq(missing, 0);
	free(out);
	free(seen);
	free(path);
}

/* Timeouts keep being enforced in a slot whose worker was already replaced once. */
Test(faults, repeated_timeouts_in_one_slot, .timeout = 60)
{
	struct outcome o;
	const char *dir = t_tmpdir();
	cr_expect_eq(run_faulty(dir, "hang_on = 3,4,5,6",
				"gpus = 0\nworkers_per_gpu = 1\n"
				"task_timeout = 0.2\nmax_worker_restarts = 10",
				20, &o),
		     1);
	exactly_once(&o, 20);
	cr_expect_eq(o.timed_out, 4);
	cr_expect_eq(o.restarts, 4);
}

/* A worker still in setup when every task is done does not hold the run up. */
Test(faults, run_ends_while_a_setup_hangs, .timeout = 60)
{
	struct outcome o;
	const char *dir = t_tmpdir();
	cr_expect_eq(run_faulty(dir, "setup_hang_gpu = 1", "", 200, &o), 0);
	exactly_once(&o, 200);
	cr_expect_eq(o.setup_fail, 0, "a cancelled setup is not a failure");
	cr_expect_eq(t_count_lines(o.events, "setup_failed "), 0);
}

/* A hanging cleanup is cut off after cleanup_timeout and reported. */
Test(faults, hanging_cleanup_is_bounded, .timeout = 60)
{
	struct outcome o;
	const char *dir = t_tmpdir();
	cr_expect_eq(run_faulty(dir, "cleanup_hang = 1\nsleep_us = 5000", "cleanup_timeout = 0.5",
				100, &o),
		     0);
	exactly_once(&o, 100);
	cr_expect_eq(t_count_lines(o.events, "cleanup_failed "), 4);
	cr_expect(strstr(o.events, "cleanup did not finish within 0.5 s; killed"), "%s", o.events);
}

/* Results finished before a call that hangs reach the host while it hangs (the worker
 * publishes in bursts, between calls; its watcher thread publishes what waits once a
 * call has run 20 ms): when the hung worker is killed at task_timeout, tasks 1-4 are
 * not run a second time, and after SIGTERM a drain counts them ok, not "not run". */
Test(faults, results_before_a_hung_call_are_not_held_back, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *job = t_jobf(dir,
			   "[job]\ngpus = 0\njournal = off\ntask_timeout = 1\n"
			   "[worker]\nplugin = faulty\nhang_on = 5\nprint_every = 1\n"
			   "[generator]\nplugin = failgen\nstop = 10\n"
			   "[sink]\nplugin = jsonl\npath = %s/out.jsonl\n",
			   dir);
	cr_expect_eq(t_gpud(dir, "run '%s' --ui plain", job), 1, "%s", t_read_in(dir, "err"));
	char *out = t_read_in(dir, "out"), *err = t_read_in(dir, "err");
	for (int i = 0; i < 10; i++) {
		char line[64];
		snprintf(line, sizeof line, "faulty prints for input %d\n", i);
		size_t n = 0;
		for (const char *p = err; (p = strstr(p, line)); p++)
			n++; /* (plain mode passes the workers' output on to standard error) */
		cr_expect_eq(n, 1, "task %d ran %zu times:\n%s%s", i, n, out, err);
	}
	free(out);
	free(err);

	/* The drain: the worker hangs in task 5 with no task_timeout; SIGTERM, and 1 s of
	 * drain_timeout. Tasks 0-4 finished long before. */
	const char *d2 = t_tmpdir();
	free(t_jobf(d2, "[job]\ngpus = 0\njournal = off\ndrain_timeout = 1\n"
			"[worker]\nplugin = faulty\nhang_on = 5\n"
			"[generator]\nplugin = failgen\nstop = 10\n"
			"[sink]\nplugin = recorder\npath = rec\n"));
	t_sh(d2, "\"$GPUD\" run job.ini --ui plain 2>err & pid=$!\n"
		 "w 'grep -q \"^start 5 \" rec 2>/dev/null'; sleep 0.5\n"
		 "kill -TERM $pid; wait $pid; echo $? >rc\n");
	char *rec = t_read_in(d2, "rec");
	cr_expect_eq(t_read_long(d2, "rc"), 3);
	cr_expect_eq(t_count_lines(rec, "ok "), 5, "tasks 0-4 ok:\n%s", rec);
	free(rec);
	free(job);
}

/* A GPU retired while its other worker runs a task that hangs: that worker is told to
 * stop, and still gets task_timeout (it was no longer looked at, and the run waited for
 * it for ever). Every task hangs, so no worker's window grows past one task (no result
 * ever comes) and the second worker, however late it starts (under a sanitizer, on a
 * loaded machine), finds a task of its own; the bound leaves it 3 s to start. */
Test(faults, a_hung_task_on_a_retired_gpu_still_times_out, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *job = t_jobf(dir,
			   "[job]\ngpus = 0\nworkers_per_gpu = 2\ntask_timeout = 3\n"
			   "max_worker_restarts = 0\njournal = off\n"
			   "[worker]\nplugin = faulty\nhang_every = 1\n"
			   "[generator]\nplugin = range\nstop = 20\n"
			   "[sink]\nplugin = recorder\npath = %s/rec\n",
			   dir);
	t_sh(dir, "timeout -s KILL 20 \"$GPUD\" run job.ini --ui plain 2>err; echo $? >rc\n");
	cr_expect_eq(t_read_long(dir, "rc"), 3, "exit 3 (137: it never ended)");
	char *err = t_read_in(dir, "err"), *rec = t_read_in(dir, "rec");
	cr_expect(strstr(err, "GPU 0 retired"), "%s", err);
	cr_expect(strstr(err, "aborted: no worker left to run the remaining tasks"), "%s", err);
	cr_expect_eq(t_count_lines(rec, "timeout "), 2, "both hung tasks timed out:\n%s", rec);
	/* Two generated (each worker held one), both timed out; the rest never generated. */
	cr_expect_eq(t_count_lines(rec, "close 2 0 0 2 "), 1, "%s", rec);
	/* Killed for its task, not for a cleanup it never began. */
	cr_expect(!strstr(err, "cleanup"), "%s", err);
	free(err);
	free(rec);
	free(job);
}
