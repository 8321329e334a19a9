/* SPDX-License-Identifier: MIT */
/* What a run shows: the dashboard in a real terminal (tmux), plain-mode lines, worker
 * output capture, and the stats JSON against the sink's own count. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "helpers.h"

static char sock[64];

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char *cmd;
	va_list ap;
	va_start(ap, fmt);
	cr_assert(vasprintf(&cmd, fmt, ap) > 0);
	va_end(ap);
	int st = system(cmd);
	free(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* What the tmux pane shows now (with escape sequences when `escapes`). */
static char *capture(const char *dir, bool escapes)
{
	sh("tmux -L %s capture-pane -p %s -t ui > '%s/pane' 2>/dev/null", sock, escapes ? "-e" : "",
	   dir);
	return t_read_in(dir, "pane");
}

/* The pane, once it shows `needle` (polled for up to `seconds`); the last capture if
 * it never does. */
static char *pane_with(const char *dir, const char *needle, double seconds)
{
	char *pane = NULL;
	for (double t = 0; t < seconds; t += 0.1) {
		free(pane);
		pane = capture(dir, false);
		if (pane && strstr(pane, needle))
			break;
		usleep(100000);
	}
	return pane;
}

static void stop_tmux(void)
{
	sh("tmux -L %s kill-server 2>/dev/null", sock);
}

/* Starts gpud in a 120x40 tmux terminal; `env` is put before the command. */
static void start_in_tmux(const char *dir, const char *env, const char *job)
{
	static int starts;
	snprintf(sock, sizeof sock, "gpud-test-%d-%d", (int)getpid(), starts++);
	cr_assert_eq(sh("tmux -L %s new-session -d -s ui -x 120 -y 40 "
			"\"cd '%s' && %s GPUD_PLUGIN_PATH='%s' '%s' run '%s' --ui auto "
			"--stats-json '%s/stats.json'; echo exit=\\$? > '%s/exit'; sleep 60\"",
			sock, dir, env, t_env("FIXTURES"), t_env("GPUD"), job, dir, dir),
		     0, "tmux would not start");
}

/* Waits (up to 60 s) for the run in tmux to end. */
static void wait_exit(const char *dir)
{
	for (int i = 0; i < 600; i++) {
		char *e = t_read_in(dir, "exit");
		if (e) {
			free(e);
			return;
		}
		usleep(100000);
	}
	cr_assert_fail("the run did not end");
}

static char *job(const char *dir, const char *worker_extra, int tasks)
{
	char *path = t_jobf(dir,
			    "[job]\ngpus = 0,1,2,3\nmax_worker_restarts = 100\n"
			    "[worker]\nplugin = faulty\nsleep_us = 20000\n%s\n"
			    "[generator]\nplugin = range\nstop = %d\n"
			    "[sink]\nplugin = jsonl\npath = %s/out.jsonl\n",
			    worker_extra, tasks, dir);
	return path;
}

