/* SPDX-License-Identifier: MIT */
/* Resume: the journal, `--resume` after kill -9 with every id exactly once in the
 * output, torn journals, another job's journal, SIGTERM, --retry-failed, status. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "record/journal.h"

/* How many lines of the jsonl text have task id `id`, and whether each is ok with the
 * input as result (the faulty worker echoes its input). */
static void check_jsonl_once(const char *out, unsigned n)
{
	unsigned char *seen = calloc(n, 1);
	unsigned lines = 0, bad = 0;
	for (const char *p = out; p && *p;) {
		unsigned long id;
		char result[32];
		if (sscanf(p, "{\"task_id\": %lu, \"status\": \"ok\"", &id) == 1 && id < n) {
			const char *r = strstr(p, "\"result\": \"");
			snprintf(result, sizeof result, "\"result\": \"%lu\"", id);
			if (!r || strncmp(r, result, strlen(result)) != 0)
				bad++;
			seen[id]++;
		} else {
			bad++;
		}
		lines++;
		p = strchr(p, '\n');
		p = p ? p + 1 : NULL;
	}
	unsigned missing = 0, twice = 0, first_missing = n, first_twice = n;
	for (unsigned i = 0; i < n; i++) {
		if (!seen[i] && missing++ == 0)
			first_missing = i;
		if (seen[i] > 1 && twice++ == 0)
			first_twice = i;
	}
	cr_expect_eq(bad, 0, "%u lines are not an ok line with the right result", bad);
	cr_expect_eq(missing, 0, "%u ids missing (first %u)", missing, first_missing);
	cr_expect_eq(twice, 0, "%u ids more than once (first %u)", twice, first_twice);
	cr_expect_eq(lines, n);
	free(seen);
}

/* Runs the job with --resume `kills` times, each killed with SIGKILL at a random moment
 * after the state that makes it a kill in the middle: the output holds between 1 and
 * `step` results more than when the run began (`count`, a shell command, prints how
 * many it holds) and the journal holds a DONE record; then once more to the end. Not
 * after a fixed time: on a slow machine (a sanitizer, a loaded one) a run killed
 * before its first record leaves nothing to resume. A run that ends first is not
 * killed. The workers of a killed run leave on their own: waited for. (Not `i`:
 * WAIT_FOR's w() counts with it.) */
static int kill_and_resume(const char *dir, int kills, const char *count, unsigned step)
{
	char script[2048];
	snprintf(script, sizeof script,
		 WAIT_FOR JOURNAL_DONE ALIVE
		 "n() { %s; }\n"
		 "k=0; while [ $k -lt %d ]; do\n"
		 "  want=$(( $(n) + 1 + $(od -An -N2 -tu2 /dev/urandom) %% %u ))\n"
		 "  \"$GPUD\" run job.ini --ui off --resume 2>>err & p=$!\n"
		 "  while alive $p && ! { [ $(n) -ge $want ] && [ $(jdone job.journal) -ge 1 ]; }\n"
		 "  do sleep 0.02; done\n"
		 "  kill -9 $p 2>/dev/null; wait $p 2>/dev/null\n"
		 "  w '! pgrep -f \"gpud-worker --run [0-9]* $p$\" >/dev/null'\n"
		 "  k=$((k+1))\n"
		 "done\n"
		 "\"$GPUD\" run job.ini --ui off --resume 2>>err; echo $? > rc\n",
		 count, kills, step);
	t_sh(dir, script);
	return (int)t_read_long(dir, "rc");
}

/* How many results the jsonl sink's out.jsonl and the files sink's res/ hold. */
#define JSONL_COUNT "cat out.jsonl 2>/dev/null | wc -l"
#define FILES_COUNT "ls res 2>/dev/null | grep -c '^[0-9]*\\.txt$'"

