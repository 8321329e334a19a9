/* SPDX-License-Identifier: MIT */
/* The host's children (children.c). */
#ifndef GPUD_CHILDREN_H
#define GPUD_CHILDREN_H

#include <sys/types.h>

struct host;

/* Reaps every child that exited; a worker's exit is marked (w->exited) for
 * lifecycle_exited, once the dispatcher has taken in its last results. */
void lifecycle_reap(struct host *h);
/* End of run: kills and reaps every process left below the host (children of workers
 * that outlived them), but the ones lifecycle_children_note saw; returns how many. */
unsigned lifecycle_sweep(void);
/* Notes the process's children at the start of a run (a libgpud caller's): neither
 * lifecycle_reap nor lifecycle_sweep touches them, nor takes their exit status.
 * lifecycle_children_forget ends that at the run's end. */
void lifecycle_children_note(void);
void lifecycle_children_forget(void);
/* A worker a warm pool keeps after the run (run.c): left alone by lifecycle_sweep, as the
 * caller's children are. */
void lifecycle_children_keep(pid_t pid);

#endif /* GPUD_CHILDREN_H */
