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
 * WINDOW_S of its own measured work, and at least two (one running, the next ready),
 * so a worker with slow tasks holds two while a fast one gets bursts of hundreds;
 * queue_size bounds all of them together.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "run/dispatcher.h"
#include "cluster/ranks.h"
#include "run/events.h"
#include "util/abort.h"
#include "record/failures.h"
#include "workers/lifecycle.h"
#include "workers/memory.h"
#include "run/stages.h"
#include "run/standin.h"
#include "util/textio.h"
#include "view/ui.h"
#include "util/notes.h"

#define WINDOW_S 5e-3

static const uint32_t result_kinds[] = {REC_OK, REC_FAIL, REC_SKIP, 0};

/* Where worker w says it has got to in its task ring, kept inside what we gave it. */
static uint64_t reported_tail(const struct host_worker *w)
{
	uint64_t upto = atomic_load_explicit(&w->rep->task_tail, memory_order_acquire);
	if (upto - w->task_free > w->task_head - w->task_free)
		return w->task_free;
	return upto;
}

/* Reports GPUD_TASK_START for every task the worker has begun since the last call. */
static unsigned emit_starts(struct host *h, struct host_worker *w)
{
	uint64_t upto = reported_tail(w);
	unsigned n = 0;
	while (w->tt_started != w->tt_head) {
		const struct task_ent *t = &w->tt[w->tt_started & w->tt_mask];
		/* Started means its record lies wholly before the reported tail. */
		if (t->pos - w->task_free >= upto - w->task_free)
			break;
		struct gpud_event ev = {
			.kind = GPUD_TASK_START,
			.task_id = t->id,
			.worker_id = w->index,
			.gpu_id = w->gpu_id,
			.attempt = (int)t->attempt,
			.input = h->out.no_input ? NULL : ring_payload(ring_at(&w->tasks, t->pos)),
			.input_size = h->out.no_input ? 0 : t->size,
		};
		events_deliver(h, &ev);
		w->tt_started++;
		n++;
	}
	return n;
}

/* The most tasks one worker may hold: its share of queue_size, which is shared by the
 * workers of one stage (all of them without stages). */
static uint32_t window_max(const struct host *h, const struct host_worker *w)
{
	unsigned n = h->pool.stages ? h->pool.stages[w->stage].n : h->pool.n;
	return (h->cfg->queue_size + n - 1) / n;
}

/* A worker that takes tasks in flight may hold three times max_in_flight, from the
 * start: as many as its engine runs, as many finished behind an older one still
 * running (results go back in order), and as many ready to go in as they finish. Only
 * one whose process says it runs them so (w->flies): max_in_flight is the job's, and a
 * plugin of the job that calls process() (a CPU stage's, a GPU worker without the
 * pair) holding that many would keep them from the other workers while it runs them
 * one by one. A process that lies about it changes only its own window (at most its
 * share of queue_size). */
#define IN_FLIGHT_WINDOW 3

static void publish_tasks(struct host_worker *w)
{
	atomic_store_explicit(&w->feed->task_head, w->task_head, memory_order_release);
	wait_ring_fast(shm_worker_bell(w));
}

void dispatch_first_window(struct host *h, struct host_worker *w)
{
	uint32_t max = window_max(h, w), want = 1;
	w->flies = w->rep && atomic_load_explicit(&w->rep->flight, memory_order_relaxed) != 0;
	if (h->cfg->max_in_flight > 1 && w->flies)
		want = IN_FLIGHT_WINDOW * h->cfg->max_in_flight;
	/* A batching GPU worker's first call may be a whole batch (update_window gives it
	 * two after its first result anyway): with one task, a worker behind a CPU stage
	 * began with a call of 1. */
	if (h->cfg->batch_size > 1 && w->stage == h->pool.n_stages)
		want = 2 * h->cfg->batch_size;
	w->window = want < max ? want : max;
	/* What was written while it set up (its first batch whole, if the generator had
	 * it): handed over now. */
	if (atomic_load_explicit(&w->feed->task_head, memory_order_relaxed) != w->task_head)
		publish_tasks(w);
}

