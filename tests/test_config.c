/* SPDX-License-Identifier: MIT */
/* The job-file parser: good files, every kind of bad one, --set, paths, long values. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "job/config.h"
#include "helpers.h"

static const char good[] = "; a full job\n"
			   "[job]\n"
			   "gpus = 0, 2,5\n"
			   "workers_per_gpu = 3\n"
			   "queue_size = 77\n"
			   "task_timeout = 1.5\n"
			   "cleanup_timeout = 2.5\n"
			   "base_seed = 1000\n"
			   "max_task_bytes = 64K\n"
			   "max_result_bytes = 2M\n"
			   "max_retries = 2\n"
			   "max_worker_restarts = 9\n"
			   "\n"
			   "[worker]\n"
			   "plugin = ./libw.so\n"
			   "model_path = model.bin\n"
			   "greeting = hello world\n"
			   "[generator]\n"
			   "plugin = lines\n"
			   "path = inputs.txt\n"
			   "[sink]\n"
			   "plugin = jsonl\n";

static char err[4096];

static int load(const char *text, char *const *sets, size_t n, struct cfg *c)
{
	const char *dir = t_tmpdir();
	char *path = t_write(dir, "job.ini", text);
	int rc = cfg_load(c, path, sets, n, err, sizeof err);
	free(path);
	return rc;
}

/* Loads `text`, expects failure, and that the message contains each of `needles`. */
static void bad(const char *text, const char *needle1, const char *needle2)
{
	struct cfg c;
	cr_assert_eq(load(text, NULL, 0, &c), -1, "accepted a bad file:\n%s", text);
	cr_expect(strstr(err, needle1), "message '%s' lacks '%s'", err, needle1);
	if (needle2)
		cr_expect(strstr(err, needle2), "message '%s' lacks '%s'", err, needle2);
}

static const char *arg(const struct cfg_section *s, const char *key)
{
	return gpud_arg(&s->args, key, NULL);
}

Test(config, full_file)
{
	struct cfg c;
	cr_assert_eq(load(good, NULL, 0, &c), 0, "%s", err);
	cr_expect_eq(c.n_gpus, 3);
	cr_expect_eq(c.gpus[0], 0);
	cr_expect_eq(c.gpus[1], 2);
	cr_expect_eq(c.gpus[2], 5);
	cr_expect_eq(c.workers_per_gpu, 3);
	cr_expect_eq(c.queue_size, 77);
	cr_expect_float_eq(c.task_timeout, 1.5, 1e-9);
	cr_expect_float_eq(c.cleanup_timeout, 2.5, 1e-9);
	cr_expect_eq(c.base_seed, 1000);
	cr_expect_eq(c.max_task_bytes, 64u << 10);
	cr_expect_eq(c.max_result_bytes, 2u << 20);
	cr_expect_eq(c.max_retries, 2);
	cr_expect_eq(c.max_worker_restarts, 9);
	cr_expect_str_eq(c.generator.plugin, "lines");
	cr_expect_str_eq(c.sink.plugin, "jsonl");
	cr_expect_str_eq(arg(&c.worker, "greeting"), "hello world");
	cr_expect_eq(c.worker.count, 2, "plugin is not an argument");
	cfg_free(&c);
}

Test(config, defaults)
{
	struct cfg c;
	cr_assert_eq(load("[job]\ngpus=1\n[worker]\nplugin=/w.so\n[generator]\nplugin=range\n",
			  NULL, 0, &c),
		     0, "%s", err);
	cr_expect_eq(c.workers_per_gpu, 1);
	cr_expect_eq(c.queue_size, 1024);
	cr_expect_float_eq(c.task_timeout, 0, 1e-12);
	cr_expect_float_eq(c.cleanup_timeout, 30, 1e-12);
	cr_expect_eq(c.base_seed, 42);
	cr_expect_eq(c.max_task_bytes, 1u << 20);
	cr_expect_eq(c.max_result_bytes, 1u << 20);
	cr_expect_eq(c.max_retries, 0);
	cr_expect_str_eq(c.sink.plugin, "jsonl", "the default sink");
	cfg_free(&c);
}

