/* SPDX-License-Identifier: MIT */
/* `gpud merge-arrays` (arrays.c): the ranks' array shards joined by task id through the
 * array sink plugin of their format. */
#ifndef GPUD_ARRAYS_H
#define GPUD_ARRAYS_H

#include <stddef.h>
#include <stdint.h>

/* What a merge did. */
struct arrays_result {
	const char *format; /* "npy", "hdf5", or "" when not known */
	uint64_t rows, failed;
	char error[4096]; /* the refusal's line, else "" */
};

/* Joins shards into out (dataset: hdf5's, NULL "data"); every message to the log
 * streams (util/log.h). 0 every row ok, 1 some rows failed, 2 refused (res->error). */
int arrays_merge(const char *out, const char *const *shards, size_t n_shards, const char *dataset,
		 struct arrays_result *res);

/* `merge-arrays`'s arguments. */
struct arrays_args {
	const char *out, *dataset;
	const char **shards; /* calloc'd: the caller frees it */
	size_t n_shards;
};

/* Parses the arguments after `merge-arrays`: -1 to go on; else the exit status, the
 * help printed (0) or the usage error said (2). */
int arrays_parse(int argc, char *const *argv, struct arrays_args *a);

#endif
