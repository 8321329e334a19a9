/* SPDX-License-Identifier: MIT */
/* `gpud merge-arrays`: the ranks' shards joined by task id (merge.h). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "merge.h"

/* Rows copied at a time. */
#define MERGE_BLOCK (1u << 22)

static int usage(void)
{
	fprintf(stderr, "usage: gpud merge-arrays [--dataset NAME] OUT SHARD...\n");
	return 2;
}

/* Names the files in `names` (up to a few). */
static void say_files(char *buf, size_t len, struct merge_file *f, size_t n)
{
	size_t used = 0;
	for (size_t i = 0; i < n && used < len; i++) {
		if (i == 4) {
			used += (size_t)snprintf(buf + used, len - used, " and %zu more", n - i);
			break;
		}
		used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "", f[i].path);
	}
}

int merge_arrays(const struct merge_format *fmt, int argc, char **argv)
{
	const char *dataset = NULL, *out_path = NULL;
	char **shards = calloc((size_t)argc + 1, sizeof *shards);
	size_t n = 0;
	int rc = 2;
	struct gpud_error err = {{0}};
	if (!shards)
		return 2;
	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--dataset") == 0 && i + 1 < argc)
			dataset = argv[++i];
		else if (strncmp(argv[i], "--dataset=", 10) == 0)
			dataset = argv[i] + 10;
		else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			free(shards);
			usage();
			return 0;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			fprintf(stderr, "gpud merge-arrays: unknown option %s\n", argv[i]);
			free(shards);
			return usage();
		} else if (!out_path)
			out_path = argv[i];
		else
			shards[n++] = argv[i];
	}
	if (!out_path || n == 0) {
		free(shards);
		return usage();
	}
	struct merge_file *f = calloc(n, sizeof *f);
	uint8_t *status = NULL;
	uint32_t *owner = NULL;
	void *buf = NULL;
	struct merge_file out = {.path = out_path};
	bool created = false;
	size_t opened = 0;
	if (!f)
		goto oom;
	struct stat so, si;
	bool out_exists = stat(out_path, &so) == 0;
	for (size_t i = 0; i < n; i++) {
		if (out_exists && stat(shards[i], &si) == 0 && si.st_dev == so.st_dev &&
		    si.st_ino == so.st_ino) {
			fprintf(stderr, "gpud merge-arrays: %s is both the output and a shard\n",
				out_path);
			goto out;
		}
		for (size_t k = 0; k < i; k++)
			if (stat(shards[i], &si) == 0 && stat(shards[k], &so) == 0 &&
			    si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
				fprintf(stderr, "gpud merge-arrays: %s and %s are the same file\n",
					shards[k], shards[i]);
				goto out;
			}
		f[i].path = shards[i];
		if (fmt->open_shard(&f[i], dataset, &err) < 0) {
			fprintf(stderr, "gpud merge-arrays: %s\n", err.message);
			goto out;
		}
		opened++;
		char a[256], b[256];
		if (i && (strcmp(f[i].dtype.descr, f[0].dtype.descr) != 0 ||
			  f[i].rows != f[0].rows || f[i].row.ndim != f[0].row.ndim ||
			  memcmp(f[i].row.dims, f[0].row.dims,
				 f[0].row.ndim * sizeof *f[0].row.dims) != 0)) {
			fprintf(stderr,
				"gpud merge-arrays: %s is %s of %s, %s is %s of %s: shards of "
				"one job are alike\n",
				f[0].path,
				arr_shape_str(&f[0].row, (int64_t)f[0].rows, a, sizeof a),
				f[0].dtype.descr, f[i].path,
				arr_shape_str(&f[i].row, (int64_t)f[i].rows, b, sizeof b),
				f[i].dtype.descr);
			goto out;
		}
	}
	uint64_t rows = f[0].rows;
	size_t row_bytes = arr_row_bytes(&f[0].row, &f[0].dtype);
	status = calloc(rows, 1);
	owner = malloc(rows * sizeof *owner);
	if (!status || !owner)
		goto oom;
	/* Every id done in exactly one shard. */
	uint64_t gaps = 0, first_gap = 0, failed = 0;
	for (uint64_t id = 0; id < rows; id++) {
		owner[id] = UINT32_MAX;
		for (size_t i = 0; i < n; i++) {
			if (!f[i].status[id])
				continue;
			if (owner[id] != UINT32_MAX) {
				fprintf(stderr,
					"gpud merge-arrays: task %llu is in two shards: %s and %s "
					"(shards of two runs of one rank?); nothing written\n",
					(unsigned long long)id, f[owner[id]].path, f[i].path);
				goto out;
			}
			owner[id] = (uint32_t)i;
			status[id] = f[i].status[id];
		}
		if (owner[id] == UINT32_MAX && gaps++ == 0)
			first_gap = id;
		if (status[id] > ARR_OK)
			failed++;
	}
	if (gaps) {
		char names[1024];
		say_files(names, sizeof names, f, n);
		fprintf(stderr,
			"gpud merge-arrays: task %llu is in none of %s (%llu task%s missing in "
			"all): a rank that did not finish (--resume it) or a shard left out; "
			"nothing written\n",
			(unsigned long long)first_gap, names, (unsigned long long)gaps,
			gaps == 1 ? "" : "s");
		goto out;
	}
	out.dtype = f[0].dtype;
	out.row = f[0].row;
	out.rows = rows;
	created = true; /* finish removes what create left, also when it failed */
	if (fmt->create(&out, dataset, &err) < 0) {
		fprintf(stderr, "gpud merge-arrays: %s\n", err.message);
		goto out;
	}
	uint64_t block = MERGE_BLOCK / row_bytes ? MERGE_BLOCK / row_bytes : 1;
	buf = malloc(block * row_bytes);
	if (!buf)
		goto oom;
	/* Runs of rows from one shard, a block at most, read and written whole. */
	for (uint64_t id = 0; id < rows;) {
		if (status[id] != ARR_OK) { /* no row: it stays zero */
			id++;
			continue;
		}
		uint32_t o = owner[id];
		uint64_t end = id + 1;
		while (end < rows && end - id < block && owner[end] == o && status[end] == ARR_OK)
			end++;
		if (fmt->read(&f[o], id, end - id, buf, &err) < 0 ||
		    fmt->write(&out, id, end - id, buf, &err) < 0) {
			fprintf(stderr, "gpud merge-arrays: %s\n", err.message);
			goto out;
		}
		id = end;
	}
	if (fmt->finish(&out, status, true, &err) < 0) {
		created = false;
		fprintf(stderr, "gpud merge-arrays: %s\n", err.message);
		goto out;
	}
	created = false;
	char names[1024];
	say_files(names, sizeof names, f, n);
	fprintf(stderr, "gpud merge-arrays: %s: %llu rows from %zu shard%s (%s)", out_path,
		(unsigned long long)rows, n, n == 1 ? "" : "s", names);
	if (failed && strcmp(fmt->name, "hdf5") == 0)
		fprintf(stderr, "; %llu tasks failed: their rows are zero, marked in %s_done",
			(unsigned long long)failed, dataset ? dataset : "data");
	else if (failed)
		fprintf(stderr, "; %llu tasks failed: their rows are zero, marked in %s.done",
			(unsigned long long)failed, out_path);
	fputc('\n', stderr);
	rc = failed ? 1 : 0;
	goto out;
oom:
	fprintf(stderr, "gpud merge-arrays: out of memory\n");
out:
	if (created)
		fmt->finish(&out, status, false, &err);
	for (size_t i = 0; i < opened; i++) {
		fmt->close(&f[i]);
		free(f[i].status);
	}
	free(buf);
	free(owner);
	free(status);
	free(f);
	free(shards);
	return rc;
}
