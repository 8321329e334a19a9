/* SPDX-License-Identifier: MIT */
/*
 * The task loop of process() and process_batch() (worker.h): a task taken from the task
 * ring (loop_next_task), more gathered up to the batch size (gather), their result
 * slots reserved (loop_reserve_result) with their canaries armed (canary.h), the plugin
 * called, its results checked and written (loop_finish_result) and published in bursts
 * (loop_publish: every PUBLISH_BURST results or PUBLISH_NS, and before a call that may
 * block). Out of memory, and a call of several tasks that fails as a whole, go to fit.c; where the
 * time goes is times.h's. This is the per-task hot path: what it calls on every task is here or
 * inline.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "canary.h"
#include "worker.h"

void loop_publish(struct worker *w, uint64_t now)
{
	if (w->tm.dirty & CALLS_DIRTY)
		times_publish_calls(&w->tm); /* before the results they count */
	atomic_store_explicit(&w->rep->result_head, w->result_head, memory_order_release);
	wait_ring_fast(w->host_bell);
	w->pending = 0;
	w->published_ns = now;
}

/* A wait for tasks starts: the time before it was the user's (tiny calls) or gpud's
 * handing back; the wait is starving, or idle once the generator has ended. */
static enum shm_phase wait_phase(const struct worker *w)
{
	return atomic_load_explicit(&w->feed->drained, memory_order_relaxed) ? PH_IDLE : PH_WAIT;
}

static bool task_or_stop(void *ctx)
{
	struct worker *w = ctx;
	return atomic_load_explicit(&w->feed->task_head, memory_order_acquire) != w->task_tail ||
	       atomic_load_explicit(&w->feed->stop, memory_order_acquire);
}

static bool more_tasks(void *ctx)
{
	struct worker *w = ctx;
	return atomic_load_explicit(&w->feed->task_head, memory_order_acquire) != w->task_head;
}

/* more_tasks, or the feed drained: the automatic batch wait ends there (gather). */
static bool more_tasks_or_drained(void *ctx)
{
	struct worker *w = ctx;
	return more_tasks(ctx) || atomic_load_explicit(&w->feed->drained, memory_order_acquire);
}

static bool result_space(void *ctx)
{
	struct worker *w = ctx;
	return atomic_load_explicit(&w->feed->result_tail, memory_order_acquire) != w->result_tail;
}

struct shm_rec *loop_next_task(struct worker *w, uint64_t *now)
{
	for (;;) {
		struct shm_rec *t = ring_peek(&w->tasks, &w->task_tail, w->task_head);
		if (t)
			return t;
		w->task_head = atomic_load_explicit(&w->feed->task_head, memory_order_acquire);
		if (w->task_head != w->task_tail)
			continue;
		/* Dry: hand over what we have before waiting. */
		if (w->pending)
			loop_publish(w, *now);
		atomic_store_explicit(&w->rep->busy_since_ns, 0, memory_order_relaxed);
		if (atomic_load_explicit(&w->feed->stop, memory_order_acquire)) {
			w->task_head =
				atomic_load_explicit(&w->feed->task_head, memory_order_acquire);
			if (w->task_head == w->task_tail)
				return NULL;
			continue;
		}
		w->waited = true;
		times_charge_now(&w->tm, w->clk.tiny ? PH_USER : PH_HANDBACK);
		enum shm_phase p = wait_phase(w);
		wait_until(w->my_bell, task_or_stop, w, 0);
		*now = times_charge_now(&w->tm, p);
	}
}

struct shm_rec *loop_reserve_result(struct worker *w, uint64_t *head)
{
	for (;;) {
		struct shm_rec *r = ring_reserve(&w->results, head, w->result_tail, w->result_need);
		if (r)
			return r;
		w->result_tail = atomic_load_explicit(&w->feed->result_tail, memory_order_acquire);
		r = ring_reserve(&w->results, head, w->result_tail, w->result_need);
		if (r)
			return r;
		/* Full: the host must see our results to free space. */
		loop_publish(w, times_charge_now(&w->tm, w->clk.tiny ? PH_USER : PH_UNPACK));
		atomic_store_explicit(&w->rep->busy_since_ns, 0, memory_order_relaxed);
		w->waited = true;
		wait_until(w->my_bell, result_space, w, 0);
		times_charge_now(&w->tm, PH_HANDBACK);
		w->result_tail = atomic_load_explicit(&w->feed->result_tail, memory_order_acquire);
	}
}