Test(ui, dashboard_in_a_terminal, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "fail_every = 37\ncrash_every = 101\nprint_every = 50", 600);
	start_in_tmux(dir, "", path);
	/* A frame mid-run with a failure already shown and a worker at work. */
	free(pane_with(dir, "failed on worker", 10));
	char *pane = pane_with(dir, "processing", 5);
	cr_expect(strstr(pane, "4 workers on 4 GPUs"), "%s", pane);
	cr_expect(strstr(pane, "ETA"), "%s", pane);
	cr_expect(strstr(pane, "/600"), "progress against the total: %s", pane);
	cr_expect(strstr(pane, "[#"), "a bar: %s", pane);
	cr_expect(strstr(pane, "processing"), "%s", pane);
	cr_expect(strstr(pane, "GPU WORKER  STATUS"), "%s", pane);
	cr_expect(strstr(pane, "queue "), "%s", pane);
	cr_expect(strstr(pane, "failed on worker"), "failures shown: %s", pane);
	cr_expect(strstr(pane, "worker output: "), "%s", pane);
	cr_expect(!strstr(pane, "faulty prints"), "worker output kept off the screen: %s", pane);
	free(pane);

	/* Narrowed mid-run: lines are cut to the new width, not wrapped (the title's
	 * continuation would push the bar off the second row). */
	sh("tmux -L %s resize-window -t ui -x 60", sock);
	/* The frame redrawn at the new width (waited for, not given 0.8 s). */
	pane = pane_with(dir, "GPU WKR  STATUS", 10);
	char *second = strchr(pane, '\n');
	cr_assert(second, "%s", pane);
	cr_expect(strncmp(pane, "gpud", 4) == 0 && second[1] == '[', "after a resize: %s", pane);
	for (char *l = pane; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		size_t len = strchr(l, '\n') ? (size_t)(strchr(l, '\n') - l) : strlen(l);
		cr_expect_leq(len, 60, "a line wider than the terminal: %.*s", (int)len, l);
	}
	/* The worker table narrows instead of losing its outcome columns. */
	cr_expect(strstr(pane, "GPU WKR  STATUS         TASK       OK FAILED  T/O RST"), "%s",
		  pane);
	free(pane);
	/* Wide enough for where each worker's time goes: its percentages and call sizes,
	 * the outcome columns still there. */
	sh("tmux -L %s resize-window -t ui -x 160", sock);
	pane = pane_with(dir, "LAST WAIT UNPK", 10);
	cr_expect(strstr(pane, "LAST WAIT UNPK USER BACK IDLE CALLS"), "%s", pane);
	cr_expect(strstr(pane, "OK FAILED   T/O RESTARTS"), "%s", pane);
	const char *row = strstr(pane, "processing");
	cr_expect(row && strchr(row, '%') && strchr(row, '%') < strchr(row, '\n'),
		  "a worker's row has its percentages: %s", pane);
	free(pane);
	sh("tmux -L %s resize-window -t ui -x 120", sock);

	wait_exit(dir);
	pane = pane_with(dir, "gpud: 600 tasks: ", 10);
	cr_expect(strstr(pane, "|  done"), "the final frame stays: %s", pane);
	cr_expect(strstr(pane, "600/600  100.0%"), "%s", pane);
	cr_expect(strstr(pane, "finished"), "%s", pane);
	cr_expect(strstr(pane, "gpud: 600 tasks: "), "the summary: %s", pane);

	/* The worker output went to the log files the screen named. */
	const char *w = strstr(pane, "worker output: ");
	cr_assert(w);
	char logdir[512];
	cr_assert_eq(sscanf(w, "worker output: %511[^ ]", logdir), 1);
	*strstr(logdir, "/worker-<id>.log") = '\0';
	cr_expect_eq(sh("cat '%s'/worker-*.log | grep -c 'faulty prints for input' | grep -qx 12",
			logdir),
		     0, "12 prints (every 50th of 600) in %s", logdir);
	free(pane);

	/* The stats JSON against the sink's own count. */
	char *js = t_read_in(dir, "stats.json");
	char *out = t_read_in(dir, "out.jsonl");
	cr_assert(js && out);
	unsigned long ok, failed;
	cr_assert_eq(sscanf(strstr(js, "\"ok\": "), "\"ok\": %lu", &ok), 1);
	cr_assert_eq(sscanf(strstr(js, "\"failed\": "), "\"failed\": %lu", &failed), 1);
	cr_expect_eq(ok, t_count_lines(out, "{\"task_id\": ") - failed);
	size_t lines_failed = 0;
	for (const char *p = out; (p = strstr(p, "\"status\": \"error\"")); p++)
		lines_failed++;
	cr_expect_eq(failed, lines_failed, "stats %lu failed, the sink %zu", failed, lines_failed);
	cr_expect(strstr(js, "\"gpus\": [{\"gpu_id\": 0"), "%s", js);
	free(js);
	free(out);
	stop_tmux();
}

