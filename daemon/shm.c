/* SPDX-License-Identifier: MIT */
/* Creating the run's shared memory: a sealed memfd only this run's processes hold. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "host.h"

#define PAGE 4096u
#define MIN_RING (64u << 10)

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

/* The worker plugin path, then each [worker] key and value, NUL-terminated. */
static size_t config_blob(const struct host *h, char *out)
{
	const struct cfg_section *s = &h->cfg->worker;
	size_t n = 0;
#define PUT(str)                                                                           \
	do {                                                                               \
		size_t l = strlen(str) + 1;                                                \
		if (out)                                                                   \
			memcpy(out + n, str, l);                                           \
		n += l;                                                                    \
	} while (0)
	PUT(h->worker_plugin);
	for (size_t i = 0; i < s->count; i++) {
		PUT(s->kv[i].key);
		PUT(s->kv[i].value);
	}
#undef PUT
	return n;
}

void shm_reset_worker(struct host *h, struct host_worker *w)
{
	struct shm_worker *c = w->ctl;
	(void)h;
	atomic_store(&c->task_head, 0);
	atomic_store(&c->task_tail, 0);
	atomic_store(&c->busy_since_ns, 0);
	atomic_store(&c->cur_task, 0);
	atomic_store(&c->run_from, 0);
	atomic_store(&c->result_head, 0);
	atomic_store(&c->result_tail, 0);
	atomic_store(&c->bell.sleeping, 0);
	atomic_store(&c->state, WS_SPAWNED);
	atomic_store(&c->stop, 0);
	c->message[0] = '\0';
	w->task_head = w->task_free = w->start_pos = w->result_tail = 0;
	w->outstanding = 0;
	w->window = 1;
	w->task_seconds = 0;
	w->state = HW_STARTING;
	w->timed_out = false;
	w->cancelled = false;
	w->pid = -1;
}

int shm_create(struct host *h)
{
	const struct cfg *c = h->cfg;
	unsigned n = h->n_workers;
	uint64_t res_payload = c->max_result_bytes > SHM_MSG_MAX ? c->max_result_bytes : SHM_MSG_MAX;
	uint64_t per_worker_queue = (c->queue_size + n - 1) / n;
	uint64_t small = 2 * SHM_REC_HDR * per_worker_queue;

	h->task_need = ring_span(c->max_task_bytes);
	/* A batching worker holds a whole batch of tasks, and reserves a full result slot
	 * for each before the call. */
	uint64_t batch = c->batch_size;
	uint64_t task_cap = ring_capacity_for(h->task_need * batch, small > MIN_RING ? small : MIN_RING);
	uint64_t result_cap = ring_capacity_for(ring_span(res_payload) * batch,
						small > MIN_RING ? small : MIN_RING);
	size_t blob = config_blob(h, NULL);

	uint64_t workers_off = sizeof(struct shm_header);
	uint64_t config_off = workers_off + (uint64_t)n * sizeof(struct shm_worker);
	uint64_t rings_off = align_up(config_off + blob, PAGE);
	uint64_t total = rings_off + (uint64_t)n * (task_cap + result_cap);

	h->shm_fd = memfd_create("gpud-run", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (h->shm_fd < 0) {
		fprintf(stderr, "gpud: memfd_create: %s\n", strerror(errno));
		return -1;
	}
	/* Keep it off fd 3, where the workers want it: dup2 onto itself would keep
	 * close-on-exec set. */
	if (h->shm_fd <= 3) {
		int fd = fcntl(h->shm_fd, F_DUPFD_CLOEXEC, 10);
		close(h->shm_fd);
		h->shm_fd = fd;
	}
	if (ftruncate(h->shm_fd, (off_t)total) < 0) {
		fprintf(stderr, "gpud: cannot size the shared memory to %llu bytes: %s\n",
			(unsigned long long)total, strerror(errno));
		return -1;
	}
	/* A worker cannot shrink it under the host (a SIGBUS) or grow it. */
	fcntl(h->shm_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, h->shm_fd, 0);
	if (m == MAP_FAILED) {
		fprintf(stderr, "gpud: cannot map %llu bytes of shared memory (%u workers, "
				"max_task_bytes %u, max_result_bytes %u): %s\n",
			(unsigned long long)total, n, c->max_task_bytes, c->max_result_bytes,
			strerror(errno));
		return -1;
	}
	h->hdr = m;
	h->shm_size = total;
	*h->hdr = (struct shm_header){
		.magic = SHM_MAGIC,
		.version = SHM_VERSION,
		.header_size = sizeof(struct shm_header),
		.total_size = total,
		.n_workers = n,
		.worker_size = sizeof(struct shm_worker),
		.workers_off = workers_off,
		.config_off = config_off,
		.config_len = blob,
		.n_args = (uint32_t)c->worker.count,
		.max_task_bytes = c->max_task_bytes,
		.max_result_bytes = c->max_result_bytes,
		.batch_size = c->batch_size,
		.pin_memory = (uint32_t)c->pin_memory,
		.batch_wait_ns = (uint64_t)(c->batch_wait_ms * 1e6),
	};
	config_blob(h, (char *)m + config_off);

	struct shm_worker *ctl = (struct shm_worker *)((uint8_t *)m + workers_off);
	for (unsigned k = 0; k < n; k++) {
		struct host_worker *w = &h->w[k];
		uint64_t t_off = rings_off + (uint64_t)k * (task_cap + result_cap);
		w->ctl = &ctl[k];
		w->tasks = (struct ring){(uint8_t *)m + t_off, task_cap};
		w->results = (struct ring){(uint8_t *)m + t_off + task_cap, result_cap};
		ctl[k].worker_id = w->index;
		ctl[k].gpu_id = w->gpu_id;
		ctl[k].seed = c->base_seed + (uint64_t)w->index;
		ctl[k].task_ring_off = t_off;
		ctl[k].task_ring_cap = task_cap;
		ctl[k].result_ring_off = t_off + task_cap;
		ctl[k].result_ring_cap = result_cap;
		shm_reset_worker(h, w);
	}
	return 0;
}

void shm_destroy(struct host *h)
{
	if (h->hdr)
		munmap(h->hdr, h->shm_size);
	if (h->shm_fd >= 0)
		close(h->shm_fd);
	h->hdr = NULL;
	h->shm_fd = -1;
}