static void update_window(struct host *h, struct host_worker *w)
{
	uint32_t max = window_max(h, w);
	double per = w->task_seconds;
	double want = per > 0 ? WINDOW_S / per : (double)max;
	if (want < 1)
		want = 1;
	/* A batching worker may hold two batches: one running, the next one ready, so a
	 * GPU does not wait for the host between batches. */
	if (h->cfg->batch_size > 1 && want < 2.0 * h->cfg->batch_size)
		want = 2.0 * h->cfg->batch_size;
	if (h->cfg->max_in_flight > 1 && w->flies &&
	    want < IN_FLIGHT_WINDOW * h->cfg->max_in_flight)
		want = IN_FLIGHT_WINDOW * h->cfg->max_in_flight;
	/* Two tasks at least: the next one is in the worker's ring while one runs, so a
	 * worker with long tasks (a Python Dispatcher's chunk of a whole batch, a GPU
	 * worker fed by a CPU stage) does not wait for the host between them. */
	if (want < 2)
		want = 2;
	w->window = want >= (double)max ? max : (uint32_t)want;
}

unsigned dispatch_drain(struct host *h, struct host_worker *w)
{
	if (!w->rep)
		return 0;
	uint64_t head = atomic_load_explicit(&w->rep->result_head, memory_order_acquire);
	if (head == w->result_tail || w->corrupt)
		return 0;
	if (h->out.mask & GPUD_EVENT_BIT(GPUD_TASK_START) && w->stage == h->pool.n_stages)
		emit_starts(h, w);

	uint64_t max_payload = h->shm.hdr->max_result_bytes > SHM_MSG_MAX
				       ? h->shm.hdr->max_result_bytes
				       : SHM_MSG_MAX;
	unsigned n = 0;
	struct shm_rec r, *rec;
	const char *why = NULL;
	int rc;
	while ((rc = ring_check(&w->results, &w->result_tail, head, result_kinds, max_payload, &r,
				&rec, &why)) == 1) {
		if (r.kind == REC_SKIP) { /* the unused end of a batch's result slot */
			w->result_tail += ring_span(r.size);
			continue;
		}
		/* The result must be for the oldest task it holds, as we handed it out, with
		 * a header nobody changed after the worker finished it. */
		const struct task_ent *t = tasks_front(w);
		uint64_t sec_bits;
		memcpy(&sec_bits, &r.seconds, sizeof sec_bits);
		if (!t || r.task_id != t->id || r.attempt != t->attempt) {
			rc = -1;
			why = "a result for a task it was not given";
			break;
		}
		if (r.check != shm_rec_check(r.task_id, r.kind, r.size, r.attempt, r.flags,
					     sec_bits, w->result_tail)) {
			rc = -1;
			why = "a result header changed after it was written";
			break;
		}
		/* A small payload is copied, and delivered as copied if the header is still
		 * the one checked: the worker may be writing its memory as we read. */
		const void *payload = ring_payload(rec);
		if (r.size <= SHM_COPIED_MAX) {
			memcpy(h->out.result_copy, payload, r.size);
			payload = h->out.result_copy;
			atomic_thread_fence(memory_order_acquire); /* the copy, then the look */
			if (__atomic_load_n(&rec->check, __ATOMIC_RELAXED) != r.check) {
				rc = -1;
				why = "a result changed while it was read";
				break;
			}
		}
		double sec = r.seconds >= 0 && r.seconds < 1e9 ? r.seconds : 0;
		/* A CPU stage's ok result goes on to the next stage (stages.h), or waits
		 * in its ring for room there. */
		if (__builtin_expect(w->stage < h->pool.n_stages, 0) && r.kind == REC_OK) {
			if (!stages_forward(h, w, t, payload, r.size)) {
				w->blocked = true;
				break;
			}
			w->blocked = false;
			UI_SET(w->last_seconds, sec);
			UI_SET(w->busy_s, w->busy_s + sec);
			w->task_seconds =
				w->task_seconds > 0 ? w->task_seconds * 0.875 + sec * 0.125 : sec;
			w->task_free = t->pos + ring_span(t->size);
			w->result_tail += ring_rec_span(&w->results, r.kind, r.size);
			tasks_pop(w);
			n++;
			continue;
		}
		const void *input = ring_payload(ring_at(&w->tasks, t->pos));
		UI_SET(w->last_seconds, sec);
		UI_SET(w->busy_s, w->busy_s + sec);
		if (h->view.metrics)
			metrics_task(h->view.metrics, sec, r.flags >> REC_CALL_SHIFT);
		w->task_seconds = w->task_seconds > 0 ? w->task_seconds * 0.875 + sec * 0.125 : sec;
		if (r.kind == REC_OK) {
			if (__builtin_expect(r.size > h->flow.largest_result, 0))
				h->flow.largest_result = r.size;
			UI_ADD(w->ok, 1);
			events_outcome(h, w, t, input, CAUSE_OK, payload, r.size, NULL, sec);
		} else if (r.flags & REC_FLAG_TIMEOUT) {
			/* Its call ran past task_timeout and the worker interrupted it
			 * (gpud_worker_interrupt): a timeout, as if it had been killed for
			 * it, but the worker goes on; no restart. */
			char msg[256];
			double limit = stagecfg_task_timeout(h->cfg, w->stage);
			UI_ADD(w->timeouts, 1);
			snprintf(msg, sizeof msg,
				 "timed out after %g s on worker %d (%s), interrupted in place",
				 limit, w->index, WHERE_OF(h, w));
			events_outcome(h, w, t, input, CAUSE_TIMEOUT, NULL, 0, msg, limit);
		} else {
			char msg[SHM_MSG_MAX + 1];
			size_t len = r.size < SHM_MSG_MAX ? r.size : SHM_MSG_MAX;
			memcpy(msg, payload, len);
			msg[len] = '\0';
			text_clean(msg);
			UI_ADD(w->failed, 1);
			events_outcome(h, w, t, input,
				       r.flags & REC_FLAG_REJECT ? CAUSE_REJECT : CAUSE_ERROR, NULL,
				       0, msg, sec);
		}
		w->task_free = t->pos + ring_span(t->size);
		w->result_tail += ring_rec_span(&w->results, r.kind, r.size);
		tasks_pop(w);
		UI_SET(h->flow.in_flight, h->flow.in_flight - 1);
		n++;
	}
	atomic_store_explicit(&w->feed->result_tail, w->result_tail, memory_order_release);
	wait_ring_fast(shm_worker_bell(w));
	if (__builtin_expect(w->stage < h->pool.n_stages, 0))
		stages_publish_handed(h, w->stage + 1);
	update_window(h, w);
	if (rc < 0)
		lifecycle_corrupt(h, w, why);
	return n;
}

