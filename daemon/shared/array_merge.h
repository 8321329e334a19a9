/* SPDX-License-Identifier: MIT */
/*
 * The call between gpud (daemon/host/cluster/arrays.c) and an array sink plugin's merge
 * (plugins/arrays/merge.c): sink-npy.so and sink-hdf5.so export
 *
 *   int gpud_array_merge_call(struct gpud_array_merge_call *call);
 *
 * which joins call->shards into call->out by task id and returns 0 (every row ok), 1
 * (merged, some rows failed) or 2 (refused, nothing written). Every message (a
 * refusal's reason, the summary) is handed to call->say, one line without a newline;
 * nothing is written to standard error. Its name is new with this struct: a plugin of
 * a gpud before it (gpud_array_merge(argc, argv), which printed) is refused by name.
 */
#ifndef GPUD_ARRAY_MERGE_H
#define GPUD_ARRAY_MERGE_H

#include <stddef.h>
#include <stdint.h>

struct gpud_array_merge_call {
	size_t size; /* sizeof(struct gpud_array_merge_call) */
	const char *out;
	const char *const *shards;
	size_t n_shards;
	const char *dataset; /* hdf5: the dataset, NULL: "data" */
	/* A message at a GPUD_LOG_* level (gpud.h): 0 error, 1 a note (a shard naming no
	 * job), 2 the summary. */
	void (*say)(void *ctx, int level, const char *line);
	void *say_ctx;
	/* Filled by the merge. */
	uint64_t rows;    /* rows written (when 0 or 1 is returned) */
	uint64_t failed;  /* of them, tasks that failed or timed out */
	char error[4096]; /* the refusal's line (2 returned), else "" */
};

#endif
