/* SPDX-License-Identifier: MIT */
/* GPU groups: `gpus_per_worker` consecutive GPUs of [job] gpus (ids as listed, `all`
 * once counted, or the launcher's `auto` tokens) make one group; every group has
 * `workers_per_gpu` workers, worker k on group k / workers_per_gpu, and each of them
 * sees the whole group (CUDA_VISIBLE_DEVICES = the group's tokens, in order). A group
 * is named by its first GPU: that is a worker's gpu_id, in events and messages. */
#ifndef GPUD_GROUPS_H
#define GPUD_GROUPS_H

#include <stddef.h>

#include "job/config.h"

/* Room for a group's ids as text ("0,1,2,3"); a longer list ends in "...". */
#define GROUPS_LABEL 96

/* GPUs per group: gpus_per_worker, 1 when unset. */
static inline size_t groups_width(const struct cfg *c)
{
	return c->gpus_per_worker > 1 ? c->gpus_per_worker : 1;
}

/* How many groups: the GPUs known (after `all` and `auto` are resolved) over the width. */
static inline size_t groups_count(const struct cfg *c)
{
	return c->n_gpus / groups_width(c);
}

/* The index in c->gpus of group g's first GPU. */
static inline size_t groups_first(const struct cfg *c, size_t g)
{
	return g * groups_width(c);
}

/* The group whose first GPU has id gpu_id, or -1 when none has. */
long groups_of_gpu(const struct cfg *c, int gpu_id);

/* Group g's GPU ids joined by commas ("0,1"), into buf (GROUPS_LABEL or more). */
const char *groups_ids(const struct cfg *c, size_t g, char *buf, size_t len);

/* The ids of the group whose first GPU is gpu_id ("2,3"), or gpu_id alone when no group
 * starts there. For messages and the dashboard. */
const char *groups_label(const struct cfg *c, int gpu_id, char *buf, size_t len);

/* groups_label of worker w of host h, for one message: "worker 3 (GPU 2,3) ...". The
 * text lives until the end of the enclosing block. */
#define GROUPS_OF(h, w) groups_label((h)->cfg, (w)->gpu_id, (char[GROUPS_LABEL]){0}, GROUPS_LABEL)

/* Group g's CUDA_VISIBLE_DEVICES value: its ids, or with `gpus = auto` its launcher
 * tokens, joined by commas. Returns a malloc'd string, or NULL when out of memory. */
char *groups_visible(const struct cfg *c, size_t g);

/* Whether gpus_per_worker divides the GPUs known and the workers fit: 0, or -1 with one
 * line in why naming where gpus_per_worker was set and the numbers. */
int groups_check(const struct cfg *c, char *why, size_t len);

#endif /* GPUD_GROUPS_H */