/* Whether tasks waiting to run again may still start. After an abort, only when the
 * generator failed (the tasks it yielded finish); after an interrupt, a failed sink or a
 * kill, nothing new starts. */
static bool requeued_may_run(const struct host *h)
{
	return !h->ctl.abort ||
	       (h->flow.failed && !h->ctl.interrupted && h->out.open && !h->ctl.killing);
}

/* A feeding pass gives the rest of the loop a turn at least this often, so a slow
 * generator cannot hold back results, timeouts or signals for more than one of its
 * calls (the clock is read every few calls, more often once calls are slow). */
#define FEED_SLICE_NS 1000000u

/* What became of one generator call (generate()). */
enum fed {
	FED_TASK,    /* a task for the ring: *ent */
	FED_DROPPED, /* an item used up without a task: another rank's, or done before */
	FED_REFUSED, /* an item failed without running (larger than max_task_bytes) */
	FED_STOP,    /* no more from the generator in this pass: the end, a failure */
};

/* Publishes what `w`'s ring holds and rings its bell. */

/* The generator has ended: the workers it fed (the first stage's, or the GPU workers
 * without stages) are told, so that their waits for tasks from now on count as idle,
 * not as starving (shm_feed.drained). */
static void tell_drained(struct host *h)
{
	h->flow.drained_told = true;
	for (unsigned i = 0; i < h->pool.n; i++)
		if (h->pool.w[i].stage == 0)
			atomic_store_explicit(&h->pool.w[i].feed->drained, 1, memory_order_relaxed);
}

/* The generator returned 0: the end. Resuming, it must not end before a task the
 * journaled run read, or it is not that run's input. */
static void generator_ended(struct host *h)
{
	/* A call made before the run was ended (the generator is not called after), which
	 * the stand-in interrupted (gpud_generator_ops.interrupt): not the input's end. */
	if (h->ctl.abort)
		return;
	h->flow.done = true;
	uint64_t seen =
		h->resume.on ? journal_sample_from(&h->journal, h->flow.next_id) : UINT64_MAX;
	if (seen == UINT64_MAX)
		return;
	h->resume.input_changed = true;
	host_abort(h,
		   "the generator's input is not what the journaled run read: it ended after "
		   "%llu tasks, and that run read task %llu; run without --resume to start over, "
		   "or add --force to resume anyway",
		   (unsigned long long)h->flow.next_id, (unsigned long long)seen);
}

