/* SPDX-License-Identifier: MIT */
/* The files a run writes, each its own (outputs.c): the journal, the sink's outputs, the
 * metrics file, --stats-json and log_dir's files must be different files, and none of
 * them a file the run reads (the job file, the generator's and the worker's inputs). */
#ifndef GPUD_OUTPUTS_H
#define GPUD_OUTPUTS_H

#include <stdbool.h>
#include <stddef.h>

#include "job/config.h"

/* Compares the paths of `c` (after ranks_apply) and `stats_json` (may be NULL) as files:
 * by device and inode where the file exists, else by the real path of its folder and
 * its name, so ./x, an absolute path, a symlink or a hard link to one file are one.
 * Also refuses a file the run writes (journal, sink outputs, metrics_file,
 * --stats-json, log_dir's files, a sink's dir or *_dir) in a folder a generator key
 * names (not a path/file key), or in a folder below it with recursive = true: the run
 * would change its own input set. Touches nothing. 0, or -1 with one line in why naming
 * both keys and where each was set. */
int outputs_distinct(const struct cfg *c, const char *stats_json, char *why, size_t len);
/* Whether key `k` = `v` names one file (path, file, *_path, *_file; not `-`, not a
 * list of folders). */
bool outputs_file_key(const char *k, const char *v);
/* Whether a sink key names a file (outputs_file_key) that is there with something in
 * it, which a fresh run's sink would empty (not with append = true): true with the key
 * and file in `what`. */
bool outputs_sink_fills(const struct cfg *c, char *what, size_t len);

#endif
