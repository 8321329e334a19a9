/* SPDX-License-Identifier: MIT */
/*
 * Task names (ABI 1.9): the name a generator gave a task (gpud_generator_name, a
 * sample's key), kept by task id from its generation to the sink's taking its outcome,
 * for every event of the task (gpud_event.name). Only names given are kept, and only
 * while their task is on its way: a run of 100 M tasks without names holds nothing, one
 * with names holds those of the tasks in flight and held for ordered delivery. The
 * journal does not keep them. Owned by run/events.c (struct host_out); the loop's
 * thread and, while it holds the loop, the stand-in use it (never both at once).
 */
#ifndef GPUD_NAMES_H
#define GPUD_NAMES_H

#include <stddef.h>
#include <stdint.h>

struct task_name;

struct task_names {
	struct task_name **bucket; /* nbucket, a power of two; chains */
	size_t nbucket, n;
};

/* Keeps a copy of `name` (cut to GPUD_NAME_MAX bytes at a UTF-8 character's start) for
 * task `id`, in place of one it had. 0, or -1 out of memory (the task goes unnamed). */
int names_put(struct task_names *m, uint64_t id, const char *name);
/* Task id's name, or NULL. Valid until names_drop(id) or names_free. */
const char *names_get(const struct task_names *m, uint64_t id);
/* Forgets task id's name (if any). */
void names_drop(struct task_names *m, uint64_t id);
/* Forgets every name: the run's end. */
void names_free(struct task_names *m);

#endif /* GPUD_NAMES_H */