/* The generator returned -1. */
static void generator_failed(struct host *h, struct gpud_error *err)
{
	h->flow.done = true;
	if (host_interrupts)
		return; /* a read cut short by Ctrl-C or SIGTERM: not a failure */
	h->flow.failed = true;
	text_clean(err->message);
	host_abort(h, "the generator failed after %llu tasks: %s",
		   (unsigned long long)h->flow.next_id,
		   err->message[0] ? err->message : "gpud_generator_next returned -1");
}

/* The generator jumped to task `to` (the ids before it are other ranks'). false when it
 * failed: the run is aborted, saying why. */
static bool skip_to(struct host *h, uint64_t to, struct gpud_error *err)
{
	if (h->gen_ops->skip(h->gen, to - h->flow.next_id, err) != 0) {
		h->flow.done = h->flow.failed = true;
		text_clean(err->message);
		host_abort(h, "the generator failed to skip to task %llu: %s",
			   (unsigned long long)to,
			   err->message[0] ? err->message : "gpud_generator_skip failed");
		return false;
	}
	h->flow.next_id = to;
	return true;
}

/* Dynamic shares: the stream has passed this rank's claims; the next claim is made
 * (claims.h) and a generator that can jump, jumps to it. false when the stream ends
 * here (every chunk is claimed) or the run was aborted. */
static bool claim_more(struct host *h, struct gpud_error *err)
{
	char why[600];
	uint64_t to = claims_from(h->claims, h->flow.next_id, why, sizeof why);
	if (to == UINT64_MAX) {
		if (why[0]) {
			h->flow.failed = true;
			host_abort(h, "%s", why);
		}
		h->flow.done = true; /* the rest is other ranks' */
		return false;
	}
	if (to == h->flow.next_id || !h->gen_ops->skip)
		return true; /* a generator that cannot jump: admit drops the ids between */
	return skip_to(h, to, err);
}

/* Another rank's chunk ahead: a generator that can jump, jumps it. false when the jump
 * failed (the run is aborted), or the stream ends here for this rank. */
static bool skip_other_ranks(struct host *h, struct gpud_error *err)
{
	const struct cfg *c = h->cfg;
	if (h->claims) {
		uint64_t id = h->flow.next_id;
		return (id >= h->claims->lo && id < h->claims->hi) || claim_more(h, err);
	}
	if (c->ranks <= 1 || !h->gen_ops->skip || ranks_mine(h->flow.next_id, c->rank, c->ranks))
		return true;
	uint64_t to = ranks_next_own(h->flow.next_id, c->rank, c->ranks);
	return skip_to(h, to, err);
}

/* Task `id`, just generated into `item`: another rank's, one an earlier run finished,
 * one too large, one the generator failed itself (`failed`: its message, ABI 1.7), or a
 * task for the ring (*ent). */
