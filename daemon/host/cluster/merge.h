/* SPDX-License-Identifier: MIT */
/* `gpud merge STATS.json...` (merge.c): one summary of the ranks' --stats-json files
 * on standard output, as JSON (a figure that is not known is null). 0; or 2 when a file
 * is missing, not one of ours, given twice (the same file, or two of one rank), of
 * another job or number of ranks, or when ranks of the job have no file (then the
 * summary of those given is still printed, with "missing_ranks"). */
#ifndef GPUD_MERGE_H
#define GPUD_MERGE_H

#include <stdbool.h>

int merge_main(int argc, char **argv);

#endif
