/* SPDX-License-Identifier: MIT */
/*
 * The run's shared memory (layout: shm_layout.h). Three kinds of memfd, split by who
 * may write them: the run memfd (host only; workers get it read-only), one out memfd
 * per worker process (that process and the host), and the bell page.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "host.h"
#include "util/log.h"
#include "job/stagecfg.h"
#include "workers/fit.h"
#include "workers/times.h"
#include "workers/memory.h"

_Static_assert(CFG_MAX_KEYS == SHM_MAX_ARGS, "a worker takes every key the job file may give");

#define MIN_RING (64u << 10)

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

/* The worker plugin path, then each [worker] key and value, NUL-terminated; then for
 * each [stage.NAME], in order: its plugin path, its key count in decimal, its keys and
 * values (a stage's worker is told its stage: gpud-worker --stage K). */
static size_t config_blob(const struct host *h, char *out)
{
	const struct cfg_section *s = &h->cfg->worker;
	size_t n = 0;
#define PUT(str)                                                                                   \
	do {                                                                                       \
		size_t l = strlen(str) + 1;                                                        \
		if (out)                                                                           \
			memcpy(out + n, str, l);                                                   \
		n += l;                                                                            \
	} while (0)
	PUT(h->pool.plugin);
	for (size_t i = 0; i < s->count; i++) {
		PUT(s->kv[i].key);
		PUT(s->kv[i].value);
	}
	for (unsigned k = 0; k < h->pool.n_stages; k++) {
		const struct cfg_section *ss = &h->cfg->stages[k].sec;
		char count[24];
		snprintf(count, sizeof count, "%zu", ss->count);
		PUT(h->pool.stages[k].plugin);
		PUT(count);
		for (size_t i = 0; i < ss->count; i++) {
			PUT(ss->kv[i].key);
			PUT(ss->kv[i].value);
		}
	}
#undef PUT
	return n;
}

/* fd itself, or a duplicate of it at 10 or above (the old one closed), so that the
 * descriptors workers are given (0-6) are never ours. */
static int fd_high(int fd)
{
	if (fd < 0 || fd >= 10)
		return fd;
	int hi = fcntl(fd, F_DUPFD_CLOEXEC, 10);
	close(fd);
	return hi;
}

/* A memfd of `size` bytes that can neither shrink (a SIGBUS in the host) nor grow,
 * kept off the descriptors workers are given. -errno on failure. */
static int sealed_memfd(const char *name, uint64_t size)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	fd = fd_high(fd);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

static void unmap_out(struct host *h, struct host_worker *w)
{
	if (w->rep)
		munmap(w->rep, h->shm.out_size);
	if (w->out_fd >= 0)
		close(w->out_fd);
	w->rep = NULL;
	w->out_fd = -1;
}

int shm_renew_worker(struct host *h, struct host_worker *w)
{
	/* A fresh memfd: nothing the last process (or a child it left behind) holds can
	 * reach the next one's results. It replaces the old mapping in place, so the
	 * dashboard thread, which reads w->rep, never meets an unmapped page. */
	char name[32];
	fit_worker_ends(w);
	times_worker_ends(w);
	snprintf(name, sizeof name, "gpud-out-%d", w->index);
	int fd = sealed_memfd(name, h->shm.out_size);
	if (fd < 0)
		return fd;
	void *m = mmap(w->rep, h->shm.out_size, PROT_READ | PROT_WRITE,
		       MAP_SHARED | (w->rep ? MAP_FIXED : 0), fd, 0);
	if (m == MAP_FAILED) {
		int e = -errno;
		close(fd);
		return e;
	}
	if (w->out_fd >= 0)
		close(w->out_fd);
	w->out_fd = fd;
	UI_SET(w->rep, m); /* the same address after the first: read by the dashboard */
	w->results = (struct ring){(uint8_t *)m + SHM_OUT_RING_OFF, w->feed->result_ring_cap,
				   SHM_SLOT_GAP};

	/* The task ring keeps its positions: the new process starts where we are. */
	struct shm_feed *f = w->feed;
	w->task_free = w->task_head;
	w->result_tail = 0;
	f->task_base = w->task_head;
	f->incarnation++;
	atomic_store(&f->result_tail, 0);
	atomic_store(&f->stop, 0);
	w->window = 1;
	w->task_seconds = 0;
	UI_SET(w->state, HW_STARTING);
	w->timed_out = false;
	w->cancelled = false;
	w->corrupt = false;
	w->exited = false;
	w->seen_since = 0;
	w->grace_ns = 0;
	w->seen_tail = w->task_head;
	w->still_ns = 0;
	w->blocked = false;
	w->pid = -1;
	return 0;
}

int shm_plan(const struct host *h, unsigned n, struct shm_plan *p)
{
	return shm_plan_for(h, n, h->cfg->max_task_bytes, h->cfg->max_result_bytes, p);
}