static enum fed admit(struct host *h, uint64_t id, const struct gpud_buf *item, const char *failed,
		      const char *name, struct task_ent *ent)
{
	const struct cfg *c = h->cfg;
	/* Another rank's (a generator that cannot jump): dropped likewise. With dynamic
	 * shares, claim_more has just claimed what the stream is in, if anything. */
	if (h->claims ? id < h->claims->lo || id >= h->claims->hi
		      : c->ranks > 1 && !ranks_mine(id, c->rank, c->ranks))
		return FED_DROPPED;
	/* A sampled task's input, recorded, or compared with what the journaled run read
	 * when resuming. */
	if (h->journal.fd >= 0 && !failed &&
	    __builtin_expect(journal_sampled(shares_nth(h->claims, id, c->rank, c->ranks)), 0) &&
	    journal_sample(&h->journal, id, item->data,
			   item->size < c->max_task_bytes ? item->size : c->max_task_bytes) < 0) {
		h->flow.done = true;
		h->resume.input_changed = true;
		host_abort(h,
			   "the generator's input is not what the journaled run read: task %llu "
			   "came with other bytes (the input changed, or it starts elsewhere); run "
			   "without --resume to start over, or add --force to resume anyway",
			   (unsigned long long)id);
		return FED_STOP;
	}
	/* Finished by an earlier run: dropped before it touches a ring (the slot just
	 * written is reserved again for the next item). */
	if (h->resume.on && journal_is_done(&h->journal, id)) {
		events_skip(h, id);
		return FED_DROPPED; /* progress: the loop must not sleep between slices */
	}
	UI_ADD(h->stats.generated, 1);
	/* (ABI 1.9) Its name, kept for its events; a name that cannot be kept (out of
	 * memory) leaves the task unnamed, nothing else. */
	if (name)
		(void)names_put(&h->out.task_names, id, name);
	if (h->resume.on && !h->resume.first_new_ns)
		h->resume.first_new_ns = wait_now_ns(); /* the skipping is over */
	if (failed || item->size > c->max_task_bytes) {
		char msg[sizeof((struct gpud_error *)0)->message];
		if (failed)
			snprintf(msg, sizeof msg, "%s",
				 failed[0] ? failed : "the generator failed this task");
		else
			snprintf(msg, sizeof msg,
				 "task input of %zu bytes exceeds max_task_bytes (%u)", item->size,
				 c->max_task_bytes);
		UI_ADD(h->stats.failed, 1);
		failures_add(h, id, 0, NULL, false, msg, false);
		ui_say(h, UI_FAILURE, "task %llu failed: %s", (unsigned long long)id, msg);
		struct gpud_event ev = {.kind = GPUD_TASK_ERROR,
					.task_id = id,
					.worker_id = -1,
					.gpu_id = -1,
					.message = msg};
		events_deliver_outcome(h, &ev);
		return FED_REFUSED;
	}
	*ent = (struct task_ent){.id = id, .size = (uint32_t)item->size};
	if (__builtin_expect(item->size > h->flow.largest_task, 0))
		h->flow.largest_task = (uint32_t)item->size;
	return FED_TASK;
}

/* One generator call, writing into the reserved record `t` of `w`'s ring; *head0 is
 * what was last published of that ring. Inlined into feed_one, the per-task path: as
 * a call of its own (the compiler's choice) it cost 10% of the no-op rate, the
 * positions it updates going through memory (docs/benchmarks.md). */
static inline __attribute__((always_inline)) enum fed
generate(struct host *h, struct host_worker *w, struct shm_rec *t, uint64_t *head0, uint64_t *clock,
	 bool *slice_end, struct task_ent *ent)
{
	struct gpud_buf item = {ring_payload(t), 0, h->cfg->max_task_bytes};
	struct gpud_error err;
	err.message[0] = '\0';
	/* What this ring has goes to the worker before the next call when calls are slow,
	 * or when the worker sleeps for want of tasks: the call may block. (Its sleeping
	 * flag's line changes only when it falls asleep or wakes, so looking costs nothing
	 * while it works.) */
	if (w->task_head != *head0 &&
	    (h->flow.check_mask == 0 ||
	     atomic_load_explicit(&w->rep->sleeping, memory_order_relaxed)) &&
	    w->state != HW_STARTING) { /* one starting takes its first batch whole */
		publish_tasks(w);
		*head0 = w->task_head;
	}
	if (!skip_other_ranks(h, &err))
		return FED_STOP;
	/* The ring this call writes into, for the stand-in to leave alone. Only this thread
	 * writes it, and only here: the stand-in feeds other rings meanwhile and must not
	 * move it. */
	h->gate.filling = w;
	gate_enter(&h->gate);
	int rc = h->gen_ops->next(h->gen, &item, &err);
	if (gate_leave(h, &h->gate)) {
		/* The stand-in ran the loop meanwhile (and may have published this ring):
		 * this task goes in, then the loop looks again. */
		*slice_end = true;
		*head0 = atomic_load_explicit(&w->feed->task_head, memory_order_relaxed);
	}
	uint64_t calls = atomic_load_explicit(&h->gate.calls, memory_order_relaxed);
	if ((calls & h->flow.check_mask) == 0) {
		uint64_t now = wait_now_ns();
		/* Calls slower than ~2 us: look at the clock after every one. */
		h->flow.check_mask = now - *clock > 2000u * (h->flow.check_mask + 1) ? 0 : 15;
		if (now - h->flow.start_ns >= FEED_SLICE_NS)
			*slice_end = true;
		*clock = now;
	}
	if (rc == 0) {
		generator_ended(h);
		return FED_STOP;
	}
	if (rc < 0) {
		generator_failed(h, &err);
		return FED_STOP;
	}
	const char *failed = NULL;
	if (rc == GPUD_GENERATOR_TASK_FAILED) { /* ABI 1.7: this task fails, the stream goes on */
		text_clean(err.message);
		failed = err.message;
	}
	const char *name = h->out.names ? h->gen_ops->name(h->gen) : NULL;
	return admit(h, h->flow.next_id++, &item, failed, name, ent);
}

