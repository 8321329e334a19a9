/* SPDX-License-Identifier: MIT */
#ifndef GPUD_RUN_H
#define GPUD_RUN_H

#include "job/config.h"

#include "view/ui.h"

struct run_opts {
	const char *stats_json; /* --stats-json PATH, or NULL */
	enum ui_mode ui;        /* --ui, resolved (auto decided) */
	bool resume;            /* --resume: finish the run the journal describes */
	bool retry_failed;      /* --retry-failed: and run its failed tasks again */
	bool force;             /* --force: resume a journal another job wrote */
	const char *rank;       /* --rank K/N, or NULL */
	bool import_code;       /* check --import: import the python sections' code */
};

/* Exit status of a run stopped by Ctrl-C, SIGTERM or SIGHUP whose journal lets
 * `--resume` finish it. */
#define RUN_EXIT_RESUMABLE 4

/* `gpud check`: everything but running; with `import_code`, the python sections' code
 * imported and checked too (python_check_import). 0 or 2. */
int run_check(struct cfg *c, bool import_code);
/* `gpud status`: how far the journaled run got; 0, or 2 without a journal. */
int run_status(struct cfg *c);
/* `gpud run`: the exit status of the contract (0, 1, 2 or 3). */
int run_job(struct cfg *c, const struct run_opts *opts);

#endif /* GPUD_RUN_H */
