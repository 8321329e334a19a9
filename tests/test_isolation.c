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

/* Parses dir/out.jsonl: every id 0..n-1 exactly once; innocent ids ok with "r<id>"
 * (with an empty result when `empty`); returns how many poison tasks failed. */
static unsigned check_output_of(const char *dir, unsigned n, unsigned every, bool empty)
{
	char *text = t_read_in(dir, "out.jsonl");
	cr_assert(text, "no output:\n%s", t_read_in(dir, "err"));
	unsigned char *seen = calloc(n, 1);
	unsigned poison_failed = 0;
	for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
		unsigned long id;
		char status[16];
		cr_assert_eq(sscanf(l, "{\"task_id\": %lu, \"status\": \"%15[a-z]\"", &id, status),
			     2, "malformed line: %s", l);
		cr_assert_lt(id, n, "%s", l);
		cr_assert_eq(seen[id]++, 0, "task %lu has two outcomes", id);
		bool poison = id % every == every - 1;
		if (!poison) {
			char want[64];
			if (empty)
				snprintf(want, sizeof want, "\"result\": \"\"}");
			else
				snprintf(want, sizeof want, "\"result\": \"r%lu\"}", id);
			cr_assert_str_eq(status, "ok", "innocent task %lu: %s", id, l);
			cr_assert(strstr(l, want), "innocent task %lu has a wrong result: %s", id,
				  l);
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

static unsigned check_output(const char *dir, unsigned n, unsigned every)
{
	return check_output_of(dir, n, every, false);
}

static int run_hostile_with(const char *dir, const char *mode, unsigned n, const char *more)
{
	char *job = t_jobf(dir,
			   "[job]\ngpus = 0,1\nworkers_per_gpu = 2\nqueue_size = 64\n"
			   "max_worker_restarts = 1000\nmax_result_bytes = 4K\n"
			   "[worker]\nplugin = hostile\nmode = %s\nevery = %d\n%s"
			   "[generator]\nplugin = range\nstop = %u\n"
			   "[sink]\nplugin = jsonl\npath = %s/out.jsonl\n",
			   mode, EVERY, more, n, dir);
	int rc = t_gpud(dir, "run '%s' --ui plain", job);
	free(job);
	return rc;
}

static int run_hostile(const char *dir, const char *mode, unsigned n)
{
	return run_hostile_with(dir, mode, n, "");
}

/* Every poison task fails with `message` in its outcome; everything else is checked by
 * check_output. */
static void expect_poison_failed(const char *mode, const char *message)
{
	const char *dir = t_tmpdir();
	int rc = run_hostile(dir, mode, N);
	cr_expect_eq(rc, 1, "exit 1: some tasks failed\n%s", t_read_in(dir, "err"));
	cr_expect_eq(check_output(dir, N, EVERY), N / EVERY, "every poison task failed");
	char *out = t_read_in(dir, "out.jsonl");
	cr_expect(strstr(out, message), "the outcome says \"%s\"", message);
	free(out);
}

Test(isolation, overflow_past_the_result_buffer, .timeout = 120)
{
	expect_poison_failed("overflow", "wrote past the end of its result buffer");
}

Test(isolation, underflow_before_the_result_buffer, .timeout = 120)
{
	expect_poison_failed("underflow", "wrote before the start of its result buffer");
}

/* A worker that wrote before a result buffer leaves with exit 71 (WORKER_EXIT_TAINTED):
 * the operator is told which worker it was and that it exited tainted, once per exit. */
Test(isolation, a_worker_that_exits_tainted_is_told, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *job = t_jobf(dir,
			   "[job]\ngpus = 0\nmax_worker_restarts = 100\nmax_result_bytes = 4K\n"
			   "[worker]\nplugin = hostile\nmode = underflow\nevery = 10\n"
			   "[generator]\nplugin = range\nstop = 30\n"
			   "[sink]\nplugin = jsonl\npath = %s/out.jsonl\n",
			   dir);
	int rc = t_gpud(dir, "run '%s' --ui off", job);
	free(job);
	char *err = t_read_in(dir, "err");
	cr_expect_eq(rc, 1, "exit 1: the poison tasks failed\n%s", err);
	unsigned told = 0;
	for (const char *p = err; (p = strstr(p, "exited tainted")); p++) {
		const char *line = p;
		while (line > err && line[-1] != '\n')
			line--;
		cr_expect(!strncmp(line, "gpud: worker 0 (GPU 0) exited tainted", 37),
			  "the note names the worker: %.*s", (int)(strchrnul(p, '\n') - line),
			  line);
		told++;
	}
	/* Each poison task ends its worker (one at the run's end may do so in its cleanup,
	 * told as such): every restart here is a tainted exit, and each is told. */
	const char *r = strstr(err, " worker restart");
	cr_assert(r, "a summary with restarts\n%s", err);
	while (r > err && r[-1] >= '0' && r[-1] <= '9')
		r--;
	unsigned restarts = (unsigned)strtoul(r, NULL, 10);
	cr_expect_geq(told, 1, "a tainted exit is told\n%s", err);
	cr_expect_eq(told, restarts, "every tainted exit is told (%u told, %u restarts)\n%s", told,
		     restarts, err);
	free(err);
}

/* Empty results have no gap after them (shm_layout.h): a write before the buffer
 * reaches the headers of the empty results before it, never a payload. Whatever the
 * write reached, the innocent tasks end ok, each once. */
Test(isolation, underflow_over_empty_results, .timeout = 120)
{
	const char *dir = t_tmpdir();
	int rc = run_hostile_with(dir, "underflow", N, "empty = 1\nbytes = 1024\n");
	cr_expect(rc == 0 || rc == 1, "the host survives (exit %d)\n%s", rc, t_read_in(dir, "err"));
	check_output_of(dir, N, EVERY, true);
}

/* The task ring is read-only in workers: the write faults and blames the task. */
Test(isolation, writes_to_the_input_fault_in_the_worker, .timeout = 120)
{
	expect_poison_failed("input", "killed by SIGSEGV");
}

Test(isolation, scribbling_every_writable_shared_mapping, .timeout = 180)
{
	const char *dir = t_tmpdir();
	int rc = run_hostile(dir, "scribble", N);
	cr_expect(rc == 0 || rc == 1, "the host survives (exit %d)\n%s", rc, t_read_in(dir, "err"));
	check_output(dir, N, EVERY);
}

/* A child forked by a worker (in a session of its own) neither outlives the run nor
 * holds its output open. */
Test(isolation, forked_children_end_with_the_run, .timeout = 60)
{
	const char *dir = t_tmpdir();
	free(t_jobf(dir,
		    "[job]\ngpus = 0,1\n"
		    "[worker]\nplugin = hostile\nmode = fork\nevery = 5\npidfile = %s/pids\n"
		    "[generator]\nplugin = range\nstop = 20\n"
		    "[sink]\nplugin = jsonl\n",
		    dir));
	/* The children end with the run; each has its time to die (WAIT_FOR's bound), not a
	 * fixed 0.3 s. */
	t_sh(dir, ALIVE "left() { for p in $(cat pids); do alive $p && echo $p; done; }\n"
			"start=$(date +%s%N)\n"
			"\"$GPUD\" run job.ini --ui plain 2>err | cat >/dev/null\n"
			"echo $(( ($(date +%s%N) - start) / 1000000 )) >ms\n"
			"w '[ -z \"$(left)\" ]'; left >left\n");
	char *pids = t_read_in(dir, "pids"), *left = t_read_in(dir, "left");
	long ms = t_read_long(dir, "ms");
	cr_assert(pids && *pids, "the plugin forked");
	cr_expect_lt(ms, 10000, "the pipe closed with the run, not 30 s later (%ld ms)", ms);
	cr_expect_str_eq(left, "", "no forked child left: %s", left);
	free(pids);
	free(left);
}

/* A constructor that writes 200 KB to standard error stalls neither gpud check nor
 * gpud run (the helper's output and errors are read together). */
Test(isolation, a_plugin_flooding_stderr_does_not_stall_check, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *job = t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = noisy\n"
				"[generator]\nplugin = range\nstop = 5\n[sink]\nplugin = null\n");
	cr_expect_eq(t_gpud(dir, "check '%s'", job), 0, "%s", t_read_in(dir, "err"));
	cr_expect_eq(t_gpud(dir, "run '%s' --ui off", job), 0, "%s", t_read_in(dir, "err"));
	free(job);
}

/* The default log folder ($TMPDIR/gpud-<uid>) is used only when it is ours, a real
 * folder and private; otherwise the run goes on in plain mode and says why. */
static void expect_log_folder_refused(const char *prepare, const char *why)
{
	const char *dir = t_tmpdir();
	char *script;
	free(t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = faulty\n"
			 "[generator]\nplugin = range\nstop = 5\n[sink]\nplugin = null\n"));
	cr_assert(asprintf(&script,
			   "base=\"$PWD/gpud-$(id -u)\"\n%s\n"
			   "TMPDIR=\"$PWD\" \"$GPUD\" run job.ini --ui dashboard 2>err\n"
			   "echo $? >rc\n",
			   prepare) > 0);
	t_sh(dir, script);
	free(script);
	char *err = t_read_in(dir, "err");
	cr_expect_eq(t_read_long(dir, "rc"), 0, "the run goes on: %s", err);
	cr_expect(strstr(err, why), "says why: %s", err);
	cr_expect(strstr(err, "showing plain progress instead of the dashboard"), "%s", err);
	free(err);
}

