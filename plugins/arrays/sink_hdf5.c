/* SPDX-License-Identifier: MIT */
/*
 * Sink `hdf5`: every task's result as one row of a dataset in an HDF5 file, at the row
 * of its task id. Keys: path (required), dataset (default data), dtype (required:
 * uint8 .. uint64, int8 .. int64, float32, float64, with a byte order as <f4, >i2),
 * shape (required: the shape of one row), tasks (the number of rows; default: the
 * number of tasks the generator says the job has).
 *
 * The file holds two datasets made at their full size when the run starts: `dataset`,
 * (tasks, *shape) of dtype, and `dataset`_done, (tasks,) uint8, the done record
 * (common.h: 0 no outcome, 1 ok, 2 error, 3 timeout). Both are contiguous and allocated
 * when made, so after that only their bytes change, never the file's structure: a
 * host killed at any moment leaves a file libhdf5 opens. Rows never written read as
 * zeros (no fill value is written: the file's space is allocated, and a filesystem
 * gives zeros for it).
 *
 * Results are gathered in blocks of rows (an aligned window of up to 4 MiB, at least one
 * row) and written as hyperslabs, one per run of consecutive rows, when a result falls
 * outside the window, when the window is full, at the first result a second or more
 * after the window's first, and at the end; each run's done bytes are written only after
 * its rows. A row its done record does not mark (one still in the window when the host
 * was killed) runs again on --resume (what the file holds decides, not the journal).
 *
 * A result whose size is not a row's fails its task (GPUD_SINK_TASK_FAILED), naming
 * both sizes. With ranks, `path` must hold {rank}: each rank a full-size file of its
 * own; `gpud merge-arrays` joins them (gpud_array_merge_call, below).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include <gpud/plugin.h>

#include "../check.h"
#include "common.h"
#include "h5why.h"
#include "merge.h"

GPUD_PLUGIN("sink", "hdf5", "1.0");
GPUD_PLUGIN_DESCRIPTION("one row per task id in an HDF5 dataset (path, dataset, dtype, shape, "
			"tasks)");
GPUD_PLUGIN_KEYS("path", "dataset", "dtype", "shape", "tasks");

#define WINDOW_BYTES (4u << 20)
#define FLUSH_NS 1000000000ull

struct h5_sink {
	char *path, *dataset, *done_name;
	struct arr_dtype dtype;
	struct arr_shape shape;
	size_t row_bytes;
	long tasks_key;
	hid_t file, data, done, ftype;
	uint64_t rows;
	/* The window: rows [w0, w0 + wn) gathered in buf, their outcomes in wstat (0: none
	 * yet). */
	uint64_t w0, wn;
	unsigned char *buf;
	uint8_t *wstat;
	size_t filled;
	uint64_t first_ns;
	bool has_job; /* gpud_sink_job told the job: its id is the done dataset's attribute */
	bool broken;  /* a write failed: the window is not written again */
	uint64_t job_id;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The HDF5 type of a dtype (a copy to close), or -1 for one HDF5 has no plain type for. */
static hid_t h5_type(const struct arr_dtype *d)
{
	bool be = d->order == '>';
	hid_t t = -1;
	switch (d->kind) {
	case 'i':
		t = d->itemsize == 1   ? H5T_STD_I8LE
		    : d->itemsize == 2 ? (be ? H5T_STD_I16BE : H5T_STD_I16LE)
		    : d->itemsize == 4 ? (be ? H5T_STD_I32BE : H5T_STD_I32LE)
				       : (be ? H5T_STD_I64BE : H5T_STD_I64LE);
		break;
	case 'u':
		t = d->itemsize == 1   ? H5T_STD_U8LE
		    : d->itemsize == 2 ? (be ? H5T_STD_U16BE : H5T_STD_U16LE)
		    : d->itemsize == 4 ? (be ? H5T_STD_U32BE : H5T_STD_U32LE)
				       : (be ? H5T_STD_U64BE : H5T_STD_U64LE);
		break;
	case 'f':
		if (d->itemsize == 4)
			t = be ? H5T_IEEE_F32BE : H5T_IEEE_F32LE;
		else if (d->itemsize == 8)
			t = be ? H5T_IEEE_F64BE : H5T_IEEE_F64LE;
		break;
	}
	return t < 0 ? -1 : H5Tcopy(t);
}

