/* SPDX-License-Identifier: MIT */
/* Files the host makes for a run, in the run's folder (files.c): the failures list and
 * the dashboard's worker logs. */
#ifndef GPUD_FILES_H
#define GPUD_FILES_H

#include "host.h"
#include "record/failures.h"

/* How long a default run folder is kept: older ones are removed when a run starts. */
#define FILES_KEEP_DAYS 7

/* The failures list in the run folder: FILES_FAILURES (failures.h). */

/*
 * Makes the run's folder (h->files.log_dir) and opens its failures list.
 * [job] log_dir: that folder (created 0700 if missing); the failures list is rewritten
 * and logs append, never through a symlink. Default: $TMPDIR/gpud-<uid>, which must be
 * ours, a real folder and private (0700), holding a fresh run-<time>-XXXXXX folder per
 * run (mkdtemp) whose files are created new (O_EXCL). 0, or -1 with one line on standard
 * error (the run goes on without the folder).
 */
int files_open_run(struct host *h);
/* Opens one log per worker slot (w->log_fd) in the run folder, for the dashboard. 0, or
 * -1 with one line on standard error. */
int files_open_logs(struct host *h);
void files_close_logs(struct host *h);

#endif
