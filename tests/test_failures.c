/* SPDX-License-Identifier: MIT */
/* No failure is lost: the run's failures list (failures.jsonl), plain mode's order and
 * cap, and the tasks an interrupted run did not run. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"

/* Counts lines of the failures list with `status` and the given task id. */
static unsigned listed(const char *list, unsigned long id, const char *status)
{
	char want[96];
	unsigned n = 0;
	snprintf(want, sizeof want, "{\"task_id\": %lu, \"status\": \"%s\"", id, status);
	for (const char *p = list; (p = strstr(p, want)); p += strlen(want))
		n++;
	return n;
}

Test(failures, every_failure_is_listed_whatever_the_sink_and_plain_mode_keeps_order, .timeout = 60)
{
	const char *dir = t_tmpdir();
	/* 3000 tasks, every 7th refused; the null sink sees nothing. One worker, so the
	 * failures happen in task order. */
	t_jobf(dir,
	       "[job]\ngpus = 0\nlog_dir = %s/logs\n"
	       "[worker]\nplugin = faulty\nfail_every = 7\n"
	       "[generator]\nplugin = range\nstop = 3000\n[sink]\nplugin = null\n",
	       dir);
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui plain", dir), 1);
	char *err = t_read_in(dir, "err");
	char *list = t_read_in(dir, "logs/failures.jsonl");
	cr_assert(list, "no failures list; stderr:\n%s", err);
	unsigned failed = 0;
	for (unsigned long id = 0; id < 3000; id++) {
		bool bad = id % 7 == 6;
		unsigned n = listed(list, id, "error");
		cr_assert_eq(n, bad ? 1 : 0, "task %lu listed %u times", id, n);
		failed += bad;
	}
	cr_expect_eq(t_count_lines(list, "{\"task_id\": "), failed, "one line per failure");
	cr_expect(strstr(list, "\"retried\": false, \"message\": \"faulty: refused input 6\"}"),
		  "%.300s", list);
	/* The summary names the list; plain mode printed the first failures in order and
	 * said where the rest are. */
	char where[600];
	snprintf(where, sizeof where, "every failure is listed in %s/logs/failures.jsonl", dir);
	cr_expect(strstr(err, where), "%s", err);
	const char *first = strstr(err, "gpud: task 6 failed");
	const char *second = strstr(err, "gpud: task 13 failed");
	cr_expect(first && second && first < second, "failures out of order:\n%s", err);
	cr_expect(strstr(err, "more messages not shown: every failure is in"), "%s", err);
	free(err);
	free(list);
}

Test(failures, retried_attempts_are_listed_and_the_list_is_rewritten_each_run, .timeout = 60)
{
	const char *dir = t_tmpdir();
	t_jobf(dir,
	       "[job]\ngpus = 0,1\nmax_retries = 1\nlog_dir = %s/logs\n"
	       "[worker]\nplugin = faulty\nfail_on = 5,50\n"
	       "[generator]\nplugin = range\nstop = 100\n[sink]\nplugin = null\n",
	       dir);
	for (int run = 0; run < 2; run++) {
		cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 1);
		char *list = t_read_in(dir, "logs/failures.jsonl");
		cr_assert(list);
		/* Each failing task: its first attempt (retried) and its last (final). */
		cr_expect_eq(t_count_lines(list, "{\"task_id\": "), 4, "run %d:\n%s", run, list);
		cr_expect(strstr(list, "{\"task_id\": 50, \"status\": \"error\", \"attempt\": 0,"));
		cr_expect(strstr(list, "{\"task_id\": 50, \"status\": \"error\", \"attempt\": 1,"));
		cr_expect_eq(t_count_lines(list, "{\"task_id\": 5, "), 2);
		cr_expect(strstr(list, "\"retried\": true"));
		free(list);
	}
}