Test(resume, kill_9_again_and_again_then_resume_gives_every_id_once_in_jsonl, .timeout = 180)
{
	const char *dir = t_tmpdir();
	t_jobf(dir,
	       "[job]\ngpus = 0,1\nworkers_per_gpu = 2\n[worker]\nplugin = faulty\nsleep_us = 1000\n"
	       "[generator]\nplugin = range\nstop = 20000\n[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_expect_eq(kill_and_resume(dir, 5, JSONL_COUNT, 500), 0);
	char *out = t_read_in(dir, "out.jsonl"), *err = t_read_in(dir, "err");
	cr_assert(out, "%s", err);
	check_jsonl_once(out, 20000);
	cr_expect(strstr(err, "tasks were already done"), "%s", err);
	free(out);
	free(err);
}

Test(resume, kill_9_then_resume_with_ordered_output_and_the_files_sink, .timeout = 180)
{
	const char *dir = t_tmpdir();
	t_jobf(dir,
	       "[job]\ngpus = 0,1\nordered = true\n[worker]\nplugin = faulty\nsleep_us = 600\n"
	       "[generator]\nplugin = range\nstop = 8000\n[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_expect_eq(kill_and_resume(dir, 3, JSONL_COUNT, 400), 0);
	char *out = t_read_in(dir, "out.jsonl");
	cr_assert(out);
	check_jsonl_once(out, 8000);
	free(out);

	dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = 0,1\n[worker]\nplugin = faulty\nsleep_us = 600\n"
		    "[generator]\nplugin = range\nstop = 8000\n[sink]\nplugin = files\ndir = res\n"
		    "suffix = .txt\n");
	cr_expect_eq(kill_and_resume(dir, 3, FILES_COUNT, 400), 0);
	/* Every result file once (a name is a name), whole, and no temporary file left. */
	char *ls = NULL;
	t_sh(dir, "ls -a res | grep -c '^[0-9]*\\.txt$' > count; ls -a res | grep -c tmp > tmps; "
		  "for i in 0 1 4321 7999; do cat res/$i.txt; echo; done > some");
	cr_expect_eq(t_read_long(dir, "count"), 8000);
	cr_expect_eq(t_read_long(dir, "tmps"), 0);
	ls = t_read_in(dir, "some");
	cr_expect_str_eq(ls, "0\n1\n4321\n7999\n");
	free(ls);
}

Test(resume, a_finished_run_resumes_to_nothing_and_status_says_so, .timeout = 60)
{
	const char *dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = echo\n[generator]\nplugin = range\n"
		    "stop = 1000\n[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	struct stat st;
	char path[600];
	snprintf(path, sizeof path, "%s/job.journal", dir);
	cr_assert_eq(stat(path, &st), 0, "no journal beside the job file");
	/* A journal is small: 1000 tasks in order. */
	cr_expect_lt(st.st_size, 64 + 32 * 40, "%ld bytes", (long)st.st_size);
	/* jsonl can say what its file holds, so it is asked even after the end: all there. */
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 0);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "gpud: 0 tasks: ") &&
			  strstr(err, "resumed: 1000 tasks were already done"),
		  "%s", err);
	free(err);
	/* Run again without --resume, it would start over and empty out.jsonl: refused,
	 * naming --resume and --force, with the journal and the output as they were. */
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "job.journal holds the outcomes of 1000 tasks of an earlier run of "
			      "this job (it finished all 1000), and [sink] path = ") &&
			  strstr(err, "--resume goes on from them") &&
			  strstr(err, "--force starts over anyway"),
		  "%s", err);
	cr_expect_eq(t_count_lines(err, ""), 1, "%s", err);
	free(err);
	char *kept = t_read_in(dir, "out.jsonl");
	cr_expect_eq(t_count_lines(kept, "{"), 1000, "the output was emptied");
	free(kept);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 0);
	/* --force starts over. A sink that cannot tell: the journal's end is the word. */
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --force", dir), 0);
	cr_expect_eq(t_gpud(dir,
			    "run '%s/job.ini' --ui off --resume --set sink.plugin=null --force",
			    dir),
		     0);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --set sink.plugin=null", dir), 0);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume --set sink.plugin=null", dir),
		     0);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "already finished: all 1000 tasks have their outcome"), "%s", err);
	free(err);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	char *out = t_read_in(dir, "out.jsonl");
	cr_expect_eq(t_count_lines(out, "{"), 1000, "the output was not touched");
	free(out);
	cr_expect_eq(t_gpud(dir, "status '%s/job.ini'", dir), 0);
	out = t_read_in(dir, "out");
	cr_expect(strstr(out, "tasks with an outcome: 1000 (0 of them failed)") &&
			  strstr(out, "finished: all 1000 tasks"),
		  "%s", out);
	free(out);
	/* journal = off: nothing to resume from. */
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume --set job.journal=off", dir),
		     2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "--resume needs a journal"), "%s", err);
	free(err);
}

/* Every task failed: a run without --resume is refused naming --retry-failed (what
 * runs them again) and --force; a --resume, with nothing left to run, says so and
 * names --retry-failed; --retry-failed then runs them. */
Test(resume, after_every_task_failed_the_messages_name_retry_failed, .timeout = 60)
{
	const char *dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = 0\nmax_retries = 0\n[worker]\nplugin = faulty\nfail_every = 1\n"
		    "[generator]\nplugin = range\nstop = 200\n[sink]\nplugin = jsonl\n"
		    "path = out.jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 1);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "holds the outcomes of 200 tasks of an earlier run of this job (it "
			      "finished all 200)") &&
			  strstr(err, "200 of them failed: --resume --retry-failed runs those "
				      "again (--resume alone has nothing left to run); --force "
				      "starts over anyway"),
		  "%s", err);
	free(err);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 1);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "gpud: nothing left to run: every task already has its outcome, "
			      "200 of them failed; --resume --retry-failed runs those again"),
		  "%s", err);
	free(err);
	cr_expect_eq(t_gpud(dir,
			    "run '%s/job.ini' --ui off --resume --retry-failed --force "
			    "--set worker.fail_every=0",
			    dir),
		     0);
	err = t_read_in(dir, "err");
	cr_expect(!strstr(err, "nothing left to run"), "%s", err);
	free(err);
	t_sh(dir, "grep -c '\"status\": \"ok\"' out.jsonl > count");
	cr_expect_eq(t_read_long(dir, "count"), 200, "every task ran again, ok");
}

/* The journal's own cut, at every byte of its last two records: 300 tasks (task 5
 * failed) end with FAILED, DONE x5 and END, the last DONE holding tasks 256..299. Cut k
 * bytes off the end and resumed: the partial record's bytes are cut (none when k is a
 * whole record), END is gone, and what the records left whole say is loaded, the same
 * as a cut at the record's start (k = 32: every task done; k = 33..64: 256..299 not);
 * the tasks lost marked again and the run ended, the journal reads whole and finished.
 * In-process, so every byte is cheap; the end-to-end run below samples the cuts. */
