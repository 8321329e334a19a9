/* SPDX-License-Identifier: MIT */
/*
 * The inputs a job names (inputs.c): what the files and folders named by its keys were
 * when a run's journal was made, so that `gpud run --resume` can tell when they changed.
 * Tasks are known by their place in the generator's stream: a file added to a folder
 * the generator lists shifts every id after it, and resuming would then do one file
 * twice and another never.
 */
#ifndef GPUD_INPUTS_H
#define GPUD_INPUTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct cfg;

/* Whether plugin key `key` names a file the plugin writes (`*_out`): resolved as a path,
 * never taken for an input (nor, in the job's fingerprint, by its size and mtime). */
static inline bool inputs_output_key(const char *key)
{
	size_t n = strlen(key);
	return n > 4 && strcmp(key + n - 4, "_out") == 0;
}

struct journal_input {
	uint32_t tag;     /* its section, key and value, hashed; the low bit set for a folder */
	uint64_t a, b;    /* a file: its size and mtime (ns); a folder: how many files it
			   * holds, and a hash of their names, sizes and mtimes */
	char *key;        /* "generator.dir" (NULL for one read from a journal) */
	const char *path; /* the config's value (not owned), or `own` */
	char *own;        /* a file a generator's glob value matched (owned) */
};

/* Every input `c` names: each worker or generator key whose value is the path of a
 * regular file, and each generator key whose value is the path of a folder, listed as
 * a generator sees it (regular files, links followed; the folders below only when the
 * section says recursive = true), and each regular file a generator key's glob value
 * matches (`path = /data/shard-*.tar`: each shard on its own, named when it changed;
 * a file added or removed since is not told). A key ending in `_out` names what a
 * plugin writes (the tar generator's keys_out): never an input. A worker's folder may be where it
 * writes: not an input. *out is malloc'd (inputs_free). 0, or -1 with why. */
int inputs_scan(const struct cfg *c, struct journal_input **out, size_t *n, char *why, size_t len);
void inputs_free(struct journal_input *in, size_t n);
/* The generator key whose value is `-` (standard input) or the path of a pipe or
 * device, or NULL. A stream cannot be read ahead of the run to be compared. */
const char *inputs_stdin_key(const struct cfg *c);
/* Compares the inputs now with those a journal recorded (matched by tag; one the
 * journal has no record of is not compared). 0 when none changed; 1 with a line in why
 * naming the first that did. */
int inputs_compare(const struct journal_input *was, size_t n_was, const struct journal_input *now,
		   size_t n_now, char *why, size_t len);

#endif