Test(config, relative_paths_resolve_against_the_job_folder)
{
	struct cfg c;
	cr_assert_eq(load(good, NULL, 0, &c), 0, "%s", err);
	char *want;
	cr_assert(asprintf(&want, "%s/libw.so", c.dir) > 0);
	cr_expect_str_eq(c.worker.plugin, want);
	free(want);
	cr_assert(asprintf(&want, "%s/model.bin", c.dir) > 0);
	cr_expect_str_eq(arg(&c.worker, "model_path"), want);
	free(want);
	cr_assert(asprintf(&want, "%s/inputs.txt", c.dir) > 0);
	cr_expect_str_eq(arg(&c.generator, "path"), want);
	free(want);
	cr_expect_str_eq(arg(&c.worker, "greeting"), "hello world", "not a path: untouched");
	cfg_free(&c);
}

Test(config, set_overrides_and_adds)
{
	struct cfg c;
	char *sets[] = {"job.gpus=7", "worker.greeting=hi", "worker.new_key=v", "sink.plugin=null",
			"job.queue_size=5"};
	cr_assert_eq(load(good, sets, 5, &c), 0, "%s", err);
	cr_expect_eq(c.n_gpus, 1);
	cr_expect_eq(c.gpus[0], 7);
	cr_expect_eq(c.queue_size, 5);
	cr_expect_str_eq(arg(&c.worker, "greeting"), "hi");
	cr_expect_str_eq(arg(&c.worker, "new_key"), "v");
	cr_expect_str_eq(c.sink.plugin, "null");
	cfg_free(&c);
}

Test(config, set_errors_name_the_set)
{
	struct cfg c;
	char *s1[] = {"job.queue_size=abc"};
	cr_expect_eq(load(good, s1, 1, &c), -1);
	cr_expect(strstr(err, "--set job.queue_size=abc"), "%s", err);
	char *s2[] = {"nodot"};
	cr_expect_eq(load(good, s2, 1, &c), -1);
	cr_expect(strstr(err, "SECTION.KEY=VALUE"), "%s", err);
	char *s3[] = {"job.bogus=1"};
	cr_expect_eq(load(good, s3, 1, &c), -1);
	cr_expect(strstr(err, "unknown key 'bogus'"), "%s", err);
}

Test(config, values_of_4k_and_more)
{
	size_t n = 8192;
	char *big = malloc(n + 1);
	memset(big, 'x', n);
	big[n] = '\0';
	char *text;
	cr_assert(asprintf(&text,
			   "[job]\ngpus=0\n[worker]\nplugin=/w.so\nblob = %s\n"
			   "[generator]\nplugin=range\n",
			   big) > 0);
	struct cfg c;
	cr_assert_eq(load(text, NULL, 0, &c), 0, "%s", err);
	cr_expect_eq(strlen(arg(&c.worker, "blob")), n);
	cfg_free(&c);
	free(text);
	free(big);
}

Test(config, sizes)
{
	uint64_t v;
	cr_expect_eq(cfg_parse_size("0", 1ull << 30, &v), 0);
	cr_expect_eq(v, 0);
	cr_expect_eq(cfg_parse_size("4096", 1ull << 30, &v), 0);
	cr_expect_eq(v, 4096);
	cr_expect_eq(cfg_parse_size("64K", 1ull << 30, &v), 0);
	cr_expect_eq(v, 65536);
	cr_expect_eq(cfg_parse_size("1MiB", 1ull << 30, &v), 0);
	cr_expect_eq(v, 1u << 20);
	cr_expect_eq(cfg_parse_size("1G", 1ull << 30, &v), 0);
	cr_expect_eq(cfg_parse_size("2G", 1ull << 30, &v), -1, "above the limit");
	cr_expect_eq(cfg_parse_size("-1", 1ull << 30, &v), -1);
	cr_expect_eq(cfg_parse_size("1X", 1ull << 30, &v), -1);
	cr_expect_eq(cfg_parse_size("", 1ull << 30, &v), -1);
	cr_expect_eq(cfg_parse_size("99999999999999999999", 1ull << 30, &v), -1);
}

#define BASE "[worker]\nplugin=/w.so\n[generator]\nplugin=range\n"

Test(config, unknown_key_names_file_and_line)
{
	bad("[job]\ngpus = 0\nqueue_sise = 4\n" BASE, "job.ini:3:", "unknown key 'queue_sise'");
}