/* The automatic batch wait (shm_header.batch_wait_auto): four times the time the
 * `missing` tasks take to come at the rate seen so far (a margin for a rate that varies
 * and a stage worker that is not scheduled for a while), at least AUTO_WAIT_MIN_NS, at
 * most batch_wait_ns; batch_wait_ns until a rate is seen. Behind a stage that is the
 * bottleneck the GPU would idle anyway, so the wait costs latency, not throughput. */
#define AUTO_WAIT_MIN_NS 20000000u
static uint64_t auto_wait(const struct worker *w, uint32_t missing)
{
	uint64_t cap = w->hdr->batch_wait_ns;
	if (!w->gap_ns)
		return cap;
	double want = 4.0 * (double)w->gap_ns * missing;
	if (want < AUTO_WAIT_MIN_NS)
		want = AUTO_WAIT_MIN_NS;
	return want < (double)cap ? (uint64_t)want : cap;
}

/* k tasks came in `ns` of waiting: the average gap between arrivals follows (an eighth
 * of the way a sample, so one slow stretch does not cut the next batch short). */
static void arrivals(struct worker *w, uint64_t ns, uint32_t k)
{
	uint64_t gap = ns / k;
	w->gap_ns = w->gap_ns ? w->gap_ns - w->gap_ns / 8 + gap / 8 : gap;
	if (!w->gap_ns)
		w->gap_ns = 1;
}

/* Gathers up to fit.batch_cap tasks from `first` on, waiting at most batch_wait_ns for more
 * (with batch_wait_auto, the time the batch takes to fill at the rate tasks come, and
 * never once the feed is drained: the last batch goes at once); *end is the ring
 * position after the last one (past any pad between them). */
static uint32_t gather(struct worker *w, struct shm_rec *first, uint64_t *end)
{
	uint32_t n = 0;
	uint64_t pos = w->task_tail;
	uint64_t deadline = 0, waited_from = 0;
	bool autow = w->hdr->batch_wait_auto && !w->cpu_stage;
	w->in[n++] = first;
	pos += ring_span(first->size);
	while (n < w->fit.batch_cap) {
		struct shm_rec *t = ring_peek(&w->tasks, &pos, w->task_head);
		if (!t) {
			w->task_head =
				atomic_load_explicit(&w->feed->task_head, memory_order_acquire);
			if (w->task_head != pos)
				continue;
			if (!w->hdr->batch_wait_ns ||
			    atomic_load_explicit(&w->feed->stop, memory_order_acquire))
				break;
			if (autow &&
			    atomic_load_explicit(&w->feed->drained, memory_order_acquire)) {
				/* What was published before the feed was drained: taken, then
				 * the call goes. */
				w->task_head = atomic_load_explicit(&w->feed->task_head,
								    memory_order_acquire);
				if (w->task_head != pos)
					continue;
				break;
			}
			uint64_t now = wait_now_ns();
			if (!deadline)
				deadline = now + (autow ? auto_wait(w, w->fit.batch_cap - n)
							: w->hdr->batch_wait_ns);
			if (now >= deadline)
				break;
			if (w->pending)
				loop_publish(w, now);
			w->waited = true;
			times_charge(&w->tm, w->clk.tiny ? PH_USER : PH_UNPACK, now);
			if (!waited_from)
				waited_from = now;
			wait_until(w->my_bell, autow ? more_tasks_or_drained : more_tasks, w,
				   deadline);
			uint64_t woke = times_charge_now(&w->tm, PH_WAIT);
			w->task_head =
				atomic_load_explicit(&w->feed->task_head, memory_order_acquire);
			if (autow && w->task_head != pos) {
				uint32_t k = 0;
				for (uint64_t q = pos; k < w->fit.batch_cap - n;) {
					struct shm_rec *r = ring_peek(&w->tasks, &q, w->task_head);
					if (!r)
						break;
					q += ring_span(r->size);
					k++;
				}
				if (k)
					arrivals(w, wait_since(woke, waited_from), k);
				waited_from = woke;
			}
			continue;
		}
		w->in[n++] = t;
		pos += ring_span(t->size);
	}
	*end = pos;
	return n;
}

