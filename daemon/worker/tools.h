/* SPDX-License-Identifier: MIT */
#ifndef GPUD_WORKER_TOOLS_H
#define GPUD_WORKER_TOOLS_H

/* --check PLUGIN: loads it as a worker plugin; prints name and version; 0 or 2. */
int worker_check(const char *path);
/* --count-gpus: prints the CUDA device count, or one line naming the CUDA error; 0 or 2. */
int worker_count_gpus(void);
/* --describe PLUGIN: prints "kind\tname\tversion\tdescription"; 0 or 2. */
int worker_describe(const char *path);

#endif
