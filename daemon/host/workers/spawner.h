/* SPDX-License-Identifier: MIT */
/* Starting worker processes and helpers (spawn.c). */
#ifndef GPUD_SPAWNER_H
#define GPUD_SPAWNER_H

#include <stddef.h>

#include "host.h"

int spawn_worker(struct host *h, struct host_worker *w);
/* The thread a warm pool's workers are started from (host_pool.spawner). A worker dies
 * with the thread that started it (PR_SET_PDEATHSIG names a thread, not the process):
 * a pool's outlive its runs' threads (the stand-in, a caller's thread that ends), so
 * they are started from this one, which lives until the pool is closed. */
struct spawn_thread;
/* Started with every signal blocked; NULL when it cannot be (errno). */
struct spawn_thread *spawn_thread_start(void);
/* Ended and freed (its workers ended first: their PR_SET_PDEATHSIG fires). NULL ignored. */
void spawn_thread_stop(struct spawn_thread *st);
/* Sends sig to a child we started in a process group of its own (a worker, a helper):
 * to that group, and to the child itself, which may have left the group (for ours, a
 * session of its own, anyone's). pid must not have been reaped yet: until then it
 * cannot name another process. */
void spawn_kill(pid_t pid, int sig);
/* Loads the worker plugin in a helper process, as a worker would. On success `out`
 * holds "name version", then, when the plugin declares its keys, a line "keys" and
 * one key a line. */
int spawn_check_worker_plugin(const char *worker_exe, const char *plugin, char *out, size_t outlen,
			      char *err, size_t errlen);
/* gpud plugins: "kind\tname\tversion\tdescription" of a plugin, from a helper process
 * (a worker plugin never loads into the host). 0, or -1 with err. */
int spawn_describe(const char *worker_exe, const char *plugin, char *out, size_t outlen, char *err,
		   size_t errlen);
/* The CUDA device count, from a short-lived gpud-worker (the host never loads CUDA);
 * -1 with err. bus_ids[i] (when not NULL, up to max) gets device i's PCI bus id, or
 * stays as it is when CUDA gave none. */
#define SPAWN_BUS_ID 32
int spawn_count_gpus(const char *worker_exe, char (*bus_ids)[SPAWN_BUS_ID], size_t max, char *err,
		     size_t errlen);

/* How long a helper process may take before it is killed. */
#define SPAWN_HELPER_TIMEOUT_S 30

#endif
