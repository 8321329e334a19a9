/* SPDX-License-Identifier: MIT */
/* `gpud merge STATS.json...` (merge.c): one summary of the ranks' --stats-json files
 * as JSON (what the command prints on standard output; a figure that is not known is
 * null). 0; or 2 when a file is missing, not one of ours, given twice (the same file,
 * or two of one rank), of another job or number of ranks, or when ranks of the job
 * have no file (then the summary of those given is still made, with
 * "missing_ranks"). */
#ifndef GPUD_MERGE_H
#define GPUD_MERGE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* The summary's figures. */
struct merge_figures {
	bool made;       /* the summary was written (also with ranks missing) */
	int exit_status; /* the worst of the ranks' */
	unsigned missing_ranks;
	uint64_t generated, ok, failed, timed_out, not_run;
};

/* The summary (the command's standard output) to `out`, messages to the log streams;
 * the exit status. */
int merge_run(int argc, char **argv, FILE *out, struct merge_figures *fig);

#endif
