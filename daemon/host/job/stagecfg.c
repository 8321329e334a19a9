/* SPDX-License-Identifier: MIT */
/* Each worker's settings as the job sets them (stagecfg.h). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <unistd.h>

#include "job/stagecfg.h"
#include "job/config.h"
#include "job/groups.h"

unsigned stagecfg_cores(void)
{
	cpu_set_t set;
	long cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
								 : sysconf(_SC_NPROCESSORS_ONLN);
	return cores > 0 ? (unsigned)cores : 1;
}

/* The cores the GPUs keep from the stages without `workers` (stagecfg_workers). */
static unsigned gpus_share(const struct cfg *c, unsigned named)
{
	long left = (long)stagecfg_cores() - (long)named;
	long gpus = (long)(groups_count(c) / STAGES_GPUS_PER_CORE);
	if (left <= 0)
		return 0;
	return (unsigned)(gpus < left / 4 ? gpus : left / 4);
}

unsigned stagecfg_workers(const struct cfg *c, unsigned *per)
{
	unsigned named = 0, unnamed = 0, total = 0;
	for (size_t i = 0; i < c->n_stages; i++) {
		if (c->stages[i].workers)
			named += c->stages[i].workers;
		else
			unnamed++;
	}
	/* The cores this process may run on (a batch system's share), less the named
	 * stages' workers and the GPUs' share. A GPU's CPU work (unpacking inputs,
	 * launching kernels) follows what the GPU gets through, not how many workers
	 * share it: counted per worker, workers_per_gpu = 2 on 2 cores took a core from
	 * a decode stage (2 workers to 1) and halved the run. So a core per
	 * STAGES_GPUS_PER_CORE GPUs (or groups), never more than a quarter of the
	 * cores left. */
	long left = (long)stagecfg_cores() - (long)named - (long)gpus_share(c, named);
	unsigned each = unnamed && left > (long)unnamed ? (unsigned)(left / (long)unnamed) : 1;
	for (size_t i = 0; i < c->n_stages; i++) {
		per[i] = c->stages[i].workers ? c->stages[i].workers : each;
		total += per[i];
	}
	return total;
}

const char *stagecfg_workers_why(const struct cfg *c, unsigned stage, char *buf, size_t len)
{
	unsigned named = 0, unnamed = 0;
	for (size_t i = 0; i < c->n_stages; i++) {
		named += c->stages[i].workers;
		unnamed += !c->stages[i].workers;
	}
	if (stage >= c->n_stages || c->stages[stage].workers) {
		snprintf(buf, len, "workers = %u",
			 stage < c->n_stages ? c->stages[stage].workers : 0);
		return buf;
	}
	unsigned cores = stagecfg_cores(), gpus = gpus_share(c, named);
	int n = snprintf(buf, len, "no workers =: the %u core%s gpud may use", cores,
			 cores == 1 ? "" : "s");
	if (named && n > 0 && (size_t)n < len)
		n += snprintf(buf + n, len - (size_t)n, ", less %u for the stages that name theirs",
			      named);
	if (gpus && n > 0 && (size_t)n < len)
		n += snprintf(buf + n, len - (size_t)n, ", less %u for %zu GPU%s (a core per %d)",
			      gpus, groups_count(c), groups_count(c) == 1 ? "" : "s",
			      STAGES_GPUS_PER_CORE);
	if (unnamed > 1 && n > 0 && (size_t)n < len)
		n += snprintf(buf + n, len - (size_t)n, ", shared by %u stages", unnamed);
	if (n > 0 && (size_t)n < len)
		snprintf(buf + n, len - (size_t)n,
			 ", at least 1; workers_per_gpu does not count: set [stage.%s] "
			 "workers = N to choose",
			 c->stages[stage].name);
	return buf;
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