int shm_plan_for(const struct host *h, unsigned n, uint64_t max_task, uint64_t max_result,
		 struct shm_plan *p)
{
	const struct cfg *c = h->cfg;
	uint64_t res_payload = max_result > SHM_MSG_MAX ? max_result : SHM_MSG_MAX;
	uint64_t per_worker_queue = (c->queue_size + n - 1) / n;
	uint64_t small_tasks = 2 * SHM_REC_HDR * per_worker_queue;
	uint64_t small_results = (2 * SHM_REC_HDR + SHM_SLOT_GAP) * per_worker_queue;

	*p = (struct shm_plan){.task_need = ring_span(max_task)};
	/* A batching worker holds a whole batch of tasks, and reserves a full result slot
	 * (with its gap) for each before the call; one with tasks in flight, as many as
	 * max_in_flight. The limits of the keys keep these far from overflowing, and the
	 * sums below are checked all the same. */
	uint64_t batch = c->batch_size > c->max_in_flight ? c->batch_size : c->max_in_flight;
	p->task_cap = ring_capacity_for(p->task_need * batch,
					small_tasks > MIN_RING ? small_tasks : MIN_RING);
	p->result_need = ring_slot_span(res_payload);
	p->result_cap = ring_capacity_for(p->result_need * batch,
					  small_results > MIN_RING ? small_results : MIN_RING);
	p->blob = config_blob(h, NULL);
	p->feeds_off = sizeof(struct shm_header);
	p->config_off = p->feeds_off + (uint64_t)n * sizeof(struct shm_feed);
	p->rings_off = align_up(p->config_off + p->blob, SHM_PAGE);
	p->out_size = SHM_OUT_RING_OFF + p->result_cap;
	uint64_t rings, outs;
	if (__builtin_mul_overflow((uint64_t)n, p->task_cap, &rings) ||
	    __builtin_add_overflow(p->rings_off, rings, &p->run_size) ||
	    __builtin_mul_overflow((uint64_t)n, p->out_size, &outs) ||
	    __builtin_add_overflow(p->run_size, outs, &p->all) ||
	    __builtin_add_overflow(p->all, (uint64_t)SHM_PAGE, &p->all) || p->all > INT64_MAX)
		return -1;
	return 0;
}

/* The run memfd (plan->run_size bytes), mapped here read-write, and its read-only
 * descriptor for workers. 0, or -1 said. */
static int map_run_memory(struct host *h, const struct shm_plan *plan)
{
	const struct cfg *c = h->cfg;
	uint64_t total = plan->run_size;
	int fd = sealed_memfd("gpud-run", total);
	if (fd < 0) {
		/* A memfd's size counts against RLIMIT_FSIZE as any file's. */
		struct rlimit fs;
		char hint[160] = "";
		if (fd == -EFBIG && getrlimit(RLIMIT_FSIZE, &fs) == 0 &&
		    fs.rlim_cur != RLIM_INFINITY)
			snprintf(hint, sizeof hint,
				 " (the file size limit, ulimit -f, is %llu bytes, and the run's "
				 "shared memory counts against it: raise it)",
				 (unsigned long long)fs.rlim_cur);
		fprintf(LOG_ERR, "gpud: cannot create %llu bytes of shared memory: %s%s\n",
			(unsigned long long)total, strerror(-fd), hint);
		return -1;
	}
	h->shm.fd = fd;
	void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, h->shm.fd, 0);
	if (m == MAP_FAILED) {
		fprintf(LOG_ERR,
			"gpud: cannot map %llu bytes of shared memory (%u workers, "
			"max_task_bytes %u, max_result_bytes %u): %s\n",
			(unsigned long long)total, h->pool.n, c->max_task_bytes,
			c->max_result_bytes, strerror(errno));
		return -1;
	}
	h->shm.hdr = m;
	h->shm.size = total;
	/* Workers get the run memfd through a read-only descriptor: they can map it only
	 * PROT_READ, and never writable again (mprotect refuses too). */
	char self[64];
	snprintf(self, sizeof self, "/proc/self/fd/%d", h->shm.fd);
	h->shm.ro_fd = fd_high(open(self, O_RDONLY | O_CLOEXEC));
	if (h->shm.ro_fd < 0) {
		fprintf(LOG_ERR, "gpud: cannot open the shared memory read-only (%s): %s\n", self,
			strerror(errno));
		return -1;
	}
	return 0;
}

/* The host's wake-up page, and the pipe whose end tells workers the host is gone. 0, or
 * -1 said. */
