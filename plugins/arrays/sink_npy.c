/* SPDX-License-Identifier: MIT */
/*
 * Sink `npy`: every task's result as one row of a .npy array, at the row of its task id.
 * Keys: path (required), dtype (required: uint8, float32, <f4 ...), shape (required: the
 * shape of one row, "3", "64x64x3", "()" for one scalar a row), tasks (the number of
 * rows; default: the number of tasks the generator says the job has).
 *
 * The file is (tasks, *shape) of dtype, C order, made at its full size when the run
 * starts (a sparse file where the filesystem has holes): a valid .npy from the first
 * moment, rows never written reading as zeros. Each result is written at its row with
 * one pwrite, then its byte in the done record PATH.done (common.h) with another; the
 * host's journal records the outcome only after this call returned, so a kill at any
 * point leaves a row either marked done and whole, or run again and written again in
 * place. Failed and timed-out tasks write no row, only their byte (2, 3).
 *
 * A result whose size is not a row's fails its task (GPUD_SINK_TASK_FAILED), naming
 * both sizes; so does a task id past the last row.
 *
 * With ranks, `path` must hold {rank}: each rank writes a full-size file of its own
 * holding its rows at their task ids (the others zero, marked 0 in its done record);
 * `gpud merge-arrays` joins them.
 *
 * `gpud merge-arrays` for .npy files is here too (gpud_array_merge_call), so that gpud
 * itself links nothing the array formats need.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gpud/plugin.h>

#include "../check.h"
#include "common.h"
#include "merge.h"

GPUD_PLUGIN("sink", "npy", "1.0");
GPUD_PLUGIN_DESCRIPTION("one row per task id in a .npy array (path, dtype, shape, tasks)");
GPUD_PLUGIN_KEYS("path", "dtype", "shape", "tasks");

struct npy_sink {
	char *path, *done_path;
	struct arr_dtype dtype;
	struct arr_shape shape;
	size_t row_bytes;
	long tasks_key; /* -1: not set */
	int fd, done_fd;
	uint64_t rows, data_off, done_off;
	int error;    /* errno of a failed write, sticky */
	bool has_job; /* gpud_sink_job told the job: its id ends the done record */
	uint64_t job_id;
};

/* The keys, parsed. */
static int parse_keys(const struct gpud_args *args, struct arr_dtype *dtype,
		      struct arr_shape *shape, long *tasks, struct gpud_error *err)
{
	const char *path = gpud_arg(args, "path", NULL), *dt = gpud_arg(args, "dtype", NULL),
		   *sh = gpud_arg(args, "shape", NULL);
	if (!path || !*path || strcmp(path, "-") == 0)
		return gpud_fail(err, "npy: 'path' is required (the .npy file to write; not "
				      "standard output: rows are written in place)");
	if (!dt)
		return gpud_fail(err, "npy: 'dtype' is required (the type of the array's "
				      "elements: uint8, float32, <f4 ...)");
	if (!sh)
		return gpud_fail(err, "npy: 'shape' is required (the shape of one row: 3, "
				      "64x64x3; () for one scalar a row)");
	if (arr_parse_dtype("npy", dt, dtype, err) < 0 ||
	    arr_parse_shape("npy", sh, shape, err) < 0)
		return -1;
	if (arr_row_bytes(shape, dtype) == 0)
		return gpud_fail(err, "npy: shape = '%s' of %s: a row is too large", sh, dt);
	if (gpud_arg_parse_long(args, "tasks", -1, tasks, err) < 0)
		return gpud_fail(err, "npy: tasks = '%s': not a whole number",
				 gpud_arg(args, "tasks", ""));
	if (gpud_arg(args, "tasks", NULL) && *tasks < 1)
		return gpud_fail(err, "npy: tasks = %ld: the array needs at least one row", *tasks);
	return 0;
}

GPUD_EXPORT int gpud_sink_check(const struct gpud_args *args, struct gpud_error *err)
{
	struct arr_dtype dtype;
	struct arr_shape shape;
	long tasks;
	if (parse_keys(args, &dtype, &shape, &tasks, err) < 0)
		return -1;
	const char *path = gpud_arg(args, "path", NULL);
	return check_file_writable("npy", path, err);
}

static void free_sink(struct npy_sink *s)
{
	if (s->fd >= 0)
		close(s->fd);
	if (s->done_fd >= 0)
		close(s->done_fd);
	free(s->path);
	free(s->done_path);
	free(s);
}

