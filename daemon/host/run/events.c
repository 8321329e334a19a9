/* SPDX-License-Identifier: MIT */
/* Outcomes: what the sink hears, what the stats count, what runs again. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/events.h"
#include "util/names.h"
#include "util/abort.h"
#include "job/stagecfg.h"
#include "record/failures.h"
#include "view/ui.h"
#include "util/notes.h"

static bool is_outcome(enum gpud_event_kind kind)
{
	return kind == GPUD_TASK_OK || kind == GPUD_TASK_ERROR || kind == GPUD_TASK_TIMEOUT;
}

/* The outcome of `ev` reached its end (the sink took it, or does not want its kind):
 * the journal records it now, and only now, so that a run that ends before the sink
 * took an outcome (a sink that failed, or whose call never returned) runs that task
 * again on --resume. */
static void taken(struct host *h, const struct gpud_event *ev)
{
	if (h->out.names)
		names_drop(&h->out.task_names, ev->task_id);
	if (h->journal.fd < 0)
		return;
	if (ev->kind == GPUD_TASK_OK)
		journal_mark_ok(&h->journal, ev->task_id);
	else
		journal_mark(&h->journal, ev->task_id, ev->kind == GPUD_TASK_TIMEOUT ? 2 : 1);
}

/* Marks the gate for a sink call about to be made from the loop's thread (kind, task
 * and attempt say which event, for the stand-in's notes and the end of a stuck run),
 * and enters it: a call that does not return leaves the run in control (standin.h).
 * false when the stand-in runs the loop (a generator call is stuck): it calls the sink
 * itself, unwatched, and the gate is not entered. */
static bool sink_gate_enter(struct host *h, int kind, uint64_t task, int attempt)
{
	struct gate *g = &h->gate;
	if (atomic_load_explicit(&g->taken, memory_order_relaxed) || !h->standin_running)
		return false;
	g->sink_kind = kind;
	g->sink_task = task;
	g->sink_attempt = attempt;
	atomic_store_explicit(&g->sink, 1, memory_order_relaxed);
	gate_enter(g);
	return true;
}

static void sink_gate_leave(struct host *h)
{
	gate_leave(h, &h->gate);
	atomic_store_explicit(&h->gate.sink, 0, memory_order_relaxed);
}

static int sink_call(struct host *h, const struct gpud_event *ev, struct gpud_error *err)
{
	bool gated = sink_gate_enter(h, ev->kind, ev->task_id, ev->attempt);
	struct gpud_event named;
	if (h->out.names && ev->task_id != UINT64_MAX) {
		/* (ABI 1.9) Its name, looked up at the call: a held event's copy has none. */
		named = *ev;
		named.name = names_get(&h->out.task_names, ev->task_id);
		ev = &named;
	}
	int rc = h->sink_ops->event(h->sink, ev, err);
	if (gated)
		sink_gate_leave(h);
	return rc;
}

int events_close_sink(struct host *h, const struct gpud_run_end *end, struct gpud_error *err)
{
	bool gated = sink_gate_enter(h, GATE_SINK_CLOSE, UINT64_MAX, 0);
	int rc = h->sink_ops->finish ? h->sink_ops->finish(h->sink, &h->stats, end, err)
				     : h->sink_ops->close(h->sink, &h->stats, err);
	if (gated)
		sink_gate_leave(h);
	return rc;
}

static struct held_outcome *hold(const struct gpud_event *ev);
static void uncount(struct host *h, int kind);

/* The stand-in runs the loop (the loop's thread is inside a generator call). */
static bool standing_in(const struct host *h)
{
	return h->standin_running && atomic_load_explicit(&h->gate.taken, memory_order_acquire);
}

/* A result the sink refused (GPUD_SINK_TASK_FAILED, ABI 1.6): the task fails with the
 * sink's message, as if its worker had failed it for good (no retry), and the journal
 * records the error. */
