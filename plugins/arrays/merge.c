/* SPDX-License-Identifier: MIT */
/* `gpud merge-arrays`: the ranks' shards joined by task id (merge.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "merge.h"

/* Rows copied at a time. */
#define MERGE_BLOCK (1u << 22)

/* One message to the caller, "gpud merge-arrays: " first; an error is also the call's
 * error. */
__attribute__((format(printf, 3, 4))) static void say(struct gpud_array_merge_call *call, int level,
						      const char *fmt, ...)
{
	char line[4096];
	int n = snprintf(line, sizeof line, "gpud merge-arrays: ");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
	va_end(ap);
	if (level == 0)
		snprintf(call->error, sizeof call->error, "%s", line);
	if (call->say)
		call->say(call->say_ctx, level, line);
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

int merge_arrays(const struct merge_format *fmt, struct gpud_array_merge_call *call)
{
	const char *dataset = call->dataset, *out_path = call->out;
	const char *const *shards = call->shards;
	size_t n = call->n_shards;
	int rc = 2;
	struct gpud_error err = {{0}};
	call->error[0] = '\0';
	call->rows = call->failed = 0;
	if (!out_path || !shards || n == 0) {
		say(call, 0, "no %s given", out_path ? "shard" : "output");
		return 2;
	}
	struct merge_file *f = calloc(n, sizeof *f);
	struct stat *st = NULL;
	uint8_t *status = NULL;
	uint32_t *owner = NULL;
	void *buf = NULL;
	struct merge_file out = {.path = out_path};
	bool created = false;
	size_t opened = 0, job_from = SIZE_MAX; /* the first shard naming its job */
	if (!f)
		goto oom;
	/* Every file stat'ed once (a symlink followed): the output may be none of the
	 * shards, however named, and no shard given twice. */
	struct stat so;
	st = calloc(n, sizeof *st);
	if (!st)
		goto oom;
	bool out_exists = stat(out_path, &so) == 0;
	for (size_t i = 0; i < n; i++) {
		if (stat(shards[i], &st[i]) < 0) {
			say(call, 0, "cannot open %s: %s", shards[i], strerror(errno));
			goto out;
		}
		if (out_exists && st[i].st_dev == so.st_dev && st[i].st_ino == so.st_ino) {
			say(call, 0,
			    "%s is the output and the shard %s: name another output; "
			    "nothing written",
			    out_path, shards[i]);
			goto out;
		}
		/* Nor a shard's done record (an npy shard's PATH.done), which the merge
		 * reads: written over, the shard's rows would be lost. */
		char *done = arr_done_path(shards[i]);
		if (!done)
			goto oom;
		struct stat sd;
		bool hit = out_exists && stat(done, &sd) == 0 && sd.st_dev == so.st_dev &&
			   sd.st_ino == so.st_ino;
		free(done);
		if (hit) {
			say(call, 0,
			    "%s is the output and the done record of the shard %s: name another "
			    "output; nothing written",
			    out_path, shards[i]);
			goto out;
		}
		for (size_t k = 0; k < i; k++)
			if (st[i].st_dev == st[k].st_dev && st[i].st_ino == st[k].st_ino) {
				say(call, 0, "%s and %s are the same file", shards[k], shards[i]);
				goto out;
			}
	}
	for (size_t i = 0; i < n; i++) {
		f[i].path = shards[i];
		if (fmt->open_shard(&f[i], dataset, &err) < 0) {
			say(call, 0, "%s", err.message);
			goto out;
		}
		opened++;
		if (f[i].has_job && job_from == SIZE_MAX) {
			job_from = i;
		} else if (f[i].has_job && f[i].job_id != f[job_from].job_id) {
			say(call, 0,
			    "%s and %s are shards of different jobs (job_id %016llx and %016llx); "
			    "nothing written",
			    f[job_from].path, f[i].path, (unsigned long long)f[job_from].job_id,
			    (unsigned long long)f[i].job_id);
			goto out;
		}
		char a[256], b[256];
		if (i && (strcmp(f[i].dtype.descr, f[0].dtype.descr) != 0 ||
			  f[i].rows != f[0].rows || f[i].row.ndim != f[0].row.ndim ||
			  memcmp(f[i].row.dims, f[0].row.dims,
				 f[0].row.ndim * sizeof *f[0].row.dims) != 0)) {
			say(call, 0,
			    "%s is %s of %s, %s is %s of %s: shards of "
			    "one job are alike",
			    f[0].path, arr_shape_str(&f[0].row, (int64_t)f[0].rows, a, sizeof a),
			    f[0].dtype.descr, f[i].path,
			    arr_shape_str(&f[i].row, (int64_t)f[i].rows, b, sizeof b),
			    f[i].dtype.descr);
			goto out;
		}
	}
	/* A shard an older gpud wrote names no job: taken, but said. */
	for (size_t i = 0; i < n; i++)
		if (!f[i].has_job)
			say(call, 1,
			    "note: %s carries no job id (written by a gpud before 1.8): that it "
			    "is a shard of the same job as the others cannot be checked",
			    f[i].path);
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
				say(call, 0,
				    "task %llu is in two shards: %s and %s "
				    "(shards of two runs of one rank?); nothing written",
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
		say(call, 0,
		    "task %llu is in none of %s (%llu task%s missing in "
		    "all): a rank that did not finish (--resume it) or a shard left out; "
		    "nothing written",
		    (unsigned long long)first_gap, names, (unsigned long long)gaps,
		    gaps == 1 ? "" : "s");
		goto out;
	}
	out.dtype = f[0].dtype;
	out.row = f[0].row;
	out.rows = rows;
	out.has_job = job_from != SIZE_MAX;
	for (size_t i = 0; i < n; i++)
		out.has_job = out.has_job && f[i].has_job;
	out.job_id = out.has_job ? f[job_from].job_id : 0;
	created = true; /* finish removes what create left, also when it failed */
	if (fmt->create(&out, dataset, &err) < 0) {
		say(call, 0, "%s", err.message);
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
			say(call, 0, "%s", err.message);
			goto out;
		}
		id = end;
	}
	if (fmt->finish(&out, status, true, &err) < 0) {
		created = false;
		say(call, 0, "%s", err.message);
		goto out;
	}
	created = false;
	char names[1024];
	say_files(names, sizeof names, f, n);
	char line[2048];
	int used = snprintf(line, sizeof line, "%s: %llu rows from %zu shard%s (%s)", out_path,
			    (unsigned long long)rows, n, n == 1 ? "" : "s", names);
	if (used < 0 || (size_t)used >= sizeof line)
		used = (int)strlen(line);
	if (failed && strcmp(fmt->name, "hdf5") == 0)
		snprintf(line + used, sizeof line - (size_t)used,
			 "; %llu tasks failed: their rows are zero, marked in %s_done",
			 (unsigned long long)failed, dataset ? dataset : "data");
	else if (failed)
		snprintf(line + used, sizeof line - (size_t)used,
			 "; %llu tasks failed: their rows are zero, marked in %s.done",
			 (unsigned long long)failed, out_path);
	say(call, 2, "%s", line);
	call->rows = rows;
	call->failed = failed;
	rc = failed ? 1 : 0;
	goto out;
oom:
	say(call, 0, "out of memory");
out:
	if (created)
		fmt->finish(&out, status, false, &err);
	for (size_t i = 0; i < opened; i++) {
		fmt->close(&f[i]);
		free(f[i].status);
	}
	free(st);
	free(buf);
	free(owner);
	free(status);
	free(f);
	return rc;
}