Test(resume, a_journal_cut_at_every_byte_of_its_end_loads_what_is_whole, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char path[600], why[1200];
	snprintf(path, sizeof path, "%s/j.journal", dir);
	struct journal j = {.fd = -1, .ranks = 1};
	cr_assert_eq(journal_create(&j, path, 7, NULL, 0, why, sizeof why), 0, "%s", why);
	for (uint64_t id = 0; id < 300; id++)
		journal_mark(&j, id, id == 5);
	cr_assert_eq(journal_end(&j, 300), 0);
	journal_close(&j);
	char *whole = t_read(path);
	struct stat st;
	cr_assert(whole && stat(path, &st) == 0);
	size_t size = (size_t)st.st_size, records = (size - 64) / 32;
	cr_assert_eq((size - 64) % 32, 0, "%zu bytes", size);
	for (size_t k = 1; k <= 64; k++) {
		FILE *f = fopen(path, "w");
		cr_assert(f && fwrite(whole, 1, size - k, f) == size - k && fclose(f) == 0);
		j = (struct journal){.fd = -1, .ranks = 1};
		cr_assert_eq(journal_resume(&j, path, 7, NULL, 0, false, false, why, sizeof why), 0,
			     "cut %zu: %s", k, why);
		size_t lost = (k + 31) / 32;
		cr_expect_eq(j.cut_bytes, (32 - k % 32) % 32, "cut %zu", k);
		cr_expect_eq(j.records, records - lost, "cut %zu", k);
		cr_expect(!j.ended, "cut %zu: the END record is gone", k);
		cr_expect_eq(j.done, lost == 1 ? 300 : 256, "cut %zu", k);
		cr_expect(journal_is_done(&j, 255) && journal_is_done(&j, 5), "cut %zu", k);
		cr_expect_eq(journal_is_done(&j, 299), lost == 1, "cut %zu", k);
		cr_expect_eq(j.failed, 1, "cut %zu", k);
		/* The tasks lost run again (marked here), and the run ends. */
		for (uint64_t id = 256; id < 300; id++)
			if (!journal_is_done(&j, id))
				journal_mark(&j, id, 0);
		cr_assert_eq(journal_end(&j, 300), 0);
		journal_close(&j);
		j = (struct journal){.fd = -1, .ranks = 1};
		cr_assert_eq(journal_read(&j, path, why, sizeof why), 0, "cut %zu: %s", k, why);
		cr_expect(j.cut_bytes == 0 && j.ended && j.end_count == 300 && j.done == 300 &&
				  j.failed == 1,
			  "cut %zu, read again: %llu bytes cut, ended %d, %llu done, %llu failed",
			  k, (unsigned long long)j.cut_bytes, j.ended, (unsigned long long)j.done,
			  (unsigned long long)j.failed);
		journal_close(&j);
	}
	free(whole);
}

/* The same through gpud run --resume, at cuts sampled from that range: one byte and
 * most of the END record, the whole of it, one byte into the record before, most of
 * that one. Each cut is three runs of gpud; under a sanitizer on a loaded machine
 * every byte would run past the test's time. */
Test(resume, torn_journal_tails_are_cut_and_what_they_said_runs_again, .timeout = 120)
{
	const char *dir = t_tmpdir();
	/* The null sink cannot say what it holds: the journal alone decides. */
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = echo\n[generator]\nplugin = range\n"
		    "stop = 5000\n[sink]\nplugin = null\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	t_sh(dir, "cp job.journal whole");
	static const int cuts[] = {1, 17, 31, 32, 33, 63};
	for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
		int k = cuts[c];
		/* Cut inside the END record (k < 32) or inside the record before it. */
		char cmd[300];
		snprintf(cmd, sizeof cmd,
			 "cp whole job.journal && n=$(stat -c %%s whole) && "
			 "truncate -s $((n - %d)) job.journal",
			 k);
		cr_assert_eq(t_sh(dir, cmd), 0);
		cr_expect_eq(t_gpud(dir,
				    "run '%s/job.ini' --ui off --resume --stats-json %s/s.json",
				    dir, dir),
			     0, "cut %d bytes", k);
		char *err = t_read_in(dir, "err");
		if (k % 32)
			cr_expect(strstr(err, "bytes of a record cut short"), "cut %d: %s", k, err);
		/* Whatever a lost record said is run again; nothing else is. */
		char *st = t_read_in(dir, "s.json");
		long generated = atol(strstr(st, "\"generated\": ") + 13);
		cr_expect(generated <= 64 + 64, "cut %d bytes: %ld tasks ran again", k, generated);
		free(st);
		free(err);
		/* And the journal is whole again: resuming once more runs nothing. */
		cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 0);
		err = t_read_in(dir, "err");
		cr_expect(strstr(err, "already finished"), "cut %d, second resume: %s", k, err);
		free(err);
	}
	/* A record changed in the middle: cut from there on, and those tasks run again. */
	t_sh(dir,
	     "cp whole job.journal && printf 'X' | dd of=job.journal bs=1 seek=100 conv=notrunc "
	     "2>/dev/null");
	cr_expect_eq(
		t_gpud(dir, "run '%s/job.ini' --ui off --resume --stats-json %s/s.json", dir, dir),
		0);
	char *st = t_read_in(dir, "s.json");
	cr_expect(atol(strstr(st, "\"generated\": ") + 13) >= 4000, "%s", st);
	free(st);
}

Test(resume, another_jobs_journal_is_refused_unless_forced, .timeout = 60)
{
	const char *dir = t_tmpdir();
	free(t_write(dir, "in.txt", "a\nb\nc\n"));
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = faulty\n[generator]\nplugin = lines\n"
		    "path = in.txt\n[sink]\nplugin = null\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume --set worker.sleep_us=5", dir),
		     2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "was written by another job") && strstr(err, "--force"), "%s", err);
	cr_expect_eq(t_count_lines(err, ""), 1, "%s", err);
	free(err);
	/* Another input file is another job too. */
	free(t_write(dir, "in.txt", "a\nb\nc\nd\n"));
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 2);
	cr_expect_eq(t_gpud(dir, "status '%s/job.ini'", dir), 0);
	char *out = t_read_in(dir, "out");
	/* Said once, as the file that changed (not also as "another job"). */
	cr_expect(strstr(out, "in.txt named by generator.path changed since the journaled run"),
		  "%s", out);
	cr_expect_null(strstr(out, "written by another job"), "%s", out);
	free(out);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume --force", dir), 0);
}

