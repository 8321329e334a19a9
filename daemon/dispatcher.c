/* SPDX-License-Identifier: MIT */
/*
 * The host loop: generator -> task rings -> workers -> result rings -> sink.
 *
 * One thread does everything, in passes: take in results (events, freeing task
 * space), report task starts, feed the workers from the generator, then, when a pass
 * did nothing, wait (spin, yield, sleep on the host's doorbell). The generator writes
 * each task straight into a worker's task ring and the sink reads inputs and results
 * where the workers left them, so nothing is copied on the way.
 *
 * Load balancing: each worker may hold at most `window` tasks, sized to about
 * WINDOW_S of its own measured work, so a worker with slow tasks holds one or two
 * while a fast one gets bursts of hundreds; queue_size bounds all of them together.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "host.h"
#include "wait.h"

#define WINDOW_S 5e-3

static const uint32_t result_kinds[] = {REC_OK, REC_FAIL, REC_SKIP, 0};

/* Reports GPUD_TASK_START for every task the worker has begun since the last call. */
static unsigned emit_starts(struct host *h, struct host_worker *w)
{
	uint64_t upto = atomic_load_explicit(&w->ctl->task_tail, memory_order_acquire);
	unsigned n = 0;
	if (upto - w->start_pos > w->task_head - w->start_pos)
		upto = w->task_head; /* never trust a position past what we wrote */
	if (w->start_pos - w->task_free > w->task_head - w->task_free)
		w->start_pos = w->task_free;
	while (w->start_pos != upto) {
		struct shm_rec *t = ring_peek(&w->tasks, &w->start_pos, upto);
		if (!t)
			break;
		struct gpud_event ev = {
			.kind = GPUD_TASK_START,
			.task_id = t->task_id,
			.worker_id = w->index,
			.gpu_id = w->gpu_id,
			.attempt = (int)t->attempt,
			.input = ring_payload(t),
			.input_size = t->size,
		};
		events_deliver(h, &ev);
		w->start_pos += ring_span(t->size);
		n++;
	}
	return n;
}

static void update_window(struct host *h, struct host_worker *w)
{
	uint32_t max = (h->cfg->queue_size + h->n_workers - 1) / h->n_workers;
	double per = w->task_seconds;
	double want = per > 0 ? WINDOW_S / per : (double)max;
	if (want < 1)
		want = 1;
	/* A batching worker may hold two batches: one running, the next one ready, so a
	 * GPU does not wait for the host between batches. */
	if (h->cfg->batch_size > 1 && want < 2.0 * h->cfg->batch_size)
		want = 2.0 * h->cfg->batch_size;
	w->window = want >= (double)max ? max : (uint32_t)want;
}

unsigned dispatch_drain(struct host *h, struct host_worker *w)
{
	uint64_t head = atomic_load_explicit(&w->ctl->result_head, memory_order_acquire);
	if (head == w->result_tail)
		return 0;
	if (h->sink_mask & GPUD_EVENT_BIT(GPUD_TASK_START))
		emit_starts(h, w);

	uint64_t max_payload = h->hdr->max_result_bytes > SHM_MSG_MAX ? h->hdr->max_result_bytes
								       : SHM_MSG_MAX;
	unsigned n = 0;
	struct shm_rec *r;
	const char *why = NULL;
	int rc;
	while ((rc = ring_check(&w->results, &w->result_tail, head, result_kinds, max_payload, &r,
				&why)) == 1) {
		if (r->kind == REC_SKIP) { /* the unused end of a batch's result slot */
			w->result_tail += ring_span(r->size);
			continue;
		}
		struct shm_rec *t = ring_peek(&w->tasks, &w->task_free, w->task_head);
		if (!t || t->task_id != r->task_id) {
			rc = -1;
			why = "a result for a task it was not given";
			break;
		}
		double sec = r->seconds;
		w->last_seconds = sec;
		w->task_seconds = w->task_seconds > 0 ? w->task_seconds * 0.875 + sec * 0.125 : sec;
		if (r->kind == REC_OK) {
			w->ok++;
			events_outcome(h, w, t, GPUD_TASK_OK, ring_payload(r), r->size, NULL, sec);
		} else {
			char msg[SHM_MSG_MAX + 1];
			memcpy(msg, ring_payload(r), r->size < SHM_MSG_MAX ? r->size : SHM_MSG_MAX);
			msg[r->size < SHM_MSG_MAX ? r->size : SHM_MSG_MAX] = '\0';
			w->failed++;
			events_outcome(h, w, t, GPUD_TASK_ERROR, NULL, 0, msg, sec);
		}
		w->task_free += ring_span(t->size);
		w->result_tail += ring_span(r->size);
		w->outstanding--;
		h->in_flight--;
		n++;
	}
	if (w->start_pos - w->task_free > w->task_head - w->task_free)
		w->start_pos = w->task_free;
	atomic_store_explicit(&w->ctl->result_tail, w->result_tail, memory_order_release);
	wait_ring_fast(&w->ctl->bell);
	update_window(h, w);
	if (rc < 0 && w->pid > 0 && !w->timed_out) {
		/* The worker wrote something that is not a result: it cannot be trusted with
		 * more tasks. Killing it sends its tasks through the crash path. */
		ui_say(h, UI_EVENT, "worker %d (GPU %d) corrupted its result ring (%s); restarting it",
		       w->index, w->gpu_id, why);
		kill(w->pid, SIGKILL);
	}
	return n;
}