/* Fills `w`'s ring from the requeued tasks first, then from the generator, up to its
 * window and to `upto` tasks held. Returns the tasks given (and those dropped as done
 * before: progress too); *slice_end is set when the pass ran out of time. */
static unsigned feed_one(struct host *h, struct host_worker *w, bool gen_ok, uint64_t *clock,
			 bool *slice_end, uint32_t upto)
{
	const struct cfg *c = h->cfg;
	uint64_t head0 = atomic_load_explicit(&w->feed->task_head, memory_order_relaxed);
	unsigned n = 0;
	uint32_t limit = upto < w->window ? upto : w->window;

	while (h->flow.in_flight < c->queue_size && tasks_held(w) < limit &&
	       tasks_may_hold(w, false)) {
		/* Tasks to run again wait for a worker that is set up (a task taken back
		 * from one still starting is not given to another such). */
		bool rq = tasks_requeued_for(h, w) && requeued_may_run(h) && w->state == HW_READY;
		/* A task that runs alone (tasks.h) waits for a worker that holds nothing,
		 * and the generator's tasks wait for it, so that one comes free. */
		if (__builtin_expect(tasks_requeued_alone(h), 0) && requeued_may_run(h) &&
		    (!rq || tasks_held(w)))
			break;
		if (!rq && (h->flow.done || h->ctl.abort || !gen_ok))
			break;
		/* With ordered output, queue_size also bounds the tasks from the oldest
		 * undelivered one on, and so the outcomes held back. Tasks to run again are
		 * inside that span already. */
		if (!rq && h->out.held && h->flow.next_id - h->out.next_deliver >= c->queue_size)
			break;
		struct shm_rec *t =
			ring_reserve(&w->tasks, &w->task_head, w->task_free, h->shm.task_need);
		if (!t)
			break;
		struct task_ent ent;
		if (rq) {
			struct requeued *q = tasks_requeued_take(h);
			memcpy(ring_payload(t), q->data, q->t.size);
			ent = q->t;
			free(q);
		} else {
			enum fed f = generate(h, w, t, &head0, clock, slice_end, &ent);
			if (f == FED_STOP)
				break;
			if (f != FED_TASK) {
				n += f == FED_DROPPED;
				if (*slice_end)
					break;
				continue;
			}
		}
		tasks_place(w, t, &ent);
		UI_ADD(h->flow.in_flight, 1);
		n++;
		if (*slice_end || ent.alone)
			break;
	}
	if (w->task_head != head0) {
		if (__builtin_expect(!h->startup.first_window_ns, 0))
			h->startup.first_window_ns = wait_now_ns();
		/* A worker still starting is handed its tasks when it is ready
		 * (dispatch_first_window): until then they may be taken back. */
		if (__builtin_expect(w->state != HW_STARTING, 1))
			publish_tasks(w);
	}
	return n;
}

/* Tasks written for workers still starting go back to the queue when a set-up worker
 * has nothing to run: a setup that takes long (or hangs) holds back no task. They were
 * never published, so the worker cannot have seen them (workers/lifecycle.c
 * lifecycle_take_back moves its ring back to what it was handed). */
static void take_back_from_starting(struct host *h, unsigned lo, unsigned cnt, bool gen_ok)
{
	for (unsigned i = 0; i < cnt; i++) {
		struct host_worker *w = &h->pool.w[lo + i];
		/* The stand-in leaves alone the ring the stuck call writes into. */
		if (w->state == HW_STARTING && tasks_held(w) && (gen_ok || w != h->gate.filling))
			lifecycle_take_back(h, w);
	}
}

/* Whether the generator may feed w: a worker that runs, or one still starting (its
 * rings exist from its spawn: its first tasks are written while it sets up, and taken
 * back without blame if its setup fails, workers/lifecycle.c). */
static inline bool feedable(const struct host *h, const struct host_worker *w, bool gen_ok)
{
	/* The stand-in leaves alone the ring the stuck call writes into. */
	return (w->state == HW_READY || w->state == HW_STARTING) &&
	       (gen_ok || w != h->gate.filling);
}

