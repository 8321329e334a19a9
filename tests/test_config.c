/* SPDX-License-Identifier: MIT */
/* The job-file parser: good files, every kind of bad one, --set, paths, long values. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "job/config.h"
#include "job/groups.h"
#include "job/keys.h"
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

/* gpus_per_worker: groups of listed ids, refused where it does not divide the list,
 * naming where it was set and both numbers; `all` and `auto` wait for the count. */
Test(config, gpus_per_worker)
{
	struct cfg c;
	cr_assert_eq(load("[job]\ngpus = 0,1,2,3\ngpus_per_worker = 2\n" BASE, NULL, 0, &c), 0,
		     "%s", err);
	cr_expect_eq(c.gpus_per_worker, 2);
	cr_expect_eq(groups_count(&c), 2);
	char ids[GROUPS_LABEL], *cvd = groups_visible(&c, 1);
	cr_expect_str_eq(groups_ids(&c, 0, ids, sizeof ids), "0,1");
	cr_expect_str_eq(cvd, "2,3");
	cr_expect_str_eq(groups_label(&c, 2, ids, sizeof ids), "2,3");
	free(cvd);
	cfg_free(&c);
	cr_assert_eq(load("[job]\ngpus = 0\n" BASE, NULL, 0, &c), 0, "%s", err);
	cr_expect_eq(c.gpus_per_worker, 1, "one GPU a worker by default");
	cfg_free(&c);
	bad("[job]\ngpus = 0,1,2\ngpus_per_worker = 2\n" BASE,
	    "job.ini:3: [job] gpus_per_worker = 2 does not divide the 3 GPUs [job] gpus lists",
	    "a multiple of 2 GPUs");
	bad("[job]\ngpus_per_worker = 4\ngpus = 5, 6\n" BASE,
	    "job.ini:2: [job] gpus_per_worker = 4 does not divide the 2 GPUs", NULL);
	bad("[job]\ngpus = 0\ngpus_per_worker = 0\n" BASE, "job.ini:3:", "gpus_per_worker");
	bad("[job]\ngpus = 0\ngpus_per_worker = 257\n" BASE, "job.ini:3:", "gpus_per_worker");
	char *sets[] = {"job.gpus_per_worker=3"};
	cr_assert_eq(load("[job]\ngpus = 0,1,2,3\n" BASE, sets, 1, &c), -1);
	cr_expect(strstr(err, "--set job.gpus_per_worker=3: [job] gpus_per_worker = 3 does not "
			      "divide the 4 GPUs"),
		  "%s", err);
	cr_assert_eq(load("[job]\ngpus = all\ngpus_per_worker = 3\n" BASE, NULL, 0, &c), 0,
		     "counted at run start: %s", err);
	cfg_free(&c);
	cr_assert_eq(load("[job]\ngpus = auto\ngpus_per_worker = 3\n" BASE, NULL, 0, &c), 0, "%s",
		     err);
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

/* The table of [job] and [ui] keys, walked: each row's example is accepted and lands in
 * the row's field, each bounded row takes its bounds and refuses what lies just outside
 * them with the key's file:line, each named value is accepted, an empty value refused. */

/* A job file with `key = value` of row k on line 2, and what it needs to load. */
static int load_key(const struct cfg_key *k, const char *value, struct cfg *c, char *loc,
		    size_t loclen)
{
	/* rank and ranks go together: each gets the other, at its widest. */
	const char *other = strcmp(k->name, "rank") == 0    ? "ranks = 1000000\n"
			    : strcmp(k->name, "ranks") == 0 ? "rank = 0\n"
							    : "";
	char *text;
	if (strcmp(k->section, "job") == 0)
		cr_assert(asprintf(&text, "[job]\n%s = %s\n%s%s" BASE, k->name, value, other,
				   !strcmp(k->name, "gpus") ? ""
				   /* counted at run start: any gpus_per_worker may divide it */
				   : !strcmp(k->name, "gpus_per_worker") ? "gpus = all\n"
									 : "gpus = 0\n") > 0);
	else
		cr_assert(asprintf(&text, "[%s]\n%s = %s\n[job]\ngpus = 0\n" BASE, k->section,
				   k->name, value) > 0);
	static const char *dir;
	if (!dir)
		dir = t_tmpdir(); /* one for the whole walk: the file is rewritten each time */
	char *path = t_write(dir, "job.ini", text);
	snprintf(loc, loclen, "%s:2: [%s] %s = '%s': ", path, k->section, k->name, value);
	int rc = cfg_load(c, path, NULL, 0, err, sizeof err);
	free(path);
	free(text);
	return rc;
}

static void accepts(const struct cfg_key *k, const char *value)
{
	struct cfg c;
	char loc[1024];
	int rc = load_key(k, value, &c, loc, sizeof loc);
	/* rank must be below ranks, whose largest is rank's largest too. */
	if (strcmp(k->name, "rank") == 0 && strcmp(value, "1000000") == 0) {
		cr_expect_eq(rc, -1);
		cr_expect(strstr(err, "rank = 1000000 must be below ranks = 1000000"), "%s", err);
		return;
	}
	cr_expect_eq(rc, 0, "[%s] %s = %s refused: %s", k->section, k->name, value, err);
	if (rc == 0)
		cfg_free(&c);
}

static void refuses(const struct cfg_key *k, const char *value)
{
	struct cfg c;
	char loc[1024];
	cr_expect_eq(load_key(k, value, &c, loc, sizeof loc), -1, "[%s] %s = %s accepted",
		     k->section, k->name, value);
	cr_expect(strncmp(err, loc, strlen(loc)) == 0 && strstr(err, "': expected"),
		  "[%s] %s = %s: message '%s' does not start '%sexpected'", k->section, k->name,
		  value, err, loc);
}

/* The row's field read back as a whole number. */
static uint64_t field_u64(const struct cfg *c, const struct cfg_key *k)
{
	const char *f = (const char *)c + k->off;
	if (k->width == 8)
		return *(const uint64_t *)f;
	if (k->width == 4)
		return *(const uint32_t *)f;
	return *(const uint8_t *)f;
}

Test(config, every_key_of_the_table_takes_its_example_into_its_field)
{
	cr_assert_gt(cfg_n_keys, 20);
	for (size_t i = 0; i < cfg_n_keys; i++) {
		const struct cfg_key *k = &cfg_keys[i];
		cr_assert(k->example && k->doc && *k->doc, "[%s] %s lacks an example or a doc",
			  k->section, k->name);
		cr_expect_eq(cfg_key_find(k->section, k->name), k, "[%s] %s is in two rows",
			     k->section, k->name);
		for (size_t j = 0; j < i && k->kind != CFG_CUSTOM; j++)
			cr_expect(cfg_keys[j].kind == CFG_CUSTOM || cfg_keys[j].off != k->off,
				  "[%s] %s and %s fill one field", k->section, k->name,
				  cfg_keys[j].name);
		struct cfg c;
		char loc[1024];
		int rc = load_key(k, k->example, &c, loc, sizeof loc);
		cr_expect_eq(rc, 0, "[%s] %s = %s refused: %s", k->section, k->name, k->example,
			     err);
		if (rc < 0)
			continue;
		uint64_t want;
		switch (k->kind) {
		case CFG_UINT:
			cr_expect_eq(field_u64(&c, k), strtoull(k->example, NULL, 10), "%s",
				     k->name);
			break;
		case CFG_SIZE:
			cr_assert_eq(cfg_parse_size(k->example, k->max, &want), 0);
			cr_expect_eq(field_u64(&c, k), want, "%s", k->name);
			break;
		case CFG_REAL:
			cr_expect_float_eq(*(const double *)((const char *)&c + k->off),
					   strtod(k->example, NULL), 1e-12, "%s", k->name);
			break;
		case CFG_PATH: {
			const char *got = *(char *const *)((const char *)&c + k->off);
			const char *at = *(char *const *)((const char *)&c + k->at_off);
			cr_expect(got && got[0] == '/' && strstr(got, k->example), "%s = %s",
				  k->name, got);
			cr_expect(at && strstr(at, "job.ini:2"), "%s set at %s", k->name, at);
			break;
		}
		default:
			break;
		}
		cfg_free(&c);
	}
}

Test(config, bounded_keys_take_their_bounds_and_refuse_one_past_them)
{
	char v[64];
	size_t bounded = 0;
	for (size_t i = 0; i < cfg_n_keys; i++) {
		const struct cfg_key *k = &cfg_keys[i];
		switch (k->kind) {
		case CFG_UINT:
		case CFG_SIZE:
			bounded++;
			snprintf(v, sizeof v, "%llu", (unsigned long long)k->min);
			accepts(k, v);
			snprintf(v, sizeof v, "%llu", (unsigned long long)k->max);
			accepts(k, v);
			if (k->min > 0)
				snprintf(v, sizeof v, "%llu", (unsigned long long)k->min - 1);
			else
				snprintf(v, sizeof v, "-1");
			refuses(k, v);
			if (k->max == UINT64_MAX)
				snprintf(v, sizeof v, "18446744073709551616");
			else
				snprintf(v, sizeof v, "%llu", (unsigned long long)k->max + 1);
			refuses(k, v);
			break;
		case CFG_REAL:
			bounded++;
			snprintf(v, sizeof v, "%.17g", k->lo_open ? k->lo : k->lo - 1);
			refuses(k, v);
			if (k->lo_open)
				snprintf(v, sizeof v, "%.17g", k->lo + 1e-3);
			else
				snprintf(v, sizeof v, "%.17g", k->lo);
			accepts(k, v);
			snprintf(v, sizeof v, "%.17g", k->hi);
			accepts(k, v);
			snprintf(v, sizeof v, "%.17g", k->hi + 1);
			refuses(k, v);
			break;
		case CFG_BOOL:
		case CFG_ENUM:
		case CFG_FLAGS:
			for (const struct cfg_name *n = k->names; n && n->name; n++)
				accepts(k, n->name);
			refuses(k, "bogus");
			break;
		default:
			break;
		}
		if (k->kind != CFG_PATH)
			refuses(k, "");
	}
	cr_expect_gt(bounded, 15);
}

/* The reference's job file (docs/reference.md, ## The job file) shows every [job] and
 * [ui] key of the table, and no other. */
Test(config, reference_lists_the_keys_of_the_table)
{
	char *path;
	cr_assert(asprintf(&path, "%s/docs/reference.md", t_env("SRCDIR")) > 0);
	char *text = t_read(path);
	cr_assert(text, "cannot read %s", path);
	char *s = strstr(text, "## The job file");
	cr_assert(s, "docs/reference.md has no '## The job file'");
	s = strstr(s, "```ini\n");
	cr_assert(s);
	s += 7;
	char *end = strstr(s, "```");
	cr_assert(end);
	*end = '\0';
	char section[32] = "", *save = NULL;
	size_t listed = 0;
	bool seen[256] = {0};
	cr_assert_lt(cfg_n_keys, 256);
	for (char *line = strtok_r(s, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char name[64];
		if (sscanf(line, "[%31[a-z]]", section) == 1)
			continue;
		if (strcmp(section, "job") && strcmp(section, "ui"))
			continue;
		if (sscanf(line, "%63[a-z_] =", name) != 1)
			continue;
		const struct cfg_key *k = cfg_key_find(section, name);
		cr_expect(k, "docs/reference.md shows [%s] %s, which is not a key", section, name);
		if (k && !seen[k - cfg_keys]) {
			seen[k - cfg_keys] = true;
			listed++;
		}
	}
	for (size_t i = 0; i < cfg_n_keys; i++)
		cr_expect(seen[i], "docs/reference.md's job file lacks [%s] %s",
			  cfg_keys[i].section, cfg_keys[i].name);
	cr_expect_eq(listed, cfg_n_keys);
	free(text);
	free(path);
}