Test(resume, sigterm_exits_4_and_resume_finishes_and_retry_failed_reruns, .timeout = 120)
{
	const char *dir = t_tmpdir();
	t_jobf(dir,
	       "[job]\ngpus = 0,1\n[worker]\nplugin = faulty\nsleep_us = 2000\nfail_on = 7,9\n"
	       "[generator]\nplugin = range\nstop = 3000\n[sink]\nplugin = files\ndir = res\n");
	t_sh(dir, WAIT_FOR "\"$GPUD\" run job.ini --ui off 2>err & p=$!\n"
			   "w '[ $(ls res 2>/dev/null | wc -l) -gt 100 ]'\n"
			   "kill -TERM $p; wait $p; echo $? > rc\n");
	cr_expect_eq(t_read_long(dir, "rc"), 4, "SIGTERM with a journal: resumable");
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "--resume` finishes it"), "%s", err);
	free(err);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 1);
	t_sh(dir, "ls res | wc -l > count");
	cr_expect_eq(t_read_long(dir, "count"), 2998, "all but the two that fail");
	/* The failures again, now that the worker would take them (another job: forced). */
	cr_expect_eq(t_gpud(dir,
			    "run '%s/job.ini' --ui off --retry-failed --force "
			    "--set worker.fail_on=1000000 --stats-json %s/s.json",
			    dir, dir),
		     0);
	t_sh(dir, "ls res | wc -l > count");
	cr_expect_eq(t_read_long(dir, "count"), 3000);
	char *st = t_read_in(dir, "s.json");
	cr_expect(strstr(st, "\"generated\": 2,"), "only the two ran: %s", st);
	cr_expect(strstr(st, "\"resumed\": 2998"), "%s", st);
	free(st);
	cr_expect_eq(t_gpud(dir, "status '%s/job.ini'", dir), 0);
	char *out = t_read_in(dir, "out");
	cr_expect(strstr(out, "(0 of them failed)"), "%s", out);
	free(out);
}

Test(resume, output_cut_at_any_byte_is_completed_exactly_once, .timeout = 120)
{
	const char *dir = t_tmpdir();
	/* Lines in, so the lines generator's skip is used too. */
	t_sh(dir, "seq 0 2999 > in.txt");
	t_jobf(dir, "[job]\ngpus = 0,1\n[worker]\nplugin = faulty\n[generator]\nplugin = lines\n"
		    "path = in.txt\n[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	t_sh(dir, "cp out.jsonl whole; stat -c %s whole > size");
	long size = t_read_long(dir, "size");
	/* As if the disk lost the end of the file (a power cut): at line ends, inside a
	 * line, near the start, near the end. */
	long cuts[] = {0, 1, 37, size / 3, size / 2 + 5, size - 200, size - 1};
	for (size_t k = 0; k < sizeof cuts / sizeof *cuts; k++) {
		char cmd[200];
		snprintf(cmd, sizeof cmd, "cp whole out.jsonl && truncate -s %ld out.jsonl",
			 cuts[k]);
		cr_assert_eq(t_sh(dir, cmd), 0);
		cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 0,
			     "cut at %ld", cuts[k]);
		char *out = t_read_in(dir, "out.jsonl");
		cr_assert(out);
		check_jsonl_once(out, 3000);
		free(out);
	}
}

Test(resume, a_journal_that_cannot_be_written_stops_the_run_before_it_starts, .timeout = 60)
{
	const char *dir = t_tmpdir();
	t_jobf(dir,
	       "[job]\ngpus = 0\njournal = no/such/folder/j.journal\n[worker]\nplugin = echo\n"
	       "[generator]\nplugin = range\nstop = 3\n[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini'", dir), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "[job] journal: no folder") && strstr(err, "journal = off"), "%s",
		  err);
	free(err);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "cannot open the journal") && strstr(err, "journal = off"), "%s",
		  err);
	free(err);
	cr_expect_eq(t_sh(dir, "test ! -e out.jsonl"), 0, "nothing ran");
	/* Not a journal at all. */
	t_jobf(dir, "[job]\ngpus = 0\njournal = j.journal\n[worker]\nplugin = echo\n"
		    "[generator]\nplugin = range\nstop = 3\n[sink]\nplugin = null\n");
	free(t_write(dir, "j.journal",
		     "this is not a journal, and it is long enough to read\n"
		     "................................................\n"));
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "is not a gpud journal"), "%s", err);
	free(err);
}

/* The task ids of the jsonl text: how many lines, how many ids twice, how many of
 * 0..n-1 missing. */
static void count_ids(const char *out, unsigned n, unsigned *lines, unsigned *twice,
		      unsigned *missing)
{
	unsigned char *seen = calloc(n, 1);
	*lines = *twice = *missing = 0;
	for (const char *p = out; p && *p;) {
		unsigned long id;
		if (sscanf(p, "{\"task_id\": %lu,", &id) == 1 && id < n && seen[id]++)
			(*twice)++;
		(*lines)++;
		p = strchr(p, '\n');
		p = p ? p + 1 : NULL;
	}
	for (unsigned i = 0; i < n; i++)
		*missing += !seen[i];
	free(seen);
}

/* Lines far longer than the 64 KiB jsonl reads its file back with: 50 of 100 KB and 3
 * of 1 MB, each starting with its number. */
#define LONG_LINES                                                                                 \
	"for i in $(seq 0 49); do printf %d $i; head -c 100000 /dev/zero | tr '\\0' x; "           \
	"echo; done > in.txt; for i in 50 51 52; do printf %d $i; "                                \
	"head -c 1000000 /dev/zero | tr '\\0' y; echo; done >> in.txt"

Test(resume, jsonl_lines_of_any_length_are_recognised_on_resume, .timeout = 120)
{
	const char *dir = t_tmpdir();
	cr_assert_eq(t_sh(dir, LONG_LINES), 0);
	t_jobf(dir, "[job]\ngpus = 0\nmax_task_bytes = 2M\nmax_result_bytes = 2M\n"
		    "[worker]\nplugin = faulty\n[generator]\nplugin = lines\npath = in.txt\n"
		    "[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	/* The finished run resumed: every line is recognised, nothing runs again. */
	cr_expect_eq(
		t_gpud(dir, "run '%s/job.ini' --ui off --resume --stats-json %s/s.json", dir, dir),
		0);
	char *st = t_read_in(dir, "s.json"), *err = t_read_in(dir, "err");
	cr_expect(st && strstr(st, "\"generated\": 0,"), "%s\n%s", st, err);
	free(st);
	free(err);
	char *out = t_read_in(dir, "out.jsonl");
	unsigned lines, twice, missing;
	count_ids(out, 53, &lines, &twice, &missing);
	cr_expect(lines == 53 && twice == 0 && missing == 0, "%u lines, %u twice, %u missing",
		  lines, twice, missing);
	free(out);

	/* Stopped in the middle with SIGTERM, then resumed: each line once. */
	dir = t_tmpdir();
	cr_assert_eq(t_sh(dir, LONG_LINES), 0);
	t_jobf(dir, "[job]\ngpus = 0\nmax_task_bytes = 2M\nmax_result_bytes = 2M\n"
		    "[worker]\nplugin = faulty\nsleep_us = 30000\n[generator]\nplugin = lines\n"
		    "path = in.txt\n[sink]\nplugin = jsonl\npath = out.jsonl\n");
	t_sh(dir, "\"$GPUD\" run job.ini --ui off 2>err & p=$!\n"
		  "w '[ $(cat out.jsonl 2>/dev/null | wc -l) -gt 5 ]'\n"
		  "kill -TERM $p; wait $p; echo $? > rc\n");
	cr_expect_eq(t_read_long(dir, "rc"), 4);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 0);
	out = t_read_in(dir, "out.jsonl");
	count_ids(out, 53, &lines, &twice, &missing);
	cr_expect(lines == 53 && twice == 0 && missing == 0, "%u lines, %u twice, %u missing",
		  lines, twice, missing);
	free(out);
}

