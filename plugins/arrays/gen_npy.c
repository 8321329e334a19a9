/* SPDX-License-Identifier: MIT */
/*
 * Generator `npy`: the rows of a .npy array, one task each, task i being row A + i of
 * `rows = A:B` (default: every row). The array's first axis is the rows; a row is the
 * rest (an (N, 3, 4) float32 array gives tasks of 48 bytes). The file is memory-mapped
 * and each row is copied once, straight into the ring; nothing else is read.
 *
 * Read: C-order arrays of the numeric dtypes (bool, int8..int64, uint8..uint64,
 * float16..float64, complex64/128), bytes and unicode strings (S, U), void (V),
 * datetime64 and timedelta64, either byte order: the bytes go as they are in the file.
 * Refused, naming the file: Fortran order (its rows are not contiguous), object dtypes
 * (pointers, not data) and record dtypes (named fields).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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
	const unsigned char *map;
	size_t map_len;
	uint64_t data_off, first, end, next;
	size_t row_bytes;
};

/* The type letter of the header's descr ('O' for '|O'), 'R' for a record dtype (a list
 * of fields), or 0 (no header that says); *size its size digits (S10: 10), 0 without. */
static char descr_kind(int fd, unsigned long *size)
{
	char h[1024];
	*size = 0;
	ssize_t n = pread(fd, h, sizeof h - 1, 0);
	if (n <= 10)
		return 0;
	h[n] = '\0';
	if (memmem(h, (size_t)n, "'descr': [", 10))
		return 'R';
	const char *d = memmem(h, (size_t)n, "'descr': '", 10);
	if (!d)
		return 0;
	d += 10;
	if (*d == '<' || *d == '>' || *d == '|' || *d == '=')
		d++;
	char kind = *d++;
	if (kind == 'M' || kind == 'm') /* datetime64[s]: 8 bytes whatever the unit */
		*size = *d == '8' ? 8 : 0;
	else
		*size = strtoul(d, NULL, 10);
	return kind;
}

/* A dtype the array sinks do not write, but whose rows are bytes all the same: bytes
 * (S), unicode (U, 4 bytes a character), void (V), datetime64 and timedelta64 (M8, m8).
 * Its header is read as an equal-sized uint8 array's, the row getting one more axis. */
