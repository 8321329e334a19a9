/* SPDX-License-Identifier: MIT */
/*
 * Where each worker's time goes: the phases and call sizes its processes report in their
 * report blocks (shm_layout.h, struct shm_times; daemon/worker/main.c), with those of
 * its earlier processes kept when one ends (a restart). Untrusted like the rest of that
 * block: a worker that lies skews only its own figures. The loop (stats, restarts) and
 * the dashboard and metrics threads read them through these (docs/architecture.md,
 * Threads: w->rep and times_past are published fields).
 */
#ifndef GPUD_TIMES_H
#define GPUD_TIMES_H

#include "host.h"
#include "view/publish.h"

/* The phases' names, as --stats-json, the metrics and the dashboard say them. */
static const char *const times_phase_names[PH_COUNT] = {
	[PH_SETUP] = "setup", [PH_WAIT] = "waiting",          [PH_UNPACK] = "unpacking",
	[PH_USER] = "user",   [PH_HANDBACK] = "handing_back", [PH_IDLE] = "idle",
};

/* What one report block says (a process of the worker). */
static inline void times_of_report(const struct shm_report *rep, struct worker_times *t)
{
	*t = (struct worker_times){0};
	if (!rep)
		return;
	const struct shm_times *s = &rep->times;
	uint64_t end = atomic_load_explicit(&s->end_ns, memory_order_acquire);
	uint64_t start = atomic_load_explicit(&s->start_ns, memory_order_relaxed);
	t->wall_ns = start && end > start ? end - start : 0;
	for (unsigned p = 0; p < PH_COUNT; p++)
		t->phase_ns[p] = atomic_load_explicit(&s->phase_ns[p], memory_order_relaxed);
	for (unsigned b = 0; b < SHM_CALL_BUCKETS; b++)
		t->calls[b] = atomic_load_explicit(&s->calls[b], memory_order_relaxed);
	t->call_min = atomic_load_explicit(&s->call_min, memory_order_relaxed);
	t->call_max = atomic_load_explicit(&s->call_max, memory_order_relaxed);
	t->items = atomic_load_explicit(&s->items, memory_order_relaxed);
	t->cpu_ns = atomic_load_explicit(&s->cpu_ns, memory_order_relaxed);
	t->main_cpu_ns = atomic_load_explicit(&s->main_cpu_ns, memory_order_relaxed);
	/* the worker's word: never more than the user's time it is part of */
	t->user_cpu_ns = atomic_load_explicit(&s->user_cpu_ns, memory_order_relaxed);
	if (t->user_cpu_ns > t->phase_ns[PH_USER])
		t->user_cpu_ns = t->phase_ns[PH_USER];
	/* nor more than its thread's CPU time: that one is read every 10 ms, the calls'
	 * share on each call, and the share is an estimate (sampled calls) */
	if (t->main_cpu_ns && t->user_cpu_ns > t->main_cpu_ns)
		t->user_cpu_ns = t->main_cpu_ns;
}

/* a += b */
static inline void times_add(struct worker_times *a, const struct worker_times *b)
{
	for (unsigned p = 0; p < PH_COUNT; p++)
		a->phase_ns[p] += b->phase_ns[p];
	a->wall_ns += b->wall_ns;
	for (unsigned k = 0; k < SHM_CALL_BUCKETS; k++)
		a->calls[k] += b->calls[k];
	if (b->call_min && (!a->call_min || b->call_min < a->call_min))
		a->call_min = b->call_min;
	if (b->call_max > a->call_max)
		a->call_max = b->call_max;
	a->items += b->items;
	a->cpu_ns += b->cpu_ns;
	a->main_cpu_ns += b->main_cpu_ns;
	a->user_cpu_ns += b->user_cpu_ns;
}

/* Worker w's figures: its earlier processes' and the current one's. */
static inline void times_of(const struct host_worker *w, struct worker_times *t)
{
	struct worker_times now;
	const struct worker_times *p = &w->times_past;
	/* read as UI_READ does (relaxed loads of whole words) */
	for (unsigned k = 0; k < PH_COUNT; k++)
		t->phase_ns[k] = __atomic_load_n(&p->phase_ns[k], __ATOMIC_RELAXED);
	t->wall_ns = __atomic_load_n(&p->wall_ns, __ATOMIC_RELAXED);
	for (unsigned k = 0; k < SHM_CALL_BUCKETS; k++)
		t->calls[k] = __atomic_load_n(&p->calls[k], __ATOMIC_RELAXED);
	t->call_min = __atomic_load_n(&p->call_min, __ATOMIC_RELAXED);
	t->call_max = __atomic_load_n(&p->call_max, __ATOMIC_RELAXED);
	t->items = __atomic_load_n(&p->items, __ATOMIC_RELAXED);
	t->cpu_ns = __atomic_load_n(&p->cpu_ns, __ATOMIC_RELAXED);
	t->main_cpu_ns = __atomic_load_n(&p->main_cpu_ns, __ATOMIC_RELAXED);
	t->user_cpu_ns = __atomic_load_n(&p->user_cpu_ns, __ATOMIC_RELAXED);
	times_of_report(__atomic_load_n(&w->rep, __ATOMIC_RELAXED), &now);
	times_add(t, &now);
}

/* The calls of worker figures t, and the median call's size (the upper bound of the
 * bucket that holds it, clamped to the largest call; 0 without calls). */
static inline uint64_t times_calls(const struct worker_times *t, uint32_t *median)
{
	uint64_t n = 0, seen = 0;
	for (unsigned k = 0; k < SHM_CALL_BUCKETS; k++)
		n += t->calls[k];
	*median = 0;
	for (unsigned k = 0; k < SHM_CALL_BUCKETS && n; k++) {
		seen += t->calls[k];
		if (2 * seen >= n) {
			uint32_t hi = 1u << k;
			*median = hi > t->call_max ? t->call_max : hi;
			if (*median < t->call_min)
				*median = t->call_min;
			break;
		}
	}
	return n;
}

/* Worker w's process is gone and its report block is about to be made fresh (the loop,
 * before a restart): its figures are kept. */
static inline void times_worker_ends(struct host_worker *w)
{
	struct worker_times now, *p = &w->times_past;
	if (!w->rep)
		return;
	times_of_report(w->rep, &now);
	for (unsigned k = 0; k < PH_COUNT; k++)
		UI_ADD(p->phase_ns[k], now.phase_ns[k]);
	UI_ADD(p->wall_ns, now.wall_ns);
	UI_ADD(p->items, now.items);
	UI_ADD(p->cpu_ns, now.cpu_ns);
	UI_ADD(p->main_cpu_ns, now.main_cpu_ns);
	UI_ADD(p->user_cpu_ns, now.user_cpu_ns);
	for (unsigned k = 0; k < SHM_CALL_BUCKETS; k++)
		UI_ADD(p->calls[k], now.calls[k]);
	if (now.call_min && (!p->call_min || now.call_min < p->call_min))
		UI_SET(p->call_min, now.call_min);
	if (now.call_max > p->call_max)
		UI_SET(p->call_max, now.call_max);
}

#endif /* GPUD_TIMES_H */
