/* SPDX-License-Identifier: MIT */
/*
 * `gpud merge-arrays OUT SHARD...` (merge.c): the ranks' array shards joined into one
 * array by task id. Each shard is a full-size array with its done record (common.h);
 * each task id must be done (ok, error or timeout) in exactly one shard: an id done in
 * two is a duplicate, in none a gap, and either refuses the merge, naming the id and
 * the files. The format's own parts (reading a shard's rows, writing the output) come
 * from the plugin that holds this file: sink-npy.so, sink-hdf5.so.
 *
 * gpud calls gpud_array_merge_call (daemon/shared/array_merge.h) with the output, the
 * shards and the dataset; it returns the exit status: 0 every row ok, 1 merged with
 * some rows failed (zero in the array, 2 or 3 in OUT.done), 2 refused (nothing
 * written). Its messages go to the call's say, never to standard error.
 */
#ifndef GPUD_PLUGINS_ARRAYS_MERGE_H
#define GPUD_PLUGINS_ARRAYS_MERGE_H

#include "common.h"
#include "../../daemon/shared/array_merge.h"

/* One opened shard or output, by the format's code. */
struct merge_file {
	const char *path;
	struct arr_dtype dtype;
	struct arr_shape row;
	uint64_t rows;
	uint8_t *status; /* rows bytes: the done record (shards only) */
	bool has_job;    /* a shard's record names its job (job_id); the output gets the
			  * shards' one when they all name it */
	uint64_t job_id;
	void *impl;
};

struct merge_format {
	const char *name; /* "npy" */
	/* Opens a shard (and reads its done record into f->status). 0, or -1 with err. */
	int (*open_shard)(struct merge_file *f, const char *dataset, struct gpud_error *err);
	/* Reads rows [first, first + n) of a shard into buf. 0, or -1 with err. */
	int (*read)(struct merge_file *f, uint64_t first, uint64_t n, void *buf,
		    struct gpud_error *err);
	/* Creates the output (f->path, dtype, row, rows set) under a temporary name. */
	int (*create)(struct merge_file *f, const char *dataset, struct gpud_error *err);
	/* Writes rows [first, first + n) of the output. */
	int (*write)(struct merge_file *f, uint64_t first, uint64_t n, const void *buf,
		     struct gpud_error *err);
	/* Finishes the output with its done record `status`, renamed into place (ok), or
	 * removes it (!ok). 0, or -1 with err. */
	int (*finish)(struct merge_file *f, const uint8_t *status, bool ok, struct gpud_error *err);
	void (*close)(struct merge_file *f); /* a shard */
};

int merge_arrays(const struct merge_format *fmt, struct gpud_array_merge_call *call);

#endif
