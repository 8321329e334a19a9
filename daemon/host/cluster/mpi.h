/* SPDX-License-Identifier: MIT */
/*
 * A chunk counter in MPI's one-sided memory (mpi.c): under Open MPI's mpirun, dynamic
 * shares take the end of the chain of claims from a counter in rank 0's window
 * (MPI_Fetch_and_op, passive target), so no two ranks ever try the same claim. libmpi is
 * loaded at run time (dlopen "libmpi.so.40", Open MPI 3 and 4): the same gpud binary
 * runs where there is no MPI, and builds without MPI's headers, declaring the few calls
 * it makes. Open MPI's handles for the predefined objects (MPI_COMM_WORLD, MPI_UINT64_T,
 * MPI_SUM, MPI_INFO_NULL) are the addresses of its globals (ompi_mpi_comm_world, ...),
 * looked up by name; MPICH's ABI (integer handles) is another, and is not used: there,
 * and wherever libmpi does not load, the claims go through the filesystem alone.
 *
 * Every claim is still recorded in the claims folder (status, resume, takeover read it
 * there); the counter only hands out where each one starts. Set GPUD_NO_MPI=1 to claim
 * through the filesystem under mpirun too.
 *
 * Threads: mpi_counter_add from the feeding thread, mpi_counter_progress from the lease
 * thread (MPI_THREAD_MULTIPLE is asked for; with less, the counter is not used).
 */
#ifndef GPUD_MPI_H
#define GPUD_MPI_H

#include <stddef.h>
#include <stdint.h>

struct mpi_counter;

/* Under Open MPI's mpirun, rank `rank` of `ranks` (as the launcher's environment said):
 * MPI initialised, and the counter made in rank 0's window, set to `start` (rank 0's)
 * there. 0 with *out set; 1 when MPI is not used here (not under mpirun, GPUD_NO_MPI,
 * no libmpi, a size or rank that differs, no MPI_THREAD_MULTIPLE), with why saying
 * so; -1 with why on an MPI error. Collective: every rank calls it. */
int mpi_counter_open(struct mpi_counter **out, unsigned rank, unsigned ranks, uint64_t start,
		     char *why, size_t len);
/* Adds n to the counter: *old gets its value before. 0, or -1. */
int mpi_counter_add(struct mpi_counter *m, uint64_t n, uint64_t *old);
/* Lets MPI progress (a target with no hardware atomics serves others' adds only from
 * inside an MPI call). */
void mpi_counter_progress(struct mpi_counter *m);
/* Collective: frees the window and finalises MPI. */
void mpi_counter_close(struct mpi_counter *m);

#endif
