/* SPDX-License-Identifier: MIT */
/* The built-in generators and sinks, on normal and hostile input, through real runs. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "helpers.h"

/* Runs an echo job over `gen` into `sink` (lines of the sections); returns the status. */
static int echo_job(const char *dir, const char *job_extra, const char *gen, const char *sink)
{
	char *path = t_jobf(dir,
			    "[job]\ngpus = 0,1\n%s\n[worker]\nplugin = echo\n"
			    "[generator]\n%s\n[sink]\n%s\n",
			    job_extra, gen, sink);
	int rc = t_gpud(dir, "run '%s'", path);
	free(path);
	return rc;
}

static void mkfile(const char *dir, const char *name, const char *text)
{
	free(t_write(dir, name, text));
}

static int cmp_id(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}

/* The ids of the jsonl lines in `out`, in file order; *n set. */
static long *ids(const char *out, size_t *n)
{
	long *v = malloc(sizeof *v * (t_count_lines(out, "{") + 1));
	*n = 0;
	for (const char *p = out; (p = strstr(p, "\"task_id\": ")); p++)
		v[(*n)++] = strtol(p + 11, NULL, 10);
	return v;
}

Test(plugins, lines_empty_file)
{
	const char *dir = t_tmpdir();
	t_write(dir, "in.txt", "");
	cr_expect_eq(echo_job(dir, "", "plugin = lines\npath = in.txt", "plugin = jsonl"), 0);
	char *out = t_read_in(dir, "out");
	cr_expect_str_eq(out, "");
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "gpud: 0 tasks"), "%s", err);
	free(out);
	free(err);
}

Test(plugins, lines_huge_line_fails_alone)
{
	const char *dir = t_tmpdir();
	size_t big = 3u << 20;
	char *text = malloc(big + 64);
	strcpy(text, "first\r\n");
	memset(text + 7, 'z', big);
	strcpy(text + 7 + big, "\r\nlast");
	t_write(dir, "in.txt", text);
	free(text);
	cr_expect_eq(echo_job(dir, "max_task_bytes = 1K", "plugin = lines\npath = in.txt",
			      "plugin = jsonl"),
		     1);
	char *out = t_read_in(dir, "out");
	cr_expect_eq(t_count_lines(out, "{"), 3, "never split: %s", out);
	cr_expect(strstr(out, "\"result\": \"first\""), "CRLF stripped");
	cr_expect(strstr(out, "\"result\": \"last\""), "no trailing newline");
	cr_expect(strstr(out, "task input of 3145729 bytes exceeds max_task_bytes (1024)"), "%s",
		  out);
	free(out);
}

Test(plugins, lines_binary_bytes)
{
	const char *dir = t_tmpdir();
	static const char bin[] = "a\0b\n\xc3\x28\n";
	char path[256];
	snprintf(path, sizeof path, "%s/in.bin", dir);
	FILE *f = fopen(path, "wb");
	fwrite(bin, 1, sizeof bin - 1, f);
	fclose(f);
	cr_expect_eq(echo_job(dir, "", "plugin = lines\npath = in.bin", "plugin = jsonl"), 0);
	char *out = t_read_in(dir, "out");
	cr_expect(strstr(out, "\"result\": \"a\\u0000b\""), "NUL kept and escaped: %s", out);
	cr_expect(strstr(out, "\"result_base64\": \"wyg=\""), "invalid UTF-8 as base64: %s", out);
	free(out);
}

Test(plugins, lines_unreadable_input)
{
	const char *dir = t_tmpdir();
	cr_expect_eq(echo_job(dir, "", "plugin = lines\npath = missing.txt", "plugin = jsonl"), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "lines: cannot open"), "%s", err);
	cr_expect(strstr(err, "missing.txt: No such file or directory"), "%s", err);
	free(err);
	cr_expect_eq(echo_job(dir, "", "plugin = lines\npath = .", "plugin = jsonl"), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "is a folder"), "%s", err);
	free(err);
}

