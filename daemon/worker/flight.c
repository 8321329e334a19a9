/* SPDX-License-Identifier: MIT */
/* Tasks in flight (flight.h): the loop of gpud_worker_submit and gpud_worker_poll. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "canary.h"
#include "worker.h"

/* How long a poll may wait: with room for more tasks, briefly, so new ones go in soon
 * after they arrive; otherwise only a finished task can change anything. */
#define FLY_POLL_MS 1
#define FLY_WAIT_MS 100

/* The report for what runs now (after each submit and each finish). */
static void report_flight(struct worker *w)
{
	if (w->fl.running) {
		uint32_t i = (uint32_t)(w->fl.first_running % w->fl.held);
		const struct flight *f = &w->fl.fly[i];
		atomic_store_explicit(&w->rep->cur_task, w->t[i].id, memory_order_relaxed);
		atomic_store_explicit(&w->rep->busy_since_ns, f->since, memory_order_relaxed);
		atomic_store_explicit(&w->rep->run_from, f->from, memory_order_relaxed);
		atomic_store_explicit(&w->rep->timed_to, f->to, memory_order_relaxed);
	} else {
		atomic_store_explicit(&w->rep->busy_since_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&w->rep->run_from, w->task_tail, memory_order_relaxed);
		atomic_store_explicit(&w->rep->timed_to, 0, memory_order_relaxed);
	}
	atomic_store_explicit(&w->rep->task_tail, w->task_tail, memory_order_release);
}

/* A result slot for the next task without waiting, or NULL when the ring is full (or,
 * with nothing held, after waiting for room). */
static struct shm_rec *reserve_flight(struct worker *w, uint64_t *head)
{
	if (w->fl.next == w->fl.oldest)
		return loop_reserve_result(w, head);
	struct shm_rec *r = ring_reserve(&w->results, head, w->result_tail, w->result_need);
	if (r)
		return r;
	w->result_tail = atomic_load_explicit(&w->feed->result_tail, memory_order_acquire);
	return ring_reserve(&w->results, head, w->result_tail, w->result_need);
}

/* Task `i` finished (rc: submit's or poll's verdict): its result written in its slot. */
static void land(struct worker *w, uint32_t i, int rc, uint64_t now)
{
	bool ended = w->tainted || w->fatal[0];
	w->fl.fly[i].state = FLY_DONE;
	w->fl.running--;
	loop_finish_result(w, i, w->out_pos[i], rc, (double)(now - w->fl.fly[i].since) * 1e-9, true,
			   0);
	if (!ended && (w->tainted || w->fatal[0]))
		w->fl.culprit = i; /* the first: nothing more is submitted after it */
}

/* Submits task record `t` (at w->task_tail); false when no result slot is free now. */
static bool submit_one(struct worker *w, struct shm_rec *t, uint64_t now)
{
	uint32_t i = (uint32_t)(w->fl.next % w->fl.held);
	uint64_t head = w->fl.reserved_head;
	struct shm_rec *r = reserve_flight(w, &head);
	if (!r)
		return false;
	uint32_t cap = w->hdr->max_result_bytes;
	w->in[i] = t;
	w->out[i] = r;
	w->out_pos[i] = head;
	w->fl.reserved_head = head + w->result_need;
	arm(r, cap);
	w->err[i].message[0] = '\0';
	w->t[i] = (struct gpud_task){
		.id = t->task_id,
		.input = ring_payload(t),
		.input_size = t->size,
		.result = {.data = ring_payload(r), .size = 0, .capacity = cap},
		.error = &w->err[i],
		.attempt = (int)t->attempt,
	};
	w->fl.fly[i] = (struct flight){.from = w->task_tail,
				       .to = w->task_tail + ring_span(t->size),
				       .since = now,
				       .state = FLY_RUNNING};
	w->task_tail = w->fl.fly[i].to;
	if (!w->fl.running)
		w->fl.first_running = w->fl.next;
	w->fl.next++;
	w->fl.running++;
	report_flight(w);
	int rc = w->plugin.worker.submit(w->state, &w->t[i]);
	leave_if_forked();
	times_count_call(&w->tm, 1, &w->t[i]);
	if (rc != 0)
		land(w, i, rc, wait_now_ns());
	return true;
}

/* Leaves after a poll that failed, or that handed back what is not in flight: the
 * finished results go to the host first; the rest fail or run again (a crash). The
 * engine as a whole failed: the report names every task still held as the call. */
static _Noreturn void flight_broken(struct worker *w, const char *msg, uint64_t now)
{
	atomic_store_explicit(&w->rep->timed_to, 0, memory_order_relaxed);
	loop_publish(w, now);
	snprintf(w->rep->message, sizeof w->rep->message, "%s", msg);
	worker_finish(WORKER_EXIT_FATAL);
}

/* A task said this process is beyond repair (gpud_task_fatal) or wrote before its
 * result buffer: the finished results before it go to the host, and the report names
 * that task alone as the call (run_from..timed_to, written again: a write before a
 * buffer may have reached the report block), as after a process() call. The host then
 * fails it (or gives it a strike), and the tasks held beside it, not its fault, run
 * again; when its own result was handed over, it is the host's already. */