static long file_size(const char *dir, const char *name)
{
	char path[600];
	struct stat st;
	snprintf(path, sizeof path, "%s/%s", dir, name);
	cr_assert_eq(stat(path, &st), 0, "no %s", path);
	return (long)st.st_size;
}

/* --retry-failed with the fault gone, then plain --resume runs: the fixed tasks stay
 * fixed, and a resume with nothing to do leaves the journal as it was. The fault is a
 * key, so the runs after the first are another job to the journal: --force. */
static void retry_fixes_last(const char *sink)
{
	const char *dir = t_tmpdir();
	t_jobf(dir,
	       "[job]\ngpus = 0,1\n[worker]\nplugin = faulty\nfail_on = 7,9,11\n"
	       "[generator]\nplugin = range\nstop = 500\n[sink]\n%s\n",
	       sink);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 1, "%s", sink);
	const char *fixed = "--force --set worker.fail_on=1000000";
	cr_expect_eq(
		t_gpud(dir, "run '%s/job.ini' --ui off --resume --retry-failed %s", dir, fixed), 0,
		"%s", sink);
	long size = file_size(dir, "job.journal");
	for (int k = 0; k < 2; k++) {
		cr_expect_eq(t_gpud(dir,
				    "run '%s/job.ini' --ui off --resume %s --stats-json %s/s.json",
				    dir, fixed, dir),
			     0, "%s, resume %d", sink, k);
		/* Nothing ran: a sink that cannot tell what it holds stops at the journal's
		 * end (no stats written). */
		char *st = t_read_in(dir, "s.json"), *err = t_read_in(dir, "err");
		cr_expect((st && strstr(st, "\"generated\": 0,")) ||
				  strstr(err, "already finished"),
			  "%s: %s\n%s", sink, st, err);
		free(st);
		free(err);
		char path[600];
		snprintf(path, sizeof path, "%s/s.json", dir);
		remove(path);
		cr_expect_eq(file_size(dir, "job.journal"), size, "%s, resume %d: the journal grew",
			     sink, k);
	}
	/* Nothing failed any more: --retry-failed has nothing to do either. */
	cr_expect_eq(
		t_gpud(dir, "run '%s/job.ini' --ui off --resume --retry-failed %s", dir, fixed), 0,
		"%s", sink);
	cr_expect_eq(file_size(dir, "job.journal"), size, "%s, --retry-failed: the journal grew",
		     sink);
	cr_expect_eq(t_gpud(dir, "status '%s/job.ini'", dir), 0);
	char *out = t_read_in(dir, "out");
	cr_expect(strstr(out, "tasks with an outcome: 500 (0 of them failed)"), "%s: %s", sink,
		  out);
	free(out);
}

Test(resume, retry_failed_fixes_last_and_a_finished_resume_appends_nothing, .timeout = 120)
{
	retry_fixes_last("plugin = jsonl\npath = out.jsonl");
	retry_fixes_last("plugin = files\ndir = res");
	retry_fixes_last("plugin = null");
}

Test(resume, resume_without_a_journal_keeps_what_the_output_holds, .timeout = 120)
{
	/* The journal lost (deleted, or kept elsewhere): the jsonl and files sinks say what
	 * their output holds, and nothing is run again or thrown away. */
	const char *dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = 0,1\n[worker]\nplugin = faulty\n[generator]\nplugin = range\n"
		    "stop = 2000\n[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	cr_assert_eq(t_sh(dir, "rm job.journal"), 0);
	cr_expect_eq(
		t_gpud(dir, "run '%s/job.ini' --ui off --resume --stats-json %s/s.json", dir, dir),
		0);
	char *st = t_read_in(dir, "s.json"), *err = t_read_in(dir, "err");
	cr_expect(st && strstr(st, "\"generated\": 0,"), "%s\n%s", st, err);
	cr_expect(strstr(err, "no journal at") &&
			  strstr(err, "already holds, if anything, is kept"),
		  "%s", err);
	free(st);
	free(err);
	char *out = t_read_in(dir, "out.jsonl");
	cr_assert(out);
	check_jsonl_once(out, 2000);
	free(out);

	dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = 0,1\n[worker]\nplugin = faulty\n[generator]\nplugin = range\n"
		    "stop = 2000\n[sink]\nplugin = files\ndir = res\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	cr_assert_eq(t_sh(dir, "rm job.journal"), 0);
	cr_expect_eq(
		t_gpud(dir, "run '%s/job.ini' --ui off --resume --stats-json %s/s.json", dir, dir),
		0);
	st = t_read_in(dir, "s.json");
	cr_expect(st && strstr(st, "\"generated\": 0,"), "%s", st);
	free(st);
	t_sh(dir, "ls res | wc -l > count");
	cr_expect_eq(t_read_long(dir, "count"), 2000);
}