Test(plugins, lines_standard_input)
{
	const char *dir = t_tmpdir();
	char *path = t_write(dir, "job.ini",
			     "[job]\ngpus = 0\n[worker]\nplugin = echo\n"
			     "[generator]\nplugin = lines\npath = -\n"
			     "[sink]\nplugin = jsonl\n");
	mkfile(dir, "typed.txt", "from\nstdin\n");
	cr_expect_eq(t_gpud(dir, "run '%s' <'%s/typed.txt'", path, dir), 0);
	char *out = t_read_in(dir, "out");
	cr_expect(strstr(out, "\"result\": \"from\""), "%s", out);
	cr_expect(strstr(out, "\"result\": \"stdin\""), "%s", out);
	free(out);
	free(path);
}

Test(plugins, files_generator)
{
	const char *dir = t_tmpdir();
	char sub[512];
	snprintf(sub, sizeof sub, "%s/data", dir);
	mkdir(sub, 0777);
	mkfile(sub, "b.txt", "");
	mkfile(sub, "a.txt", "");
	mkfile(sub, "c.bin", "");
	snprintf(sub, sizeof sub, "%s/data/deeper", dir);
	mkdir(sub, 0777);
	mkfile(sub, "d.txt", "");
	cr_expect_eq(echo_job(dir, "", "plugin = files\ndir = data\npattern = *.txt",
			      "plugin = jsonl\ninclude_input = true"),
		     0);
	char *out = t_read_in(dir, "out");
	cr_expect_eq(t_count_lines(out, "{"), 2, "not recursive: %s", out);
	cr_expect(strstr(out, "\"task_id\": 0") && strstr(out, "data/a.txt\""), "%s", out);
	char *a = strstr(out, "data/a.txt"), *b = strstr(out, "data/b.txt");
	cr_expect(a && b, "%s", out);
	free(out);

	cr_expect_eq(echo_job(dir, "",
			      "plugin = files\ndir = data\npattern = *.txt\nrecursive = true",
			      "plugin = jsonl"),
		     0);
	out = t_read_in(dir, "out");
	cr_expect_eq(t_count_lines(out, "{"), 3, "recursive: %s", out);
	/* Sorted: data/a.txt, data/b.txt, data/deeper/d.txt, as task ids 0, 1, 2. */
	char want[600];
	snprintf(want, sizeof want, "\"task_id\": 2, \"status\": \"ok\"");
	char *line = strstr(out, want);
	cr_assert(line, "%s", out);
	cr_expect(strstr(line, "deeper/d.txt\"}"), "task 2 is the deepest: %s", line);
	free(out);
}

Test(plugins, files_generator_bad_folder)
{
	const char *dir = t_tmpdir();
	mkfile(dir, "plain", "");
	cr_expect_eq(echo_job(dir, "", "plugin = files\ndir = plain", "plugin = jsonl"), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "files: cannot read folder"), "%s", err);
	cr_expect(strstr(err, "plain: Not a directory"), "%s", err);
	free(err);
	cr_expect_eq(echo_job(dir, "", "plugin = files\ndir = nope", "plugin = jsonl"), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "nope: No such file or directory"), "%s", err);
	free(err);
}

Test(plugins, files_sink_writes_whole_files)
{
	const char *dir = t_tmpdir();
	t_write(dir, "in.txt", "alpha\nbeta\n\xff\xfe\n");
	cr_expect_eq(echo_job(dir, "", "plugin = lines\npath = in.txt",
			      "plugin = files\ndir = results\nsuffix = .out"),
		     0);
	char *a = t_read_in(dir, "results/0.out"), *b = t_read_in(dir, "results/1.out"),
	     *c = t_read_in(dir, "results/2.out");
	cr_expect_str_eq(a, "alpha");
	cr_expect_str_eq(b, "beta");
	cr_expect_str_eq(c, "\xff\xfe", "bytes as they are");
	char *cmd;
	cr_assert(asprintf(&cmd, "test $(ls -A '%s/results' | wc -l) -eq 3", dir) > 0);
	cr_expect_eq(system(cmd), 0, "no temporary files left");
	free(cmd);
	free(a);
	free(b);
	free(c);
}

