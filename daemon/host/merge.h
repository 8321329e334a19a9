/* SPDX-License-Identifier: MIT */
/* `gpud merge STATS.json...` (merge.c): one summary of the ranks' --stats-json files
 * on standard output, as JSON; 0, or 2 when a file is missing or not one of ours. */
#ifndef GPUD_MERGE_H
#define GPUD_MERGE_H

#include <stdbool.h>

int merge_main(int argc, char **argv);

#endif
