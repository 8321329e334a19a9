/* SPDX-License-Identifier: MIT */
/* What a run needs of the machine, known before any worker starts (capacity.c): open
 * files for its workers, and memory for its shared-memory plan. Found by `gpud check`
 * and by `gpud run` before anything is touched, so a run that cannot be had is a job
 * error (exit 2) naming the key to change, not an abort after setup (exit 3). */
#ifndef GPUD_CAPACITY_H
#define GPUD_CAPACITY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "host.h"

/* Host descriptors each worker holds (its out memfd, its dashboard log), and those the
 * run holds whatever its size (standard streams, the run memfd and its twin, the bell,
 * pipes, journal, failures list, sink and generator files, metrics, NVML, Python). */
#define CAPACITY_FDS_PER_WORKER 2
#define CAPACITY_FDS_BASE 64

/* Checks the open-file limit against the workers of c (c->n_gpus known: after
 * prepare) and the shared memory they need against the machine's memory (or the
 * cgroup's limit). With `raise`, a soft open-file limit below what is needed goes up to
 * the hard limit when that suffices; without, that is said on `notes`. Needs
 * h->pool.plugin. 0, or -1 with one line on standard error. */
int capacity_check(const struct host *h, const struct cfg *c, bool raise, FILE *notes);

/* The run's shared memory in figures (shm_plan's, the ones the run maps): the total, the
 * run memfd, each worker's result memfd, each worker's task ring and result ring, and
 * the workers (all stages' and the GPU workers'). */
struct capacity_memory {
	uint64_t total, run_memfd, result_memfd, task_ring, result_ring;
	unsigned workers;
};

/* `gpud check`'s account of the run's shared memory, on `out`: the total, the run
 * memfd and each worker's result memfd in bytes, each worker's rings (room for how many
 * tasks and results of the largest size), and what each stage's workers and the GPU
 * workers take; a warning when a stage's results may be large. Every figure is
 * shm_plan's, the one the run maps; they are also put in *fig when fig is not NULL
 * (left as they were when there is no plan). Needs what capacity_check needs. */
void capacity_describe(const struct host *h, const struct cfg *c, FILE *out,
		       struct capacity_memory *fig);

/* At the end of a run: one note on `f` when the run's shared memory was more than
 * CAPACITY_OVERSIZED times what the largest task and result it saw needed (each ring
 * counted at CAPACITY_RING_FLOOR at least, so the defaults of a batch of 1 are never
 * said), naming the sizes seen and the keys that would fit them. Needs the run's
 * h->flow and stages' largest sizes; says nothing after fewer than
 * CAPACITY_NOTE_TASKS ok tasks or two batches (too few to know the largest). */
void capacity_note_oversized(const struct host *h, FILE *f);
#define CAPACITY_OVERSIZED 4
#define CAPACITY_RING_FLOOR (4u << 20)
#define CAPACITY_NOTE_TASKS 64

/* A stage's results above this size (the smaller of max_task_bytes and
 * max_result_bytes, which bound them) are called large by `gpud check`. */
#define CAPACITY_STAGE_RESULT_LARGE (1u << 20)

#endif
