/* SPDX-License-Identifier: MIT */
/* Files the host makes for a run: the dashboard's folder of worker logs (files.c). */
#ifndef GPUD_FILES_H
#define GPUD_FILES_H

#include "host.h"

/* How long a default run folder is kept: older ones are removed when a run starts. */
#define FILES_KEEP_DAYS 7

/*
 * Makes the run's log folder and opens one log per worker slot (w->log_fd).
 * [job] log_dir: that folder (created 0700 if missing); logs append, never followed
 * through a symlink. Default: $TMPDIR/gpud-<uid>, which must be ours, a real folder
 * and private (0700), holding a fresh run-<time>-XXXXXX folder per run (mkdtemp) whose
 * logs are created new (O_EXCL). 0, or -1 with one line on standard error.
 */
int files_open_logs(struct host *h);
void files_close_logs(struct host *h);

#endif