Test(resume, resume_with_no_journal_and_no_output_is_a_fresh_run, .timeout = 60)
{
	/* The requeue-safe batch script passes --resume on its first run too. */
	const char *dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = 0,1\n[worker]\nplugin = faulty\n[generator]\nplugin = range\n"
		    "stop = 2000\n[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 0);
	char *out = t_read_in(dir, "out.jsonl");
	cr_assert(out);
	check_jsonl_once(out, 2000);
	free(out);
	cr_expect_eq(t_gpud(dir, "status '%s/job.ini'", dir), 0);
	out = t_read_in(dir, "out");
	cr_expect(strstr(out, "finished: all 2000 tasks"), "%s", out);
	free(out);
	/* A sink that cannot tell what it holds: a fresh run, and said so. */
	cr_expect_eq(t_gpud(dir,
			    "run '%s/job.ini' --ui off --resume --set sink.plugin=null "
			    "--set job.journal=%s/other.journal",
			    dir, dir),
		     0);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "no journal at") && strstr(err, "cannot tell what an earlier run's "
							      "output holds"),
		  "%s", err);
	free(err);
}

Test(resume, a_changed_input_folder_is_refused_naming_it, .timeout = 60)
{
	const char *dir = t_tmpdir();
	cr_assert_eq(t_sh(dir, "mkdir in && for f in b c d e; do echo $f > in/$f.txt; done"), 0);
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = echo\n[generator]\nplugin = files\n"
		    "dir = in\n[sink]\nplugin = null\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	/* Unchanged: resumes (to nothing). */
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 0);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "already finished"), "%s", err);
	free(err);
	/* A file that sorts first would shift every task id. */
	free(t_write(dir, "in/a.txt", "a\n"));
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "/in named by generator.dir changed since the journaled run: 4 files "
			      "then, 5 now") &&
			  strstr(err, "--force"),
		  "%s", err);
	cr_expect_eq(t_count_lines(err, ""), 1, "%s", err);
	free(err);
	/* The same number of files, one renamed. */
	cr_assert_eq(t_sh(dir, "rm in/a.txt && mv in/e.txt in/0.txt"), 0);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "holds 4 files as it did, but their names, sizes or times differ"),
		  "%s", err);
	free(err);
	cr_expect_eq(t_gpud(dir, "status '%s/job.ini'", dir), 0);
	char *out = t_read_in(dir, "out");
	cr_expect(strstr(out, "but their names, sizes or times differ: --resume refuses it "
			      "without --force"),
		  "%s", out);
	free(out);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume --force", dir), 0);
	/* A file named by a key: named too. */
	free(t_write(dir, "list.txt", "1\n2\n"));
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = echo\n[generator]\nplugin = lines\n"
		    "path = list.txt\n[sink]\nplugin = null\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	free(t_write(dir, "list.txt", "0\n1\n2\n"));
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "list.txt named by generator.path changed since the journaled run "
			      "(4 bytes then, 6 now)"),
		  "%s", err);
	free(err);
}

/* Standard input cannot be compared ahead of the run, but the sampled tasks' inputs are
 * compared as it is read again: a stream that starts elsewhere (one line put in front)
 * is refused naming the task, before anything new runs and with the output untouched;
 * the same stream finishes the run, every id once with its own input. */
Test(resume, a_changed_stream_is_refused_and_the_same_one_resumes, .timeout = 90)
{
	const char *dir = t_tmpdir();
	t_jobf(dir,
	       "[job]\ngpus = 0,1\n[worker]\nplugin = faulty\nsleep_us = 20000\n"
	       "[generator]\nplugin = lines\npath = -\n[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_assert_eq(
		t_sh(dir,
		     "seq 0 299 | \"$GPUD\" run job.ini --ui off 2>err1 & pid=$!\n"
		     "w '[ -f out.jsonl ] && [ \"$(wc -l < out.jsonl)\" -ge 20 ]'\n"
		     "kill -TERM $pid; wait $pid; echo $? > rc\n"
		     "wc -l < out.jsonl > lines1\n"
		     "(echo 1000; seq 0 299) | \"$GPUD\" run job.ini --ui off --resume 2>err2\n"
		     "echo $? >> rc; wc -l < out.jsonl > lines2\n"
		     "seq 0 299 | \"$GPUD\" run job.ini --ui off --resume 2>err3; echo $? >> rc\n"),
		0);
	char *rc = t_read_in(dir, "rc"), *err2 = t_read_in(dir, "err2"),
	     *err3 = t_read_in(dir, "err3");
	cr_expect_str_eq(rc, "4\n2\n0\n", "%s\n%s", err2, err3);
	cr_expect(strstr(err2, "generator.path is standard input or a pipe"), "%s", err2);
	cr_expect(strstr(err2, "task 0 came with other bytes"), "%s", err2);
	cr_expect_eq(t_read_long(dir, "lines1"), t_read_long(dir, "lines2"),
		     "the refused run "
		     "changed the output");
	char *out = t_read_in(dir, "out.jsonl");
	unsigned char seen[300] = {0};
	size_t lines = 0;
	for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n"), lines++) {
		unsigned id;
		char want[64];
		cr_assert_eq(sscanf(l, "{\"task_id\": %u,", &id), 1, "%s", l);
		cr_assert_lt(id, 300u, "%s", l);
		seen[id]++;
		snprintf(want, sizeof want, "\"result\": \"%u\"}", id);
		cr_expect(strstr(l, want), "task %u: %s", id, l);
	}
	cr_expect_eq(lines, 300u, "%s", err3);
	for (unsigned i = 0; i < 300; i++)
		cr_expect_eq(seen[i], 1, "task %u %d times", i, seen[i]);
	free(out);
	free(rc);
	free(err2);
	free(err3);
}

/* Failures are outcomes too: with every other task failing, kill -9 at random moments
 * and resume, again and again, then once more with the output cut short: every id is in
 * jsonl exactly once, ok or error as its input makes it. (The journal recorded failures
 * that the sink's buffer had not yet written; a resume took the journal's word for them
 * and they were never written.) */