void loop_task_init(struct worker *w, uint32_t i)
{
	struct shm_rec *t = w->in[i];
	w->err[i].message[0] = '\0';
	w->t[i] = (struct gpud_task){
		.id = t->task_id,
		.input = ring_payload(t),
		.input_size = t->size,
		.result = {.data = ring_payload(w->out[i]),
			   .size = 0,
			   .capacity = w->hdr->max_result_bytes},
		.error = &w->err[i],
		.attempt = (int)t->attempt,
	};
}

uint64_t loop_finish_result(struct worker *w, uint32_t i, uint64_t pos, int rc, double seconds,
			    bool slot, uint32_t call)
{
	struct gpud_task *task = &w->t[i];
	struct shm_rec *r = w->out[i], *t = w->in[i];
	struct gpud_error *err = &w->err[i];
	uint32_t max_result = w->hdr->max_result_bytes;
	uint32_t kind, size, flags = 0;
	enum breach breach = disarm(r, max_result);

	/* Before the buffer lies this slot's header and the gap to the last result: a
	 * plugin that wrote there may have written more of our memory. */
	if (breach == BREACH_BEFORE)
		w->tainted = true;
	if (breach != BREACH_NONE) {
		/* Caught here, before the host could take anything the write reached: a
		 * payload is followed by SHM_SLOT_GAP unused bytes, so a write of up to that
		 * much reached no payload; at most headers of empty results, whose check
		 * words the host verifies. */
		kind = REC_FAIL;
		flags = REC_FLAG_BOUNDS;
		size = (uint32_t)snprintf(
			ring_payload(r), SHM_MSG_MAX,
			"the plugin wrote %s its result buffer (capacity %u bytes)",
			breach == BREACH_BEFORE ? "before the start of" : "past the end of",
			max_result);
	} else if (task->failed == GPUD_TASK_TIMED_OUT && w->cut) {
		/* Its call ran past task_timeout and was interrupted (gpud_worker_interrupt):
		 * a timeout, the process goes on. The plugin's note is the payload. */
		kind = REC_FAIL;
		flags = REC_FLAG_TIMEOUT;
		size = (uint32_t)strnlen(err->message, sizeof err->message);
		memcpy(ring_payload(r), err->message, size);
	} else if (task->failed || rc != 0) {
		if (w->fit.oom_abi && fit_task_oom(task->failed, rc)) {
			/* process(): a call of one task */
			fit_oom_message(err, w->cpu_stage);
			task->failed = 1;
		}
		if (!err->message[0])
			snprintf(err->message, sizeof err->message,
				 "%s returned %d without a message",
				 w->fl.flight ? "gpud_worker_submit/poll"
				 : slot       ? "process_batch()"
					      : "process()",
				 rc);
		kind = REC_FAIL;
		size = (uint32_t)strnlen(err->message, sizeof err->message);
		memcpy(ring_payload(r), err->message, size);
		if (task->failed == GPUD_TASK_REJECT)
			flags = REC_FLAG_REJECT;
		if (task->failed == GPUD_TASK_FATAL) {
			flags = REC_FLAG_FATAL;
			memcpy(w->fatal, err->message, sizeof w->fatal);
			if (!w->fatal[0])
				snprintf(w->fatal, sizeof w->fatal,
					 "gpud_task_fatal() without a message");
		}
	} else if (task->result.size > max_result) {
		kind = REC_FAIL;
		size = (uint32_t)snprintf(ring_payload(r), SHM_MSG_MAX,
					  "result of %zu bytes exceeds max_result_bytes (%u)",
					  task->result.size, max_result);
	} else {
		kind = REC_OK;
		size = (uint32_t)task->result.size;
	}
	uint64_t sec_bits;
	memcpy(&sec_bits, &seconds, sizeof sec_bits);
	flags |= call << REC_CALL_SHIFT;
	*r = (struct shm_rec){
		.task_id = t->task_id,
		.kind = kind,
		.size = size,
		.attempt = t->attempt,
		.flags = flags,
		.seconds = seconds,
		.check = shm_rec_check(t->task_id, kind, size, t->attempt, flags, sec_bits, pos),
	};
	uint64_t used = ring_rec_span(&w->results, kind, size);
	if (slot && used < w->result_need) {
		/* The slot was reserved at full size: skip over what this result left. */
		struct shm_rec *f = (struct shm_rec *)((uint8_t *)r + used);
		f->kind = REC_SKIP;
		f->size = (uint32_t)(w->result_need - used - SHM_REC_HDR);
	}
	return used;
}