static unsigned feed(struct host *h, bool gen_ok)
{
	unsigned n = 0;
	bool slice_end = false;
	uint64_t clock = h->flow.start_ns = wait_now_ns();
	/* The generator feeds the first stage: the GPU workers, or the first CPU stage. */
	unsigned lo = 0, cnt = h->pool.n;
	if (__builtin_expect(h->pool.stages != NULL, 0)) {
		lo = h->pool.stages[0].first;
		cnt = h->pool.stages[0].n;
	}
	/* First, round the workers, one batch (a task without batches) to each that holds
	 * less, so that no worker's first or next batch waits behind another's whole
	 * window (two workers start together); then every window filled. */
	uint32_t unit = h->cfg->batch_size > 1 && !h->pool.stages ? h->cfg->batch_size : 1;
	for (unsigned i = 0; i < cnt && !slice_end; i++) {
		struct host_worker *w = &h->pool.w[lo + (h->flow.rr + i) % cnt];
		if (tasks_held(w) < unit && feedable(h, w, gen_ok))
			n += feed_one(h, w, gen_ok, &clock, &slice_end, unit);
	}
	bool starving = false;
	for (unsigned i = 0; i < cnt && !slice_end; i++) {
		struct host_worker *w = &h->pool.w[lo + (h->flow.rr + i) % cnt];
		if (feedable(h, w, gen_ok)) {
			n += feed_one(h, w, gen_ok, &clock, &slice_end, UINT32_MAX);
			starving |= w->state == HW_READY && !tasks_held(w);
		}
	}
	if (__builtin_expect(starving, 0))
		take_back_from_starting(h, lo, cnt, gen_ok);
	h->flow.rr++;
	return n;
}

/* The host's wait condition: a result, a task start to report, a state to notice. */
static bool host_ready(void *ctx)
{
	struct host *h = ctx;
	/* host_interrupts counts: only one not yet seen is news (once it was nonzero the
	 * loop spun through the whole drain). */
	if (host_sigchld || host_interrupts != h->ctl.interrupts_seen || host_sigtstp ||
	    host_sigcont)
		return true;
	/* Standing in: the stuck generator call has returned. */
	if (atomic_load_explicit(&h->gate.taken, memory_order_relaxed) &&
	    !atomic_load_explicit(&h->gate.in_call, memory_order_relaxed))
		return true;
	bool starts = h->out.mask & GPUD_EVENT_BIT(GPUD_TASK_START);
	for (unsigned i = 0; i < h->pool.n; i++) {
		struct host_worker *w = &h->pool.w[i];
		if (w->state == HW_GONE || !w->rep)
			continue;
		/* A blocked stage worker's result is news only once room is made
		 * downstream, which a result of the next stage brings. */
		if (atomic_load_explicit(&w->rep->result_head, memory_order_relaxed) !=
			    w->result_tail &&
		    !w->blocked)
			return true;
		uint32_t s = atomic_load_explicit(&w->rep->state, memory_order_relaxed);
		if (w->state == HW_STARTING && s != WS_SETUP && s != WS_SPAWNED)
			return true;
		if (starts && w->tt_started != w->tt_head && w->stage == h->pool.n_stages) {
			uint64_t pos = w->tt[w->tt_started & w->tt_mask].pos;
			if (pos - w->task_free < reported_tail(w) - w->task_free)
				return true;
		}
	}
	return false;
}

/* Timeouts are looked at whenever the loop would sleep, and at least this often while
 * it is busy. */
#define BUSY_CHECK_NS 2000000u

/* A second interrupt this soon after the first is the same one sent twice (timeout(1)
 * signals its child and then its process group; a launcher may signal the process and
 * its group): only one a person could have sent stops the running tasks at once. */
#define SAME_INTERRUPT_NS 50000000u

void dispatch_signals(struct host *h)
{
	if (host_interrupts != h->ctl.interrupts_seen) {
		bool first = !h->ctl.interrupted;
		h->ctl.interrupts_seen = host_interrupts;
		if (first) {
			ui_say(h, UI_EVENT,
			       "interrupted: finishing the running tasks "
			       "(interrupt again to stop at once)");
			h->ctl.interrupted = true;
			h->ctl.interrupt_ns = wait_now_ns();
			host_abort(h, "interrupted");
		} else if (!h->ctl.killing &&
			   wait_since(wait_now_ns(), h->ctl.interrupt_ns) >= SAME_INTERRUPT_NS) {
			lifecycle_kill_all(h);
		}
	}
	if (host_sigtstp || host_sigcont)
		lifecycle_job_control(h);
}

