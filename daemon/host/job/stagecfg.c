/* SPDX-License-Identifier: MIT */
/* Each worker's settings as the job sets them (stagecfg.h). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <unistd.h>

#include "job/stagecfg.h"
#include "job/config.h"
#include "job/groups.h"

unsigned stagecfg_workers(const struct cfg *c, unsigned gpu_workers, unsigned *per)
{
	unsigned named = 0, unnamed = 0, total = 0;
	for (size_t i = 0; i < c->n_stages; i++) {
		if (c->stages[i].workers)
			named += c->stages[i].workers;
		else
			unnamed++;
	}
	/* The cores this process may run on (a batch system's share), else those online,
	 * less the named stages' workers and a quarter of a core per GPU worker: a GPU
	 * worker mostly waits for its GPU (its CPU side unpacks inputs and launches
	 * work), so counting it as a whole core left a decode stage one worker on two
	 * cores with one GPU worker, and half the throughput. */
	cpu_set_t set;
	long cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
								 : sysconf(_SC_NPROCESSORS_ONLN);
	long left = cores - (long)(gpu_workers / STAGES_GPU_WORKERS_PER_CORE) - (long)named;
	unsigned each = unnamed && left > (long)unnamed ? (unsigned)(left / (long)unnamed) : 1;
	for (size_t i = 0; i < c->n_stages; i++) {
		per[i] = c->stages[i].workers ? c->stages[i].workers : each;
		total += per[i];
	}
	return total;
}

double stagecfg_task_timeout(const struct cfg *c, unsigned stage)
{
	if (stage < c->n_stages && c->stages[stage].task_timeout >= 0)
		return c->stages[stage].task_timeout;
	return c->task_timeout;
}

unsigned stagecfg_max_retries(const struct cfg *c, unsigned stage)
{
	if (stage < c->n_stages && c->stages[stage].max_retries >= 0)
		return (unsigned)c->stages[stage].max_retries;
	return c->max_retries;
}

bool stagecfg_any_timeout(const struct cfg *c)
{
	for (size_t s = 0; s < c->n_stages; s++)
		if (c->stages[s].task_timeout > 0)
			return true;
	return false;
}

const char *stagecfg_where(const struct cfg *c, unsigned stage, int gpu_id, char *buf, size_t len)
{
	if (stage < c->n_stages) {
		snprintf(buf, len, "stage %s", c->stages[stage].name);
		return buf;
	}
	char gpus[GROUPS_LABEL];
	snprintf(buf, len, "GPU %s", groups_label(c, gpu_id, gpus, sizeof gpus));
	return buf;
}