Test(resume, failures_lost_with_the_output_are_run_again, .timeout = 180)
{
	const char *dir = t_tmpdir();
	t_jobf(dir,
	       "[job]\ngpus = 0,1\n[worker]\nplugin = faulty\nfail_every = 2\nsleep_us = 2000\n"
	       "[generator]\nplugin = range\nstop = 1500\n[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_expect_eq(kill_and_resume(dir, 4, JSONL_COUNT, 200), 1);
	/* The finished output cut in the middle, as a lost disk write would: resumed. */
	t_sh(dir, "head -c 30000 out.jsonl > cut && mv cut out.jsonl\n"
		  "\"$GPUD\" run job.ini --ui off --resume 2>>err; echo $? > rc\n");
	cr_expect_eq(t_read_long(dir, "rc"), 1);
	char *out = t_read_in(dir, "out.jsonl"), *err = t_read_in(dir, "err");
	cr_assert(out, "%s", err);
	unsigned char seen[1500] = {0};
	unsigned wrong = 0;
	for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
		unsigned id;
		if (sscanf(l, "{\"task_id\": %u,", &id) != 1 || id >= 1500) {
			wrong++;
			continue;
		}
		seen[id]++;
		bool odd = id % 2 == 1;
		if (odd ? !strstr(l, "\"status\": \"error\"") : !strstr(l, "\"status\": \"ok\""))
			wrong++;
	}
	unsigned missing = 0, twice = 0;
	for (unsigned i = 0; i < 1500; i++) {
		missing += !seen[i];
		twice += seen[i] > 1;
	}
	cr_expect_eq(missing, 0, "%u tasks missing", missing);
	cr_expect_eq(twice, 0, "%u tasks twice", twice);
	cr_expect_eq(wrong, 0, "%u lines wrong", wrong);
	free(out);
	free(err);
}

/* Streams checked on every rank, and a stream shorter than what the journaled run read:
 * rank 1 of 2 (whose sampled tasks are its own: every 1,024th global id is rank 0's
 * with 2 ranks) refuses a stream with a line put in front; a stream that ends before a
 * task the journaled run read is refused too, naming both counts. */
Test(resume, changed_streams_are_refused_on_every_rank_and_when_shorter, .timeout = 120)
{
	const char *dir = t_tmpdir();
	t_jobf(dir,
	       "[job]\ngpus = 0,1\n[worker]\nplugin = faulty\nsleep_us = 1000\n"
	       "[generator]\nplugin = lines\npath = -\n[sink]\nplugin = jsonl\npath = out-{rank}.jsonl\n");
	t_sh(dir,
	     "seq 0 5999 > in.txt; (echo EXTRA; seq 0 5999) > in2.txt\n"
	     "\"$GPUD\" run job.ini --ui off --rank 1/2 < in.txt 2>err1 & pid=$!\n"
	     "w '[ -f out-1.jsonl ] && [ $(wc -l < out-1.jsonl) -ge 1200 ]'\n"
	     "kill -9 $pid; wait $pid\n"
	     "\"$GPUD\" run job.ini --ui off --resume --rank 1/2 < in2.txt 2>err2; echo $? > rc\n"
	     "head -n 1000 in.txt | \"$GPUD\" run job.ini --ui off --resume --rank 1/2 2>err3\n"
	     "echo $? >> rc\n"
	     "\"$GPUD\" run job.ini --ui off --resume --rank 1/2 < in.txt 2>err4; echo $? >> rc\n");
	char *rc = t_read_in(dir, "rc"), *err2 = t_read_in(dir, "err2"),
	     *err3 = t_read_in(dir, "err3");
	char *err4 = t_read_in(dir, "err4");
	cr_expect_str_eq(rc, "2\n2\n0\n", "%s\n---\n%s\n---\n%s", err2, err3, err4);
	cr_expect(strstr(err2, "came with other bytes"), "%s", err2);
	cr_expect(strstr(err3, "it ended after 1000 tasks, and that run read task "), "%s", err3);
	char *out = t_read_in(dir, "out-1.jsonl");
	/* Rank 1's share of 6000: chunks 1, 3, 5, ... of 64 ids. */
	size_t want = 0;
	for (unsigned id = 0; id < 6000; id++)
		want += (id / 64) % 2 == 1;
	cr_expect_eq(t_count_lines(out, "{\"task_id\""), want, "rank 1's share, each once");
	free(out);
	free(rc);
	free(err2);
	free(err3);
	free(err4);
}

Test(resume, ids_the_output_names_past_the_job_are_ignored_and_said, .timeout = 120)
{
	/* A file or a line that names no task of the job (a stray in the results folder,
	 * an id far past the job) is neither a crash nor a task counted done. */
	const char *dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = faulty\n[generator]\nplugin = range\n"
		    "stop = 10\n[sink]\nplugin = files\ndir = res\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	cr_assert_eq(t_sh(dir, "touch res/1732467000123456789 res/20261124"), 0);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 0);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "gpud: 2 entries of the output of sink files name no task of this "
			      "job (e.g. task ") &&
			  strstr(err, "its tasks are 0 to 9): ignored"),
		  "%s", err);
	free(err);
	cr_expect_eq(t_gpud(dir, "status '%s/job.ini'", dir), 0);
	char *out = t_read_in(dir, "out");
	cr_expect(strstr(out, "tasks with an outcome: 10 (0 of them failed)"), "%s", out);
	free(out);
	/* Without a journal too. */
	cr_assert_eq(t_sh(dir, "rm job.journal"), 0);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 0);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "2 entries of the output of sink files name no task"), "%s", err);
	free(err);

	/* A jsonl line, with and without a journal. */
	dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = faulty\n[generator]\nplugin = range\n"
		    "stop = 10\n[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	cr_assert_eq(t_sh(dir, "echo '{\"task_id\": 999999999999999, \"status\": \"ok\", "
			       "\"result\": \"x\"}' >> out.jsonl"),
		     0);
	for (int k = 0; k < 2; k++) {
		cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 0);
		err = t_read_in(dir, "err");
		cr_expect(strstr(err, "1 entry of the output of sink jsonl names no task of this "
				      "job (e.g. task 999999999999999; its tasks are 0 to 9): "
				      "ignored"),
			  "%s", err);
		cr_expect(strstr(err, "resumed: 10 tasks were already done"), "%s", err);
		free(err);
		t_sh(dir, "rm job.journal");
	}

	/* A generator that cannot count its tasks (a pipe): the journal's END bounds them,
	 * and without one an id far past anything is still no crash. */
	dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = faulty\n[generator]\nplugin = lines\n"
		    "path = -\n[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_assert_eq(
		t_sh(dir,
		     "seq 0 9 | \"$GPUD\" run job.ini --ui off 2>err; echo $? > rc\n"
		     "echo '{\"task_id\": 20261124, \"status\": \"ok\", \"result\": \"x\"}' "
		     ">> out.jsonl\n"
		     "seq 0 9 | \"$GPUD\" run job.ini --ui off --resume 2>err2; echo $? >> rc\n"
		     "echo '{\"task_id\": 1732467000123456789, \"status\": \"error\"}' "
		     ">> out.jsonl\nrm job.journal\n"
		     "seq 0 9 | \"$GPUD\" run job.ini --ui off --resume 2>err3; echo $? >> rc\n"
		     "\"$GPUD\" status job.ini > status\n"),
		0);
	char *rc = t_read_in(dir, "rc"), *err2 = t_read_in(dir, "err2"),
	     *err3 = t_read_in(dir, "err3");
	cr_expect_str_eq(rc, "0\n0\n0\n", "%s\n%s", err2, err3);
	cr_expect(strstr(err2, "1 entry of the output of sink jsonl names no task of this job "
			       "(e.g. task 20261124; the journal ended with 10 tasks): ignored"),
		  "%s", err2);
	cr_expect(strstr(err3, "1 entry of the output of sink jsonl names no task of this job "
			       "(e.g. task 1732467000123456789; generator lines does not count"),
		  "%s", err3);
	free(rc);
	free(err2);
	free(err3);
}

