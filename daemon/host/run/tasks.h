/* SPDX-License-Identifier: MIT */
/*
 * The task table: the host's own record of every task it handed out and every task
 * waiting to run again. It is the one owner of task state: the dispatcher, the
 * lifecycle code and the outcome code go through it, and none of them takes a task's
 * id, size, attempt or ring position from shared memory.
 *
 * Per worker, a FIFO of the tasks in its task ring, in ring order; a result must be for
 * the task at the front. Strikes count the workers a task was running on when they had
 * to be killed for corrupting their memory or hanging outside a task: a task that
 * keeps doing that fails, instead of using up its GPU's restarts.
 */
#ifndef GPUD_TASKS_H
#define GPUD_TASKS_H

#include <stdbool.h>
#include <stdint.h>

struct host;
struct host_worker;

#define TASK_MAX_STRIKES 2

struct task_ent {
	uint64_t id;
	uint64_t pos; /* ring position of its record */
	uint32_t size;
	uint32_t attempt;
	uint16_t strikes; /* workers killed for corrupting memory while running it */
	uint16_t crashes; /* workers that died while running it */
	/* Its worker died while it ran beside others (a batch, tasks in flight), which of
	 * them did it unknown: it runs alone from then on, in a call of its own with
	 * nothing else in its worker's ring, so that a death blames the task that caused
	 * it and no other (workers/lifecycle.c, crashed). */
	bool alone;
};

/* A task taken back from a worker, waiting to run again, with its own copy of the input. */
struct requeued {
	struct requeued *next;
	struct task_ent t;
	int avoid; /* the worker it failed on (a retry goes elsewhere if it can), or -1 */
	uint8_t data[];
};

/* Worker w may be given a task (`alone`: one that must run by itself) now: a worker
 * running an alone task holds nothing else, and an alone task goes only to a worker
 * that holds nothing. */
static inline bool tasks_may_hold(const struct host_worker *w, bool alone);

/* Sizes every worker's FIFO for `per_worker` tasks. 0, or -1 (out of memory). */
int tasks_init(struct host *h, uint32_t per_worker);
void tasks_free(struct host *h);

/* A worker given more tasks than its FIFO holds: an internal error, reported. */
_Noreturn void tasks_overfull(const struct host_worker *w) __attribute__((cold));

/* The FIFO itself (tasks_push, tasks_front, tasks_pop, tasks_held) and the two
 * questions about the requeued tasks are inline, in host.h: they are on every task's
 * path. */

/* Keeps a copy of `t` and its input to run again (at the back of the queue) in `stage`
 * (a worker's `stage`: 0 is the queue the generator's workers take from, a later
 * stage's goes to that stage's own queue). */
void tasks_requeue(struct host *h, const struct task_ent *t, const void *input, int avoid,
		   unsigned stage);
/* The next task to run again in `stage` (> 0), or NULL; the caller frees it. */
struct requeued *tasks_requeued_take_stage(struct host *h, unsigned stage);
/* Whether worker w may take the next task to run again. A retry goes to a worker on
 * another GPU when one is ready, else to another worker of its GPU, else back to the
 * one it failed on. */
static inline bool tasks_requeued_for(const struct host *h, const struct host_worker *w);
bool tasks_retry_fits(const struct host *h, const struct host_worker *w) __attribute__((cold));
/* Takes that task; the caller frees it. Only after tasks_requeued_for said yes. */
struct requeued *tasks_requeued_take(struct host *h);
static inline bool tasks_requeued_any(const struct host *h);
/* Whether the next task to run again is an alone one: the generator's tasks wait, so
 * that a worker comes free for it. */
static inline bool tasks_requeued_alone(const struct host *h);
/* Counts every requeued task as not run and frees them. */
void tasks_drop_requeued(struct host *h);

#endif /* GPUD_TASKS_H */