Test(isolation, log_folder_open_to_others_is_refused, .timeout = 60)
{
	expect_log_folder_refused("mkdir -m 0777 \"$base\"; chmod 0777 \"$base\"",
				  "is open to other users (mode 777");
}

Test(isolation, log_folder_symlink_is_refused, .timeout = 60)
{
	expect_log_folder_refused("mkdir -m 0700 elsewhere; ln -s \"$PWD/elsewhere\" \"$base\"",
				  "is not a folder (a symlink?)");
}

/* A private default folder: a fresh run folder (0700) with logs made new, mode 0600. */
Test(isolation, default_log_folder_is_private, .timeout = 60)
{
	const char *dir = t_tmpdir();
	free(t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = faulty\n"
			 "[generator]\nplugin = range\nstop = 5\n[sink]\nplugin = null\n"));
	t_sh(dir,
	     "TMPDIR=\"$PWD\" \"$GPUD\" run job.ini --ui dashboard 2>err; echo $? >rc\n"
	     "stat -c %a gpud-$(id -u) gpud-$(id -u)/run-* gpud-$(id -u)/run-*/worker-0.log >modes\n");
	char *modes = t_read_in(dir, "modes");
	cr_expect_eq(t_read_long(dir, "rc"), 0, "%s", t_read_in(dir, "err"));
	cr_expect_str_eq(modes, "700\n700\n600\n");
	free(modes);
}

