/* SPDX-License-Identifier: MIT */
/* The run's shared memory as this worker sees it (descriptors 3-5: shm_layout.h). */
#ifndef GPUD_WORKER_MAPPINGS_H
#define GPUD_WORKER_MAPPINGS_H

#include <stddef.h>

struct worker;

/* Maps the run memfd read-only (a write to it faults), this worker's out memfd as two
 * guarded parts (report block, result ring) and the host's bell page; fills w's header,
 * feed, report, rings and bells and closes the descriptors. 0, or -1 when what was
 * handed over is not a gpud run's (or a mapping failed). */
int mappings_open(struct worker *w, long index);

/* pin_memory: the task and result rings registered with the CUDA runtime
 * (cudaHostRegister). 1 pinned, 0 not (off, a CPU stage, auto without the runtime
 * loaded or when it fails), -1 with `why` when pin_memory = on cannot be honoured. */
int mappings_pin(struct worker *w, char *why, size_t len);

#endif