/* One pass of the loop (and its wait, when it found nothing to do); true when the run
 * is over. gen_ok = false: the stand-in runs it, and the generator is not called. */
bool dispatch_pass(struct host *h, bool gen_ok)
{
	bool starts = h->out.mask & GPUD_EVENT_BIT(GPUD_TASK_START);
	unsigned progress = 0;

	/* What came for a calling-thread sink while the stand-in ran the loop. */
	if (gen_ok && h->out.waiting)
		events_deliver_waiting(h);
	dispatch_signals(h);
	if (host_sigchld)
		lifecycle_reap(h);
	for (unsigned i = 0; i < h->pool.n; i++) {
		struct host_worker *w = &h->pool.w[i];
		if (w->exited) {
			/* Its last results first: they are outcomes, not lost tasks. */
			dispatch_drain(h, w);
			lifecycle_exited(h, w);
		} else {
			if (w->state == HW_STARTING)
				lifecycle_poll(h, w);
			if (w->state == HW_READY || w->state == HW_STOPPING)
				progress += dispatch_drain(h, w);
			if (starts && w->state == HW_READY && w->rep &&
			    w->stage == h->pool.n_stages)
				progress += emit_starts(h, w);
			/* Given tasks by a generator call that returned after the worker
			 * had left for good. */
			if (w->state == HW_GONE && w->pid <= 0 && tasks_held(w))
				lifecycle_take_back(h, w);
		}
	}
	if (__builtin_expect(h->pool.stages != NULL, 0)) {
		stages_check_alive(h);
		if (h->rq.later && !h->ctl.stopping && !h->ctl.killing && requeued_may_run(h))
			progress += stages_feed_retries(h);
	}
	if (!h->ctl.stopping && !h->ctl.killing)
		progress += feed(h, gen_ok);
	if (__builtin_expect(h->flow.done && !h->flow.drained_told, 0))
		tell_drained(h);
	if (__builtin_expect(h->flow.done && h->pool.stages != NULL, 0) &&
	    !h->pool.stages[h->pool.n_stages].drained_told)
		stages_tell_drained(h);

	if (tasks_requeued_any(h) && !requeued_may_run(h))
		tasks_drop_requeued(h);

	if (!h->ctl.stopping && h->flow.in_flight == 0 && !tasks_requeued_any(h) &&
	    (h->flow.done || h->ctl.abort)) {
		/* A warm pool's run: every task has its outcome, the workers hold none and
		 * stay for the next run (run.c). */
		if (h->ctl.keep && !h->ctl.killing) {
			h->ctl.parked = true;
			stages_publish(h, 0);
			return true;
		}
		lifecycle_stop_all(h);
	}
	if (lifecycle_live(h) == 0) {
		stages_publish(h, 0); /* the final figures */
		if (tasks_requeued_any(h) || h->flow.in_flight ||
		    (!h->ctl.stopping && !h->flow.done)) {
			tasks_drop_requeued(h);
			host_abort(h, h->pool.ever_ready
					      ? "no worker left to run the remaining tasks"
					      : "no worker could be set up");
		}
		return true;
	}
	uint64_t now = wait_now_ns();
	stages_publish(h, now);
	if (progress && wait_since(now, h->ctl.last_check_ns) < BUSY_CHECK_NS)
		return false;
	uint64_t deadline = lifecycle_timeouts(h, now);
	if (!progress)
		wait_until(h->shm.bell, host_ready, h, deadline);
	return false;
}

int dispatch(struct host *h, int (*finish)(struct host *h))
{
	struct standin_loop loop = {
		.pass = dispatch_pass, .signals = dispatch_signals, .finish = finish};
	h->ctl.last_check_ns = wait_now_ns();
	if (standin_start(h, &loop) < 0)
		ui_say(h, UI_EVENT,
		       "cannot start the loop's stand-in thread: a generator call that "
		       "blocks holds up the run");
	while (!dispatch_pass(h, true))
		;
	/* The stand-in goes on watching the sink's calls through the end of the run (the
	 * last held outcomes, the close): finish_run stops it. */
	return h->ctl.abort ? 3 : 0;
}