Test(ui, colours_only_without_no_color, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "", 200);
	start_in_tmux(dir, "NO_COLOR=1", path);
	free(pane_with(dir, "processing", 10));
	char *pane = capture(dir, true);
	cr_expect(strstr(pane, "GPU WORKER"), "%s", pane);
	cr_expect(!strstr(pane, "\033[32m") && !strstr(pane, "\033[31m"), "NO_COLOR honoured");
	free(pane);
	wait_exit(dir);
	stop_tmux();

	dir = t_tmpdir();
	path = job(dir, "", 200);
	start_in_tmux(dir, "TERM=xterm-256color", path);
	free(pane_with(dir, "processing", 10));
	pane = capture(dir, true);
	cr_expect(strstr(pane, "GPU WORKER"), "%s", pane);
	cr_expect(strchr(pane, '\033'), "colours on a colour terminal");
	free(pane);
	wait_exit(dir);
	stop_tmux();
}

Test(ui, plain_mode_lines, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *path = t_jobf(dir, "[job]\ngpus = 0,1\n[worker]\nplugin = faulty\nsleep_us = 10000\n"
				 "fail_every = 10\nprint_every = 100\n"
				 "[generator]\nplugin = range\nstop = 300\n"
				 "[sink]\nplugin = null\n[ui]\nplain_interval = 0.5\n");
	cr_expect_eq(t_gpud(dir, "run '%s' --ui plain", path), 1);
	char *err = t_read_in(dir, "err");
	cr_expect_geq(t_count_lines(err, "gpud: [0:0"), 2, "progress lines each interval: %s", err);
	cr_expect(strstr(err, "/300 ("), "%s", err);
	cr_expect(strstr(err, "gpud: task 9 failed on worker"), "each failure a line: %s", err);
	cr_expect_eq(t_count_lines(err, "[worker "), 3, "worker output prefixed: %s", err);
	cr_expect(strstr(err, "] faulty prints for input 99"), "%s", err);
	free(err);
	free(path);
}

Test(ui, plain_mode_rate_limits_failures, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *path = t_write(dir, "job.ini",
			     "[job]\ngpus = 0\n[worker]\nplugin = faulty\n"
			     "fail_every = 1\n[generator]\nplugin = range\n"
			     "stop = 5000\n[sink]\nplugin = null\n");
	cr_expect_eq(t_gpud(dir, "run '%s' --ui plain", path), 1);
	char *err = t_read_in(dir, "err");
	cr_expect_lt(t_count_lines(err, "gpud: task "), 200, "not 5000 lines");
	cr_expect(strstr(err, "more messages not shown: every failure is in"), "%s", err);
	cr_expect(strstr(err, "failed 5000"), "the count is still whole: %s", err);
	free(err);
	free(path);
}

Test(ui, off_prints_only_the_summary_and_where_the_failures_are)
{
	const char *dir = t_tmpdir();
	char *path = t_write(dir, "job.ini",
			     "[job]\ngpus = 0\n[worker]\nplugin = faulty\n"
			     "fail_every = 2\n[generator]\nplugin = range\n"
			     "stop = 100\n[sink]\nplugin = null\n");
	cr_expect_eq(t_gpud(dir, "run '%s' --ui off", path), 1);
	char *err = t_read_in(dir, "err");
	/* The summary, and where the failures are listed. */
	cr_expect_eq(t_count_lines(err, ""), 2, "%s", err);
	cr_expect(strstr(err, "gpud: 100 tasks: 50 ok, 50 failed"), "%s", err);
	cr_expect(strstr(err, "gpud: every failure is listed in "), "%s", err);
	free(err);
	free(path);
}

