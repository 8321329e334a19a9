/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "workers/capacity.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "job/groups.h"
#include "job/stagecfg.h"
#include "workers/memory.h"
#include "util/textio.h"
#include "util/say.h"

static const char *human(uint64_t v, char *buf, size_t len)
{
	static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	double d = (double)v;
	size_t u = 0;
	while (d >= 1024 && u + 1 < sizeof unit / sizeof *unit) {
		d /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", d, unit[u]);
	return buf;
}

static int check_fds(const struct cfg *c, unsigned n, bool raise, FILE *notes)
{
	struct rlimit rl;
	uint64_t need = (uint64_t)n * CAPACITY_FDS_PER_WORKER + CAPACITY_FDS_BASE;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
	    need <= rl.rlim_cur)
		return 0;
	if (rl.rlim_max != RLIM_INFINITY && need > rl.rlim_max) {
		say("%s: %u workers (%zu GPU%s x workers_per_gpu %u) need about "
		    "%llu open files, and this process may open %llu (ulimit -n, hard "
		    "limit %llu): lower [job] workers_per_gpu or the GPUs of [job] gpus, "
		    "or raise the limit",
		    c->path, n, groups_count(c),
		    groups_width(c) > 1    ? " groups"
		    : groups_count(c) == 1 ? ""
					   : "s",
		    c->workers_per_gpu, (unsigned long long)need, (unsigned long long)rl.rlim_cur,
		    (unsigned long long)rl.rlim_max);
		return -1;
	}
	/* As daemons do: the soft limit is a default, the hard one the real bound. */
	rlim_t to = rl.rlim_max == RLIM_INFINITY ? (rlim_t)need : rl.rlim_max;
	if (!raise) {
		fprintf(notes,
			"  open files: the run raises its limit from %llu to %llu for %u "
			"workers\n",
			(unsigned long long)rl.rlim_cur, (unsigned long long)to, n);
		return 0;
	}
	rl.rlim_cur = to;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		say("%s: %u workers need about %llu open files; raising the "
		    "limit to %llu failed: %s",
		    c->path, n, (unsigned long long)need, (unsigned long long)to, strerror(errno));
		return -1;
	}
	return 0;
}

/* The memory this process may have: the machine's, or its cgroup's (v2) when lower. */
static uint64_t memory_limit(const char **what)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t limit = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
	*what = "this machine's memory";
	char why[64], *cg = NULL, *max = NULL, path[4200];
	size_t size;
	cg = io_read_small("/proc/self/cgroup", 1 << 16, &size, why, sizeof why);
	const char *line = cg ? strstr(cg, "0::/") : NULL;
	if (line && (line == cg || line[-1] == '\n')) {
		size_t l = strcspn(line + 3, "\n");
		snprintf(path, sizeof path, "/sys/fs/cgroup%.*s/memory.max", (int)l, line + 3);
		max = io_read_small(path, 1 << 10, &size, why, sizeof why);
		char *end;
		unsigned long long v = max ? strtoull(max, &end, 10) : 0;
		if (max && end != max && v < limit) {
			limit = v;
			*what = "the memory its cgroup may use (memory.max)";
		}
	}
	free(cg);
	free(max);
	return limit;
}