/* A dtype for an HDF5 type (integers and floats); -1 for others. */
static int dtype_of(hid_t t, struct arr_dtype *d)
{
	H5T_class_t c = H5Tget_class(t);
	size_t size = H5Tget_size(t);
	H5T_order_t o = H5Tget_order(t);
	char kind = c == H5T_FLOAT     ? 'f'
		    : c == H5T_INTEGER ? (H5Tget_sign(t) == H5T_SGN_NONE ? 'u' : 'i')
				       : 0;
	if (!kind || (kind == 'f' && size != 4 && size != 8))
		return -1;
	char descr[8];
	snprintf(descr, sizeof descr, "%c%c%u",
		 size == 1           ? '|'
		 : o == H5T_ORDER_BE ? '>'
				     : '<',
		 kind, (unsigned)(size & 15));
	return arr_parse_dtype("hdf5", descr, d, NULL);
}

static int parse_keys(const struct gpud_args *args, struct arr_dtype *dtype,
		      struct arr_shape *shape, long *tasks, struct gpud_error *err)
{
	const char *path = gpud_arg(args, "path", NULL), *dt = gpud_arg(args, "dtype", NULL),
		   *sh = gpud_arg(args, "shape", NULL), *ds = gpud_arg(args, "dataset", "data");
	if (!path || !*path || strcmp(path, "-") == 0)
		return gpud_fail(err, "hdf5: 'path' is required (the HDF5 file to write)");
	if (!dt)
		return gpud_fail(err, "hdf5: 'dtype' is required (the type of the dataset's "
				      "elements: uint8, float32, <f4 ...)");
	if (!sh)
		return gpud_fail(err, "hdf5: 'shape' is required (the shape of one row: 3, "
				      "64x64x3; () for one scalar a row)");
	if (!*ds || strchr(ds, '/'))
		return gpud_fail(err,
				 "hdf5: dataset = '%s': a name without '/' (the dataset "
				 "at the file's root)",
				 ds);
	if (arr_parse_dtype("hdf5", dt, dtype, err) < 0 ||
	    arr_parse_shape("hdf5", sh, shape, err) < 0)
		return -1;
	hid_t t = h5_type(dtype);
	if (t < 0)
		return gpud_fail(err,
				 "hdf5: dtype = '%s': the hdf5 sink writes integers and float32 or "
				 "float64 (no bool, float16 or complex)",
				 dt);
	H5Tclose(t);
	if (arr_row_bytes(shape, dtype) == 0)
		return gpud_fail(err, "hdf5: shape = '%s' of %s: a row is too large", sh, dt);
	if (gpud_arg_parse_long(args, "tasks", -1, tasks, err) < 0)
		return gpud_fail(err, "hdf5: tasks = '%s': not a whole number",
				 gpud_arg(args, "tasks", ""));
	if (gpud_arg(args, "tasks", NULL) && *tasks < 1)
		return gpud_fail(err, "hdf5: tasks = %ld: the dataset needs at least one row",
				 *tasks);
	return 0;
}

GPUD_EXPORT int gpud_sink_check(const struct gpud_args *args, struct gpud_error *err)
{
	struct arr_dtype dtype;
	struct arr_shape shape;
	long tasks;
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	if (parse_keys(args, &dtype, &shape, &tasks, err) < 0)
		return -1;
	return check_file_writable("hdf5", gpud_arg(args, "path", NULL), err);
}

/* The datasets and the file closed (each once); -1 when closing the file failed (its
 * last writes did). */
static int close_file(struct h5_sink *s, char *why, size_t len)
{
	if (s->data >= 0)
		H5Dclose(s->data);
	if (s->done >= 0)
		H5Dclose(s->done);
	s->data = s->done = -1;
	int rc = s->file >= 0 && H5Fclose(s->file) < 0 ? -1 : 0;
	if (rc < 0 && why)
		h5why(why, len);
	s->file = -1;
	return rc;
}