/* A worker that leaves the process group it was started in (for its parent's, a
 * session of its own or a child's group) and then hangs is still stopped at
 * task_timeout: every hanging task times out, every other one is ok, and the run ends
 * with status 1. */
static void expect_hang_times_out(const char *leave)
{
	const char *dir = t_tmpdir();
	free(t_jobf(dir,
		    "[job]\ngpus = 0\ntask_timeout = 1\nmax_worker_restarts = 10\n"
		    "[worker]\nplugin = hostile\nmode = hang\nevery = 10\nleave = %s\n"
		    "pidfile = %s/pids\n"
		    "[generator]\nplugin = range\nstop = 30\n"
		    "[sink]\nplugin = jsonl\npath = %s/out.jsonl\n",
		    leave, dir, dir));
	/* Bounded: a worker that cannot be killed would hold the run forever. timeout
	 * runs gpud in a process group of its own, which the worker joins. */
	t_sh(dir, "timeout -k 2 40 \"$GPUD\" run job.ini --ui plain 2>err; echo $? >rc\n");
	char *err = t_read_in(dir, "err");
	cr_expect_eq(t_read_long(dir, "rc"), 1, "exit 1: the hanging tasks timed out\n%s", err);
	char *pids = t_read_in(dir, "pids");
	cr_expect(pids && t_count_lines(pids, "") >= 3, "the worker left its group: %s", pids);
	free(pids);
	cr_expect_eq(check_output(dir, 30, 10), 3, "the three hanging tasks failed");
	char *out = t_read_in(dir, "out.jsonl");
	cr_expect_eq(t_count_lines(out, "{\"task_id\": 9, \"status\": \"timeout\""), 1, "%s", out);
	cr_expect_eq(t_count_lines(out, "{\"task_id\": 29, \"status\": \"timeout\""), 1, "%s", out);
	free(out);
	free(err);
}

Test(isolation, a_worker_in_its_parents_group_still_times_out, .timeout = 60)
{
	expect_hang_times_out("group");
}

Test(isolation, a_worker_in_a_session_of_its_own_still_times_out, .timeout = 60)
{
	expect_hang_times_out("session");
}

Test(isolation, a_worker_in_its_childs_group_still_times_out, .timeout = 60)
{
	expect_hang_times_out("child");
}

/* SIGTERM while such a worker hangs: drain_timeout passes, the worker is stopped, and
 * the run ends as interrupted (exit 4). */