Test(config, bad_numbers)
{
	bad("[job]\ngpus = 0\nqueue_size = ten\n" BASE, "job.ini:3:", "queue_size = 'ten'");
	bad("[job]\ngpus = 0\nqueue_size = -4\n" BASE, "job.ini:3:", "queue_size");
	bad("[job]\ngpus = 0\nqueue_size = 0\n" BASE, "job.ini:3:", "queue_size");
	bad("[job]\ngpus = 0\nworkers_per_gpu = 1000\n" BASE, "job.ini:3:", "workers_per_gpu");
	bad("[job]\ngpus = 0\ntask_timeout = -1\n" BASE, "job.ini:3:", "task_timeout");
	bad("[job]\ngpus = 0\ntask_timeout = nan\n" BASE, "job.ini:3:", "task_timeout");
	bad("[job]\ngpus = 0\nmax_task_bytes = 5G\n" BASE, "job.ini:3:", "max_task_bytes");
	bad("[job]\ngpus = 0\nmax_result_bytes = 1T\n" BASE, "job.ini:3:", "max_result_bytes");
	bad("[job]\ngpus = 0\nbase_seed = 1e3\n" BASE, "job.ini:3:", "base_seed");
	bad("[job]\ngpus = 0\nmax_retries = 1.5\n" BASE, "job.ini:3:", "max_retries");
}

Test(config, gpu_lists)
{
	bad("[job]\ngpus =\n" BASE, "job.ini:2:", "gpus");
	bad("[job]\ngpus = 0,1,0\n" BASE, "job.ini:2:", "GPU 0 is listed twice");
	bad("[job]\ngpus = 0,,1\n" BASE, "job.ini:2:", "gpus");
	bad("[job]\ngpus = -1\n" BASE, "job.ini:2:", "gpus");
	bad("[job]\ngpus = one\n" BASE, "job.ini:2:", "gpus");
	bad("[job]\ngpus = 99999999\n" BASE, "job.ini:2:", "gpus");
	struct cfg c;
	cr_assert_eq(load("[job]\ngpus = all\n" BASE, NULL, 0, &c), 0, "%s", err);
	cr_expect(c.gpus_all);
	cfg_free(&c);
}

Test(config, missing_pieces)
{
	bad("[worker]\nplugin=/w.so\n[generator]\nplugin=range\n", "gpus is required", NULL);
	bad("[job]\ngpus=0\n[generator]\nplugin=range\n", "[worker] plugin is required", NULL);
	bad("[job]\ngpus=0\n[worker]\nmodel=x\n[generator]\nplugin=range\n",
	    "[worker] plugin is required", NULL);
	bad("[job]\ngpus=0\n[worker]\nplugin=/w.so\n", "[generator] plugin is required", NULL);
	bad("[job]\ngpus=0\n[worker]\nplugin=\n[generator]\nplugin=range\n",
	    "job.ini:4:", "plugin is empty");
}

Test(config, structure_errors)
{
	bad("[job]\ngpus=0\n[wroker]\nplugin=/w.so\n" BASE,
	    "job.ini:3:", "unknown section [wroker]");
	bad("[job]\ngpus=0\n[extra]\n" BASE, "job.ini:3:", "unknown section [extra]");
	bad("[job]\ngpus=0\ngpus=1\n" BASE, "job.ini:3:", "set twice");
	bad("gpus=0\n[job]\n" BASE, "job.ini:1:", "before any [section]");
	bad("[job]\ngpus=0\nthis line has no equals sign\n" BASE, "job.ini:3:", "not a valid line");
	bad("[job\ngpus=0\n" BASE, "job.ini:1:", NULL);
}

Test(config, binary_junk)
{
	const char *dir = t_tmpdir();
	char *path;
	cr_assert(asprintf(&path, "%s/junk.ini", dir) > 0);
	FILE *f = fopen(path, "w");
	static const char junk[] = "[job]\ngpus=0\n\x7f"
				   "ELF\x02\x01\x00\x00\xff\xfe\n";
	fwrite(junk, 1, sizeof junk - 1, f);
	fclose(f);
	struct cfg c;
	cr_expect_eq(cfg_load(&c, path, NULL, 0, err, sizeof err), -1);
	cr_expect(strstr(err, "junk.ini:3:"), "%s", err);
	free(path);
}

Test(config, overlong_line)
{
	size_t n = (1u << 20) + 10;
	char *text = malloc(n + 64);
	strcpy(text, "[job]\ngpus=0\n[worker]\nplugin=/w.so\nx=");
	size_t l = strlen(text);
	memset(text + l, 'y', n);
	strcpy(text + l + n, "\n[generator]\nplugin=range\n");
	bad(text, "job.ini:5:", "line longer than");
	free(text);
}

Test(config, missing_file)
{
	struct cfg c;
	cr_expect_eq(cfg_load(&c, "/nonexistent/job.ini", NULL, 0, err, sizeof err), -1);
	cr_expect(strstr(err, "/nonexistent/job.ini: cannot open job file"), "%s", err);
}