/* The dashboard hides the cursor while it draws; a host that crashes gives it back. */
Test(ui, the_cursor_comes_back_after_a_host_crash, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *path = job(dir, "", 2000);
	start_in_tmux(dir, "", path);
	free(pane_with(dir, "processing", 10));
	sh("tmux -L %s display -p -t ui '#{cursor_flag}' > '%s/cursor' 2>/dev/null", sock, dir);
	cr_expect_eq(t_read_long(dir, "cursor"), 0, "the dashboard did not hide the cursor");
	cr_assert_eq(sh("pkill -SEGV -f '^%s run %s'", t_env("GPUD"), path), 0);
	wait_exit(dir);
	/* tmux may not have drawn the last bytes yet: asked again for up to 10 s. */
	for (int i = 0; i < 100; i++) {
		sh("tmux -L %s display -p -t ui '#{cursor_flag}' > '%s/cursor' 2>/dev/null", sock,
		   dir);
		if (t_read_long(dir, "cursor") == 1)
			break;
		usleep(100000);
	}
	cr_expect_eq(t_read_long(dir, "cursor"), 1, "the cursor stayed hidden");
	char *e = t_read_in(dir, "exit");
	cr_expect(e && strstr(e, "exit=139"), "%s", e);
	free(e);
	stop_tmux();
	free(path);
}

/* Workers on two GPUs each: the dashboard's rows and title, and plain mode's lines,
 * name both GPUs of a worker. */
Test(ui, workers_on_two_gpus_show_both, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *path = t_jobf(dir, "[job]\ngpus = 0,1,2,3\ngpus_per_worker = 2\n"
				 "[worker]\nplugin = faulty\nsleep_us = 20000\nfail_every = 37\n"
				 "[generator]\nplugin = range\nstop = 300\n"
				 "[sink]\nplugin = null\n");
	start_in_tmux(dir, "", path);
	free(pane_with(dir, "failed on worker", 30));
	char *pane = pane_with(dir, "processing", 10);
	cr_expect(strstr(pane, "2 workers on 4 GPUs (2 each)"), "%s", pane);
	cr_expect(strstr(pane, "\n 0,1      0  "), "worker 0 on GPUs 0 and 1: %s", pane);
	cr_expect(strstr(pane, "\n 2,3      1  "), "worker 1 on GPUs 2 and 3: %s", pane);
	cr_expect(strstr(pane, "(GPU 0,1): ") || strstr(pane, "(GPU 2,3): "), "%s", pane);
	free(pane);
	wait_exit(dir);
	stop_tmux();

	cr_expect_eq(t_gpud(dir, "run '%s' --ui plain --set job.gpus=0,1", path), 1);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "gpud: task 36 failed on worker 0 (GPU 0,1): "), "%s", err);
	free(err);
	free(path);
}

/* With CPU stages: the title counts the GPU workers on the GPUs and the stages'
 * workers apart, and a row per stage and one for the GPU workers stand above the
 * table. */
Test(ui, stages_in_the_dashboard, .timeout = 120)
{
	const char *dir = t_tmpdir();
	char *path = t_jobf(dir, "[job]\ngpus = 0,1\n"
				 "[stage.decode]\nplugin = tagger\ntag = d:\nworkers = 3\n"
				 "[worker]\nplugin = faulty\nsleep_us = 20000\n"
				 "[generator]\nplugin = range\nstop = 300\n"
				 "[sink]\nplugin = null\n");
	start_in_tmux(dir, "", path);
	char *pane = pane_with(dir, "processing", 30);
	cr_expect(strstr(pane, "2 workers on 2 GPUs + 3 in CPU stages  |"), "%s", pane);
	cr_expect(strstr(pane, "\nstage decode         3/3   workers  busy "), "%s", pane);
	cr_expect(strstr(pane, "\n      gpu            2/2   workers  busy "), "%s", pane);
	/* busy is the time in the user's calls; beside it the CPU part of that time */
	cr_expect(strstr(pane, "\n      gpu            2/2   workers  busy ") &&
			  strstr(strstr(pane, "\n      gpu            2/2   workers  busy "),
				 "% (cpu "),
		  "%s", pane);
	cr_expect(strstr(pane, "\n cpu      4  "), "a stage worker's row: %s", pane);
	free(pane);
	wait_exit(dir);
	stop_tmux();
	free(path);
}