static void free_sink(struct h5_sink *s)
{
	close_file(s, NULL, 0);
	if (s->ftype >= 0)
		H5Tclose(s->ftype);
	free(s->path);
	free(s->dataset);
	free(s->done_name);
	free(s->buf);
	free(s->wstat);
	free(s);
}

GPUD_EXPORT int gpud_sink_open(const struct gpud_args *args, void **state, struct gpud_error *err)
{
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* errors are said here, not printed by libhdf5 */
	struct h5_sink *s = calloc(1, sizeof *s);
	if (!s)
		return gpud_fail(err, "hdf5: out of memory");
	s->file = s->data = s->done = s->ftype = -1;
	if (parse_keys(args, &s->dtype, &s->shape, &s->tasks_key, err) < 0) {
		free_sink(s);
		return -1;
	}
	s->row_bytes = arr_row_bytes(&s->shape, &s->dtype);
	s->wn = WINDOW_BYTES / s->row_bytes ? WINDOW_BYTES / s->row_bytes : 1;
	s->ftype = h5_type(&s->dtype);
	s->path = strdup(gpud_arg(args, "path", NULL));
	s->dataset = strdup(gpud_arg(args, "dataset", "data"));
	s->buf = calloc(s->wn, s->row_bytes);
	s->wstat = calloc(s->wn, 1);
	if (!s->path || !s->dataset || !s->buf || !s->wstat ||
	    asprintf(&s->done_name, "%s_done", s->dataset) < 0) {
		s->done_name = NULL;
		free_sink(s);
		return gpud_fail(err, "hdf5: out of memory");
	}
	s->w0 = UINT64_MAX; /* no window yet */
	*state = s;
	return 0;
}

/* A contiguous dataset of `dims`, allocated now, no fill value written; -1 with why. */
static hid_t make_dataset(hid_t file, const char *name, hid_t type, int rank, const hsize_t *dims,
			  char *why, size_t len)
{
	hid_t space = H5Screate_simple(rank, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
	hid_t d = -1;
	if (space >= 0 && dcpl >= 0 && H5Pset_layout(dcpl, H5D_CONTIGUOUS) >= 0 &&
	    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY) >= 0 &&
	    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) >= 0)
		d = H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
	if (d < 0)
		h5why(why, len);
	if (dcpl >= 0)
		H5Pclose(dcpl);
	if (space >= 0)
		H5Sclose(space);
	return d;
}

static void dims_of(const struct h5_sink *s, uint64_t rows, hsize_t *dims)
{
	dims[0] = rows;
	for (unsigned i = 0; i < s->shape.ndim; i++)
		dims[i + 1] = s->shape.dims[i];
}

/* The attribute gpud_job_id (uint64) of the done dataset: which job the file is a
 * shard of (gpud_sink_job), so that `gpud merge-arrays` joins no two jobs. Made with
 * the datasets, before the file's structure is final. */
#define JOB_ATTR "gpud_job_id"

static int write_job(hid_t done, uint64_t job_id)
{
	hid_t space = H5Screate(H5S_SCALAR), a = -1;
	herr_t rc = -1;
	if (space >= 0)
		a = H5Acreate2(done, JOB_ATTR, H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT);
	if (a >= 0)
		rc = H5Awrite(a, H5T_NATIVE_UINT64, &job_id);
	if (a >= 0)
		H5Aclose(a);
	if (space >= 0)
		H5Sclose(space);
	return rc < 0 ? -1 : 0;
}

/* 1 with *job_id, 0 when the dataset has no such attribute (an older gpud's), -1. */
static int read_job(hid_t done, uint64_t *job_id)
{
	htri_t has = H5Aexists(done, JOB_ATTR);
	if (has <= 0)
		return has < 0 ? -1 : 0;
	hid_t a = H5Aopen(done, JOB_ATTR, H5P_DEFAULT);
	herr_t rc = a >= 0 ? H5Aread(a, H5T_NATIVE_UINT64, job_id) : -1;
	if (a >= 0)
		H5Aclose(a);
	return rc < 0 ? -1 : 1;
}