static int check_shm(const struct host *h, const struct cfg *c, unsigned n)
{
	struct shm_plan p;
	const char *what;
	char a[32], b[32], d[32], e[32];
	int bad = shm_plan(h, n, &p);
	uint64_t limit = memory_limit(&what);
	if (bad == 0 && p.all <= limit)
		return 0;
	/* The key that makes it large: the task rings (task size x batch, or the queue's
	 * share per worker), or the result rings. */
	uint64_t tasks = (uint64_t)n * p.task_cap, results = (uint64_t)n * p.out_size;
	char key[160];
	if (results > tasks)
		snprintf(key, sizeof key, "max_result_bytes (%s)",
			 human(c->max_result_bytes, a, sizeof a));
	else if (2 * p.task_need *
			 (c->batch_size > c->max_in_flight ? c->batch_size : c->max_in_flight) >=
		 p.task_cap / 2)
		snprintf(key, sizeof key, "max_task_bytes (%s)",
			 human(c->max_task_bytes, a, sizeof a));
	else
		snprintf(key, sizeof key, "queue_size (%u)", c->queue_size);
	char batch[96] = "";
	if (c->batch_size > 1)
		snprintf(batch, sizeof batch, " or batch_size (%u)", c->batch_size);
	if (c->max_in_flight > 1)
		snprintf(batch + strlen(batch), sizeof batch - strlen(batch),
			 " or max_in_flight (%u)", c->max_in_flight);
	if (bad)
		say("%s: the shared memory for %u workers is too large to count: "
		    "lower [job] %s%s, or run fewer workers ([job] gpus, workers_per_gpu)",
		    c->path, n, key, batch);
	else
		say("%s: the run's shared memory would take %s (%u workers x %s "
		    "of task ring and %s of results), more than %s (%s): lower [job] "
		    "%s%s, or run fewer workers ([job] gpus, workers_per_gpu)",
		    c->path, human(p.all, a, sizeof a), n, human(p.task_cap, b, sizeof b),
		    human(p.out_size, d, sizeof d), what, human(limit, e, sizeof e), key, batch);
	return -1;
}

int capacity_check(const struct host *h, const struct cfg *c, bool raise, FILE *notes)
{
	unsigned per[CFG_MAX_STAGES];
	unsigned n = (unsigned)(groups_count(c) * c->workers_per_gpu);
	if (n == 0)
		return 0; /* no GPU: said by the run */
	n += stagecfg_workers(c, per);
	return check_fds(c, n, raise, notes) < 0 || check_shm(h, c, n) < 0 ? -1 : 0;
}

void capacity_describe(const struct host *h, const struct cfg *c, FILE *out,
		       struct capacity_memory *fig)
{
	unsigned per[CFG_MAX_STAGES];
	unsigned gpu = (unsigned)(groups_count(c) * c->workers_per_gpu);
	if (gpu == 0)
		return;
	unsigned n = gpu + stagecfg_workers(c, per);
	struct shm_plan p;
	if (shm_plan(h, n, &p) < 0)
		return; /* said by capacity_check */
	if (fig)
		*fig = (struct capacity_memory){.total = p.all,
						.run_memfd = p.run_size,
						.result_memfd = p.out_size,
						.task_ring = p.task_cap,
						.result_ring = p.result_cap,
						.workers = n};
	char a[32], b[32], d[32], e[32], f[32];
	uint64_t worker = p.task_cap + p.out_size;
	unsigned batch = c->batch_size > c->max_in_flight ? c->batch_size : c->max_in_flight;
	fprintf(out,
		"  shared memory: %s in all, %llu bytes: the run's memfd of %s (%llu bytes: its "
		"header, feeds and config, then every worker's task ring), a result memfd per "
		"worker of %s (%llu bytes), a bell page\n",
		human(p.all, a, sizeof a), (unsigned long long)p.all,
		human(p.run_size, b, sizeof b), (unsigned long long)p.run_size,
		human(p.out_size, d, sizeof d), (unsigned long long)p.out_size);
	fprintf(out,
		"    per worker %s: task ring %s, room for %llu tasks of max_task_bytes (%s); "
		"results %s, room for %llu of max_result_bytes (%s) (%s %u)\n",
		human(worker, a, sizeof a), human(p.task_cap, b, sizeof b),
		(unsigned long long)(p.task_cap / p.task_need),
		human(c->max_task_bytes, d, sizeof d), human(p.result_cap, e, sizeof e),
		(unsigned long long)(p.result_cap / p.result_need),
		human(c->max_result_bytes, f, sizeof f),
		c->max_in_flight > c->batch_size ? "max_in_flight" : "batch_size", batch);
	for (unsigned s = 0; s <= c->n_stages; s++) {
		unsigned k = s < c->n_stages ? per[s] : gpu;
		fprintf(out, "    %s%s: %u worker%s x %s = %s\n", s < c->n_stages ? "stage " : "",
			s < c->n_stages ? c->stages[s].name : "gpu", k, k == 1 ? "" : "s",
			human(worker, a, sizeof a), human(worker * k, b, sizeof b));
	}
	/* A stage's result is copied whole into a task ring of the next stage's workers:
	 * results larger than they need be (float32 where uint8 would do) cost memory and
	 * copies in every one of them. */
	uint32_t result =
		c->max_task_bytes < c->max_result_bytes ? c->max_task_bytes : c->max_result_bytes;
	for (unsigned s = 0; s < c->n_stages && result > CAPACITY_STAGE_RESULT_LARGE; s++) {
		unsigned next = s + 1 < c->n_stages ? per[s + 1] : gpu;
		fprintf(out,
			"  warning: stage %s's results may take up to %s each (the smaller of "
			"max_task_bytes and max_result_bytes), each copied into the task ring of "
			"one of the %u worker%s of %s%s (%s in all, room for %llu each): send the "
			"smallest type that will do (uint8 pixels rather than float32 take a "
			"quarter) and lower [job] max_task_bytes to what a result needs (or "
			"batch_size)\n",
			c->stages[s].name, human(result, a, sizeof a), next, next == 1 ? "" : "s",
			s + 1 < c->n_stages ? "stage " : "the GPU workers",
			s + 1 < c->n_stages ? c->stages[s + 1].name : "",
			human(p.task_cap * next, b, sizeof b),
			(unsigned long long)(p.task_cap / p.task_need));
	}
}

