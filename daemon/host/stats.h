/* SPDX-License-Identifier: MIT */
/* The final figures of a run: the summary line and --stats-json. */
#ifndef GPUD_STATS_H
#define GPUD_STATS_H

#include <stdio.h>

struct host;

void stats_print(const struct host *h, FILE *f);
/* Writes the stats as JSON to `path`; 0, or -1 with errno. */
/* Writes the final stats as JSON; exit_status: the run's. 0, or -1 with errno set. */
int stats_write_json(const struct host *h, const char *path, int exit_status);
/* Whether `path` can be written, without creating or changing anything: an existing
 * regular file we may write, or a new name in a folder we may write. 0, or -1 with
 * a reason in why. */
int stats_json_check(const char *path, char *why, size_t len);

#endif /* GPUD_STATS_H */
