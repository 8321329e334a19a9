/* SPDX-License-Identifier: MIT */
/* Batches that fit (fit.h). */
#define _GNU_SOURCE
#include "fit.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "canary.h"
#include "worker.h"

void fit_init(struct fit *f, uint32_t batch, bool oom_abi)
{
	f->batch = batch;
	f->oom_abi = oom_abi;
	f->batch_cap = f->shown = batch;
	f->fitted = f->full_runs = f->oom_splits = 0;
	f->grow_after = FIT_GROW_AFTER;
	f->bad = UINT32_MAX;
}

bool fit_grow(struct fit *f, uint32_t n)
{
	bool told = false;
	if (n > f->fitted)
		f->fitted = n;
	if (n < f->batch_cap)
		return false;
	if (f->shown != f->batch_cap) {
		f->shown = f->batch_cap; /* the step up held */
		told = true;
	}
	if (f->batch_cap == f->batch || ++f->full_runs < f->grow_after)
		return told;
	uint32_t step = f->batch_cap / 8 ? f->batch_cap / 8 : 1;
	if (f->batch_cap >= f->bad)
		f->grow_after = FIT_GROW_AFTER; /* what ran out fits now: memory was freed */
	f->batch_cap = f->batch - f->batch_cap > step ? f->batch_cap + step : f->batch;
	f->full_runs = 0;
	return told;
}

void fit_shrink(struct fit *f, uint32_t fit, uint32_t bad)
{
	/* Down at once: to what fitted now, or before when that is below what ran out. */
	uint32_t before = f->fitted < bad ? f->fitted : 0;
	f->fitted = fit > before ? fit : before;
	f->batch_cap = f->shown = f->fitted ? f->fitted : 1;
	f->full_runs = 0;
	f->grow_after = f->grow_after < FIT_GROW_MAX ? 2 * f->grow_after : FIT_GROW_MAX;
	f->bad = bad;
}

void fit_publish(const struct fit *f, struct shm_report *rep)
{
	atomic_store_explicit(&rep->batch_now, f->shown, memory_order_relaxed);
	atomic_store_explicit(&rep->oom_splits, f->oom_splits, memory_order_relaxed);
}

/* A call split because it ran out of memory: counted for the host at once, so that a
 * part of it that then ends the worker leaves the splits before it counted. */
static void count_split(struct fit *f, struct shm_report *rep)
{
	f->oom_splits++;
	atomic_store_explicit(&rep->oom_splits, f->oom_splits, memory_order_relaxed);
}

void fit_oom_message(struct gpud_error *err, bool cpu_stage)
{
	const char *what =
		cpu_stage ? "out of memory: this task alone does not fit in memory (batch of 1)"
			  : "out of memory: this task alone does not fit on the GPU (batch of 1)";
	size_t what_len = strlen(what);
	char *msg = err->message;
	size_t said = strnlen(msg, sizeof err->message), room = sizeof err->message;
	size_t head = what_len + (said ? 2 : 0);
	if (said > room - 1 - head)
		said = room - 1 - head;
	memmove(msg + head, msg, said);
	memcpy(msg, what, what_len);
	if (said)
		memcpy(msg + what_len, ": ", 2);
	msg[head + said] = '\0';
}

/* Task i ran out of memory in a call of its own: it fails, saying so. */
static void oom_alone(struct worker *w, uint32_t i)
{
	fit_oom_message(&w->err[i], w->cpu_stage);
	w->t[i].failed = 1;
}

/* Task i's failure when its call returned rc (other than GPUD_OOM) and did not mark it. */
static void settle(struct worker *w, uint32_t i, int rc)
{
	if (!fit_call_failed(&w->fit, rc) || w->t[i].failed)
		return;
	w->t[i].failed = 1;
	if (!w->err[i].message[0])
		snprintf(w->err[i].message, sizeof w->err[i].message,
			 "process_batch() returned %d without a message", rc);
}

/* After a call over the tasks idx[from, from + m) returned rc: settles those it
 * finished and moves those to run again, in order, to the end of the range; returns how
 * many. A task runs again when it ran out of memory (*ran_out is then set), or when the
 * call of several tasks failed as a whole while failures are isolated and the call did
 * not mark it otherwise (rejected, fatal, timed out). A task whose canary the call
 * overwrote is finished (its record says so), and *stop is set when the process is to
 * be replaced (a write before a result buffer, gpud_task_fatal): nothing more runs in
 * it, and a call that failed as a whole then fails its tasks as it said. */
static uint32_t sort_out(struct worker *w, uint32_t from, uint32_t m, int rc, bool *stop,
			 bool *ran_out)
{
	uint32_t *idx = w->fit.idx + from, *again = w->fit.idx + w->fit.batch, kept = 0, o = 0;
	for (uint32_t j = 0; j < m; j++) {
		uint32_t i = idx[j];
		if (disarm(w->out[i], w->hdr->max_result_bytes) == BREACH_BEFORE ||
		    w->t[i].failed == GPUD_TASK_FATAL)
			*stop = true;
	}
	bool whole = w->fit.isolate && m > 1 && fit_call_failed(&w->fit, rc) && !*stop;
	for (uint32_t j = 0; j < m; j++) {
		uint32_t i = idx[j];
		int failed = w->t[i].failed;
		bool intact = disarm(w->out[i], w->hdr->max_result_bytes) == BREACH_NONE;
		bool oom = intact && w->fit.oom_abi && fit_task_oom(failed, rc);
		if (oom || (intact && whole && (failed == 0 || failed == GPUD_TASK_FAILED))) {
			*ran_out |= oom;
			again[o++] = i;
		} else {
			settle(w, i, rc);
			idx[kept++] = i;
		}
	}
	memcpy(idx + kept, again, o * sizeof *again);
	return o;
}