/* Whether tasks waiting to run again may still start. After an abort, only when the
 * generator failed (the tasks it yielded finish); after an interrupt, a failed sink or a
 * kill, nothing new starts. */
static bool requeued_may_run(const struct host *h)
{
	return !h->abort || (h->gen_failed && !h->interrupted && h->sink_open && !h->killing);
}

/* Fills `w`'s ring from the requeued tasks first, then from the generator. */
static unsigned feed_one(struct host *h, struct host_worker *w)
{
	const struct cfg *c = h->cfg;
	uint64_t head0 = w->task_head;
	unsigned n = 0;

	while (h->in_flight < c->queue_size && w->outstanding < w->window) {
		/* A retry goes to another worker when there is one to take it. */
		bool rq = h->rq_head && requeued_may_run(h) &&
			  (h->rq_head->avoid != w->index || h->n_ready < 2);
		if (!rq && (h->gen_done || h->abort))
			break;
		/* With ordered output, queue_size also bounds the tasks from the oldest
		 * undelivered one on, and so the outcomes held back. Tasks to run again are
		 * inside that span already. */
		if (!rq && h->held && h->next_id - h->next_deliver >= c->queue_size)
			break;
		struct shm_rec *t = ring_reserve(&w->tasks, &w->task_head, w->task_free, h->task_need);
		if (!t)
			break;
		if (rq) {
			struct requeued *q = h->rq_head;
			h->rq_head = q->next;
			if (!h->rq_head)
				h->rq_tail = &h->rq_head;
			memcpy(ring_payload(t), q->data, q->size);
			t->task_id = q->task_id;
			t->size = q->size;
			t->attempt = q->attempt;
			free(q);
		} else {
			struct gpud_buf item = {ring_payload(t), 0, c->max_task_bytes};
			struct gpud_error err;
			err.message[0] = '\0';
			int rc = h->gen_next(h->gen, &item, &err);
			if (rc == 0) {
				h->gen_done = true;
				break;
			}
			if (rc < 0) {
				h->gen_done = true;
				h->gen_failed = true;
				host_abort(h, "the generator failed after %llu tasks: %s",
					   (unsigned long long)h->next_id,
					   err.message[0] ? err.message : "gpud_generator_next returned -1");
				break;
			}
			uint64_t id = h->next_id++;
			h->stats.generated++;
			if (item.size > c->max_task_bytes) {
				char msg[200];
				snprintf(msg, sizeof msg,
					 "task input of %zu bytes exceeds max_task_bytes (%u)",
					 item.size, c->max_task_bytes);
				h->stats.failed++;
				ui_say(h, UI_FAILURE, "task %llu failed: %s", (unsigned long long)id, msg);
				struct gpud_event ev = {.kind = GPUD_TASK_ERROR, .task_id = id,
							.worker_id = -1, .gpu_id = -1, .message = msg};
				events_deliver_outcome(h, &ev);
				continue;
			}
			t->task_id = id;
			t->size = (uint32_t)item.size;
			t->attempt = 0;
		}
		t->kind = REC_TASK;
		w->task_head += ring_span(t->size);
		w->outstanding++;
		h->in_flight++;
		n++;
	}
	if (w->task_head != head0) {
		atomic_store_explicit(&w->ctl->task_head, w->task_head, memory_order_release);
		wait_ring_fast(&w->ctl->bell);
	}
	return n;
}

