/* SPDX-License-Identifier: MIT */
/*
 * What the array sinks (`npy`, `hdf5`) and `gpud merge-arrays` share: the `dtype` and
 * `shape` keys, .npy headers (written and read back), and the done record.
 *
 * The done record of an output PATH is PATH.done, itself a .npy file: uint8, one byte
 * per row (task id), 0 no outcome, 1 ok (the row holds the task's result), 2 error,
 * 3 timeout. A row's byte is written only after the row itself was, so a byte of 1
 * always means the row is there; a row without one may hold anything a killed run
 * left, and is written again when its task runs again.
 *
 * After the rows' bytes the record ends with one line naming the job it belongs to,
 * "\ngpud job_id 0123456789abcdef\n" (gpud_sink_job's job_id, the same for every rank
 * of a job): NumPy reads the rows and ignores what follows them. A record without it
 * was written by a gpud before ABI 1.8.
 */
#ifndef GPUD_PLUGINS_ARRAYS_COMMON_H
#define GPUD_PLUGINS_ARRAYS_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <gpud/plugin.h>

#define ARR_MAX_DIMS 16

/* The done record's byte values. */
enum { ARR_NONE = 0, ARR_OK = 1, ARR_ERROR = 2, ARR_TIMEOUT = 3 };

/* A NumPy dtype: descr as .npy writes it ('<f4', '|u1'), its kind (b, i, u, f, c),
 * its byte order ('<', '>' or '|') and size. */
struct arr_dtype {
	char descr[8];
	char kind;
	char order;
	size_t itemsize;
};

/* The shape of one row (rank 0: a scalar a row). */
struct arr_shape {
	unsigned ndim;
	uint64_t dims[ARR_MAX_DIMS];
};

/* `dtype`: a NumPy name (uint8, float32, ...) or a type string (<f4, >i2, |u1, f8).
 * 0, or -1 with err naming the value. */
int arr_parse_dtype(const char *who, const char *v, struct arr_dtype *out, struct gpud_error *err);
/* `shape`: "3", "3,4", "(3, 4)", "64x64x3"; "" or "()" for a scalar a row.
 * 0, or -1 with err. */
int arr_parse_shape(const char *who, const char *v, struct arr_shape *out, struct gpud_error *err);
/* Bytes in one row; 0 when it would overflow. */
size_t arr_row_bytes(const struct arr_shape *s, const struct arr_dtype *d);
/* "(3, 4)" into buf: the shape as Python writes a tuple, with `rows` first when
 * rows >= 0. */
const char *arr_shape_str(const struct arr_shape *s, int64_t rows, char *buf, size_t len);

/* An opened .npy file: its header parsed. */
struct arr_npy {
	struct arr_dtype dtype;
	struct arr_shape row; /* the shape after the first axis */
	uint64_t rows;        /* the first axis */
	uint64_t data_off;    /* where row 0 starts */
	bool fortran;
};

/* A .npy header as NumPy reads it (common.c): its dict's values, any dtype. */
struct arr_npy_head {
	char descr[64]; /* the dtype string ('<f4', '|S10', '<M8[s]'); "" for a record */
	bool record;    /* descr is a list of fields */
	bool fortran;
	unsigned ndim; /* the whole shape, rows first; sizes may be 0 */
	uint64_t dims[ARR_MAX_DIMS + 1];
	uint64_t data_off; /* where the data starts */
};

/* Reads fd's .npy header as NumPy does: a key given twice is its last value;
 * fortran_order other than True or False, a shape not a tuple of integers, another key,
 * text after the dict are refused, as NumPy refuses them. 0, or -1 with err naming
 * `path` and what is wrong. */
int arr_npy_parse(int fd, const char *path, struct arr_npy_head *h, struct gpud_error *err);

/* Writes a .npy header (v1.0, or 2.0 when it does not fit) for (rows, *row) of `dtype`
 * at the start of fd; sets *data_off. 0, or -1 with errno. */
int arr_npy_write_header(int fd, const struct arr_dtype *dtype, const struct arr_shape *row,
			 uint64_t rows, uint64_t *data_off);
/* Reads fd's .npy header (arr_npy_parse) as an array the sinks write: a dtype
 * arr_parse_dtype takes; a file of rank 0 is refused (no rows). Sizes may be 0. 0, or
 * -1 with err naming `path` and what is wrong. */
int arr_npy_read_header(int fd, const char *path, struct arr_npy *out, struct gpud_error *err);

/* PATH.done for `path`, malloc'd (NULL out of memory). */
char *arr_done_path(const char *path);

/* The done record of `rows` rows at `path`: created full of zeros, or (keep) opened as
 * it is and checked to hold `rows` rows (a record of another size is refused, naming
 * both). Returns an fd, or -1 with err; *data_off is where row 0's byte is. */
int arr_done_open(const char *path, uint64_t rows, bool keep, uint64_t *data_off,
		  struct gpud_error *err);
/* Reads the whole done record (rows bytes) into a malloc'd buffer: NULL with err. */
uint8_t *arr_done_read(int fd, const char *path, uint64_t rows, uint64_t data_off,
		       struct gpud_error *err);

/* Bytes of the job id line after a done record's rows. */
#define ARR_JOB_LINE 30
/* Writes the job id line after the `rows` bytes at data_off (the file ends there).
 * 0, or -1 with errno. */
int arr_done_write_job(int fd, uint64_t data_off, uint64_t rows, uint64_t job_id);
/* Reads it: 1 with *job_id, 0 when the record has none, -1 with errno. */
int arr_done_read_job(int fd, uint64_t data_off, uint64_t rows, uint64_t *job_id);

/* pwrite of all n bytes; 0, or -1 with errno. */
int arr_pwrite_all(int fd, const void *p, size_t n, uint64_t off);
/* pread of all n bytes (a short file is EIO); 0, or -1 with errno. */
int arr_pread_all(int fd, void *p, size_t n, uint64_t off);

#endif