Test(isolation, drain_timeout_stops_a_worker_in_its_parents_group, .timeout = 60)
{
	const char *dir = t_tmpdir();
	free(t_jobf(dir,
		    "[job]\ngpus = 0\ndrain_timeout = 1\n"
		    "[worker]\nplugin = hostile\nmode = hang\nevery = 2\nleave = group\n"
		    "pidfile = %s/pids\n"
		    "[generator]\nplugin = range\nstop = 10\n"
		    "[sink]\nplugin = recorder\npath = events\n",
		    dir));
	/* gpud leads a session of its own, so the group the worker joins is only theirs;
	 * SIGTERM once task 1 (the one that hangs) started; a run that does not end in 10 s
	 * is killed. */
	t_sh(dir,
	     WAIT_FOR "alive() { st=$(awk '{print $3}' /proc/$1/stat 2>/dev/null); "
		      "[ -n \"$st\" ] && [ \"$st\" != Z ]; }\n"
		      "setsid \"$GPUD\" run job.ini --ui plain 2>err & gp=$!\n"
		      "w '[ -s pids ] && grep -q \"^start 1 \" events'\n"
		      "s=$(date +%s%N); kill -TERM $gp\n"
		      "i=0; while alive $gp && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done\n"
		      "echo $(( ($(date +%s%N) - s) / 1000000 )) >ms\n"
		      "kill -9 -$gp 2>/dev/null; wait $gp; echo $? >rc\n");
	char *err = t_read_in(dir, "err");
	cr_expect_eq(t_read_long(dir, "rc"), 4, "exit 4 (interrupted)\n%s", err);
	long ms = t_read_long(dir, "ms");
	cr_expect(ms >= 900 && ms < 10000, "ended %ld ms after SIGTERM", ms);
	cr_expect(strstr(err, "drain_timeout (1 s) passed"), "%s", err);
	free(err);
}

/* The host killed outright while its worker, moved into the host's process group and
 * rid of its parent-death signal, hangs in a task: the worker's watcher ends the
 * worker, and the shell that started gpud (in that group too) lives on. */
Test(isolation, a_killed_host_takes_a_worker_in_its_group_and_nothing_else, .timeout = 60)
{
	const char *dir = t_tmpdir();
	free(t_jobf(dir,
		    "[job]\ngpus = 0\n"
		    "[worker]\nplugin = hostile\nmode = hang\nevery = 2\nleave = group\n"
		    "pdeathsig = 0\npidfile = %s/pids\n"
		    "[generator]\nplugin = range\nstop = 10\n"
		    "[sink]\nplugin = null\n",
		    dir));
	/* Alive means any state but Z (dead, waiting for its new parent). */
	t_sh(dir, WAIT_FOR
	     "alive() { st=$(awk '{print $3}' /proc/$1/stat 2>/dev/null); "
	     "[ -n \"$st\" ] && [ \"$st\" != Z ]; }\n"
	     "setsid sh -c 'echo $$ >wrapper; \"$GPUD\" run job.ini --ui plain 2>err & "
	     "echo $! >host; wait; sleep 20' &\n"
	     "w '[ -s pids ] && [ -s host ]' || { echo 2 >rc; exit; }\n"
	     "sleep 0.5\n"
	     "worker=$(cat pids); wrapper=$(cat wrapper)\n"
	     "[ \"$(awk '{print $5}' /proc/$worker/stat)\" = $wrapper ] || { echo 3 >rc; exit; }\n"
	     "kill -9 $(cat host)\n"
	     "w '! alive $worker'; sleep 0.2\n"
	     "alive $worker && echo worker >left\n"
	     "alive $wrapper && echo wrapper >>left\n"
	     "kill -9 $worker 2>/dev/null; kill -9 -$wrapper 2>/dev/null\n"
	     "echo 0 >rc\n");
	cr_expect_eq(t_read_long(dir, "rc"), 0,
		     "2: the worker never started, 3: it did not join the host's group");
	char *left = t_read_in(dir, "left");
	cr_expect_str_eq(left ? left : "", "wrapper\n", "the wrapper alone survives; alive: %s",
			 left ? left : "");
	free(left);
}

/* A plugin that forks in process() and lets both processes return (a failed exec):
 * the child never reaches the rings nor reports anything, the run never hangs, and
 * every result is the task's own, byte for byte. Thirty small runs, in three orders. */
