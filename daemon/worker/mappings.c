/* SPDX-License-Identifier: MIT */
/* The run's shared memory mapped, and the rings pinned for the GPU (mappings.h). */
#define _GNU_SOURCE
#include "mappings.h"

#include <dlfcn.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker.h"

/* Maps `len` bytes of fd at `off` with an inaccessible guard page on either side, so
 * a write running off either end faults instead of landing in other memory. */
static void *map_guarded(int fd, uint64_t off, uint64_t len, int prot)
{
	uint8_t *area =
		mmap(NULL, len + 2 * SHM_PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (area == MAP_FAILED)
		return NULL;
	void *m = mmap(area + SHM_PAGE, len, prot, MAP_SHARED | MAP_FIXED, fd, (off_t)off);
	if (m == MAP_FAILED || madvise(m, len, MADV_DONTFORK) < 0) {
		munmap(area, len + 2 * SHM_PAGE);
		return NULL;
	}
	return m;
}

int mappings_open(struct worker *w, long index)
{
	struct stat st, out;
	if (fstat(SHM_FD_RUN, &st) < 0 || (size_t)st.st_size < sizeof(struct shm_header) ||
	    fstat(SHM_FD_OUT, &out) < 0)
		return -1;
	/* Every shared mapping is MADV_DONTFORK: a child the plugin forks has none of
	 * them, so it can neither read tasks nor write results (attach_forked_child). */
	void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, SHM_FD_RUN, 0);
	if (m == MAP_FAILED || madvise(m, (size_t)st.st_size, MADV_DONTFORK) < 0)
		return -1;
	const struct shm_header *h = w->hdr = m;
	if (h->magic != SHM_MAGIC || h->version != SHM_VERSION || h->header_size != sizeof *h ||
	    h->feed_size != sizeof(struct shm_feed) ||
	    h->report_size != sizeof(struct shm_report) || h->total_size != (uint64_t)st.st_size ||
	    index < 0 || index >= h->n_workers ||
	    h->feeds_off + (uint64_t)h->n_workers * sizeof(struct shm_feed) > h->total_size ||
	    h->out_size != (uint64_t)out.st_size || h->out_size <= SHM_OUT_RING_OFF)
		return -1;
	w->feed = (const struct shm_feed *)((const uint8_t *)m + h->feeds_off) + index;
	const struct shm_feed *f = w->feed;
	if (f->task_ring_off + f->task_ring_cap > h->total_size ||
	    SHM_OUT_RING_OFF + f->result_ring_cap > h->out_size)
		return -1;
	w->rep = map_guarded(SHM_FD_OUT, 0, SHM_PAGE, PROT_READ | PROT_WRITE);
	uint8_t *results = map_guarded(SHM_FD_OUT, SHM_OUT_RING_OFF, f->result_ring_cap,
				       PROT_READ | PROT_WRITE);
	_Atomic uint32_t *bell =
		mmap(NULL, SHM_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, SHM_FD_BELL, 0);
	if (!w->rep || !results || bell == MAP_FAILED || madvise(bell, SHM_PAGE, MADV_DONTFORK) < 0)
		return -1;
	close(SHM_FD_RUN);
	close(SHM_FD_OUT);
	close(SHM_FD_BELL);
	w->tasks = (struct ring){(uint8_t *)m + f->task_ring_off, f->task_ring_cap, 0};
	w->results = (struct ring){results, f->result_ring_cap, SHM_SLOT_GAP};
	w->host_bell =
		(struct wait_bell){.bell = bell, .sleeping = (_Atomic uint32_t *)&h->host_sleeping};
	/* Going to sleep, a worker rings the host's bell: if the host loop is stuck in a
	 * generator call, its stand-in looks at once (standin.h). */
	w->my_bell = (struct wait_bell){.bell = (_Atomic uint32_t *)&f->bell.bell,
					.sleeping = &w->rep->sleeping,
					.tell = bell};
	uint32_t res = h->max_result_bytes > SHM_MSG_MAX ? h->max_result_bytes : SHM_MSG_MAX;
	w->result_need = ring_slot_span(res);
	w->task_tail = w->task_head = f->task_base;
	atomic_store(&w->rep->task_tail, f->task_base);
	atomic_store(&w->rep->run_from, f->task_base);
	return 0;
}

int mappings_pin(struct worker *w, char *why, size_t len)
{
	static const char *const names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so",
					    "/usr/local/cuda/lib64/libcudart.so"};
	uint32_t mode = w->hdr->pin_memory;
	void *lib = NULL;
	if (mode == SHM_PIN_OFF || w->cpu_stage) /* a CPU stage's worker has no GPU */
		return 0;
	/* auto: only when the plugin brought the CUDA runtime in with it, so a plugin that
	 * does not use CUDA never pays for a CUDA context. */
	for (size_t i = 0; i < sizeof names / sizeof *names && !lib; i++)
		lib = dlopen(names[i],
			     RTLD_NOW | RTLD_LOCAL | (mode == SHM_PIN_AUTO ? RTLD_NOLOAD : 0));
	if (!lib) {
		if (mode == SHM_PIN_AUTO)
			return 0;
		snprintf(why, len, "pin_memory = on: cannot load the CUDA runtime (libcudart)");
		return -1;
	}
	int (*reg)(void *, size_t, unsigned) =
		(int (*)(void *, size_t, unsigned))dlsym(lib, "cudaHostRegister");
	const char *(*name)(int) = (const char *(*)(int))dlsym(lib, "cudaGetErrorName");
	const char *(*text)(int) = (const char *(*)(int))dlsym(lib, "cudaGetErrorString");
	int (*last)(void) = (int (*)(void))dlsym(lib, "cudaGetLastError");
	if (!reg) {
		if (mode == SHM_PIN_AUTO)
			return 0;
		snprintf(why, len, "pin_memory = on: libcudart has no cudaHostRegister");
		return -1;
	}
	/* The task ring is mapped read-only here: it is registered as such. */
	int rc = reg(w->tasks.base, w->tasks.cap,
		     1 /* cudaHostRegisterPortable */ | 8 /* cudaHostRegisterReadOnly */);
	if (rc == 0)
		rc = reg(w->results.base, w->results.cap, 1 /* cudaHostRegisterPortable */);
	if (rc == 0)
		return 1;
	if (last)
		last(); /* leave no sticky error behind for the plugin */
	if (mode == SHM_PIN_AUTO)
		return 0;
	snprintf(why, len,
		 "pin_memory = on: cudaHostRegister of the task and result rings failed: %s (%s)",
		 name ? name(rc) : "error", text ? text(rc) : "?");
	return -1;
}