static void refused(struct host *h, const struct gpud_event *ev, const char *message)
{
	char msg[sizeof((struct gpud_error *)0)->message + 16];
	snprintf(msg, sizeof msg, "sink: %s", message);
	if (h->out.names)
		names_drop(&h->out.task_names, ev->task_id);
	if (h->stats.ok)
		UI_SET(h->stats.ok, h->stats.ok - 1);
	UI_ADD(h->stats.failed, 1);
	const struct host_worker *w = NULL;
	if (ev->worker_id >= 0 && (unsigned)ev->worker_id < h->pool.n)
		w = &h->pool.w[ev->worker_id];
	failures_add(h, ev->task_id, (unsigned)ev->attempt, w, false, msg, false);
	ui_say(h, UI_FAILURE, "task %llu failed: %s", (unsigned long long)ev->task_id, msg);
	if (h->journal.fd >= 0)
		journal_mark(&h->journal, ev->task_id, 1);
}

/* An event the sink wants, given to it now. */
static void deliver_now(struct host *h, const struct gpud_event *ev)
{
	bool outcome = is_outcome(ev->kind);
	if (!h->out.open) {
		/* The sink failed earlier: this outcome cannot be written. */
		if (outcome)
			h->out.lost++;
		return;
	}
	struct gpud_error err;
	err.message[0] = '\0';
	int rc = sink_call(h, ev, &err);
	if (rc == GPUD_SINK_TASK_FAILED && ev->kind == GPUD_TASK_OK && h->sink_ops->fail_task) {
		refused(h, ev, err.message[0] ? err.message : "the sink refused the result");
	} else if (rc != 0) {
		if (outcome && h->out.names)
			names_drop(&h->out.task_names, ev->task_id);
		h->out.open = false;
		if (outcome)
			h->out.lost++;
		host_abort(h, "the sink failed: %s",
			   err.message[0] ? err.message : "gpud_sink_event returned an error");
	} else if (outcome) {
		taken(h, ev);
	}
}

void events_deliver(struct host *h, const struct gpud_event *ev)
{
	if (!(h->out.mask & GPUD_EVENT_BIT(ev->kind))) {
		if (is_outcome(ev->kind))
			taken(h, ev);
		return;
	}
	if (h->out.calling_thread) {
		if (standing_in(h)) {
			/* Not journaled until the sink took it on the calling thread. */
			struct held_outcome *o = hold(ev);
			o->next = NULL;
			if (h->out.waiting)
				h->out.waiting_last->next = o;
			else
				h->out.waiting = o;
			h->out.waiting_last = o;
			return;
		}
		if (h->out.waiting)
			events_deliver_waiting(h);
	}
	deliver_now(h, ev);
}

void events_deliver_waiting(struct host *h)
{
	struct held_outcome *o;
	if (standing_in(h))
		return;
	while ((o = h->out.waiting)) {
		h->out.waiting = o->next;
		deliver_now(h, &o->ev);
		free(o);
	}
}

void events_drop_waiting(struct host *h)
{
	struct held_outcome *o;
	while ((o = h->out.waiting)) {
		h->out.waiting = o->next;
		if (is_outcome(o->ev.kind)) {
			uncount(h, o->ev.kind);
			failures_not_run(h, o->ev.task_id, (unsigned)o->ev.attempt);
		}
		free(o);
	}
}

static struct held_outcome *hold(const struct gpud_event *ev)
{
	size_t msg = ev->message ? strlen(ev->message) + 1 : 0;
	struct held_outcome *o = malloc(sizeof *o + ev->input_size + ev->result_size + msg);
	if (!o) {
		perror("gpud: cannot hold an outcome for ordered delivery");
		abort();
	}
	o->ev = *ev;
	uint8_t *p = o->data;
	if (ev->input_size)
		memcpy(p, ev->input, ev->input_size);
	o->ev.input = ev->input ? p : NULL;
	p += ev->input_size;
	if (ev->result_size)
		memcpy(p, ev->result, ev->result_size);
	o->ev.result = ev->result ? p : NULL;
	p += ev->result_size;
	if (msg)
		memcpy(p, ev->message, msg);
	o->ev.message = msg ? (const char *)p : NULL;
	return o;
}

/* A held slot for a task an earlier run finished: nothing to deliver, only to pass. */
static struct held_outcome skipped;

