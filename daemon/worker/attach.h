/* SPDX-License-Identifier: MIT */
/*
 * The worker tied to the host: it dies with the host, leaves the job's signals to it,
 * and a thread of its own watches the host (watch_host in attach.c): while a call runs
 * long it publishes the results finished before it and asks a plugin that can to end a
 * call past task_timeout. Also the flag of a child the plugin forked.
 */
#ifndef GPUD_WORKER_ATTACH_H
#define GPUD_WORKER_ATTACH_H

#include <stdbool.h>
#include <unistd.h>

struct worker;

/* Set in every child the plugin forks (pthread_atfork). Such a child has none of the
 * run's shared memory: every shared mapping is MADV_DONTFORK, so it has no rings, no
 * report block and no bells, however it was made. One that returns into our code (a
 * failed exec) leaves quietly (leave_if_forked) instead of faulting on the first ring
 * it reaches. */
extern bool attach_forked_child;

/* After each call into the plugin: a plain load, no syscall on the way of a task. */
static inline void leave_if_forked(void)
{
	if (__builtin_expect(attach_forked_child, 0))
		_exit(0);
}

/* Ties this process to the host: dies with it, leaves the job's signals to it, and
 * starts the thread that watches it. 0, or -1 (the host is gone, or no thread). */
int attach_to_host(long host_pid);

/* From now on the watcher looks after w (its shared memory mapped, the plugin set up). */
void attach_watch(struct worker *w);

#endif
