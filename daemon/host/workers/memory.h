/* SPDX-License-Identifier: MIT */
/* The run's shared memory, host side (memory.c; layout: shm_layout.h). */
#ifndef GPUD_MEMORY_H
#define GPUD_MEMORY_H

#include "host.h"

/* The sizes of a run's shared memory for n workers (shm_layout.h). */
struct shm_plan {
	/* task_need / result_need: the ring bytes one task of max_task_bytes / one result
	 * of max_result_bytes takes (with its record header and gap); task_cap /
	 * result_cap: each worker's rings; out_size: each worker's out memfd. */
	uint64_t task_need, result_need, task_cap, result_cap, out_size;
	size_t blob;
	uint64_t feeds_off, config_off, rings_off;
	uint64_t run_size; /* the run memfd */
	uint64_t all;      /* everything: the run memfd, n out memfds, the bell page */
};
/* Needs h->cfg and h->pool.plugin. 0, or -1 when the sizes overflow. */
int shm_plan(const struct host *h, unsigned n, struct shm_plan *p);
/* The same for other limits than the job's max_task_bytes and max_result_bytes. */
int shm_plan_for(const struct host *h, unsigned n, uint64_t max_task, uint64_t max_result,
		 struct shm_plan *p);

/* The run memfd, its read-only twin for workers, the bell page, the host pipe, and
 * each worker's first out memfd. 0, or -1 with a message on standard error. */
int shm_create(struct host *h);
void shm_destroy(struct host *h);
/* A fresh out memfd for the worker's next process, and its feed reset; 0 or -errno. */
int shm_renew_worker(struct host *h, struct host_worker *w);

/* Wakes worker w: its futex lives in the run memfd, its flag in its out memfd. */
static inline struct wait_bell shm_worker_bell(struct host_worker *w)
{
	return (struct wait_bell){.bell = &w->feed->bell.bell, .sleeping = &w->rep->sleeping};
}

#endif
