/* SPDX-License-Identifier: MIT */
/*
 * Generator `npy`: the rows of a .npy array, one task each, task i being row A + i of
 * `rows = A:B` (default: every row). The array's first axis is the rows; a row is the
 * rest (an (N, 3, 4) float32 array gives tasks of 48 bytes). The header is read as NumPy
 * reads it (common.h: arr_npy_parse); the rows with pread, a block of about 1 MiB at a
 * time (a row of 64 KiB or more straight into its task), so a file cut short while it
 * is read fails the tasks of the rows it lost, naming the file, and the run goes on.
 *
 * Read: C-order arrays of the numeric dtypes of any size (bool, int8..int64,
 * uint8..uint64, float16..float128, complex64..complex256), bytes and unicode strings
 * (S, U), void (V), datetime64 and timedelta64, either byte order: the bytes go as they
 * are in the file. Sizes of 0 are read as NumPy reads them: (0, 3) is no task, (4, 0)
 * four tasks of 0 bytes. Refused, naming the file: Fortran order of more than one axis
 * (its rows are not contiguous), object dtypes (pointers, not data) and record dtypes
 * (named fields).
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
#include "rows.h"

GPUD_PLUGIN("generator", "npy", "1.0");
GPUD_PLUGIN_DESCRIPTION("the rows of a .npy array (path; rows = A:B), one task each");
GPUD_PLUGIN_KEYS("path", "rows");

struct npy_gen {
	int fd;
	char *path;
	uint64_t data_off, rows, first, end, next;
	size_t row_bytes;
	/* Rows are read with pread, a block at a time (or straight into the task when a
	 * row is large): a file cut short while it is read fails the tasks of the rows it
	 * lost, where a mapping would kill the host with SIGBUS. */
	unsigned char *buf;
	uint64_t buf_first, buf_n, block;
};

/* Read straight into the task from this row size up; below it, a block of rows. */
#define DIRECT_ROW (64u << 10)
#define BLOCK_BYTES (1u << 20)

/* A dtype string's item size in bytes, as NumPy has it, for the dtypes whose rows are
 * plain bytes: numbers of any size (b, i, u, f, c: f16 is float128), bytes (S),
 * unicode (U, 4 bytes a character), void (V), datetime64 and timedelta64 (M8, m8, any
 * unit). 0 for others, with *kind the type letter ('O' for objects). */
static size_t item_size(const char *descr, char *kind)
{
	const char *d = descr;
	if (*d == '<' || *d == '>' || *d == '|' || *d == '=')
		d++;
	*kind = *d;
	if (!*d || !strchr("biufcSUVMm", *d))
		return 0;
	d++;
	if (*kind == 'M' || *kind == 'm') /* M8 or M8[unit] */
		return d[0] == '8' && (d[1] == '\0' || d[1] == '[') ? 8 : 0;
	if (*d < '1' || *d > '9')
		return 0;
	char *end;
	errno = 0;
	unsigned long n = strtoul(d, &end, 10);
	if (errno || *end || n > (1ul << 30))
		return 0;
	return *kind == 'U' ? n * 4 : n;
}

/* Opens `path` and reads its header: fd, or -1 with err. */
static int open_array(const struct gpud_args *args, struct arr_npy_head *h, uint64_t *first,
		      uint64_t *end, size_t *row_bytes, const char **pathp, struct gpud_error *err)
{
	const char *path = gpud_arg(args, "path", NULL);
	*pathp = path;
	if (!path || !*path)
		return gpud_fail(err, "npy: 'path' is required (the .npy file to read)");
	struct stat st;
	int fd = check_open_regular("npy", path, &st, err);
	if (fd < 0)
		return -1;
	char kind;
	if (arr_npy_parse(fd, path, h, err) < 0) {
		char m[sizeof err->message];
		snprintf(m, sizeof m, "%s", err->message);
		gpud_fail(err, "npy: %s", m);
		goto fail;
	}
	if (h->record) {
		gpud_fail(err,
			  "npy: %s has a record dtype (named fields): not read; save each field "
			  "as an array of its own",
			  path);
		goto fail;
	}
	size_t rb = item_size(h->descr, &kind);
	if (kind == 'O') {
		gpud_fail(err,
			  "npy: %s holds Python objects (dtype object): their bytes are "
			  "pointers, not data",
			  path);
		goto fail;
	}
	if (!rb) {
		gpud_fail(err,
			  "npy: %s: dtype '%s' is not one the npy generator reads (numbers, "
			  "bytes S, unicode U, void V, datetime64, timedelta64)",
			  path, h->descr);
		goto fail;
	}
	if (h->ndim == 0) {
		gpud_fail(err, "npy: %s holds a scalar, not rows", path);
		goto fail;
	}
	if (h->fortran && h->ndim > 1) {
		gpud_fail(err,
			  "npy: %s is in Fortran order (its rows are not contiguous): save it "
			  "in C order (numpy.ascontiguousarray)",
			  path);
		goto fail;
	}
	for (unsigned i = 1; i < h->ndim; i++)
		if (__builtin_mul_overflow(rb, (size_t)h->dims[i], &rb) || rb > (1ul << 40)) {
			gpud_fail(err, "npy: %s: a row is too large", path);
			goto fail;
		}
	uint64_t need;
	if (fstat(fd, &st) < 0) {
		gpud_fail(err, "npy: %s: %s", path, strerror(errno));
		goto fail;
	}
	if (__builtin_mul_overflow(h->dims[0], (uint64_t)rb, &need) ||
	    __builtin_add_overflow(need, h->data_off, &need) || (uint64_t)st.st_size < need) {
		gpud_fail(err,
			  "npy: %s is shorter (%llu bytes) than its header says (%llu rows of "
			  "%zu bytes after %llu)",
			  path, (unsigned long long)st.st_size, (unsigned long long)h->dims[0], rb,
			  (unsigned long long)h->data_off);
		goto fail;
	}
	*row_bytes = rb;
	if (rows_parse(args, "npy", path, h->dims[0], first, end, err) < 0)
		goto fail;
	return fd;
fail:
	close(fd);
	return -1;
}

