/* SPDX-License-Identifier: MIT */
/* The task table (tasks.h): per-worker FIFOs of handed-out tasks, and the queue of
 * tasks waiting to run again. */
#include "run/tasks.h"
#include "util/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host.h"
#include "record/failures.h"

int tasks_init(struct host *h, uint32_t per_worker)
{
	uint32_t cap = 2;
	while (cap < per_worker + 1)
		cap <<= 1;
	for (unsigned i = 0; i < h->pool.n; i++) {
		struct host_worker *w = &h->pool.w[i];
		w->tt = calloc(cap, sizeof *w->tt);
		if (!w->tt)
			return -1;
		w->tt_mask = cap - 1;
		w->tt_head = w->tt_tail = w->tt_started = 0;
	}
	h->rq.tail = &h->rq.head;
	return 0;
}

/* Frees a stage's queue, counting each as not run when `drop`. */
static void drop_stage_queues(struct host *h, bool drop)
{
	for (unsigned s = 1; h->pool.stages && s <= h->pool.n_stages; s++) {
		struct host_stage *st = &h->pool.stages[s];
		while (st->rq) {
			struct requeued *q = st->rq;
			st->rq = q->next;
			if (drop) {
				UI_ADD(h->stats.not_run, 1);
				failures_not_run(h, q->t.id, q->t.attempt);
			}
			free(q);
		}
		st->rq_tail = &st->rq;
	}
	h->rq.later = 0;
}

void tasks_free(struct host *h)
{
	drop_stage_queues(h, false);
	for (unsigned i = 0; h->pool.w && i < h->pool.n; i++) {
		free(h->pool.w[i].tt);
		h->pool.w[i].tt = NULL;
	}
	while (h->rq.head) {
		struct requeued *q = h->rq.head;
		h->rq.head = q->next;
		free(q);
	}
	h->rq.tail = &h->rq.head;
}

void tasks_overfull(const struct host_worker *w)
{
	fprintf(LOG_ERR, "gpud: internal error: worker %d holds more tasks than its table\n",
		w->index);
	abort();
}

void tasks_requeue(struct host *h, const struct task_ent *t, const void *input, int avoid,
		   unsigned stage)
{
	struct requeued *q = malloc(sizeof *q + t->size);
	if (!q) {
		perror("gpud: cannot keep a task to run again");
		abort();
	}
	q->next = NULL;
	q->t = *t;
	q->avoid = avoid;
	memcpy(q->data, input, t->size);
	if (stage > 0 && h->pool.stages) {
		/* A later stage's task: it runs again there, on its input to that stage. */
		struct host_stage *st = &h->pool.stages[stage];
		if (!st->rq_tail)
			st->rq_tail = &st->rq;
		*st->rq_tail = q;
		st->rq_tail = &q->next;
		h->rq.later++;
		return;
	}
	*h->rq.tail = q;
	h->rq.tail = &q->next;
}

struct requeued *tasks_requeued_take_stage(struct host *h, unsigned stage)
{
	struct host_stage *st = &h->pool.stages[stage];
	struct requeued *q = st->rq;
	if (!q)
		return NULL;
	st->rq = q->next;
	if (!st->rq)
		st->rq_tail = &st->rq;
	h->rq.later--;
	return q;
}

bool tasks_retry_fits(const struct host *h, const struct host_worker *w)
{
	const struct host_worker *failed_on = &h->pool.w[h->rq.head->avoid];
	bool other_gpu = false, other_worker = false;
	if (w->gpu_id != failed_on->gpu_id)
		return true;
	for (unsigned i = 0; i < h->pool.n; i++) {
		const struct host_worker *o = &h->pool.w[i];
		if (o->state != HW_READY || o == failed_on || o->stage != failed_on->stage)
			continue;
		if (o->gpu_id != failed_on->gpu_id)
			other_gpu = true;
		else
			other_worker = true;
	}
	if (other_gpu)
		return false; /* it waits for that one */
	return w != failed_on || !other_worker;
}

struct requeued *tasks_requeued_take(struct host *h)
{
	struct requeued *q = h->rq.head;
	h->rq.head = q->next;
	if (!h->rq.head)
		h->rq.tail = &h->rq.head;
	return q;
}

void tasks_drop_requeued(struct host *h)
{
	drop_stage_queues(h, true);
	while (h->rq.head) {
		struct requeued *q = h->rq.head;
		h->rq.head = q->next;
		UI_ADD(h->stats.not_run, 1);
		failures_not_run(h, q->t.id, q->t.attempt);
		free(q);
	}
	h->rq.tail = &h->rq.head;
}
