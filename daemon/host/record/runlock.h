/* SPDX-License-Identifier: MIT */
/*
 * One run of a job at a time (runlock.c). Two runs of one job, or a `--resume` racing a
 * run that is still shutting down, would interleave their journal records and their
 * outputs. So a run holds a lock on each file it writes that another run of the same
 * job would write too: the journal, the sink's output files (keys path, file, *_path,
 * *_file) and folders (dir, *_dir). The lock is flock(2) on a lock file beside the file
 * (`.NAME.lock` in its folder, symlinks resolved: a link and its target are one output;
 * two hard links to one file are not told apart) or in the folder (`.gpud.lock`), which
 * holds who took it (pid, host, start time, job file) for the refusal to name. flock dies with its
 * holder: a run killed with kill -9 never blocks the next one. The lock file is removed while held
 * at the end of a run (a run ended by _exit, from the loop's stand-in, leaves it, unlocked, for the
 * next to take); a run that finds the file it locked removed meanwhile locks the new one instead.
 *
 * `gpud check` and `gpud status` look without taking or making anything.
 */
#ifndef GPUD_RUNLOCK_H
#define GPUD_RUNLOCK_H

#include <stddef.h>

#include "job/config.h"

#define RUNLOCK_MAX 16

struct runlock {
	int fd[RUNLOCK_MAX];
	char *path[RUNLOCK_MAX];
	unsigned n;
};

/* Takes the run's locks. 0; -1 with one line in why naming the other run (another run
 * holds one) or what failed. The locks are released by runlock_release, or when the
 * process ends. */
int runlock_take(struct runlock *l, const struct cfg *c, char *why, size_t len);
/* Without taking or making anything: 0 when no other run holds a lock of this job, -1
 * with one line in why naming it. */
int runlock_probe(const struct cfg *c, char *why, size_t len);
void runlock_release(struct runlock *l);

#endif /* GPUD_RUNLOCK_H */
