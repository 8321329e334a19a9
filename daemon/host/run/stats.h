/* SPDX-License-Identifier: MIT */
/* The final figures of a run: the summary line and --stats-json. */
#ifndef GPUD_STATS_H
#define GPUD_STATS_H

#include <stdio.h>

struct host;

void stats_print(const struct host *h, FILE *f);
/* Writes the final stats as JSON to `path`; exit_status: the run's. 0, or -1 with errno
 * set. */
int stats_write_json(const struct host *h, const char *path, int exit_status);
/* The same JSON written to f (libgpud keeps it in memory). */
void stats_json(const struct host *h, FILE *f, int exit_status);
/* The wall clock (seconds since the epoch, to the nanosecond) and the process's CPU
 * time (user + system, seconds): taken at a run's start for the stats JSON. */
double stats_wall_now(void);
double stats_cpu_now(void);

#endif /* GPUD_STATS_H */
