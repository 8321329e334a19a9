/* SPDX-License-Identifier: MIT */
/*
 * Batches that fit: each worker's batch size as it adapted to calls that ran out of
 * memory, and its splits of such calls (daemon/worker/main.c, refit), as the worker
 * reports them on its report block's line 2. Untrusted like all of that block: the size
 * is clamped to 1..batch_size here, and a worker that lies about either skews only its
 * own figures. The loop (stats, on restarts) and the dashboard and metrics threads read
 * them through these (docs/architecture.md, Threads: w->rep and oom_splits_past are
 * published fields, read here as UI_READ does).
 */
#ifndef GPUD_FIT_H
#define GPUD_FIT_H

#include "host.h"

/* The most tasks worker w's next call gets: 1..batch_size (batch_size until it says). */
static inline uint32_t fit_batch_now(const struct host *h, const struct host_worker *w)
{
	const struct shm_report *rep = __atomic_load_n(&w->rep, __ATOMIC_RELAXED);
	uint32_t max = h->cfg->batch_size;
	uint32_t b = rep ? atomic_load_explicit(&rep->batch_now, memory_order_relaxed) : 0;
	return b && b <= max ? b : max;
}

/* The calls worker w's processes split because they ran out of memory. */
static inline uint64_t fit_oom_splits(const struct host_worker *w)
{
	const struct shm_report *rep = __atomic_load_n(&w->rep, __ATOMIC_RELAXED);
	uint32_t now = rep ? atomic_load_explicit(&rep->oom_splits, memory_order_relaxed) : 0;
	return __atomic_load_n(&w->oom_splits_past, __ATOMIC_RELAXED) + now;
}

/* Every worker's, added up. */
static inline uint64_t fit_oom_splits_total(const struct host *h)
{
	uint64_t n = 0;
	for (unsigned i = 0; i < h->pool.n; i++)
		n += fit_oom_splits(&h->pool.w[i]);
	return n;
}

/* Worker w's process is gone and its report block is about to be made fresh (the loop,
 * before a restart): its splits are kept. */
static inline void fit_worker_ends(struct host_worker *w)
{
	if (w->rep)
		UI_ADD(w->oom_splits_past,
		       atomic_load_explicit(&w->rep->oom_splits, memory_order_relaxed));
}

#endif /* GPUD_FIT_H */