/* One job file; the generator and the sink swapped on the command line alone. */
Test(plugins, swap_generator_and_sink_with_set)
{
	const char *dir = t_tmpdir();
	char sub[512];
	snprintf(sub, sizeof sub, "%s/in", dir);
	mkdir(sub, 0777);
	mkfile(sub, "x", "");
	mkfile(sub, "y", "");
	char *path = t_write(dir, "job.ini",
			     "[job]\ngpus = 0\n[worker]\nplugin = echo\n"
			     "[generator]\nplugin = range\nstop = 5\n"
			     "[sink]\nplugin = jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s'", path), 0);
	char *out = t_read_in(dir, "out");
	cr_expect_eq(t_count_lines(out, "{"), 5);
	free(out);
	cr_expect_eq(t_gpud(dir,
			    "run '%s' --set generator.plugin=files --set generator.dir='%s' "
			    "--set sink.plugin=files --set sink.dir='%s/res'",
			    path, sub, dir),
		     0);
	char *x = t_read_in(dir, "res/0"), *y = t_read_in(dir, "res/1");
	cr_assert(x && y);
	cr_expect(strstr(x, "/in/x") && strstr(y, "/in/y"), "%s %s", x, y);
	free(x);
	free(y);
	free(path);
}

/* Ordered output: with one GPU slow, completion order differs from task order; with
 * ordered = true the sink still gets 0, 1, 2, ... */
Test(plugins, ordered_output, .timeout = 60)
{
	const char *dir = t_tmpdir();
	const char *gen = "plugin = range\nstop = 400";
	const char *worker = "plugin = faulty\nslow_gpu = 1\nslow_us = 3000\nsleep_us = 100";
	for (int ordered = 0; ordered < 2; ordered++) {
		char *text;
		cr_assert(asprintf(&text,
				   "[job]\ngpus = 0,1\nqueue_size = 16\nordered = %s\n"
				   "[worker]\n%s\n[generator]\n%s\n[sink]\nplugin = jsonl\n",
				   ordered ? "true" : "false", worker, gen) > 0);
		char *path = t_write(dir, "job.ini", text);
		cr_expect_eq(t_gpud(dir, "run '%s'", path), 0);
		char *out = t_read_in(dir, "out");
		size_t n;
		long *v = ids(out, &n);
		cr_assert_eq(n, 400);
		bool in_order = true;
		for (size_t i = 0; i < n; i++)
			in_order &= v[i] == (long)i;
		if (ordered) {
			cr_expect(in_order, "ordered = true delivered out of order");
		} else {
			cr_expect(!in_order,
				  "the test needs out-of-order completion to mean anything");
			qsort(v, n, sizeof *v, cmp_id);
			for (size_t i = 0; i < n; i++)
				cr_assert_eq(v[i], (long)i);
		}
		free(v);
		free(out);
		free(text);
		free(path);
	}
}

/* The host killed mid-run: the jsonl file holds whole lines only. */
Test(plugins, jsonl_survives_a_host_crash, .timeout = 60)
{
	const char *dir = t_tmpdir();
	char *text, *cmd;
	cr_assert(asprintf(&text,
			   "[job]\ngpus = 0,1\n[worker]\nplugin = faulty\nsleep_us = 300\n"
			   "[generator]\nplugin = range\nstop = 100000\n"
			   "[sink]\nplugin = jsonl\npath = %s/out.jsonl\n",
			   dir) > 0);
	char *path = t_write(dir, "job.ini", text);
	/* Killed 1.6 s after the first line reached the file (it flushes once a second). */
	cr_assert(asprintf(&cmd,
			   "GPUD_PLUGIN_PATH='%s' '%s' run '%s' 2>/dev/null & gp=$!; i=0; "
			   "while [ ! -s '%s/out.jsonl' ] && [ $i -lt 400 ]; do sleep 0.05; "
			   "i=$((i+1)); done; sleep 1.6; kill -9 $gp; wait $gp; true",
			   t_env("FIXTURES"), t_env("GPUD"), path, dir) > 0);
	system(cmd);
	char *out = t_read_in(dir, "out.jsonl");
	cr_assert(out);
	size_t len = strlen(out);
	cr_expect_gt(len, 0, "a second's worth of lines was flushed");
	cr_expect(len == 0 || out[len - 1] == '\n', "the file ends with a whole line");
	size_t lines = t_count_lines(out, "");
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), lines, "every line whole");
	for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n"))
		cr_assert(l[strlen(l) - 1] == '}', "torn line: %s", l);
	free(out);
	free(cmd);
	free(text);
	free(path);
}

