/* SPDX-License-Identifier: MIT */
#ifndef GPUD_RUN_H
#define GPUD_RUN_H

#include <stdio.h>

#include <gpud/plugin.h>

#include "job/config.h"

#include "view/ui.h"

struct capacity_memory;
struct gen_ops;
struct sink_ops;
struct run_pool;

/* What a run leaves for libgpud's caller (gpud_job_stats, gpud_job_stats_json). */
struct run_result {
	bool ran;                /* the run began: stats and stats_json are its */
	struct gpud_stats stats; /* the final figures, as the sink's close gets them */
	char *stats_json;        /* the --stats-json text, malloc'd (the caller frees it) */
	char abort_msg[4096];    /* why it aborted (exit status 3), "" otherwise */
};

struct run_opts {
	const char *stats_json; /* --stats-json PATH, or NULL */
	enum ui_mode ui;        /* --ui, resolved (auto decided) */
	const char *ui_tty;     /* the terminal the dashboard draws on; NULL: standard error */
	bool resume;            /* --resume: finish the run the journal describes */
	bool retry_failed;      /* --retry-failed: and run its failed tasks again */
	bool force;             /* --force: resume a journal another job wrote */
	bool keep_signals;      /* leave the caller's signals alone but SIGCHLD (signals.c) */
	const char *rank;       /* --rank K/N, or NULL */
	/* In-process generator and sink (libgpud's callbacks) in place of the job's plugins,
	 * or NULL; their open gets *_state as the state it holds. */
	const struct gen_ops *gen_ops;
	void *gen_state;
	const struct sink_ops *sink_ops;
	void *sink_state;
	struct run_result *result;      /* filled at the end when not NULL */
	bool import_code;               /* check --import: import the python sections' code */
	FILE *check_out;                /* where run_check writes what it found; NULL: stdout */
	struct capacity_memory *memory; /* check: the shared memory's figures, when not NULL */
	/* A warm pool (libgpud's gpud_pool): the workers, their setup and the shared memory
	 * are taken from it when an earlier run left them, and left in it at the end when
	 * the run ends with every task accounted for; NULL: the run's own, as always. */
	struct run_pool *pool;
};

/* Exit status of a run stopped by Ctrl-C, SIGTERM or SIGHUP whose journal lets
 * `--resume` finish it. */
#define RUN_EXIT_RESUMABLE 4

/* `gpud check`: everything but running (opts: its in-process generator and sink, or
 * NULL); 0 or 2. */
int run_check(struct cfg *c, const struct run_opts *opts);
/* `gpud run`: the exit status of the contract (0, 1, 2, 3 or 4). */
int run_job(struct cfg *c, const struct run_opts *opts);

/* A pool of workers kept between runs (run_opts.pool): empty until its first run. */
struct run_pool *run_pool_new(void);
/* Its workers told to stop (their cleanup runs, cleanup_timeout bounds it, then they are
 * killed), its memory freed, the pool freed. NULL is ignored. */
void run_pool_free(struct run_pool *p);

#endif /* GPUD_RUN_H */
