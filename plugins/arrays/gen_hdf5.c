/* SPDX-License-Identifier: MIT */
/*
 * Generator `hdf5`: the rows of a dataset in an HDF5 file, one task each, task i being
 * row A + i of `rows = A:B` (default: every row). Keys: path, dataset (its name in the
 * file, groups included: /features/train), rows, block (rows read per libhdf5 call,
 * default enough for about 4 MiB). The first axis is the rows; a row is the rest.
 *
 * The rows are read `block` at a time (a hyperslab, through libhdf5's chunk cache and
 * filters: a compressed dataset reads as any other) into a buffer, and each row is
 * copied from there into the ring. A row's bytes are the dataset's own type as stored
 * (its byte order too), as h5py's `dset[i].tobytes()` gives them: numbers of any size,
 * fixed-length strings, compound records. Refused, naming file and dataset: a scalar
 * dataset (no rows), variable-length types (strings or sequences: pointers, not data)
 * and references.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#include <gpud/plugin.h>

#include "../check.h"
#include "h5why.h"
#include "rows.h"

GPUD_PLUGIN("generator", "hdf5", "1.0");
GPUD_PLUGIN_DESCRIPTION("the rows of an HDF5 dataset (path, dataset; rows = A:B), read in blocks");
GPUD_PLUGIN_KEYS("path", "dataset", "rows", "block");

#define H5_MAX_DIMS 32

struct h5_gen {
	hid_t file, dset, type, fspace;
	int ndim;
	hsize_t dims[H5_MAX_DIMS];
	size_t row_bytes;
	uint64_t first, end, next;
	uint64_t block;            /* rows a read takes */
	unsigned char *buf;        /* block rows from buf_first */
	uint64_t buf_first, buf_n; /* rows buf holds */
	char *path, *name;
};

static void h5_free(struct h5_gen *g)
{
	if (g->fspace >= 0)
		H5Sclose(g->fspace);
	if (g->type >= 0)
		H5Tclose(g->type);
	if (g->dset >= 0)
		H5Dclose(g->dset);
	if (g->file >= 0)
		H5Fclose(g->file);
	free(g->buf);
	free(g->path);
	free(g->name);
	free(g);
}

/* What an external link at `name` points to ("other.h5:/data"), or "" when it is not
 * one. */
static const char *elink_target(hid_t file, const char *name, char *buf, size_t len)
{
	H5L_info_t li;
	buf[0] = '\0';
	if (H5Lget_info(file, name, &li, H5P_DEFAULT) < 0 || li.type != H5L_TYPE_EXTERNAL ||
	    li.u.val_size == 0 || li.u.val_size > 4096)
		return buf;
	char *val = malloc(li.u.val_size);
	const char *f, *o;
	if (val && H5Lget_val(file, name, val, li.u.val_size, H5P_DEFAULT) >= 0 &&
	    H5Lunpack_elink_val(val, li.u.val_size, NULL, &f, &o) >= 0)
		snprintf(buf, len, "%s:%s", f, o);
	free(val);
	return buf;
}

/* Opens the file and the dataset and looks at them: a state, or NULL with err. */
static struct h5_gen *h5_open(const struct gpud_args *args, struct gpud_error *err)
{
	const char *path = gpud_arg(args, "path", NULL);
	const char *name = gpud_arg(args, "dataset", NULL);
	char why[512];
	if (!path || !*path) {
		gpud_fail(err, "hdf5: 'path' is required (the HDF5 file to read)");
		return NULL;
	}
	if (!name || !*name) {
		gpud_fail(err, "hdf5: 'dataset' is required (the dataset's name in %s)", path);
		return NULL;
	}
	if (check_file_readable("hdf5", path, err) < 0)
		return NULL;
	struct h5_gen *g = calloc(1, sizeof *g);
	if (!g || !(g->path = strdup(path)) || !(g->name = strdup(name))) {
		if (g)
			free(g->path);
		free(g);
		gpud_fail(err, "hdf5: out of memory");
		return NULL;
	}
	g->file = g->dset = g->type = g->fspace = H5I_INVALID_HID;
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* errors come back as our messages */
	g->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (g->file < 0) {
		gpud_fail(err, "hdf5: cannot open %s as an HDF5 file: %s", path,
			  h5why(why, sizeof why));
		goto fail;
	}
	if (H5Lexists(g->file, name, H5P_DEFAULT) <= 0) {
		gpud_fail(err, "hdf5: %s has no dataset '%s'", path, name);
		goto fail;
	}
	if ((g->dset = H5Dopen2(g->file, name, H5P_DEFAULT)) < 0) {
		char target[600];
		h5why(why, sizeof why);
		if (*elink_target(g->file, name, target, sizeof target))
			gpud_fail(err,
				  "hdf5: %s: '%s' is an external link to %s, which cannot be "
				  "opened: %s",
				  path, name, target, why);
		else
			gpud_fail(err, "hdf5: %s: cannot open the dataset '%s': %s", path, name,
				  why);
		goto fail;
	}
	g->type = H5Dget_type(g->dset);
	if (g->type >= 0)
		g->fspace = H5Dget_space(g->dset);
	if (g->type < 0 || g->fspace < 0) {
		gpud_fail(err, "hdf5: %s, dataset '%s': %s", path, name, h5why(why, sizeof why));
		goto fail;
	}
	if (H5Tdetect_class(g->type, H5T_VLEN) > 0 || H5Tis_variable_str(g->type) > 0 ||
	    H5Tdetect_class(g->type, H5T_REFERENCE) > 0) {
		gpud_fail(err,
			  "hdf5: %s, dataset '%s': a variable-length or reference type (its rows "
			  "hold pointers, not data): store fixed-length values",
			  path, name);
		goto fail;
	}
	g->ndim = H5Sget_simple_extent_ndims(g->fspace);
	if (g->ndim < 1 || g->ndim > H5_MAX_DIMS ||
	    H5Sget_simple_extent_dims(g->fspace, g->dims, NULL) < 0) {
		gpud_fail(err, "hdf5: %s, dataset '%s' %s", path, name,
			  g->ndim == 0 ? "is a scalar, not rows"
				       : "has a shape gpud does not read");
		goto fail;
	}
	size_t rb = H5Tget_size(g->type);
	for (int i = 1; i < g->ndim; i++)
		if (__builtin_mul_overflow(rb, (size_t)g->dims[i], &rb) || rb > (1ul << 31)) {
			gpud_fail(err, "hdf5: %s, dataset '%s': a row is too large", path, name);
			goto fail;
		}
	g->row_bytes = rb;
	char what[600];
	snprintf(what, sizeof what, "%s's dataset '%s'", path, name);
	if (rows_parse(args, "hdf5", what, g->dims[0], &g->first, &g->end, err) < 0)
		goto fail;
	long block;
	if (gpud_arg_parse_long(args, "block", 0, &block, err) < 0)
		goto fail;
	if (block < 0) {
		gpud_fail(err, "hdf5: block = %ld: a number of rows, 1 or more", block);
		goto fail;
	}
	g->block = block ? (uint64_t)block : (4u << 20) / (rb ? rb : 1);
	if (g->block == 0)
		g->block = 1;
	if (g->block > g->end - g->first)
		g->block = g->end - g->first ? g->end - g->first : 1;
	if (rb && g->block > SIZE_MAX / rb) {
		gpud_fail(err, "hdf5: block = %ld: %ld rows of %zu bytes is too large", block,
			  block, rb);
		goto fail;
	}
	g->next = g->first;
	return g;
fail:
	h5_free(g);
	return NULL;
}