GPUD_EXPORT int gpud_sink_open(const struct gpud_args *args, void **state, struct gpud_error *err)
{
	struct npy_sink *s = calloc(1, sizeof *s);
	if (!s)
		return gpud_fail(err, "npy: out of memory");
	s->fd = s->done_fd = -1;
	if (parse_keys(args, &s->dtype, &s->shape, &s->tasks_key, err) < 0) {
		free_sink(s);
		return -1;
	}
	s->row_bytes = arr_row_bytes(&s->shape, &s->dtype);
	s->path = strdup(gpud_arg(args, "path", NULL));
	s->done_path = s->path ? arr_done_path(s->path) : NULL;
	if (!s->path || !s->done_path) {
		free_sink(s);
		return gpud_fail(err, "npy: out of memory");
	}
	*state = s;
	return 0;
}

/* A fresh array of `rows` rows (an earlier file emptied), and its done record. */
static int create_files(struct npy_sink *s, uint64_t rows, struct gpud_error *err)
{
	uint64_t size;
	if (__builtin_mul_overflow(rows, (uint64_t)s->row_bytes, &size))
		return gpud_fail(err, "npy: %llu rows of %zu bytes is too large",
				 (unsigned long long)rows, s->row_bytes);
	s->fd = open(s->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (s->fd < 0)
		return gpud_fail(err, "npy: cannot create %s: %s", s->path, strerror(errno));
	if (arr_npy_write_header(s->fd, &s->dtype, &s->shape, rows, &s->data_off) < 0 ||
	    ftruncate(s->fd, (off_t)(s->data_off + size)) < 0)
		return gpud_fail(err, "npy: cannot write %s: %s", s->path, strerror(errno));
	s->done_fd = arr_done_open(s->done_path, rows, false, &s->done_off, err);
	if (s->done_fd < 0) {
		char m[sizeof err->message];
		snprintf(m, sizeof m, "%s", err->message);
		return gpud_fail(err, "npy: %s", m);
	}
	s->rows = rows;
	return 0;
}

/* The job's id, for the done record (common.h): shards of two jobs are not merged. */
GPUD_EXPORT int gpud_sink_job(void *state, const struct gpud_job_info *info, struct gpud_error *err)
{
	struct npy_sink *s = state;
	(void)err;
	s->has_job = true;
	s->job_id = info->job_id;
	return 0;
}

/* The job's id after the done record's rows, when the host said it. */
static int write_job(struct npy_sink *s, struct gpud_error *err)
{
	if (s->has_job && arr_done_write_job(s->done_fd, s->done_off, s->rows, s->job_id) < 0)
		return gpud_fail(err, "npy: writing %s: %s", s->done_path, strerror(errno));
	return 0;
}

/* What the job's size says the array's rows are: the tasks key, or the generator's
 * count; they must agree when both are known. */
GPUD_EXPORT int gpud_sink_tasks(void *state, int64_t total, struct gpud_error *err)
{
	struct npy_sink *s = state;
	int64_t rows = s->tasks_key >= 1 ? s->tasks_key : total;
	if (s->tasks_key >= 1 && total >= 0 && total != s->tasks_key)
		return gpud_fail(err,
				 "npy: tasks = %ld, but the generator says the job has %lld tasks "
				 "(leave tasks out to take the generator's count)",
				 s->tasks_key, (long long)total);
	if (rows < 0)
		return gpud_fail(err, "npy: the generator does not say how many tasks the job "
				      "has: set tasks = N in [sink] (the array's rows)");
	if (rows == 0)
		return gpud_fail(err, "npy: the job has no tasks: an array needs at least one row");
	if (s->fd >= 0) { /* resumed: the file there must be this job's */
		if (s->rows != (uint64_t)rows)
			return gpud_fail(err,
					 "npy: %s has %llu rows, but the job has %lld tasks: it is "
					 "another job's (remove it and %s to start afresh)",
					 s->path, (unsigned long long)s->rows, (long long)rows,
					 s->done_path);
		return write_job(s, err);
	}
	if (create_files(s, (uint64_t)rows, err) < 0)
		return -1;
	return write_job(s, err);
}

/* The file must be the array the keys describe; its done record must be there. */
static int reopen(struct npy_sink *s, void (*done)(void *ctx, uint64_t task_id, int status),
		  void *ctx, struct gpud_error *err)
{
	struct arr_npy h;
	char want[256], have[256];
	if (arr_npy_read_header(s->fd, s->path, &h, err) < 0) {
		char m[sizeof err->message];
		snprintf(m, sizeof m, "%s", err->message);
		return gpud_fail(err, "npy: %s (remove it to start afresh)", m);
	}
	if (strcmp(h.dtype.descr, s->dtype.descr) != 0 || h.fortran ||
	    h.row.ndim != s->shape.ndim ||
	    memcmp(h.row.dims, s->shape.dims, s->shape.ndim * sizeof *s->shape.dims) != 0)
		return gpud_fail(err,
				 "npy: %s holds rows of %s %s%s, the job writes rows of %s %s: it "
				 "is another job's (remove it to start afresh)",
				 s->path, arr_shape_str(&h.row, -1, have, sizeof have),
				 h.dtype.descr, h.fortran ? " in Fortran order" : "",
				 arr_shape_str(&s->shape, -1, want, sizeof want), s->dtype.descr);
	struct stat st;
	uint64_t size = h.data_off + h.rows * s->row_bytes;
	if (fstat(s->fd, &st) == 0 && (uint64_t)st.st_size < size &&
	    ftruncate(s->fd, (off_t)size) < 0)
		return gpud_fail(err, "npy: cannot size %s: %s", s->path, strerror(errno));
	s->rows = h.rows;
	s->data_off = h.data_off;
	if (access(s->done_path, F_OK) < 0)
		return gpud_fail(err,
				 "npy: %s is there but its done record %s is not, so which rows "
				 "hold results cannot be told (remove %s to start afresh)",
				 s->path, s->done_path, s->path);
	s->done_fd = arr_done_open(s->done_path, s->rows, true, &s->done_off, err);
	if (s->done_fd < 0) {
		char m[sizeof err->message];
		snprintf(m, sizeof m, "%s", err->message);
		return gpud_fail(err, "npy: %s", m);
	}
	uint8_t *st_ = arr_done_read(s->done_fd, s->done_path, s->rows, s->done_off, err);
	if (!st_)
		return -1;
	for (uint64_t i = 0; i < s->rows; i++)
		if (st_[i] >= ARR_OK && st_[i] <= ARR_TIMEOUT)
			done(ctx, i, st_[i] - 1);
	free(st_);
	return 0;
}

/* Resuming: the file is kept as it is (never emptied), and every row its done record
 * marks is reported with its outcome. No file yet: it is made as a fresh run makes it. */
GPUD_EXPORT int gpud_sink_resume(const struct gpud_args *args, void **state,
				 void (*done)(void *ctx, uint64_t task_id, int status), void *ctx,
				 struct gpud_error *err)
{
	if (gpud_sink_open(args, state, err) < 0)
		return -1;
	struct npy_sink *s = *state;
	s->fd = open(s->path, O_RDWR | O_CLOEXEC);
	if (s->fd < 0 && errno == ENOENT)
		return 0;
	if (s->fd < 0 || reopen(s, done, ctx, err) < 0) {
		if (s->fd < 0)
			gpud_fail(err, "npy: cannot open %s: %s", s->path, strerror(errno));
		free_sink(s);
		*state = NULL;
		return -1;
	}
	return 0;
}

GPUD_EXPORT uint32_t gpud_sink_events(void *state)
{
	(void)state;
	return GPUD_EVENT_BIT(GPUD_TASK_OK) | GPUD_EVENT_BIT(GPUD_TASK_ERROR) |
	       GPUD_EVENT_BIT(GPUD_TASK_TIMEOUT);
}

static int mark(struct npy_sink *s, uint64_t id, uint8_t status)
{
	if (arr_pwrite_all(s->done_fd, &status, 1, s->done_off + id) < 0) {
		s->error = errno;
		return -1;
	}
	return 0;
}

GPUD_EXPORT int gpud_sink_event(void *state, const struct gpud_event *ev, struct gpud_error *err)
{
	struct npy_sink *s = state;
	char shape[256];
	if (ev->kind != GPUD_TASK_OK && ev->kind != GPUD_TASK_ERROR &&
	    ev->kind != GPUD_TASK_TIMEOUT)
		return 0;
	if (s->fd < 0) { /* a host that did not call gpud_sink_tasks: the key alone */
		if (gpud_sink_tasks(s, -1, err) < 0)
			return -1;
	}
	if (ev->task_id >= s->rows) {
		if (ev->kind != GPUD_TASK_OK)
			return 0; /* no row to mark */
		gpud_fail(err, "npy: task %llu is past the last row of %s (%llu rows)",
			  (unsigned long long)ev->task_id, s->path, (unsigned long long)s->rows);
		return GPUD_SINK_TASK_FAILED;
	}
	if (ev->kind == GPUD_TASK_OK) {
		if (ev->result_size != s->row_bytes) {
			gpud_fail(err,
				  "npy: the result is %zu bytes, a row of %s is %zu bytes (shape "
				  "%s of %s)",
				  ev->result_size, s->path, s->row_bytes,
				  arr_shape_str(&s->shape, -1, shape, sizeof shape),
				  s->dtype.descr);
			if (mark(s, ev->task_id, ARR_ERROR) < 0)
				goto failed;
			return GPUD_SINK_TASK_FAILED;
		}
		if (arr_pwrite_all(s->fd, ev->result, s->row_bytes,
				   s->data_off + ev->task_id * s->row_bytes) < 0) {
			s->error = errno;
			return gpud_fail(err, "npy: writing row %llu of %s: %s",
					 (unsigned long long)ev->task_id, s->path,
					 strerror(s->error));
		}
	}
	uint8_t status = ev->kind == GPUD_TASK_OK        ? ARR_OK
			 : ev->kind == GPUD_TASK_TIMEOUT ? ARR_TIMEOUT
							 : ARR_ERROR;
	if (mark(s, ev->task_id, status) < 0)
		goto failed;
	return 0;
failed:
	return gpud_fail(err, "npy: writing %s: %s", s->done_path, strerror(s->error));
}

/* Both files synced: what the journal says is done is on disk. */
GPUD_EXPORT int gpud_sink_finish(void *state, const struct gpud_stats *stats,
				 const struct gpud_run_end *end, struct gpud_error *err)
{
	struct npy_sink *s = state;
	int rc = 0;
	(void)stats;
	(void)end;
	if (s->fd >= 0 && (fsync(s->fd) < 0 || close(s->fd) < 0))
		rc = gpud_fail(err, "npy: writing %s: %s", s->path, strerror(errno));
	s->fd = -1;
	if (s->done_fd >= 0 && (fsync(s->done_fd) < 0 || close(s->done_fd) < 0) && rc == 0)
		rc = gpud_fail(err, "npy: writing %s: %s", s->done_path, strerror(errno));
	s->done_fd = -1;
	free_sink(s);
	return rc;
}

/* ---- gpud merge-arrays for .npy shards (merge.h) ---- */

struct npy_file {
	int fd;
	uint64_t data_off;
	char *tmp, *done_tmp; /* the output's temporary names */
};

static int npy_open_shard(struct merge_file *f, const char *dataset, struct gpud_error *err)
{
	struct npy_file *nf = calloc(1, sizeof *nf);
	struct arr_npy h;
	char *done_path = arr_done_path(f->path);
	int done_fd = -1;
	if (!nf || !done_path) {
		free(nf);
		free(done_path);
		return gpud_fail(err, "out of memory");
	}
	if (dataset)
		fprintf(stderr, "gpud merge-arrays: --dataset %s: ignored for .npy files\n",
			dataset);
	nf->fd = open(f->path, O_RDONLY | O_CLOEXEC);
	if (nf->fd < 0) {
		gpud_fail(err, "cannot open %s: %s", f->path, strerror(errno));
		goto fail;
	}
	if (arr_npy_read_header(nf->fd, f->path, &h, err) < 0)
		goto fail;
	if (h.fortran || h.rows == 0 || arr_row_bytes(&h.row, &h.dtype) == 0) {
		gpud_fail(err, "%s is %s: not a shard gpud wrote", f->path,
			  h.fortran ? "in Fortran order" : "an empty array");
		goto fail;
	}
	done_fd = open(done_path, O_RDONLY | O_CLOEXEC);
	struct arr_npy d;
	if (done_fd < 0) {
		gpud_fail(err, "%s has no done record %s (%s): which rows it holds cannot be told",
			  f->path, done_path, strerror(errno));
		goto fail;
	}
	if (arr_npy_read_header(done_fd, done_path, &d, err) < 0)
		goto fail;
	if (d.rows != h.rows || d.row.ndim || d.dtype.itemsize != 1) {
		gpud_fail(err, "%s records %llu rows, %s has %llu", done_path,
			  (unsigned long long)d.rows, f->path, (unsigned long long)h.rows);
		goto fail;
	}
	struct stat st;
	if (fstat(nf->fd, &st) == 0 &&
	    (uint64_t)st.st_size < h.data_off + h.rows * arr_row_bytes(&h.row, &h.dtype)) {
		gpud_fail(err, "%s is cut short: %lld bytes, its header says %llu", f->path,
			  (long long)st.st_size,
			  (unsigned long long)(h.data_off +
					       h.rows * arr_row_bytes(&h.row, &h.dtype)));
		goto fail;
	}
	f->status = arr_done_read(done_fd, done_path, d.rows, d.data_off, err);
	if (!f->status)
		goto fail;
	int has = arr_done_read_job(done_fd, d.data_off, d.rows, &f->job_id);
	if (has < 0) {
		gpud_fail(err, "cannot read %s: %s", done_path, strerror(errno));
		free(f->status);
		f->status = NULL;
		goto fail;
	}
	f->has_job = has == 1;
	close(done_fd);
	free(done_path);
	f->dtype = h.dtype;
	f->row = h.row;
	f->rows = h.rows;
	nf->data_off = h.data_off;
	f->impl = nf;
	return 0;
fail:
	if (done_fd >= 0)
		close(done_fd);
	if (nf->fd >= 0)
		close(nf->fd);
	free(nf);
	free(done_path);
	return -1;
}

static int npy_read(struct merge_file *f, uint64_t first, uint64_t n, void *buf,
		    struct gpud_error *err)
{
	struct npy_file *nf = f->impl;
	size_t rb = arr_row_bytes(&f->row, &f->dtype);
	if (arr_pread_all(nf->fd, buf, n * rb, nf->data_off + first * rb) < 0)
		return gpud_fail(err, "reading %s: %s", f->path, strerror(errno));
	return 0;
}

static int npy_create(struct merge_file *f, const char *dataset, struct gpud_error *err)
{
	struct npy_file *nf = calloc(1, sizeof *nf);
	(void)dataset;
	if (!nf)
		return gpud_fail(err, "out of memory");
	nf->fd = -1;
	f->impl = nf;
	if (asprintf(&nf->tmp, "%s.tmp-%ld", f->path, (long)getpid()) < 0 ||
	    asprintf(&nf->done_tmp, "%s.done.tmp-%ld", f->path, (long)getpid()) < 0)
		return gpud_fail(err, "out of memory");
	nf->fd = open(nf->tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	uint64_t size = f->rows * arr_row_bytes(&f->row, &f->dtype);
	if (nf->fd < 0 ||
	    arr_npy_write_header(nf->fd, &f->dtype, &f->row, f->rows, &nf->data_off) < 0 ||
	    ftruncate(nf->fd, (off_t)(nf->data_off + size)) < 0)
		return gpud_fail(err, "cannot write %s: %s", nf->tmp, strerror(errno));
	return 0;
}

static int npy_write(struct merge_file *f, uint64_t first, uint64_t n, const void *buf,
		     struct gpud_error *err)
{
	struct npy_file *nf = f->impl;
	size_t rb = arr_row_bytes(&f->row, &f->dtype);
	if (arr_pwrite_all(nf->fd, buf, n * rb, nf->data_off + first * rb) < 0)
		return gpud_fail(err, "writing %s: %s", nf->tmp, strerror(errno));
	return 0;
}

static int npy_finish(struct merge_file *f, const uint8_t *status, bool ok, struct gpud_error *err)
{
	struct npy_file *nf = f->impl;
	int rc = 0;
	if (!nf)
		return 0;
	if (ok) {
		uint64_t off;
		char *done = arr_done_path(f->path);
		int dfd = arr_done_open(nf->done_tmp, f->rows, false, &off, err);
		if (!done || dfd < 0 || arr_pwrite_all(dfd, status, f->rows, off) < 0 ||
		    (f->has_job && arr_done_write_job(dfd, off, f->rows, f->job_id) < 0) ||
		    fsync(dfd) < 0 || fsync(nf->fd) < 0 || rename(nf->tmp, f->path) < 0 ||
		    rename(nf->done_tmp, done) < 0) {
			if (dfd >= 0 || !done)
				gpud_fail(err, "writing %s: %s", f->path, strerror(errno));
			rc = -1;
		}
		if (dfd >= 0)
			close(dfd);
		free(done);
	}
	if (nf->fd >= 0)
		close(nf->fd);
	if ((!ok || rc < 0) && nf->tmp)
		unlink(nf->tmp);
	if ((!ok || rc < 0) && nf->done_tmp)
		unlink(nf->done_tmp);
	free(nf->tmp);
	free(nf->done_tmp);
	free(nf);
	f->impl = NULL;
	return rc;
}

static void npy_close(struct merge_file *f)
{
	struct npy_file *nf = f->impl;
	if (!nf)
		return;
	close(nf->fd);
	free(nf);
	f->impl = NULL;
}

static const struct merge_format npy_format = {
	.name = "npy",
	.open_shard = npy_open_shard,
	.read = npy_read,
	.create = npy_create,
	.write = npy_write,
	.finish = npy_finish,
	.close = npy_close,
};

/* Not part of the plugin ABI: `gpud merge-arrays` finds it by name in sink-npy.so. */
GPUD_EXPORT int gpud_array_merge_call(struct gpud_array_merge_call *call)
{
	return merge_arrays(&npy_format, call);
}