Test(isolation, a_forked_child_returning_into_the_worker_is_harmless, .timeout = 240)
{
	static const char *const firsts[] = {"both", "child", "parent"};
	for (int run = 0; run < 30; run++) {
		const char *dir = t_tmpdir();
		free(t_jobf(dir,
			    "[job]\ngpus = 0,1\nqueue_size = 16\n"
			    "[worker]\nplugin = hostile\nmode = forkret\nevery = %d\nfirst = %s\n"
			    "[generator]\nplugin = range\nstop = 200\n"
			    "[sink]\nplugin = jsonl\npath = %s/out.jsonl\n",
			    run % 2 ? 7 : 25, firsts[run % 3], dir));
		t_sh(dir, "timeout -k 2 20 \"$GPUD\" run job.ini --ui plain 2>err; echo $? >rc\n");
		cr_assert_eq(t_read_long(dir, "rc"), 0, "run %d (first = %s): exit 0\n%s", run,
			     firsts[run % 3], t_read_in(dir, "err"));
		/* Every task checked as an innocent one: ok with "r<id>". */
		check_output(dir, 200, 1000);
	}
}

/* The host is not dumpable: a worker of the same user can neither write its memory
 * through /proc/<host>/mem, nor open its descriptors through /proc/<host>/fd, nor
 * ptrace it. The worker itself (exec'd) is dumpable again. Run as an ordinary user:
 * root (CAP_SYS_PTRACE) reaches every process whatever its flag, so as root gpud runs
 * as nobody here. */
Test(isolation, workers_cannot_reach_into_the_host, .timeout = 60)
{
	const char *dir = t_tmpdir();
	if (geteuid() == 0 && t_sh(dir, "command -v setpriv >/dev/null") != 0)
		cr_skip_test("running as root, and no setpriv to run gpud as an ordinary user");
	free(t_jobf(dir, "[job]\ngpus = 0\njournal = off\n"
			 "[worker]\nplugin = hostile\nmode = reach\nevery = 1\n"
			 "[generator]\nplugin = range\nstop = 2\n"
			 "[sink]\nplugin = jsonl\npath = out.jsonl\n"));
	t_sh(dir, "as=\n"
		  "if [ \"$(id -u)\" = 0 ]; then\n"
		  "  chmod 0777 .; as='setpriv --reuid=65534 --regid=65534 --clear-groups --'\n"
		  "fi\n"
		  "$as \"$GPUD\" run job.ini --ui plain 2>err & echo $! >pid\n"
		  "wait $!; echo $? >rc\n");
	char *out = t_read_in(dir, "out.jsonl"), *err = t_read_in(dir, "err");
	cr_assert_eq(t_read_long(dir, "rc"), 0, "%s", err);
	cr_assert(out, "%s", err);
	char host[32];
	snprintf(host, sizeof host, "host=%ld ", t_read_long(dir, "pid"));
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 2, "%s", out);
	for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
		cr_expect(strstr(l, host), "the worker found the host (%s): %s", host, l);
		cr_expect(strstr(l, " mem=denied("), "opened the host's memory for writing: %s", l);
		cr_expect(strstr(l, " fd=denied("), "opened the host's descriptors: %s", l);
		cr_expect(strstr(l, " ptrace=denied("), "ptrace-attached to the host: %s", l);
		cr_expect(strstr(l, " self_dumpable=1"), "an exec'd worker is dumpable: %s", l);
	}
	free(out);
	free(err);
}

/* A generator that calls exit(0) inside gpud (a C plugin, or ctypes) would have ended the
 * run with status 0 after a few tasks, as if all had gone well: it is an abort (3), said
 * in one line, with what the sink had written kept. */
Test(isolation, a_host_plugin_calling_exit_is_an_abort, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *job = t_jobf(dir,
			   "[job]\ngpus = 0\njournal = off\n[worker]\nplugin = echo\n"
			   "[generator]\nplugin = failgen\nstop = 100\nexit_after = 20\n"
			   "[sink]\nplugin = jsonl\npath = %s/out.jsonl\n",
			   dir);
	cr_expect_eq(t_gpud(dir, "run '%s' --ui plain", job), 3, "%s", t_read_in(dir, "err"));
	char *err = t_read_in(dir, "err"), *out = t_read_in(dir, "out.jsonl");
	cr_expect(strstr(err, "gpud: aborted: a plugin called exit(0) inside the gpud process"),
		  "%s", err);
	/* Outcomes written before the exit are kept, whole lines only. */
	cr_expect(out && (!*out || out[strlen(out) - 1] == '\n'), "%s", out ? out : "(none)");
	free(err);
	free(out);
	free(job);
}