static unsigned feed(struct host *h)
{
	unsigned n = 0;
	h->n_ready = 0;
	for (unsigned i = 0; i < h->n_workers; i++)
		h->n_ready += h->w[i].state == HW_READY;
	for (unsigned i = 0; i < h->n_workers; i++) {
		struct host_worker *w = &h->w[(h->rr + i) % h->n_workers];
		if (w->state == HW_READY)
			n += feed_one(h, w);
	}
	h->rr++;
	return n;
}

/* The host's wait condition: a result, a task start to report, a state to notice. */
static bool host_ready(void *ctx)
{
	struct host *h = ctx;
	if (host_sigchld || host_interrupts)
		return true;
	bool starts = h->sink_mask & GPUD_EVENT_BIT(GPUD_TASK_START);
	for (unsigned i = 0; i < h->n_workers; i++) {
		struct host_worker *w = &h->w[i];
		if (w->state == HW_GONE)
			continue;
		if (atomic_load_explicit(&w->ctl->result_head, memory_order_relaxed) != w->result_tail)
			return true;
		if (w->state == HW_STARTING &&
		    atomic_load_explicit(&w->ctl->state, memory_order_relaxed) != WS_SETUP &&
		    atomic_load_explicit(&w->ctl->state, memory_order_relaxed) != WS_SPAWNED)
			return true;
		if (starts && atomic_load_explicit(&w->ctl->task_tail, memory_order_relaxed) != w->start_pos)
			return true;
	}
	return false;
}

int dispatch(struct host *h)
{
	bool starts = h->sink_mask & GPUD_EVENT_BIT(GPUD_TASK_START);
	int interrupts_seen = 0;

	for (;;) {
		unsigned progress = 0;

		if (host_interrupts != interrupts_seen) {
			interrupts_seen = host_interrupts;
			if (interrupts_seen == 1) {
				ui_say(h, UI_EVENT, "interrupted: finishing the running tasks "
						    "(interrupt again to stop at once)");
				h->interrupted = true;
				host_abort(h, "interrupted");
			} else if (!h->killing) {
				lifecycle_kill_all(h);
			}
		}
		if (host_sigchld)
			lifecycle_reap(h);
		for (unsigned i = 0; i < h->n_workers; i++) {
			struct host_worker *w = &h->w[i];
			if (w->state == HW_STARTING)
				lifecycle_poll(h, w);
			if (w->state == HW_READY || w->state == HW_STOPPING)
				progress += dispatch_drain(h, w);
			if (starts && w->state == HW_READY)
				progress += emit_starts(h, w);
		}
		if (!h->stopping && !h->killing)
			progress += feed(h);

		if (h->rq_head && !requeued_may_run(h))
			events_drop_requeued(h);

		if (!h->stopping && h->in_flight == 0 && !h->rq_head && (h->gen_done || h->abort))
			lifecycle_stop_all(h);
		if (lifecycle_live(h) == 0) {
			if (h->rq_head || h->in_flight || (!h->stopping && !h->gen_done)) {
				events_drop_requeued(h);
				host_abort(h, h->ever_ready ? "no worker left to run the remaining tasks"
							    : "no worker could be set up");
			}
			break;
		}
		if (progress)
			continue;

		uint64_t now = wait_now_ns();
		uint64_t deadline = lifecycle_timeouts(h, now);
		wait_until(&h->hdr->host_bell, host_ready, h, deadline);
	}
	return h->abort ? 3 : 0;
}