static void deliver_held(struct host *h)
{
	unsigned q = h->cfg->queue_size;
	struct held_outcome *o;
	while ((o = h->out.held[h->out.next_deliver % q])) {
		h->out.held[h->out.next_deliver % q] = NULL;
		if (o != &skipped) {
			events_deliver(h, &o->ev);
			free(o);
		}
		h->out.next_deliver++;
	}
}

void events_deliver_outcome(struct host *h, const struct gpud_event *ev)
{
	unsigned q = h->cfg->queue_size;
	if (!h->out.held) {
		events_deliver(h, ev);
		return;
	}
	if (ev->task_id != h->out.next_deliver) {
		h->out.held[ev->task_id % q] = hold(ev);
		return;
	}
	events_deliver(h, ev);
	h->out.next_deliver++;
	deliver_held(h);
}

void events_skip(struct host *h, uint64_t id)
{
	UI_ADD(h->resume.skipped, 1);
	if (!h->out.held)
		return;
	if (id != h->out.next_deliver) {
		h->out.held[id % h->cfg->queue_size] = &skipped;
		return;
	}
	h->out.next_deliver++;
	deliver_held(h);
}

void events_flush_held(struct host *h)
{
	unsigned q = h->cfg->queue_size;
	if (!h->out.held)
		return;
	for (; h->out.next_deliver < h->flow.next_id; h->out.next_deliver++) {
		struct held_outcome *o = h->out.held[h->out.next_deliver % q];
		if (o) {
			h->out.held[h->out.next_deliver % q] = NULL;
			if (o != &skipped) {
				events_deliver(h, &o->ev);
				free(o);
			}
		}
	}
}

void events_worker(struct host *h, enum gpud_event_kind kind, const struct host_worker *w,
		   const char *message)
{
	struct gpud_event ev = {
		.kind = kind,
		.task_id = UINT64_MAX,
		.worker_id = w->index,
		.gpu_id = w->gpu_id,
		.message = message,
	};
	events_deliver(h, &ev);
}

/* Whether a failure of this cause runs again, attempts allowing. */
static bool retried(const struct host *h, enum cause cause)
{
	switch (cause) {
	case CAUSE_ERROR:
		return h->cfg->retry_on & CFG_RETRY_ERROR;
	case CAUSE_TIMEOUT:
		return h->cfg->retry_on & CFG_RETRY_TIMEOUT;
	case CAUSE_CRASH:
		return h->cfg->retry_on & CFG_RETRY_CRASH;
	default:
		return false;
	}
}

/* The first outcome of the run: when, and the worker's own start (host.h startup). */
static void events_first_result(struct host *h, const struct host_worker *w)
{
	h->startup.first_result_ns = wait_now_ns();
	h->startup.first_worker = w->index;
	h->startup.spawned_ns = w->spawned_ns;
	h->startup.ready_ns = w->ready_ns;
}

