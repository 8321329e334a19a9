/* SPDX-License-Identifier: MIT */
/* The final figures of a run: the summary line and --stats-json. */
#ifndef GPUD_STATS_H
#define GPUD_STATS_H

#include <stdio.h>

struct host;

void stats_print(const struct host *h, FILE *f);
/* Writes the stats as JSON to `path`; 0, or -1 with errno. */
int stats_write_json(const struct host *h, const char *path);

#endif /* GPUD_STATS_H */