/* Runs the tasks idx[from, from + m) again in one call; returns what it returned. */
static int call_part(struct worker *w, uint32_t from, uint32_t m)
{
	const uint32_t *idx = w->fit.idx + from;
	struct gpud_task *part = w->fit.part;
	for (uint32_t j = 0; j < m; j++) {
		arm(w->out[idx[j]], w->hdr->max_result_bytes);
		loop_task_init(w, idx[j]);
	}
	/* The plugin takes an array: the part's own when its tasks are side by side. */
	bool side_by_side = idx[m - 1] - idx[0] == m - 1;
	struct gpud_task *t = side_by_side ? &w->t[idx[0]] : part;
	for (uint32_t j = 0; !side_by_side && j < m; j++)
		part[j] = w->t[idx[j]];
	/* Each call has its own task_timeout. */
	atomic_store_explicit(&w->rep->cur_task, w->t[idx[0]].id, memory_order_relaxed);
	atomic_store_explicit(&w->rep->busy_since_ns, wait_now_ns(), memory_order_relaxed);
	call_begins(w);
	int rc = w->plugin.worker.process_batch(w->state, t, m);
	leave_if_forked();
	call_ends(w);
	times_count_call(&w->tm, m, t);
	for (uint32_t j = 0; !side_by_side && j < m; j++)
		w->t[idx[j]] = part[j];
	return rc;
}

/* The tasks idx[from, from + left) were to run again (`why`), and another task of their
 * call of n ended this worker: they fail without running again. */
static void fail_left(struct worker *w, uint32_t from, uint32_t left, uint32_t n, const char *why)
{
	for (uint32_t j = from; j < from + left; j++) {
		uint32_t i = w->fit.idx[j];
		w->t[i].failed = 1;
		snprintf(w->err[i].message, sizeof w->err[i].message,
			 "%s in a call of %u tasks, and not run again: "
			 "another task of the call ended this worker",
			 why, n);
	}
}

/* One call's parts run again: the call's size, the largest part that fitted, the
 * smallest that ran out, whether any did, and whether the process is to be replaced. */
struct refit {
	uint32_t n, fit, bad;
	bool ran_out, stop;
};

static void isolate_part(struct worker *w, struct refit *r, uint32_t from, uint32_t m);

/* The tasks idx[from, from + m) are to run again after their call failed as a whole
 * (or, in such a part, ran out of memory): in two halves, each split again while it
 * fails, so a task that fails does so alone, with its own error. */
static void isolate(struct worker *w, struct refit *r, uint32_t from, uint32_t m)
{
	if (m == 1) {
		isolate_part(w, r, from, 1);
		return;
	}
	uint32_t half = (m + 1) / 2;
	isolate_part(w, r, from, half);
	isolate_part(w, r, from + half, m - half);
}

static void isolate_part(struct worker *w, struct refit *r, uint32_t from, uint32_t m)
{
	if (r->stop) {
		fail_left(w, from, m, r->n, "failed as a whole");
		return;
	}
	bool ran_out = false;
	uint32_t o = sort_out(w, from, m, call_part(w, from, m), &r->stop, &ran_out);
	if (!o) {
		r->fit = m > r->fit ? m : r->fit;
		return;
	}
	if (m == 1) { /* alone, only running out of memory runs it again */
		oom_alone(w, w->fit.idx[from]);
		r->ran_out = true;
		return;
	}
	if (ran_out) {
		r->ran_out = true;
		count_split(&w->fit, w->rep);
		r->bad = m < r->bad ? m : r->bad;
	}
	isolate(w, r, from + m - o, o);
}

int fit_refit(struct worker *w, uint32_t n, int rc)
{
	struct fit *f = &w->fit;
	struct refit r = {.n = n, .bad = n};
	for (uint32_t i = 0; i < n; i++)
		f->idx[i] = i;
	uint32_t left = sort_out(w, 0, n, rc, &r.stop, &r.ran_out), from = n - left;
	uint32_t part = (n + 1) / 2;
	if (!r.ran_out) { /* failed as a whole */
		if (left)
			isolate(w, &r, from, left);
		left = 0;
	} else if (n == 1 && left) {
		oom_alone(w, f->idx[from++]);
		left--;
	} else if (left) {
		count_split(f, w->rep);
	}
	while (left) {
		if (r.stop) {
			fail_left(w, from, left, n, "out of memory");
			break;
		}
		uint32_t m = left < part ? left : part;
		bool ran_out = false;
		uint32_t o = sort_out(w, from, m, call_part(w, from, m), &r.stop, &ran_out);
		from += m - o;
		left -= m - o;
		if (!o) {
			r.fit = m > r.fit ? m : r.fit;
		} else if (!ran_out) { /* this part failed as a whole: its failures alone */
			isolate(w, &r, from, o);
			from += o;
			left -= o;
		} else if (m == 1) {
			oom_alone(w, f->idx[from++]);
			left--;
		} else {
			count_split(f, w->rep);
			r.bad = m < r.bad ? m : r.bad;
			part = (m + 1) / 2;
		}
	}
	if (r.ran_out && n > 1) {
		fit_shrink(f, r.fit, r.bad);
		fit_publish(f, w->rep);
	}
	return 0;
}
