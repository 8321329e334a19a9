/* SPDX-License-Identifier: MIT */
/*
 * Batches that fit (ABI 1.4): a call that ran out of memory (it returned GPUD_OOM, or
 * marked tasks with gpud_task_oom) does not fail its tasks: those it did not finish run
 * again on this worker in calls half its size, halving again while a part runs out,
 * down to single tasks; one that runs out alone fails, saying so. Each task keeps its
 * result slot, so the records are written as for any call (loop_finish_result), in
 * task order.
 *
 * Then the batch size (batch_cap) adapts: down at once to the largest call that fitted
 * (or the size that fitted before, when that is below the one that ran out), back up
 * by an eighth (at least one task) after grow_after full calls in a row fit, never
 * above batch_size; the host is told a size once a call of that many fitted.
 * grow_after starts at FIT_GROW_AFTER and doubles each time memory runs out (up to
 * FIT_GROW_MAX), so a worker at its limit seldom tries a size that fails; it is back at
 * FIT_GROW_AFTER once a size that ran out has fitted grow_after times. Only this path
 * pays: a call that fits costs a look at each task's mark.
 *
 * A call of several tasks that fails as a whole (process_batch returned an error other
 * than GPUD_OOM: a Python process_batch that raised) is split the same way, when the
 * job isolates failures ([job] isolate_failures, the default): its tasks run again in
 * two halves, a half that fails whole in two halves again, down to single tasks, so
 * that a task that fails alone fails with its own error and every other one gets its
 * result; this does not change the batch size. A task the call marked rejected, fatal
 * or timed out keeps that outcome and is not run again.
 *
 * The sizing (fit_init, fit_grow, fit_shrink) works on a struct fit alone (unit test:
 * tests/test_worker_fit.c); fit_refit runs the parts, so it takes the worker.
 */
#ifndef GPUD_WORKER_FIT_H
#define GPUD_WORKER_FIT_H

#include <stdbool.h>
#include <stdint.h>

#include <gpud/plugin.h>

#include "shm_layout.h"

#define FIT_GROW_AFTER 16u
#define FIT_GROW_MAX 1024u

/* The batch size as adapted to out of memory; owned by the loop's thread. */
struct fit {
	uint32_t batch;         /* the most tasks a call may get: batch_size (1 without
				 * process_batch) */
	bool oom_abi;           /* the plugin is 1.4 or newer: GPUD_OOM means out of memory */
	bool isolate;           /* a call that fails whole is split ([job] isolate_failures) */
	uint32_t batch_cap;     /* the most tasks the next call gets: 1..batch */
	uint32_t shown;         /* the batch size the host is told: batch_cap once a call of
				 * that many fitted (a step up is tried before it is said) */
	uint32_t fitted;        /* the largest call that fitted since the cap last fell */
	uint32_t full_runs;     /* calls of batch_cap tasks that fitted since it last changed */
	uint32_t grow_after;    /* full calls that fit before the cap grows a step */
	uint32_t bad;           /* the smallest call that ran out of memory, last time */
	uint32_t oom_splits;    /* calls that ran out of memory and were split */
	uint32_t *idx;          /* 2 x batch: an out-of-memory call's tasks, and scratch */
	struct gpud_task *part; /* batch: a part's tasks when they are not side by side */
};

struct worker;

/* A fresh worker's sizing: batch_cap and shown at `batch`, nothing run out yet. */
void fit_init(struct fit *f, uint32_t batch, bool oom_abi);

/* A call of n tasks fitted while the batch size is (or was said to be) below
 * batch_size. Returns true when the size the host is told changed (fit_publish). */
bool fit_grow(struct fit *f, uint32_t n);

/* A call of n > 1 tasks ran out of memory and was split: `fit` the largest part that
 * fitted (0: none), `bad` the smallest that ran out. The batch size goes down at once;
 * the host is to be told (fit_publish). */
void fit_shrink(struct fit *f, uint32_t fit, uint32_t bad);

/* The batch size and the splits, for the host (a line written only when they change). */
void fit_publish(const struct fit *f, struct shm_report *rep);

/* Puts in front of err's message that its task alone does not fit (on the GPU, or in
 * memory for a CPU stage's worker, which has no GPU), keeping what the plugin said after
 * it as far as it fits. */
void fit_oom_message(struct gpud_error *err, bool cpu_stage);

/* Whether a task marked `failed` by a call that returned rc ran out of memory. */
static inline bool fit_task_oom(int failed, int rc)
{
	return failed == GPUD_TASK_OOM || (rc == GPUD_OOM && failed == 0);
}

/* Whether a call of n tasks that returned rc ran out of memory for any of them. */
static inline bool fit_any_oom(const struct gpud_task *t, uint32_t n, int rc)
{
	bool oom = rc == GPUD_OOM;
	for (uint32_t i = 0; i < n; i++)
		oom |= t[i].failed == GPUD_TASK_OOM;
	return oom;
}

/* Whether a call that returned rc failed as a whole (not out of memory). */
static inline bool fit_call_failed(const struct fit *f, int rc)
{
	return rc != 0 && !(f->oom_abi && rc == GPUD_OOM);
}

/* Whether a call of n tasks that returned rc is to run again in parts: it ran out of
 * memory for some task, or failed as a whole while failures are isolated. */
static inline bool fit_again(const struct fit *f, const struct gpud_task *t, uint32_t n, int rc)
{
	return (f->oom_abi && fit_any_oom(t, n, rc)) ||
	       (f->isolate && n > 1 && fit_call_failed(f, rc));
}

/* The first n tasks' call returned rc and ran out of memory, or failed as a whole
 * (fit_again): see above. Every task has its outcome in w->t when it returns 0 (for
 * loop_finish_result). */
int fit_refit(struct worker *w, uint32_t n, int rc);

#endif