Test(resume, status_and_resume_load_many_failures_in_n_log_n, .timeout = 120)
{
	/* Every task failed: as many FAILED records as tasks. The last word about each
	 * id is found by sorting, not by rescanning them all for each. */
	const char *dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = faulty\nfail_every = 1\n"
		    "[generator]\nplugin = range\nstop = 200000\n[sink]\nplugin = null\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 1);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	cr_expect_eq(t_gpud(dir, "status '%s/job.ini'", dir), 0);
	char *out = t_read_in(dir, "out");
	cr_expect(strstr(out, "tasks with an outcome: 200000 (200000 of them failed)"), "%s", out);
	free(out);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	cr_expect_lt(s, 5.0, "gpud status and a --resume that runs nothing took %.1f s", s);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "already finished: all 200000 tasks have their outcome (200000 "
			      "failed"),
		  "%s", err);
	free(err);
}

/* The failures a journal ends with: the last FAILED record about each id says. */
Test(resume, a_failure_fixed_later_is_dropped_and_one_after_a_fix_stands)
{
	const char *dir = t_tmpdir();
	char path[600], why[1200];
	snprintf(path, sizeof path, "%s/j.journal", dir);
	struct journal j = {.fd = -1, .ranks = 1};
	cr_assert_eq(journal_create(&j, path, 7, NULL, 0, why, sizeof why), 0, "%s", why);
	for (uint64_t id = 0; id < 6; id++)
		journal_mark(&j, id, id >= 1 && id <= 3 ? 1 : 0); /* 1, 2, 3 fail */
	cr_assert_eq(journal_end(&j, 6), 0);
	journal_close(&j);
	/* --retry-failed: 1 and 2 now end ok (a FAILED record of status 0 each), 3 fails
	 * again. */
	j = (struct journal){.fd = -1, .ranks = 1};
	cr_assert_eq(journal_resume(&j, path, 7, NULL, 0, false, true, why, sizeof why), 0, "%s",
		     why);
	journal_mark(&j, 1, 0);
	journal_mark(&j, 2, 0);
	journal_mark(&j, 3, 1);
	cr_assert_eq(journal_end(&j, 6), 0);
	journal_close(&j);
	/* Again: 3 ends ok now, and 1, fixed before, fails (its output said so). */
	j = (struct journal){.fd = -1, .ranks = 1};
	cr_assert_eq(journal_resume(&j, path, 7, NULL, 0, false, true, why, sizeof why), 0, "%s",
		     why);
	journal_mark(&j, 3, 0);
	journal_mark(&j, 1, 2);
	cr_assert_eq(journal_end(&j, 6), 0);
	journal_close(&j);
	j = (struct journal){.fd = -1, .ranks = 1};
	cr_assert_eq(journal_read(&j, path, why, sizeof why), 0, "%s", why);
	cr_expect_eq(j.failed, 1);
	cr_expect_eq(j.n_fail, 1);
	cr_expect(j.n_fail && j.fail_ids[0] == 1, "task %llu", (unsigned long long)j.fail_ids[0]);
	cr_expect_eq(j.done, 6);
	journal_close(&j);
}

/* jsonl into standard output cannot read its output back: it says so, and the journal
 * decides. A second --resume of a finished run then runs nothing (it ran everything
 * again: the sink reported nothing, and that was taken for "nothing is done"). */
Test(resume, a_sink_that_cannot_read_back_leaves_the_journal_the_word, .timeout = 60)
{
	const char *dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = echo\n[generator]\nplugin = range\n"
		    "stop = 10\n[sink]\nplugin = jsonl\npath = -\n");
	t_sh(dir, "\"$GPUD\" run job.ini --ui off --resume > o1 2>e1; echo $? > rc\n"
		  "\"$GPUD\" run job.ini --ui off --resume > o2 2>e2; echo $? >> rc\n");
	char *rc = t_read_in(dir, "rc"), *o1 = t_read_in(dir, "o1"), *o2 = t_read_in(dir, "o2");
	cr_expect_str_eq(rc, "0\n0\n");
	cr_expect_eq(t_count_lines(o1, "{\"task_id\""), 10, "%s", o1);
	cr_expect_eq(t_count_lines(o2, "{\"task_id\""), 0, "the finished run ran again: %s", o2);
	free(rc);
	free(o1);
	free(o2);
}