static int read_other_header(int fd, const char *path, char kind, unsigned long size,
			     struct arr_npy *a, struct gpud_error *err)
{
	unsigned long itemsize = kind == 'U' ? size * 4 : size;
	if (!itemsize || itemsize > (1ul << 30))
		return -1;
	/* The header is read as the writers read it (from a copy in memory), with its
	 * descr made '|u1'. */
	unsigned char pre[12];
	if (arr_pread_all(fd, pre, sizeof pre, 0) < 0 || memcmp(pre, "\x93NUMPY", 6) != 0)
		return -1;
	size_t start = pre[6] == 1 ? 10 : 12;
	size_t hlen = pre[6] == 1 ? (size_t)pre[8] | (size_t)pre[9] << 8
				  : (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 |
					    (size_t)pre[11] << 24;
	if (hlen > (1u << 20))
		return -1;
	char *buf = malloc(start + hlen);
	if (!buf || arr_pread_all(fd, buf, start + hlen, 0) < 0) {
		free(buf);
		return -1;
	}
	char *d = memmem(buf + start, hlen, "'descr': '", 10);
	char *q = d ? memchr(d + 10, '\'', hlen - (size_t)(d + 10 - (buf + start))) : NULL;
	int rc = -1;
	if (q && q - (d + 10) >= 3) {
		memset(d + 10, ' ', (size_t)(q - (d + 10)));
		memcpy(d + 10, "|u1'", 4);
		if (q != d + 13)
			q[0] = ' ';
		int tfd = memfd_create("gpud-npy-header", MFD_CLOEXEC);
		if (tfd >= 0) {
			if (arr_pwrite_all(tfd, buf, start + hlen, 0) == 0 &&
			    arr_npy_read_header(tfd, path, a, err) == 0 &&
			    a->row.ndim < ARR_MAX_DIMS) {
				a->row.dims[a->row.ndim++] = itemsize;
				rc = 0;
			}
			close(tfd);
		}
	}
	free(buf);
	return rc;
}

/* Opens `path` and reads its header: fd, or -1 with err. */
static int open_array(const struct gpud_args *args, struct arr_npy *a, uint64_t *first,
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
	unsigned long size;
	char kind = descr_kind(fd, &size);
	if (kind == 'O') {
		gpud_fail(err,
			  "npy: %s holds Python objects (dtype object): their bytes are "
			  "pointers, not data",
			  path);
		goto fail;
	}
	if (kind == 'R') {
		gpud_fail(err,
			  "npy: %s has a record dtype (named fields): not read; save each field "
			  "as an array of its own",
			  path);
		goto fail;
	}
	if (strchr("SUVMm", kind ? kind : 'x')) {
		if (read_other_header(fd, path, kind, size, a, err) < 0) {
			if (!err->message[0])
				gpud_fail(err, "npy: %s: its .npy header is not one gpud reads",
					  path);
			goto fail;
		}
	} else if (arr_npy_read_header(fd, path, a, err) < 0) {
		goto fail;
	}
	if (a->fortran) {
		gpud_fail(err,
			  "npy: %s is in Fortran order (its rows are not contiguous): save it "
			  "in C order (numpy.ascontiguousarray)",
			  path);
		goto fail;
	}
	size_t rb = a->dtype.itemsize;
	for (unsigned i = 0; i < a->row.ndim; i++)
		if (__builtin_mul_overflow(rb, (size_t)a->row.dims[i], &rb)) {
			gpud_fail(err, "npy: %s: a row is too large", path);
			goto fail;
		}
	uint64_t need;
	if (fstat(fd, &st) < 0) {
		gpud_fail(err, "npy: %s: %s", path, strerror(errno));
		goto fail;
	}
	if (__builtin_mul_overflow(a->rows, (uint64_t)rb, &need) ||
	    __builtin_add_overflow(need, a->data_off, &need) || (uint64_t)st.st_size < need) {
		gpud_fail(err,
			  "npy: %s is shorter (%llu bytes) than its header says (%llu rows of "
			  "%zu bytes after %llu)",
			  path, (unsigned long long)st.st_size, (unsigned long long)a->rows, rb,
			  (unsigned long long)a->data_off);
		goto fail;
	}
	*row_bytes = rb;
	if (rows_parse(args, "npy", path, a->rows, first, end, err) < 0)
		goto fail;
	return fd;
fail:
	close(fd);
	return -1;
}

GPUD_EXPORT int gpud_generator_check(const struct gpud_args *args, struct gpud_error *err)
{
	struct arr_npy a;
	uint64_t first, end;
	size_t rb;
	const char *path;
	int fd = open_array(args, &a, &first, &end, &rb, &path, err);
	if (fd < 0)
		return -1;
	close(fd);
	return 0;
}

GPUD_EXPORT int gpud_generator_open(const struct gpud_args *args, void **state,
				    struct gpud_error *err)
{
	struct arr_npy a;
	struct npy_gen *g = calloc(1, sizeof *g);
	if (!g)
		return gpud_fail(err, "npy: out of memory");
	const char *path;
	int fd = open_array(args, &a, &g->first, &g->end, &g->row_bytes, &path, err);
	if (fd < 0) {
		free(g);
		return -1;
	}
	g->data_off = a.data_off;
	g->next = g->first;
	g->map_len = (size_t)(a.data_off + a.rows * g->row_bytes);
	if (g->end > g->first && g->row_bytes) {
		void *m = mmap(NULL, g->map_len, PROT_READ, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED) {
			gpud_fail(err, "npy: cannot map %s: %s", path, strerror(errno));
			close(fd);
			free(g);
			return -1;
		}
		madvise(m, g->map_len, MADV_SEQUENTIAL);
		g->map = m;
	}
	close(fd); /* the mapping keeps the file */
	*state = g;
	return 0;
}

GPUD_EXPORT int gpud_generator_next(void *state, struct gpud_buf *item, struct gpud_error *err)
{
	struct npy_gen *g = state;
	(void)err;
	if (g->next >= g->end)
		return 0;
	item->size = g->row_bytes;
	if (item->size <= item->capacity && g->row_bytes)
		memcpy(item->data, g->map + g->data_off + g->next * g->row_bytes, g->row_bytes);
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
	if (g->map)
		munmap((void *)g->map, g->map_len);
	free(g);
}
