/* SPDX-License-Identifier: MIT */
/* The GPUs a worker sees (gpud_worker_info.n_gpus and gpu_ids, ABI 1.4). */
#ifndef GPUD_WORKER_GPUS_H
#define GPUD_WORKER_GPUS_H

#define WORKER_MAX_GPUS 256 /* [job] gpus_per_worker's largest value */

/* Fills ids from GPUD_GPU_IDS ("0,1", set by the host for this worker's group) and
 * returns how many. Anything else there (unset, empty, not a list of ids, more than
 * `max`, a first id that is not `first`) gives the one GPU `first`. */
unsigned worker_gpu_ids(int first, int *ids, unsigned max);

#endif