Test(failures, an_interrupted_run_lists_what_it_did_not_run, .timeout = 60)
{
	const char *dir = t_tmpdir();
	t_jobf(dir,
	       "[job]\ngpus = 0,1\nlog_dir = %s/logs\n"
	       "[worker]\nplugin = faulty\nsleep_us = 5000000\n"
	       "[generator]\nplugin = range\nstop = 1000\n"
	       "[sink]\nplugin = recorder\npath = events\n",
	       dir);
	/* Two interrupts once tasks run: the running tasks are stopped, not finished. The
	 * second once gpud took the first, and more than 50 ms later (one sooner is the
	 * same one sent twice: dispatcher.c, SAME_INTERRUPT_NS). */
	int rc = t_sh(dir, "$GPUD run job.ini --ui off --stats-json s.json 2>err & p=$!\n"
			   "w 'test -e logs/failures.jsonl && grep -q \"^start \" events'\n"
			   "kill -TERM $p; w 'grep -q \"interrupt again\" err'; sleep 0.2\n"
			   "kill -TERM $p; wait $p; echo $? >rc\n");
	cr_assert_eq(rc, 0);
	cr_expect_eq(t_read_long(dir, "rc"), 4, "interrupted with a journal: resumable");
	char *err = t_read_in(dir, "err");
	char *list = t_read_in(dir, "logs/failures.jsonl");
	char *stats = t_read_in(dir, "s.json");
	cr_assert(list && stats, "%s", err);
	size_t lines = t_count_lines(list, "{\"task_id\": "), not_run = 0;
	for (const char *p = list; (p = strstr(p, "\"status\": \"not_run\"")); p++)
		not_run++;
	cr_expect_gt(not_run, 0, "%s", err);
	cr_expect_eq(lines, not_run, "%s", list);
	char want[64];
	snprintf(want, sizeof want, "\"not_run\": %zu,", not_run);
	cr_expect(strstr(stats, want), "listed %zu, stats %s", not_run, stats);
	cr_expect(strstr(err, "every failure and every task not run is listed in"), "%s", err);
	cr_expect(strstr(err, "were not generated"), "%s", err);
	free(err);
	free(list);
	free(stats);
}

Test(failures, a_bad_stats_json_path_is_refused_before_anything_runs, .timeout = 60)
{
	const char *dir = t_tmpdir();
	t_jobf(dir,
	       "[job]\ngpus = 0\n[worker]\nplugin = faulty\n"
	       "[generator]\nplugin = range\nstop = 10\n"
	       "[sink]\nplugin = jsonl\npath = %s/out.jsonl\n",
	       dir);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json '%s/no/s.json'", dir, dir),
		     2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "--stats-json"), "%s", err);
	cr_expect(strstr(err, "no folder"), "%s", err);
	char *out = t_read_in(dir, "out.jsonl");
	cr_expect_null(out, "the sink was opened: the run started");
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini' --stats-json '%s'", dir, dir), 2,
		     "a folder is not a stats file");
	free(err);
}

Test(failures, stats_json_has_the_total_exit_status_abort_reason_and_the_list, .timeout = 60)
{
	const char *dir = t_tmpdir();
	t_jobf(dir,
	       "[job]\ngpus = 0,1\nlog_dir = %s/logs\n[worker]\nplugin = faulty\nfail_on = 3\n"
	       "[generator]\nplugin = range\nstop = 50\n[sink]\nplugin = null\n",
	       dir);
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json '%s/s.json'", dir, dir),
		     1);
	char *s = t_read_in(dir, "s.json");
	cr_assert(s);
	char want[600];
	snprintf(want, sizeof want,
		 "\"total\": 50, \"resumed\": 0, \"first_new_task_seconds\": 0.000000, "
		 "\"journal\": \"%s/job.journal\", "
		 "\"exit_status\": 1, \"abort_reason\": null, "
		 "\"failures_file\": \"%s/logs/failures.jsonl\"}",
		 dir, dir);
	cr_expect(strstr(s, want), "%s", s);
	free(s);
}
