/* SPDX-License-Identifier: MIT */
/* Outcomes: what the sink hears, what the stats count, what runs again. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "events.h"
#include "failures.h"
#include "ui.h"

void host_abort(struct host *h, const char *fmt, ...)
{
	if (h->abort)
		return; /* the first reason is the one to tell */
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(h->abort_msg, sizeof h->abort_msg, fmt, ap);
	va_end(ap);
	h->abort = 3;
}

void events_deliver(struct host *h, const struct gpud_event *ev)
{
	if (!(h->sink_mask & GPUD_EVENT_BIT(ev->kind)))
		return;
	if (!h->sink_open) {
		/* The sink failed earlier: this outcome cannot be written. */
		if (ev->kind == GPUD_TASK_OK || ev->kind == GPUD_TASK_ERROR ||
		    ev->kind == GPUD_TASK_TIMEOUT)
			h->sink_lost++;
		return;
	}
	struct gpud_error err;
	err.message[0] = '\0';
	if (h->sink_event(h->sink, ev, &err) != 0) {
		h->sink_open = false;
		if (ev->kind == GPUD_TASK_OK || ev->kind == GPUD_TASK_ERROR ||
		    ev->kind == GPUD_TASK_TIMEOUT)
			h->sink_lost++;
		host_abort(h, "the sink failed: %s",
			   err.message[0] ? err.message : "gpud_sink_event returned an error");
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
	while ((o = h->held[h->next_deliver % q])) {
		h->held[h->next_deliver % q] = NULL;
		if (o != &skipped) {
			events_deliver(h, &o->ev);
			free(o);
		}
		h->next_deliver++;
	}
}

void events_deliver_outcome(struct host *h, const struct gpud_event *ev)
{
	unsigned q = h->cfg->queue_size;
	if (!h->held) {
		events_deliver(h, ev);
		return;
	}
	if (ev->task_id != h->next_deliver) {
		h->held[ev->task_id % q] = hold(ev);
		return;
	}
	events_deliver(h, ev);
	h->next_deliver++;
	deliver_held(h);
}

void events_skip(struct host *h, uint64_t id)
{
	h->resumed++;
	if (!h->held)
		return;
	if (id != h->next_deliver) {
		h->held[id % h->cfg->queue_size] = &skipped;
		return;
	}
	h->next_deliver++;
	deliver_held(h);
}

void events_flush_held(struct host *h)
{
	unsigned q = h->cfg->queue_size;
	if (!h->held)
		return;
	for (; h->next_deliver < h->next_id; h->next_deliver++) {
		struct held_outcome *o = h->held[h->next_deliver % q];
		if (o) {
			h->held[h->next_deliver % q] = NULL;
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

void events_outcome(struct host *h, const struct host_worker *w, const struct task_ent *t,
		    const void *input, enum cause cause, const void *result,
		    size_t result_size, const char *message, double seconds)
{
	enum gpud_event_kind kind = cause == CAUSE_OK	     ? GPUD_TASK_OK
				    : cause == CAUSE_TIMEOUT ? GPUD_TASK_TIMEOUT
							     : GPUD_TASK_ERROR;
	if (kind != GPUD_TASK_OK && t->attempt < h->cfg->max_retries && !h->killing &&
	    retried(h, cause)) {
		failures_add(h, t->id, t->attempt, w, kind == GPUD_TASK_TIMEOUT, message, true);
		struct task_ent again = *t;
		again.attempt++;
		h->stats.retried++;
		tasks_requeue(h, &again, input, w ? w->index : -1);
		return;
	}
	if (h->journal.fd >= 0) {
		if (kind == GPUD_TASK_OK)
			journal_mark_ok(&h->journal, t->id);
		else
			journal_mark(&h->journal, t->id, kind == GPUD_TASK_TIMEOUT ? 2 : 1);
	}
	switch (kind) {
	case GPUD_TASK_OK:
		h->stats.ok++;
		break;
	case GPUD_TASK_TIMEOUT:
		h->stats.timed_out++;
		break;
	default:
		h->stats.failed++;
		break;
	}
	if (kind != GPUD_TASK_OK) {
		failures_add(h, t->id, t->attempt, w, kind == GPUD_TASK_TIMEOUT, message, false);
		if (w)
			ui_say(h, UI_FAILURE, "task %llu %s on worker %d (GPU %d): %s",
			       (unsigned long long)t->id,
			       kind == GPUD_TASK_TIMEOUT ? "timed out" : "failed", w->index, w->gpu_id,
			       message ? message : "");
		else
			ui_say(h, UI_FAILURE, "task %llu failed: %s", (unsigned long long)t->id,
			       message ? message : "");
	}
	/* A sink that does not want this kind (the null sink wants none): nothing to
	 * build, unless ordered delivery must account for it. */
	if (!(h->sink_mask & GPUD_EVENT_BIT(kind)) && !h->held)
		return;
	struct gpud_event ev = {
		.kind = kind,
		.task_id = t->id,
		.worker_id = w ? w->index : -1,
		.gpu_id = w ? w->gpu_id : -1,
		.attempt = (int)t->attempt,
		.input = input,
		.input_size = input ? t->size : 0,
		.result = result,
		.result_size = result_size,
		.message = message,
		.seconds = seconds,
	};
	events_deliver_outcome(h, &ev);
}
