/* SPDX-License-Identifier: MIT */
/*
 * Many gpud processes, one job (ranks.c): which rank this one is, from `--rank K/N`,
 * `[job] rank`/`ranks`, or the launcher's environment (Slurm, Open MPI, PMI); and `{rank}`
 * / `{ranks}` in the job's paths, so ranks on a shared filesystem never write the same
 * file.
 *
 * Rank K of N runs the tasks whose id falls in its share: ids go in chunks of
 * RANKS_CHUNK (id / RANKS_CHUNK) and chunk c belongs to rank c % N. Ids stay global.
 */
#ifndef GPUD_RANKS_H
#define GPUD_RANKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job/config.h"

#define RANKS_CHUNK 64 /* = a journal word: a rank's done ids fill whole words */

/* Finds this process's rank: `cli` ("K/N" from --rank, or NULL), then [job] rank/ranks,
 * then SLURM_ARRAY_* and SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/SIZE,
 * PMI_RANK/SIZE; none: 0 of 1. Fills c->rank, c->ranks, c->rank_source, c->local_rank
 * and c->local_size. 0, or -1 with why. */
int ranks_detect(struct cfg *c, const char *cli, char *why, size_t len);

/* gpus = auto: the GPUs the launcher gave, the tokens of CUDA_VISIBLE_DEVICES (indices,
 * GPU-... UUIDs, MIG-... ids, never assumed to be 0..N-1), split among the ranks of
 * this node by local rank when they all see the same list. Fills c->gpu_tokens and
 * gpus[i] = i. 0 (nothing to do without gpus = auto), or -1 with why. */
int ranks_gpus_auto(struct cfg *c, char *why, size_t len);

/* Puts the rank in every path value ({rank}, {ranks}), and refuses, naming the key, an
 * output path that N > 1 ranks would share; sets c->job_id first. `stats_json` (may be NULL) is
 * replaced by its substituted copy (malloc'd, *owned set). 0, or -1 with why. */
int ranks_apply(struct cfg *c, const char **stats_json, char **owned, char *why, size_t len);

/* The tasks of rank `rank` among the first `total` ids. */
static inline uint64_t ranks_share(uint64_t total, unsigned rank, unsigned ranks)
{
	if (ranks <= 1)
		return total;
	uint64_t span = (uint64_t)RANKS_CHUNK * ranks;
	uint64_t full = total / span * RANKS_CHUNK, rest = total % span;
	uint64_t from = (uint64_t)rank * RANKS_CHUNK;
	return full + (rest > from ? (rest - from < RANKS_CHUNK ? rest - from : RANKS_CHUNK) : 0);
}

/* Whether task `id` is rank `rank`'s, and the first id from `id` on that is. */
static inline bool ranks_mine(uint64_t id, unsigned rank, unsigned ranks)
{
	return ranks <= 1 || (id / RANKS_CHUNK) % ranks == rank;
}

static inline uint64_t ranks_next_own(uint64_t id, unsigned rank, unsigned ranks)
{
	if (ranks_mine(id, rank, ranks))
		return id;
	uint64_t c = id / RANKS_CHUNK;
	return (c + (rank + ranks - c % ranks) % ranks) * RANKS_CHUNK;
}

#endif