/* append = true: a line cut short by a kill of an earlier run is removed on the next
 * open, and the new lines follow whole ones. */
Test(plugins, jsonl_append_cuts_a_torn_last_line, .timeout = 60)
{
	const char *dir = t_tmpdir();
	free(t_write(dir, "out.jsonl",
		     "{\"task_id\": 0, \"status\": \"ok\"}\n"
		     "{\"task_id\": 1, \"status\": \"ok\"}\n{\"task_id\": 2, \"sta"));
	char *job = t_jobf(dir,
			   "[job]\ngpus = 0\n[worker]\nplugin = faulty\n"
			   "[generator]\nplugin = range\nstart = 10\nstop = 13\n"
			   "[sink]\nplugin = jsonl\npath = %s/out.jsonl\nappend = true\n",
			   dir);
	cr_expect_eq(t_gpud(dir, "run '%s' --ui plain", job), 0);
	char *out = t_read_in(dir, "out.jsonl"), *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "ended in a line cut short (19 bytes"), "%s", err);
	cr_expect_eq(t_count_lines(out, ""), 5, "%s", out);
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 5, "%s", out);
	cr_expect(strncmp(out,
			  "{\"task_id\": 0, \"status\": \"ok\"}\n{\"task_id\": 1, \"status\": "
			  "\"ok\"}\n{\"task_id\": ",
			  74) == 0,
		  "%s", out);
	cr_expect_null(strstr(out, "\"sta\n"), "%s", out);
	/* A file that ends whole is left alone, and append = maybe is refused. */
	cr_expect_eq(t_gpud(dir, "run '%s' --ui plain", job), 0);
	free(err);
	err = t_read_in(dir, "err");
	cr_expect_null(strstr(err, "cut short"), "%s", err);
	free(out);
	out = t_read_in(dir, "out.jsonl");
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 8, "%s", out);
	free(job);
	job = t_jobf(dir,
		     "[job]\ngpus = 0\n[worker]\nplugin = faulty\n[generator]\nplugin = range\n"
		     "stop = 1\n[sink]\nplugin = jsonl\npath = x.jsonl\nappend = maybe\n");
	cr_expect_eq(t_gpud(dir, "run '%s' --ui plain", job), 2);
	free(err);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "append = 'maybe': expected true or false"), "%s", err);
	free(out);
	free(err);
	free(job);
}

Test(plugins, jsonl_resumes_into_what_is_not_a_regular_file_as_into_standard_output, .timeout = 60)
{
	/* /dev/stdout (here a pipe) and a FIFO hold nothing to read back: like `-`, they
	 * are opened as for a fresh run, also with --resume and no journal yet (the batch
	 * script that always passes it). They were read back ("Illegal seek", exit 2). */
	const char *dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = echo\n[generator]\nplugin = range\n"
		    "stop = 10\n[sink]\nplugin = jsonl\npath = /dev/stdout\n");
	cr_assert_eq(t_sh(dir, "\"$GPUD\" run job.ini --ui off --resume 2>err | cat > got; "
			       "echo $? > rc\n"
			       "mkfifo f; sed 's|/dev/stdout|f|' job.ini > fifo.ini\n"
			       "cat f > got2 & c=$!\n"
			       "\"$GPUD\" run fifo.ini --ui off --resume 2>err2; echo $? >> rc; "
			       "wait $c\n"),
		     0);
	char *rc = t_read_in(dir, "rc"), *err = t_read_in(dir, "err"),
	     *err2 = t_read_in(dir, "err2");
	cr_expect_str_eq(rc, "0\n0\n", "%s\n%s", err, err2);
	char *got = t_read_in(dir, "got"), *got2 = t_read_in(dir, "got2");
	cr_expect_eq(t_count_lines(got, "{\"task_id\": "), 10, "%s\n%s", got, err);
	cr_expect_eq(t_count_lines(got2, "{\"task_id\": "), 10, "%s\n%s", got2, err2);
	free(rc);
	free(err);
	free(err2);
	free(got);
	free(got2);
}