GPUD_EXPORT int gpud_generator_check(const struct gpud_args *args, struct gpud_error *err)
{
	struct arr_npy_head h;
	uint64_t first, end;
	size_t rb;
	const char *path;
	int fd = open_array(args, &h, &first, &end, &rb, &path, err);
	if (fd < 0)
		return -1;
	close(fd);
	return 0;
}

GPUD_EXPORT int gpud_generator_open(const struct gpud_args *args, void **state,
				    struct gpud_error *err)
{
	struct arr_npy_head h;
	struct npy_gen *g = calloc(1, sizeof *g);
	if (!g)
		return gpud_fail(err, "npy: out of memory");
	const char *path;
	g->fd = open_array(args, &h, &g->first, &g->end, &g->row_bytes, &path, err);
	if (g->fd < 0) {
		free(g);
		return -1;
	}
	g->path = strdup(path);
	g->data_off = h.data_off;
	g->rows = h.dims[0];
	g->next = g->first;
	if (g->row_bytes && g->row_bytes < DIRECT_ROW) {
		g->block = BLOCK_BYTES / g->row_bytes;
		g->buf = malloc(g->block * g->row_bytes);
	}
	if (!g->path || (g->block && !g->buf)) {
		close(g->fd);
		free(g->path);
		free(g->buf);
		free(g);
		return gpud_fail(err, "npy: out of memory");
	}
	posix_fadvise(g->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	*state = g;
	return 0;
}

/* The task of `row` failed: the file no longer holds it (cut short while read) or a read
 * failed. */
static int row_lost(struct npy_gen *g, uint64_t row, int e, struct gpud_error *err)
{
	struct stat st;
	g->next++;
	if (e == EIO && fstat(g->fd, &st) == 0 &&
	    (uint64_t)st.st_size < g->data_off + (row + 1) * g->row_bytes)
		gpud_fail(err,
			  "npy: %s was cut short while read: %llu bytes now, row %llu ends at "
			  "byte %llu",
			  g->path, (unsigned long long)st.st_size, (unsigned long long)row,
			  (unsigned long long)(g->data_off + (row + 1) * g->row_bytes));
	else
		gpud_fail(err, "npy: %s: reading row %llu: %s", g->path, (unsigned long long)row,
			  strerror(e));
	return GPUD_GENERATOR_TASK_FAILED;
}

/* Reads the block of rows from `row` into buf: the rows it could read whole. */
static int read_block(struct npy_gen *g, uint64_t row)
{
	uint64_t n = g->end - row < g->block ? g->end - row : g->block;
	size_t want = (size_t)(n * g->row_bytes), got = 0;
	uint64_t off = g->data_off + row * g->row_bytes;
	while (got < want) {
		ssize_t r = pread(g->fd, g->buf + got, want - got, (off_t)(off + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	g->buf_first = row;
	g->buf_n = got / g->row_bytes;
	return 0;
}

GPUD_EXPORT int gpud_generator_next(void *state, struct gpud_buf *item, struct gpud_error *err)
{
	struct npy_gen *g = state;
	if (g->next >= g->end)
		return 0;
	uint64_t row = g->next;
	item->size = g->row_bytes;
	if (item->size > item->capacity || !g->row_bytes) { /* too large: the host says so */
		g->next++;
		return 1;
	}
	if (!g->block) { /* a large row: straight into the task */
		if (arr_pread_all(g->fd, item->data, g->row_bytes,
				  g->data_off + row * g->row_bytes) < 0)
			return row_lost(g, row, errno, err);
		g->next++;
		return 1;
	}
	if (row < g->buf_first || row >= g->buf_first + g->buf_n) {
		if (read_block(g, row) < 0)
			return row_lost(g, row, errno, err);
		if (g->buf_n == 0)
			return row_lost(g, row, EIO, err);
	}
	memcpy(item->data, g->buf + (row - g->buf_first) * g->row_bytes, g->row_bytes);
	g->next++;
	return 1;
}

GPUD_EXPORT int gpud_generator_skip(void *state, uint64_t n, struct gpud_error *err)
{
	struct npy_gen *g = state;
	(void)err;
	g->next = n > g->end - g->next ? g->end : g->next + n;
	return 0;
}

GPUD_EXPORT int64_t gpud_generator_total(void *state)
{
	struct npy_gen *g = state;
	return (int64_t)(g->end - g->first);
}

GPUD_EXPORT void gpud_generator_close(void *state)
{
	struct npy_gen *g = state;
	if (g->fd >= 0)
		close(g->fd);
	free(g->buf);
	free(g->path);
	free(g);
}