static int make_bell_and_pipe(struct host *h)
{
	int fd = sealed_memfd("gpud-bell", SHM_PAGE);
	void *b = fd < 0 ? MAP_FAILED
			 : mmap(NULL, SHM_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (b == MAP_FAILED) {
		fprintf(LOG_ERR, "gpud: cannot create the host's wake-up page: %s\n",
			strerror(fd < 0 ? -fd : errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	h->shm.bell_fd = fd;
	h->shm.host_bell = b;
	if (pipe2(h->shm.pipe, O_CLOEXEC) < 0) {
		fprintf(LOG_ERR, "gpud: pipe: %s\n", strerror(errno));
		return -1;
	}
	h->shm.pipe[0] = fd_high(h->shm.pipe[0]);
	h->shm.pipe[1] = fd_high(h->shm.pipe[1]);
	return 0;
}

/* The header workers read first: the layout and the job's settings for them. */
static void write_header(struct host *h, const struct shm_plan *plan)
{
	const struct cfg *c = h->cfg;
	*h->shm.hdr = (struct shm_header){
		.magic = SHM_MAGIC,
		.version = SHM_VERSION,
		.header_size = sizeof(struct shm_header),
		.total_size = plan->run_size,
		.n_workers = h->pool.n,
		.feed_size = sizeof(struct shm_feed),
		.feeds_off = plan->feeds_off,
		.config_off = plan->config_off,
		.config_len = plan->blob,
		.n_args = (uint32_t)c->worker.count,
		.max_task_bytes = c->max_task_bytes,
		.max_result_bytes = c->max_result_bytes,
		.batch_size = c->batch_size,
		.max_in_flight = c->max_in_flight,
		.isolate = c->isolate_failures,
		.pin_memory = (uint32_t)c->pin_memory,
		.report_size = sizeof(struct shm_report),
		.batch_wait_ns = (uint64_t)(cfg_batch_wait_ms(c) * 1e6),
		.batch_wait_auto = c->batch_wait_ms < 0 && cfg_batch_wait_ms(c) > 0,
		.out_size = h->shm.out_size,
	};
	h->shm.bell = (struct wait_bell){.bell = h->shm.host_bell,
					 .sleeping = &h->shm.hdr->host_sleeping};
	config_blob(h, (char *)h->shm.hdr + plan->config_off);
}

/* Worker k's feed (its id, GPU, seed and task ring) and its result memory. 0, or -1
 * said. */
static int lay_out_worker(struct host *h, const struct shm_plan *plan, unsigned k)
{
	uint8_t *m = (uint8_t *)h->shm.hdr;
	struct shm_feed *feed = (struct shm_feed *)(m + plan->feeds_off) + k;
	struct host_worker *w = &h->pool.w[k];
	uint64_t t_off = plan->rings_off + (uint64_t)k * plan->task_cap;
	w->feed = feed;
	w->out_fd = -1;
	w->tasks = (struct ring){m + t_off, plan->task_cap, 0};
	feed->worker_id = w->index;
	feed->gpu_id = w->gpu_id;
	feed->seed = h->cfg->base_seed + (uint64_t)w->index;
	/* The limit at which a worker that can (gpud_worker_interrupt) ends its call
	 * itself; the host kills it timeout_grace later (lifecycle_timeouts). */
	double ms = stagecfg_task_timeout(h->cfg, w->stage) * 1e3;
	feed->interrupt_ms = 0;
	if (ms > 0 && h->cfg->timeout_grace > 0) /* rounded up: never before the limit */
		feed->interrupt_ms = ms >= UINT32_MAX ? UINT32_MAX : (uint32_t)(ms + 0.999999);
	feed->task_ring_off = t_off;
	feed->task_ring_cap = plan->task_cap;
	feed->result_ring_cap = plan->result_cap;
	int e = shm_renew_worker(h, w);
	if (e < 0) {
		fprintf(LOG_ERR, "gpud: cannot create worker %u's result memory (%llu bytes): %s\n",
			k, (unsigned long long)h->shm.out_size, strerror(-e));
		return -1;
	}
	return 0;
}

int shm_create(struct host *h)
{
	struct shm_plan plan;
	if (shm_plan(h, h->pool.n, &plan) < 0) {
		fprintf(LOG_ERR, "gpud: the shared memory for %u workers is too large to count\n",
			h->pool.n);
		return -1;
	}
	h->shm.task_need = plan.task_need;
	h->shm.out_size = plan.out_size;
	if (map_run_memory(h, &plan) < 0 || make_bell_and_pipe(h) < 0)
		return -1;
	write_header(h, &plan);
	for (unsigned k = 0; k < h->pool.n; k++)
		if (lay_out_worker(h, &plan, k) < 0)
			return -1;
	return 0;
}

void shm_destroy(struct host *h)
{
	for (unsigned k = 0; h->pool.w && k < h->pool.n; k++)
		if (h->pool.w[k].feed)
			unmap_out(h, &h->pool.w[k]);
	if (h->shm.hdr)
		munmap(h->shm.hdr, h->shm.size);
	if (h->shm.host_bell)
		munmap((void *)h->shm.host_bell, SHM_PAGE);
	for (int *fd = (int[]){h->shm.fd, h->shm.ro_fd, h->shm.bell_fd, h->shm.pipe[0],
			       h->shm.pipe[1]},
		 *end = fd + 5;
	     fd < end; fd++)
		if (*fd >= 0)
			close(*fd);
	h->shm.hdr = NULL;
	h->shm.host_bell = NULL;
	h->shm.fd = h->shm.ro_fd = h->shm.bell_fd = h->shm.pipe[0] = h->shm.pipe[1] = -1;
}