void events_outcome(struct host *h, const struct host_worker *w, const struct task_ent *t,
		    const void *input, enum cause cause, const void *result, size_t result_size,
		    const char *message, double seconds)
{
	enum gpud_event_kind kind = cause == CAUSE_OK        ? GPUD_TASK_OK
				    : cause == CAUSE_TIMEOUT ? GPUD_TASK_TIMEOUT
							     : GPUD_TASK_ERROR;
	if (__builtin_expect(!h->startup.first_result_ns, 0) && w)
		events_first_result(h, w);
	/* A CPU stage's failure says which stage (failures list, notes, the sink). */
	char staged[SHM_MSG_MAX + 256];
	if (__builtin_expect(w && w->stage < h->pool.n_stages, 0) && message) {
		snprintf(staged, sizeof staged, "stage %s: %s", h->pool.stages[w->stage].name,
			 message);
		message = staged;
	}
	if (kind != GPUD_TASK_OK && t->attempt < stagecfg_max_retries(h->cfg, w->stage) &&
	    !h->ctl.killing && retried(h, cause)) {
		failures_add(h, t->id, t->attempt, w, kind == GPUD_TASK_TIMEOUT, message, true);
		struct task_ent again = *t;
		again.attempt++;
		UI_ADD(h->stats.retried, 1);
		tasks_requeue(h, &again, input, w ? w->index : -1, w ? w->stage : 0);
		return;
	}
	switch (kind) {
	case GPUD_TASK_OK:
		UI_ADD(h->stats.ok, 1);
		break;
	case GPUD_TASK_TIMEOUT:
		UI_ADD(h->stats.timed_out, 1);
		break;
	default:
		UI_ADD(h->stats.failed, 1);
		break;
	}
	if (kind != GPUD_TASK_OK) {
		failures_add(h, t->id, t->attempt, w, kind == GPUD_TASK_TIMEOUT, message, false);
		if (w)
			ui_say(h, UI_FAILURE, "task %llu %s on worker %d (%s): %s",
			       (unsigned long long)t->id,
			       kind == GPUD_TASK_TIMEOUT ? "timed out" : "failed", w->index,
			       WHERE_OF(h, w), message ? message : "");
		else
			ui_say(h, UI_FAILURE, "task %llu failed: %s", (unsigned long long)t->id,
			       message ? message : "");
	}
	/* A sink that does not want this kind (the null sink wants none): nothing to
	 * build, unless ordered delivery must account for it; the journal has it now. */
	if (!(h->out.mask & GPUD_EVENT_BIT(kind)) && !h->out.held) {
		taken(h, &(struct gpud_event){.kind = kind, .task_id = t->id});
		return;
	}
	struct gpud_event ev = {
		.kind = kind,
		.task_id = t->id,
		.worker_id = w ? w->index : -1,
		.gpu_id = w ? w->gpu_id : -1,
		.attempt = (int)t->attempt,
		.input = h->out.no_input ? NULL : input,
		.input_size = input && !h->out.no_input ? t->size : 0,
		.result = result,
		.result_size = result_size,
		.message = message,
		.seconds = seconds,
	};
	events_deliver_outcome(h, &ev);
}

/* An outcome the sink never took: it is not counted, so the task counts as not run (and
 * runs again on --resume: the journal has no record of it). */
static void uncount(struct host *h, int kind)
{
	uint64_t *n = kind == GPUD_TASK_OK        ? &h->stats.ok
		      : kind == GPUD_TASK_TIMEOUT ? &h->stats.timed_out
						  : &h->stats.failed;
	if (*n)
		UI_SET(*n, *n - 1);
	h->out.lost++;
}

/* Whether a worker still holds this run of the task (failures_not_run_held lists it). */
static bool held_by_a_worker(const struct host *h, uint64_t id, int attempt)
{
	for (unsigned i = 0; i < h->pool.n; i++) {
		const struct host_worker *w = &h->pool.w[i];
		for (uint64_t k = w->tt_tail; w->tt && k != w->tt_head; k++)
			if (w->tt[k & w->tt_mask].id == id &&
			    (int)w->tt[k & w->tt_mask].attempt == attempt)
				return true;
	}
	return false;
}

void events_undelivered(struct host *h)
{
	const struct gate *g = &h->gate;
	if (is_outcome(g->sink_kind)) {
		uncount(h, g->sink_kind);
		if (!held_by_a_worker(h, g->sink_task, g->sink_attempt))
			failures_not_run(h, g->sink_task, (unsigned)g->sink_attempt);
	}
	if (!h->out.held)
		return;
	unsigned q = h->cfg->queue_size;
	for (uint64_t id = h->out.next_deliver; id < h->flow.next_id; id++) {
		struct held_outcome *o = h->out.held[id % q];
		if (!o || o == &skipped)
			continue;
		h->out.held[id % q] = NULL;
		if (is_outcome(o->ev.kind) && h->out.mask & GPUD_EVENT_BIT(o->ev.kind)) {
			uncount(h, o->ev.kind);
			failures_not_run(h, o->ev.task_id, (unsigned)o->ev.attempt);
		} else {
			taken(h, &o->ev); /* nothing the sink wants: done */
		}
		free(o);
	}
}
