/* SPDX-License-Identifier: MIT */
/* The journal in a run (resume.c): see journal.h for the file. */
#ifndef GPUD_RESUME_H
#define GPUD_RESUME_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "host.h"

/* What the command asked of the journal. */
struct resume_flags {
	bool resume;       /* --resume: finish the run the journal describes */
	bool retry_failed; /* --retry-failed: and run its failed tasks again */
	bool force;        /* --force: resume a journal another job wrote */
};

/* Creates the journal, or with --resume loads it. 0 to run, 1 when the journal says the
 * run already finished (nothing to do: exit 0), -1 with one line said (exit 2). */
int resume_open(struct host *h, struct resume_flags f);
/* Opens the sink through gpud_sink_resume when resuming and it has one: what its
 * output holds is done. 1 when the ordinary open is to be used; else open's result. */
int resume_sink_open(struct host *h, const struct gpud_args *args, struct gpud_error *err);
/* With --resume, right after the sink opened: tells a sink with gpud_sink_resumed (ABI
 * 1.3) which of this rank's tasks earlier runs finished. 0, or -1 with err. */
int resume_tell_sink(struct host *h, struct gpud_error *err);
/* Jumps the generator past the done prefix when it can (gpud_generator_skip). 0, or -1
 * with err. */
int resume_skip_prefix(struct host *h, struct gpud_error *err);
/* At the end: seals a complete run (an END record), or writes and syncs what is done. */
void resume_finish(struct host *h, bool complete);
/* After a --resume that ran nothing while the journal holds failures: says so on f,
 * naming --retry-failed. */
void resume_note_nothing_left(const struct host *h, FILE *f);

/* `gpud status`: how far the journaled run got; 0, or 2 without a journal. */
/* What gpud status read from a journal (libgpud's gpud_status_report). */
struct resume_figures {
	bool journal;    /* a journal was read (not with dynamic shares: see the text) */
	uint64_t done;   /* tasks with an outcome */
	uint64_t failed; /* of them, failed or timed out */
	uint64_t low;    /* every task below it has its outcome */
	bool finished;   /* the run ended: a --resume runs nothing */
	bool changed;    /* an input or the job changed: --resume refuses without --force */
};
int resume_status(struct cfg *c, FILE *out, struct resume_figures *fig);

#endif