void loop_run(struct worker *w)
{
	uint64_t now = clock_restart(&w->clk);
	uint32_t cap = w->hdr->max_result_bytes;
	uint64_t last_call_ns = 0; /* the last call's time (times_user_begins) */

	for (;;) {
		struct shm_rec *first = loop_next_task(w, &now);
		if (!first)
			break;
		uint64_t end_pos = w->task_tail + ring_span(first->size);
		uint32_t n = w->fit.batch > 1 ? gather(w, first, &end_pos) : (w->in[0] = first, 1);
		bool slots = w->plugin.worker.process_batch != NULL;

		/* Result space for every task of the call, before the call. */
		uint64_t head = w->result_head;
		for (uint32_t i = 0; i < n; i++) {
			w->out[i] = loop_reserve_result(w, &head);
			w->out_pos[i] = head;
			arm(w->out[i], cap);
			head += slots ? w->result_need : 0;
		}
		for (uint32_t i = 0; i < n; i++)
			loop_task_init(w, i);

		/* Tell the host which tasks run, since when (timeouts, starts, dashboard).
		 * The clock starts now: waiting for tasks or result space never counts. */
		if (w->waited) {
			now = clock_restart(&w->clk);
			w->waited = false;
			times_charge(&w->tm, PH_UNPACK, now);
			times_user_begins(&w->tm, last_call_ns);
		} else if (!w->clk.tiny) {
			times_charge_now(&w->tm, PH_UNPACK);
			times_user_begins(&w->tm, last_call_ns);
		}
		atomic_store_explicit(&w->rep->cur_task, first->task_id, memory_order_relaxed);
		atomic_store_explicit(&w->rep->busy_since_ns, now, memory_order_relaxed);
		uint64_t call_from = w->task_tail;
		atomic_store_explicit(&w->rep->run_from, call_from, memory_order_relaxed);
		atomic_store_explicit(&w->rep->task_tail, end_pos, memory_order_release);

		w->cut = false;
		call_begins(w);
		int rc = slots ? w->plugin.worker.process_batch(w->state, w->t, n)
			       : w->plugin.worker.process(w->state, &w->t[0]);
		leave_if_forked();
		call_ends(w);
		times_count_call(&w->tm, n, w->t);
		if (slots && !w->cut && fit_again(&w->fit, w->t, n, rc))
			rc = fit_refit(w, n, rc);
		else if (slots && w->fit.shown < w->fit.batch && fit_grow(&w->fit, n))
			fit_publish(&w->fit, w->rep);
		double each;
		uint64_t end = clock_after(&w->clk, n, now, &each);
		if (w->clk.untimed == 0) /* the clock was read: the call (or stretch) ends here */
			times_charge(&w->tm, PH_USER, end);
		last_call_ns = (uint64_t)(each * 1e9) * n;

		uint64_t used = 0;
		for (uint32_t i = 0; i < n; i++)
			used = loop_finish_result(w, i, w->out_pos[i], rc, each, slots,
						  slots && i == 0 ? n : 0);
		/* `head` is where the last slot was reserved (past any pad the reservation
		 * wrote): in slot mode already past that slot, otherwise past it after this. */
		w->result_head = slots ? head : head + used;
		atomic_store_explicit(&w->committed, w->result_head, memory_order_release);
		w->task_tail = end_pos;
		now = end;
		w->pending += n;
		if (w->tainted) {
			/* It may have written anywhere in our memory, the report block too:
			 * say again which call this was, hand over the results, and leave. */
			atomic_store_explicit(&w->rep->busy_since_ns, end, memory_order_relaxed);
			atomic_store_explicit(&w->rep->run_from, call_from, memory_order_relaxed);
			atomic_store_explicit(&w->rep->task_tail, end_pos, memory_order_relaxed);
			loop_publish(w, end);
			worker_finish(WORKER_EXIT_TAINTED);
		}
		if (w->fatal[0]) {
			/* The plugin says this process is beyond repair: hand over the results,
			 * then leave; the host starts a fresh worker. */
			loop_publish(w, end);
			snprintf(w->rep->message, sizeof w->rep->message, "%s", w->fatal);
			worker_finish(WORKER_EXIT_FATAL);
		}
		if (w->pending >= PUBLISH_BURST || end - w->published_ns >= PUBLISH_NS || slots)
			loop_publish(w, end);
		if (!w->clk.tiny)
			times_charge_now(&w->tm, PH_HANDBACK);
	}
	if (w->pending)
		loop_publish(w, now);
}