void capacity_note_oversized(const struct host *h, FILE *f)
{
	const struct cfg *c = h->cfg;
	unsigned batch = c->batch_size > c->max_in_flight ? c->batch_size : c->max_in_flight;
	if (h->stats.ok < CAPACITY_NOTE_TASKS || h->stats.ok < 2ull * batch || !h->pool.n)
		return;
	/* What travelled: the generator's tasks and each stage's results (the next
	 * ring's tasks); the stages' and the GPU workers' results. */
	uint64_t task = h->flow.largest_task, result = h->flow.largest_result;
	for (unsigned s = 0; h->pool.stages && s < h->pool.n_stages; s++) {
		uint64_t r = h->pool.stages[s].largest_result;
		task = r > task ? r : task;
		result = r > result ? r : result;
	}
	struct shm_plan p, need, fit;
	/* What to propose: half as large again, in whole KiB, 4 KiB at least. */
	uint64_t st = task * 3 / 2 > 4096 ? (task * 3 / 2 + 1023) / 1024 * 1024 : 4096,
		 sr = result * 3 / 2 > 4096 ? (result * 3 / 2 + 1023) / 1024 * 1024 : 4096;
	if (shm_plan(h, h->pool.n, &p) < 0 || shm_plan_for(h, h->pool.n, task, result, &need) < 0 ||
	    shm_plan_for(h, h->pool.n, st, sr, &fit) < 0)
		return;
	uint64_t took = p.task_cap + p.result_cap,
		 needed = (need.task_cap > CAPACITY_RING_FLOOR ? need.task_cap
							       : CAPACITY_RING_FLOOR) +
			  (need.result_cap > CAPACITY_RING_FLOOR ? need.result_cap
								 : CAPACITY_RING_FLOOR);
	if (took <= CAPACITY_OVERSIZED * needed || st > c->max_task_bytes ||
	    sr > c->max_result_bytes)
		return;
	char a[32], b[32], g[32];
	fprintf(f,
		"gpud: note: the run's shared memory took %s (%u workers x %s of task and result "
		"rings), %.0f times what its largest task (%llu bytes) and result (%llu bytes) "
		"needed; a long run makes all of it resident: with [job] max_task_bytes = %lluK "
		"and max_result_bytes = %lluK (the largest half as large again, 4K at least) it would take %s (gpud check shows "
		"the memory)\n",
		human(p.all, a, sizeof a), h->pool.n, human(took, b, sizeof b),
		(double)took / (double)needed, (unsigned long long)task, (unsigned long long)result,
		(unsigned long long)(st / 1024), (unsigned long long)(sr / 1024),
		human(fit.all, g, sizeof g));
}
