/* SPDX-License-Identifier: MIT */
/* A chunk counter in rank 0's MPI window, libmpi loaded at run time (mpi.h). */
#define _GNU_SOURCE
#include "cluster/mpi.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Open MPI's ABI: handles are pointers (to its predefined globals for the predefined
 * objects); MPI_Aint is a pointer-sized signed integer. */
typedef void *ompi_handle;
typedef ptrdiff_t mpi_aint;
#define OMPI_SUCCESS 0
#define OMPI_THREAD_MULTIPLE 3
#define OMPI_ANY_SOURCE (-1)
#define OMPI_ANY_TAG (-1)

struct mpi_counter {
	void *lib;
	int (*initialized)(int *);
	int (*init_thread)(int *, char ***, int, int *);
	int (*comm_rank)(ompi_handle, int *);
	int (*comm_size)(ompi_handle, int *);
	int (*win_allocate)(mpi_aint, int, ompi_handle, ompi_handle, void *, ompi_handle *);
	int (*win_lock_all)(int, ompi_handle);
	int (*win_unlock_all)(ompi_handle);
	int (*win_flush)(int, ompi_handle);
	int (*win_free)(ompi_handle *);
	int (*fetch_and_op)(const void *, void *, ompi_handle, int, mpi_aint, ompi_handle,
			    ompi_handle);
	int (*barrier)(ompi_handle);
	int (*iprobe)(int, int, ompi_handle, int *, void *);
	int (*finalize)(void);
	ompi_handle world, u64, sum, info_null;
	ompi_handle win;
	uint64_t *base;
	bool locked, inited;
};

#define SYM(m, field, name)                                                                        \
	do {                                                                                       \
		*(void **)&(m)->field = dlsym((m)->lib, name);                                     \
		if (!(m)->field) {                                                                 \
			snprintf(why, len, "%s has no %s: not Open MPI", lib_name, name);          \
			goto not_here;                                                             \
		}                                                                                  \
	} while (0)

int mpi_counter_open(struct mpi_counter **out, unsigned rank, unsigned ranks, uint64_t start,
		     char *why, size_t len)
{
	static const char lib_name[] = "libmpi.so.40";
	*out = NULL;
	const char *off = getenv("GPUD_NO_MPI");
	if (off && *off && strcmp(off, "0") != 0) {
		snprintf(why, len, "GPUD_NO_MPI is set");
		return 1;
	}
	if (!getenv("OMPI_COMM_WORLD_SIZE")) {
		snprintf(why, len, "not under Open MPI's mpirun");
		return 1;
	}
	struct mpi_counter *m = calloc(1, sizeof *m);
	if (!m) {
		snprintf(why, len, "out of memory");
		return -1;
	}
	/* RTLD_GLOBAL: libmpi's own components (dlopen'ed by it) resolve against it. */
	m->lib = dlopen(lib_name, RTLD_NOW | RTLD_GLOBAL);
	if (!m->lib) {
		snprintf(why, len, "no %s (Debian: libopenmpi3)", lib_name);
		goto not_here;
	}
	SYM(m, initialized, "MPI_Initialized");
	SYM(m, init_thread, "MPI_Init_thread");
	SYM(m, comm_rank, "MPI_Comm_rank");
	SYM(m, comm_size, "MPI_Comm_size");
	SYM(m, win_allocate, "MPI_Win_allocate");
	SYM(m, win_lock_all, "MPI_Win_lock_all");
	SYM(m, win_unlock_all, "MPI_Win_unlock_all");
	SYM(m, win_flush, "MPI_Win_flush");
	SYM(m, win_free, "MPI_Win_free");
	SYM(m, fetch_and_op, "MPI_Fetch_and_op");
	SYM(m, barrier, "MPI_Barrier");
	SYM(m, iprobe, "MPI_Iprobe");
	SYM(m, finalize, "MPI_Finalize");
	SYM(m, world, "ompi_mpi_comm_world");
	SYM(m, u64, "ompi_mpi_uint64_t");
	SYM(m, sum, "ompi_mpi_op_sum");
	SYM(m, info_null, "ompi_mpi_info_null");
	int flag = 0, provided = 0, r = -1, n = 0;
	if (m->initialized(&flag) != OMPI_SUCCESS || flag) {
		snprintf(why, len, "MPI was initialised already");
		goto not_here;
	}
	/* gpud starts and restarts its workers with fork: Open MPI's warning about it is
	 * for children that would use MPI, which they never do. */
	setenv("OMPI_MCA_mpi_warn_on_fork", "0", 0);
	if (m->init_thread(NULL, NULL, OMPI_THREAD_MULTIPLE, &provided) != OMPI_SUCCESS) {
		snprintf(why, len, "MPI_Init_thread failed");
		goto fail;
	}
	m->inited = true;
	if (m->comm_rank(m->world, &r) != OMPI_SUCCESS ||
	    m->comm_size(m->world, &n) != OMPI_SUCCESS) {
		snprintf(why, len, "MPI_Comm_rank or MPI_Comm_size failed");
		goto fail;
	}
	/* Every rank takes the same way, or none: a rank that went on without the
	 * counter would claim through the filesystem, out of the counter's sight. The
	 * checks below give every rank the same answer. */
	if ((unsigned)n != ranks) {
		snprintf(why, len, "MPI_COMM_WORLD has %d ranks, and this run %u", n, ranks);
		goto fail;
	}
	if (provided < OMPI_THREAD_MULTIPLE) {
		snprintf(why, len, "this Open MPI gives no MPI_THREAD_MULTIPLE");
		goto fail;
	}
	if ((unsigned)r != rank) {
		snprintf(why, len, "MPI rank %d is gpud's rank %u", r, rank);
		goto fail;
	}
	if (m->win_allocate(r == 0 ? (mpi_aint)sizeof(uint64_t) : 0, (int)sizeof(uint64_t),
			    m->info_null, m->world, &m->base, &m->win) != OMPI_SUCCESS) {
		snprintf(why, len, "MPI_Win_allocate failed");
		goto fail;
	}
	if (r == 0)
		*m->base = start;
	/* Nobody adds before rank 0 has set it. */
	if (m->barrier(m->world) != OMPI_SUCCESS || m->win_lock_all(0, m->win) != OMPI_SUCCESS) {
		snprintf(why, len, "MPI_Barrier or MPI_Win_lock_all failed");
		goto fail;
	}
	m->locked = true;
	*out = m;
	return 0;
not_here:
	mpi_counter_close(m);
	return 1;
fail:
	mpi_counter_close(m);
	return -1;
}

int mpi_counter_add(struct mpi_counter *m, uint64_t n, uint64_t *old)
{
	if (m->fetch_and_op(&n, old, m->u64, 0, 0, m->sum, m->win) != OMPI_SUCCESS ||
	    m->win_flush(0, m->win) != OMPI_SUCCESS)
		return -1;
	return 0;
}

void mpi_counter_progress(struct mpi_counter *m)
{
	int flag;
	m->iprobe(OMPI_ANY_SOURCE, OMPI_ANY_TAG, m->world, &flag, NULL);
}

void mpi_counter_close(struct mpi_counter *m)
{
	if (!m)
		return;
	if (m->locked)
		m->win_unlock_all(m->win);
	if (m->win)
		m->win_free(&m->win);
	if (m->inited)
		m->finalize();
	/* libmpi stays loaded: its atexit handlers and threads may still run. */
	free(m);
}