static _Noreturn void flight_culprit(struct worker *w, uint64_t now)
{
	const struct flight *f = &w->fl.fly[w->fl.culprit];
	atomic_store_explicit(&w->rep->cur_task, w->t[w->fl.culprit].id, memory_order_relaxed);
	atomic_store_explicit(&w->rep->busy_since_ns, f->since ? f->since : 1,
			      memory_order_relaxed);
	atomic_store_explicit(&w->rep->run_from, f->from, memory_order_relaxed);
	atomic_store_explicit(&w->rep->timed_to, f->to, memory_order_relaxed);
	atomic_store_explicit(&w->rep->task_tail, w->task_tail, memory_order_release);
	loop_publish(w, now);
	if (w->tainted)
		worker_finish(WORKER_EXIT_TAINTED);
	snprintf(w->rep->message, sizeof w->rep->message, "%s", w->fatal);
	worker_finish(WORKER_EXIT_FATAL);
}

/* Publishes the finished prefix (in submit order) and reports what still runs. */
static void flight_settle(struct worker *w, uint64_t now)
{
	while (w->fl.oldest != w->fl.next &&
	       w->fl.fly[w->fl.oldest % w->fl.held].state == FLY_DONE) {
		uint32_t i = (uint32_t)(w->fl.oldest % w->fl.held);
		w->fl.fly[i].state = FLY_FREE;
		w->result_head = w->out_pos[i] + w->result_need;
		w->fl.oldest++;
		w->pending++;
	}
	if (w->fl.first_running < w->fl.oldest)
		w->fl.first_running = w->fl.oldest;
	while (w->fl.running && w->fl.fly[w->fl.first_running % w->fl.held].state != FLY_RUNNING)
		w->fl.first_running++;
	atomic_store_explicit(&w->committed, w->result_head, memory_order_release);
	report_flight(w);
	if (w->tainted || w->fatal[0])
		flight_culprit(w, now);
	if (w->pending >= PUBLISH_BURST || (w->pending && now - w->published_ns >= PUBLISH_NS))
		loop_publish(w, now);
}

/* One poll of the plugin, its finished tasks landed and settled. */
static void poll_flight(struct worker *w, int timeout_ms)
{
	struct gpud_error err = {{0}};
	if (timeout_ms && w->pending)
		loop_publish(w, wait_now_ns()); /* nothing for the host waits behind the poll */
	/* a poll that may block is measured every time: it is a long call */
	times_user_begins(&w->tm, timeout_ms ? CPU_EACH_NS : 0);
	int n = w->plugin.worker.poll(w->state, w->fl.done, w->fl.flight, timeout_ms, &err);
	leave_if_forked();
	uint64_t now = times_charge_now(&w->tm, PH_USER);
	if (n < 0) {
		char msg[SHM_MSG_MAX + 32];
		if (err.message[0])
			snprintf(msg, sizeof msg, "gpud_worker_poll failed: %s", err.message);
		else
			snprintf(msg, sizeof msg,
				 "gpud_worker_poll failed: it returned %d without a message", n);
		flight_broken(w, msg, now);
	}
	if ((uint32_t)n > w->fl.flight)
		flight_broken(w, "gpud_worker_poll returned more tasks than it was given room for",
			      now);
	for (int k = 0; k < n; k++) {
		/* The plugin's pointers: each must be an entry of ours that is running. */
		uintptr_t p = (uintptr_t)w->fl.done[k], base = (uintptr_t)w->t;
		uintptr_t off = p - base;
		uint32_t i = (uint32_t)(off / sizeof *w->t);
		if (p < base || off % sizeof *w->t || i >= w->fl.held ||
		    w->fl.fly[i].state != FLY_RUNNING)
			flight_broken(w,
				      "gpud_worker_poll returned a task that is not in flight "
				      "(not one submit was given, or one it returned before)",
				      now);
		land(w, i, w->t[i].failed ? -1 : 0, now);
	}
	flight_settle(w, now);
}

void flight_run(struct worker *w)
{
	uint64_t now = wait_now_ns();
	w->fl.reserved_head = w->result_head;
	for (;;) {
		/* What the ring holds goes in, up to max_in_flight running. */
		bool room = true;
		while (w->fl.running < w->fl.flight && w->fl.next - w->fl.oldest < w->fl.held) {
			struct shm_rec *t = ring_peek(&w->tasks, &w->task_tail, w->task_head);
			if (!t) {
				w->task_head = atomic_load_explicit(&w->feed->task_head,
								    memory_order_acquire);
				t = ring_peek(&w->tasks, &w->task_tail, w->task_head);
			}
			if (!t)
				break;
			if (!submit_one(w, t, now)) {
				room = false;
				break;
			}
			now = times_charge_now(&w->tm, PH_USER);
			if (w->tainted || w->fatal[0])
				break; /* nothing more goes to this process (flight_settle) */
		}
		flight_settle(w, now); /* submit may have failed some at once */
		if (w->fl.oldest == w->fl.next) {
			/* Idle: wait for a task, or the end. */
			if (!loop_next_task(w, &now))
				break;
			now = wait_now_ns();
			continue;
		}
		bool more = room && w->fl.running < w->fl.flight &&
			    w->fl.next - w->fl.oldest < w->fl.held &&
			    !atomic_load_explicit(&w->feed->stop, memory_order_acquire);
		poll_flight(w, more ? FLY_POLL_MS : FLY_WAIT_MS);
		now = wait_now_ns();
	}
	if (w->pending)
		loop_publish(w, now);
}
