/* SPDX-License-Identifier: MIT */
/*
 * Each worker's settings as the job sets them: a CPU stage's ([stage.NAME]) own
 * task_timeout and max_retries, else [job]'s; how many workers each stage gets; where a
 * worker runs, for messages. Read from the configuration alone, so the layers below
 * the run (workers/, view/) ask here and not run/stages.c.
 *
 * A worker's `stage` is 0.. for the stages, in file order; c->n_stages (or more) is the
 * GPU workers'.
 */
#ifndef GPUD_STAGECFG_H
#define GPUD_STAGECFG_H

#include <stdbool.h>
#include <stddef.h>

struct cfg;

/* GPUs (groups of gpus_per_worker) counted as one core when stage workers are counted by
 * default. */
#define STAGES_GPUS_PER_CORE 4

/* The cores this process may run on: its CPU affinity (a batch system's share), else
 * those online; at least 1. */
unsigned stagecfg_cores(void);

/* Workers of each stage (per[i], CFG_MAX_STAGES of them); returns their sum (0 without
 * stages). A stage's `workers` is kept as it is. The stages without it share, at least
 * 1 each, the cores this process may run on (stagecfg_cores) less the workers of the
 * stages that name their count and a core per STAGES_GPUS_PER_CORE GPUs (or groups;
 * rounded down, at most a quarter of the cores left): a GPU worker mostly waits for
 * its GPU, and workers_per_gpu does not change how much CPU work a GPU needs. */
unsigned stagecfg_workers(const struct cfg *c, unsigned *per);
/* Why `stage` gets the workers stagecfg_workers gives it, for `gpud check` and the run's
 * notes: "workers = 3", or how the cores made its count. Returns buf. */
const char *stagecfg_workers_why(const struct cfg *c, unsigned stage, char *buf, size_t len);

/* The task_timeout (seconds, 0 none) and max_retries of a worker of `stage`: the
 * stage's own when it sets them, else [job]'s. */
double stagecfg_task_timeout(const struct cfg *c, unsigned stage);
unsigned stagecfg_max_retries(const struct cfg *c, unsigned stage);
/* Whether some stage sets a task_timeout of its own. */
bool stagecfg_any_timeout(const struct cfg *c);

/* Where a worker of `stage` (GPU `gpu_id` for the GPU workers') runs, for messages:
 * "GPU 2,3" (its group), or "stage decode". */
const char *stagecfg_where(const struct cfg *c, unsigned stage, int gpu_id, char *buf, size_t len);
/* stagecfg_where of worker w of host h for one message; the text lives until the end
 * of the enclosing block. */
#define WHERE_OF(h, w) stagecfg_where((h)->cfg, (w)->stage, (w)->gpu_id, (char[160]){0}, 160)

#endif /* GPUD_STAGECFG_H */