static int create_file(struct h5_sink *s, uint64_t rows, struct gpud_error *err)
{
	hsize_t dims[ARR_MAX_DIMS + 1];
	dims_of(s, rows, dims);
	char why[512];
	s->file = H5Fcreate(s->path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	if (s->file < 0)
		return gpud_fail(err, "hdf5: cannot create %s: %s", s->path,
				 h5why(why, sizeof why));
	s->data = make_dataset(s->file, s->dataset, s->ftype, (int)s->shape.ndim + 1, dims, why,
			       sizeof why);
	if (s->data >= 0)
		s->done =
			make_dataset(s->file, s->done_name, H5T_STD_U8LE, 1, dims, why, sizeof why);
	if (s->data >= 0 && s->done >= 0 &&
	    ((s->has_job && write_job(s->done, s->job_id) < 0) ||
	     H5Fflush(s->file, H5F_SCOPE_GLOBAL) < 0))
		h5why(why, sizeof why);
	else if (s->data >= 0 && s->done >= 0)
		why[0] = '\0';
	if (why[0])
		return gpud_fail(err,
				 "hdf5: cannot make the datasets %s and %s in %s (%llu rows): %s",
				 s->dataset, s->done_name, s->path, (unsigned long long)rows, why);
	s->rows = rows;
	return 0;
}

/* The job's id, written with the datasets (a file resumed keeps what it has). */
GPUD_EXPORT int gpud_sink_job(void *state, const struct gpud_job_info *info, struct gpud_error *err)
{
	struct h5_sink *s = state;
	(void)err;
	s->has_job = true;
	s->job_id = info->job_id;
	return 0;
}

GPUD_EXPORT int gpud_sink_tasks(void *state, int64_t total, struct gpud_error *err)
{
	struct h5_sink *s = state;
	int64_t rows = s->tasks_key >= 1 ? s->tasks_key : total;
	if (s->tasks_key >= 1 && total >= 0 && total != s->tasks_key)
		return gpud_fail(err,
				 "hdf5: tasks = %ld, but the generator says the job has %lld tasks "
				 "(leave tasks out to take the generator's count)",
				 s->tasks_key, (long long)total);
	if (rows < 0)
		return gpud_fail(err, "hdf5: the generator does not say how many tasks the job "
				      "has: set tasks = N in [sink] (the dataset's rows)");
	if (rows == 0)
		return gpud_fail(err,
				 "hdf5: the job has no tasks: a dataset needs at least one row");
	if (s->file >= 0) {
		if (s->rows != (uint64_t)rows)
			return gpud_fail(err,
					 "hdf5: %s's %s has %llu rows, but the job has %lld tasks: "
					 "it is another job's (remove it to start afresh)",
					 s->path, s->dataset, (unsigned long long)s->rows,
					 (long long)rows);
		return 0;
	}
	return create_file(s, (uint64_t)rows, err);
}

/* The file there must hold the datasets the keys describe. */
static int reopen(struct h5_sink *s, void (*done)(void *ctx, uint64_t task_id, int status),
		  void *ctx, struct gpud_error *err)
{
	hsize_t dims[ARR_MAX_DIMS + 1], ddims[1];
	char want[256];
	s->data = H5Dopen2(s->file, s->dataset, H5P_DEFAULT);
	s->done = H5Dopen2(s->file, s->done_name, H5P_DEFAULT);
	if (s->data < 0 || s->done < 0)
		return gpud_fail(err,
				 "hdf5: %s has no datasets %s and %s: it is not this job's "
				 "(remove it to start afresh)",
				 s->path, s->dataset, s->done_name);
	hid_t space = H5Dget_space(s->data), type = H5Dget_type(s->data);
	int rank = H5Sget_simple_extent_ndims(space);
	bool same = rank == (int)s->shape.ndim + 1 &&
		    H5Sget_simple_extent_dims(space, dims, NULL) == rank &&
		    H5Tequal(type, s->ftype) > 0;
	for (unsigned i = 0; same && i < s->shape.ndim; i++)
		same = dims[i + 1] == s->shape.dims[i];
	H5Sclose(space);
	H5Tclose(type);
	if (!same)
		return gpud_fail(err,
				 "hdf5: %s's %s is not rows of %s %s: it is another job's (remove "
				 "it to start afresh)",
				 s->path, s->dataset,
				 arr_shape_str(&s->shape, -1, want, sizeof want), s->dtype.descr);
	space = H5Dget_space(s->done);
	same = H5Sget_simple_extent_ndims(space) == 1 &&
	       H5Sget_simple_extent_dims(space, ddims, NULL) == 1 && ddims[0] == dims[0];
	H5Sclose(space);
	if (!same)
		return gpud_fail(err, "hdf5: %s's %s does not have the %llu rows of %s", s->path,
				 s->done_name, (unsigned long long)dims[0], s->dataset);
	s->rows = dims[0];
	uint8_t *st = malloc(s->rows);
	if (!st)
		return gpud_fail(err, "hdf5: out of memory reading %s", s->done_name);
	if (H5Dread(s->done, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, st) < 0) {
		free(st);
		return gpud_fail(err, "hdf5: cannot read %s from %s", s->done_name, s->path);
	}
	for (uint64_t i = 0; i < s->rows; i++)
		if (st[i] >= ARR_OK && st[i] <= ARR_TIMEOUT)
			done(ctx, i, st[i] - 1);
	free(st);
	return 0;
}

GPUD_EXPORT int gpud_sink_resume(const struct gpud_args *args, void **state,
				 void (*done)(void *ctx, uint64_t task_id, int status), void *ctx,
				 struct gpud_error *err)
{
	if (gpud_sink_open(args, state, err) < 0)
		return -1;
	struct h5_sink *s = *state;
	if (access(s->path, F_OK) < 0)
		return 0; /* made as a fresh run makes it */
	s->file = H5Fopen(s->path, H5F_ACC_RDWR, H5P_DEFAULT);
	char why[512];
	if (s->file < 0)
		gpud_fail(err,
			  "hdf5: cannot open %s as an HDF5 file: %s (remove it to start afresh)",
			  s->path, h5why(why, sizeof why));
	if (s->file < 0 || reopen(s, done, ctx, err) < 0) {
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

/* Rows [first, first + n) of a dataset of `ndim` + 1 dimensions from buf (memory of
 * exactly those rows). */
static int write_rows(hid_t d, hid_t mtype, unsigned ndim, const uint64_t *row_dims, uint64_t first,
		      uint64_t n, const void *buf, char *why, size_t len)
{
	hsize_t start[ARR_MAX_DIMS + 1] = {0}, count[ARR_MAX_DIMS + 1];
	start[0] = first;
	count[0] = n;
	for (unsigned i = 0; i < ndim; i++)
		count[i + 1] = row_dims[i];
	hid_t fs = H5Dget_space(d), ms = H5Screate_simple((int)ndim + 1, count, NULL);
	herr_t rc = -1;
	if (fs >= 0 && ms >= 0 &&
	    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) >= 0)
		rc = H5Dwrite(d, mtype, ms, fs, H5P_DEFAULT, buf);
	if (rc < 0) /* now: H5Sclose clears the error stack */
		h5why(why, len);
	if (ms >= 0)
		H5Sclose(ms);
	if (fs >= 0)
		H5Sclose(fs);
	return rc < 0 ? -1 : 0;
}

/* The window's runs written: rows, then (after a flush) their done bytes. A failure
 * names the system's error and the results it leaves out of the file: every one the
 * window holds (none of their done bytes is known to be on disk), which --resume runs
 * again. */
static int flush_window(struct h5_sink *s, bool with_current, struct gpud_error *err)
{
	char why[512];
	/* The results taken before: the host counts the current one (the call fails). */
	size_t lost = s->filled - (with_current && s->filled ? 1 : 0);
	if (!s->filled || s->broken)
		return 0;
	for (int pass = 0; pass < 2; pass++) {
		for (uint64_t i = 0; i < s->wn;) {
			if (!s->wstat[i]) {
				i++;
				continue;
			}
			uint64_t e = i + 1;
			while (e < s->wn && s->wstat[e])
				e++;
			int rc = pass == 0
					 ? write_rows(s->data, s->ftype, s->shape.ndim,
						      s->shape.dims, s->w0 + i, e - i,
						      s->buf + i * s->row_bytes, why, sizeof why)
					 : write_rows(s->done, H5T_NATIVE_UINT8, 0, NULL, s->w0 + i,
						      e - i, s->wstat + i, why, sizeof why);
			if (rc < 0) {
				s->broken = true;
				return gpud_fail(err,
						 "hdf5: writing rows %llu to %llu of %s in %s: %s; "
						 "%zu results taken before are not in the file "
						 "(not marked in %s: --resume runs them again)",
						 (unsigned long long)(s->w0 + i),
						 (unsigned long long)(s->w0 + e - 1),
						 pass ? s->done_name : s->dataset, s->path, why,
						 lost, s->done_name);
			}
			i = e;
		}
		if (H5Fflush(s->file, H5F_SCOPE_LOCAL) < 0) {
			s->broken = true;
			return gpud_fail(
				err,
				"hdf5: writing %s: %s; %zu results taken before are not in "
				"the file (not marked in %s: --resume runs them again)",
				s->path, h5why(why, sizeof why), lost, s->done_name);
		}
	}
	memset(s->wstat, 0, s->wn);
	memset(s->buf, 0, s->wn * s->row_bytes);
	s->filled = 0;
	return 0;
}

GPUD_EXPORT int gpud_sink_event(void *state, const struct gpud_event *ev, struct gpud_error *err)
{
	struct h5_sink *s = state;
	char shape[256];
	if (ev->kind != GPUD_TASK_OK && ev->kind != GPUD_TASK_ERROR &&
	    ev->kind != GPUD_TASK_TIMEOUT)
		return 0;
	if (s->file < 0 && gpud_sink_tasks(s, -1, err) < 0)
		return -1;
	uint64_t id = ev->task_id;
	if (id >= s->rows) {
		if (ev->kind != GPUD_TASK_OK)
			return 0;
		gpud_fail(err, "hdf5: task %llu is past the last row of %s in %s (%llu rows)",
			  (unsigned long long)id, s->dataset, s->path, (unsigned long long)s->rows);
		return GPUD_SINK_TASK_FAILED;
	}
	uint8_t status = ev->kind == GPUD_TASK_OK        ? ARR_OK
			 : ev->kind == GPUD_TASK_TIMEOUT ? ARR_TIMEOUT
							 : ARR_ERROR;
	int rc = 0;
	if (ev->kind == GPUD_TASK_OK && ev->result_size != s->row_bytes) {
		gpud_fail(err,
			  "hdf5: the result is %zu bytes, a row of %s in %s is %zu bytes "
			  "(shape %s of %s)",
			  ev->result_size, s->dataset, s->path, s->row_bytes,
			  arr_shape_str(&s->shape, -1, shape, sizeof shape), s->dtype.descr);
		status = ARR_ERROR;
		rc = GPUD_SINK_TASK_FAILED;
	}
	struct gpud_error werr;
	if (s->w0 == UINT64_MAX || id < s->w0 || id >= s->w0 + s->wn) {
		if (flush_window(s, false, &werr) < 0) {
			*err = werr;
			return -1;
		}
		s->w0 = id - id % s->wn;
		s->first_ns = now_ns();
	}
	uint64_t k = id - s->w0;
	if (status == ARR_OK)
		memcpy(s->buf + k * s->row_bytes, ev->result, s->row_bytes);
	if (!s->wstat[k])
		s->filled++;
	s->wstat[k] = status;
	bool full = s->filled == s->wn || (s->w0 + s->wn > s->rows && s->filled == s->rows - s->w0);
	if (full) {
		if (flush_window(s, true, &werr) < 0) {
			*err = werr;
			return -1;
		}
	} else if (now_ns() - s->first_ns >= FLUSH_NS) {
		if (flush_window(s, true, &werr) < 0) {
			*err = werr;
			return -1;
		}
		s->first_ns = now_ns();
	}
	return rc;
}

GPUD_EXPORT int gpud_sink_finish(void *state, const struct gpud_stats *stats,
				 const struct gpud_run_end *end, struct gpud_error *err)
{
	struct h5_sink *s = state;
	int rc = 0;
	(void)stats;
	(void)end;
	char why[512];
	if (s->file >= 0 && flush_window(s, false, err) < 0)
		rc = -1;
	if (close_file(s, why, sizeof why) < 0 && rc == 0)
		rc = gpud_fail(err, "hdf5: closing %s: %s", s->path, why);
	free_sink(s);
	return rc;
}

/* ---- gpud merge-arrays for HDF5 shards (merge.h) ---- */

struct h5_file {
	hid_t file, data;
	char *tmp;
	const char *dataset;
};

static int h5_open_shard(struct merge_file *f, const char *dataset, struct gpud_error *err)
{
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	struct h5_file *hf = calloc(1, sizeof *hf);
	char done_name[512];
	if (!hf)
		return gpud_fail(err, "out of memory");
	hf->dataset = dataset ? dataset : "data";
	snprintf(done_name, sizeof done_name, "%s_done", hf->dataset);
	hf->data = -1;
	hf->file = H5Fopen(f->path, H5F_ACC_RDONLY, H5P_DEFAULT);
	hid_t done = -1, space = -1, type = -1;
	hsize_t dims[ARR_MAX_DIMS + 1], ddims[1];
	if (hf->file < 0) {
		char why[512];
		gpud_fail(err, "cannot open %s as an HDF5 file: %s", f->path,
			  h5why(why, sizeof why));
		goto fail;
	}
	hf->data = H5Dopen2(hf->file, hf->dataset, H5P_DEFAULT);
	done = H5Dopen2(hf->file, done_name, H5P_DEFAULT);
	if (hf->data < 0 || done < 0) {
		gpud_fail(err, "%s has no datasets %s and %s (--dataset NAME names another)",
			  f->path, hf->dataset, done_name);
		goto fail;
	}
	space = H5Dget_space(hf->data);
	type = H5Dget_type(hf->data);
	int rank = H5Sget_simple_extent_ndims(space);
	if (rank < 1 || rank > ARR_MAX_DIMS + 1 ||
	    H5Sget_simple_extent_dims(space, dims, NULL) != rank || dtype_of(type, &f->dtype) < 0) {
		gpud_fail(err, "%s's %s is not rows of integers or floats", f->path, hf->dataset);
		goto fail;
	}
	f->rows = dims[0];
	f->row.ndim = (unsigned)rank - 1;
	for (int i = 1; i < rank; i++)
		f->row.dims[i - 1] = dims[i];
	H5Sclose(space);
	space = H5Dget_space(done);
	if (H5Sget_simple_extent_ndims(space) != 1 ||
	    H5Sget_simple_extent_dims(space, ddims, NULL) != 1 || ddims[0] != f->rows) {
		gpud_fail(err, "%s's %s does not have the %llu rows of %s", f->path, done_name,
			  (unsigned long long)f->rows, hf->dataset);
		goto fail;
	}
	int has = read_job(done, &f->job_id);
	if (has < 0) {
		gpud_fail(err, "cannot read %s's %s attribute %s", f->path, done_name, JOB_ATTR);
		goto fail;
	}
	f->has_job = has == 1;
	f->status = malloc(f->rows ? f->rows : 1);
	if (!f->status ||
	    H5Dread(done, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, f->status) < 0) {
		free(f->status);
		f->status = NULL;
		gpud_fail(err, "cannot read %s's %s", f->path, done_name);
		goto fail;
	}
	H5Sclose(space);
	H5Tclose(type);
	H5Dclose(done);
	f->impl = hf;
	return 0;
fail:
	if (space >= 0)
		H5Sclose(space);
	if (type >= 0)
		H5Tclose(type);
	if (done >= 0)
		H5Dclose(done);
	if (hf->data >= 0)
		H5Dclose(hf->data);
	if (hf->file >= 0)
		H5Fclose(hf->file);
	free(hf);
	return -1;
}

static int h5_read(struct merge_file *f, uint64_t first, uint64_t n, void *buf,
		   struct gpud_error *err)
{
	struct h5_file *hf = f->impl;
	hsize_t start[ARR_MAX_DIMS + 1] = {0}, count[ARR_MAX_DIMS + 1];
	start[0] = first;
	count[0] = n;
	for (unsigned i = 0; i < f->row.ndim; i++)
		count[i + 1] = f->row.dims[i];
	hid_t fs = H5Dget_space(hf->data), ms = H5Screate_simple((int)f->row.ndim + 1, count, NULL);
	hid_t t = h5_type(&f->dtype);
	herr_t rc = -1;
	if (fs >= 0 && ms >= 0 && t >= 0 &&
	    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) >= 0)
		rc = H5Dread(hf->data, t, ms, fs, H5P_DEFAULT, buf);
	if (t >= 0)
		H5Tclose(t);
	if (ms >= 0)
		H5Sclose(ms);
	if (fs >= 0)
		H5Sclose(fs);
	return rc < 0 ? gpud_fail(err, "reading rows %llu to %llu of %s", (unsigned long long)first,
				  (unsigned long long)(first + n - 1), f->path)
		      : 0;
}

static int h5_create(struct merge_file *f, const char *dataset, struct gpud_error *err)
{
	struct h5_sink *s = calloc(1, sizeof *s);
	if (!s)
		return gpud_fail(err, "out of memory");
	s->file = s->data = s->done = s->ftype = -1;
	f->impl = s;
	s->dtype = f->dtype;
	s->shape = f->row;
	s->row_bytes = arr_row_bytes(&f->row, &f->dtype);
	s->ftype = h5_type(&f->dtype);
	s->has_job = f->has_job;
	s->job_id = f->job_id;
	s->dataset = strdup(dataset ? dataset : "data");
	if (!s->dataset || asprintf(&s->done_name, "%s_done", s->dataset) < 0 ||
	    asprintf(&s->path, "%s.tmp-%ld", f->path, (long)getpid()) < 0) {
		s->done_name = s->path = NULL;
		return gpud_fail(err, "out of memory");
	}
	return create_file(s, f->rows, err);
}

static int h5_write(struct merge_file *f, uint64_t first, uint64_t n, const void *buf,
		    struct gpud_error *err)
{
	struct h5_sink *s = f->impl;
	char why[512];
	if (write_rows(s->data, s->ftype, s->shape.ndim, s->shape.dims, first, n, buf, why,
		       sizeof why) < 0)
		return gpud_fail(err, "writing %s: %s", s->path, why);
	return 0;
}

static int h5_finish(struct merge_file *f, const uint8_t *status, bool ok, struct gpud_error *err)
{
	struct h5_sink *s = f->impl;
	int rc = 0;
	if (!s)
		return 0;
	char why[512];
	if (ok &&
	    write_rows(s->done, H5T_NATIVE_UINT8, 0, NULL, 0, f->rows, status, why, sizeof why) < 0)
		rc = gpud_fail(err, "writing %s: %s", s->path, why);
	if (close_file(s, why, sizeof why) < 0 && rc == 0)
		rc = gpud_fail(err, "writing %s: %s", s->path, why);
	if (ok && rc == 0 && rename(s->path, f->path) < 0)
		rc = gpud_fail(err, "cannot rename %s to %s: %s", s->path, f->path,
			       strerror(errno));
	if ((!ok || rc < 0) && s->path)
		unlink(s->path);
	free_sink(s);
	f->impl = NULL;
	return rc;
}

static void h5_close(struct merge_file *f)
{
	struct h5_file *hf = f->impl;
	if (!hf)
		return;
	H5Dclose(hf->data);
	H5Fclose(hf->file);
	free(hf);
	f->impl = NULL;
}

static const struct merge_format h5_format = {
	.name = "hdf5",
	.open_shard = h5_open_shard,
	.read = h5_read,
	.create = h5_create,
	.write = h5_write,
	.finish = h5_finish,
	.close = h5_close,
};

/* Not part of the plugin ABI: `gpud merge-arrays` finds it by name in sink-hdf5.so. */
GPUD_EXPORT int gpud_array_merge_call(struct gpud_array_merge_call *call)
{
	return merge_arrays(&h5_format, call);
}