GPUD_EXPORT int gpud_generator_check(const struct gpud_args *args, struct gpud_error *err)
{
	struct h5_gen *g = h5_open(args, err);
	if (!g)
		return -1;
	h5_free(g);
	return 0;
}

GPUD_EXPORT int gpud_generator_open(const struct gpud_args *args, void **state,
				    struct gpud_error *err)
{
	struct h5_gen *g = h5_open(args, err);
	if (!g)
		return -1;
	*state = g;
	return 0;
}

/* Reads the block of rows from `row` into buf. 0, or -1 with err. */
static int read_block(struct h5_gen *g, uint64_t row, struct gpud_error *err)
{
	uint64_t n = g->end - row < g->block ? g->end - row : g->block;
	if (!g->buf) {
		g->buf = malloc((size_t)g->block * g->row_bytes);
		if (!g->buf)
			return gpud_fail(err, "hdf5: out of memory for a block of %llu rows",
					 (unsigned long long)g->block);
	}
	hsize_t start[H5_MAX_DIMS] = {0}, count[H5_MAX_DIMS];
	start[0] = row;
	count[0] = n;
	for (int i = 1; i < g->ndim; i++)
		count[i] = g->dims[i];
	hid_t mspace = H5Screate_simple(g->ndim, count, NULL);
	char why[512] = "";
	herr_t rc = mspace < 0 ? -1
			       : H5Sselect_hyperslab(g->fspace, H5S_SELECT_SET, start, NULL, count,
						     NULL);
	if (rc >= 0)
		rc = H5Dread(g->dset, g->type, mspace, g->fspace, H5P_DEFAULT, g->buf);
	if (rc < 0) /* now: H5Sclose clears the error stack */
		h5why(why, sizeof why);
	if (mspace >= 0)
		H5Sclose(mspace);
	if (rc < 0)
		return gpud_fail(err, "hdf5: %s, dataset '%s': reading rows %llu to %llu: %s",
				 g->path, g->name, (unsigned long long)row,
				 (unsigned long long)(row + n - 1), why);
	g->buf_first = row;
	g->buf_n = n;
	return 0;
}

GPUD_EXPORT int gpud_generator_next(void *state, struct gpud_buf *item, struct gpud_error *err)
{
	struct h5_gen *g = state;
	if (g->next >= g->end)
		return 0;
	uint64_t row = g->next;
	if (g->row_bytes && (row < g->buf_first || row >= g->buf_first + g->buf_n)) {
		if (read_block(g, row, err) < 0) {
			/* Every task of the block fails with the message; the stream goes on. */
			g->next++;
			return GPUD_GENERATOR_TASK_FAILED;
		}
	}
	item->size = g->row_bytes;
	if (item->size <= item->capacity && g->row_bytes)
		memcpy(item->data, g->buf + (row - g->buf_first) * g->row_bytes, g->row_bytes);
	g->next++;
	return 1;
}

GPUD_EXPORT int gpud_generator_skip(void *state, uint64_t n, struct gpud_error *err)
{
	struct h5_gen *g = state;
	(void)err;
	g->next = n > g->end - g->next ? g->end : g->next + n;
	return 0;
}

GPUD_EXPORT int64_t gpud_generator_total(void *state)
{
	struct h5_gen *g = state;
	return (int64_t)(g->end - g->first);
}

GPUD_EXPORT void gpud_generator_close(void *state)
{
	h5_free(state);
}
