/* SPDX-License-Identifier: MIT */
/* The worker plugin's configuration, as the host wrote it in the run memfd (memory.c). */
#ifndef GPUD_WORKER_CONFIG_H
#define GPUD_WORKER_CONFIG_H

#include <gpud/plugin.h>

#include "shm_layout.h"

/* What the plugin is given: its path and its keys. The strings point into the mapped
 * blob; `kv` is allocated (one entry at least) and lives as long as the process. */
struct plugin_config {
	const char *path;
	struct gpud_kv *kv;
	struct gpud_args args;
};

/* Reads the plugin path and [worker] args from the config blob of `hdr` (the whole
 * mapped run memfd, hdr->total_size bytes), bounds-checked; a CPU stage's worker
 * (stage >= 0) reads its [stage.NAME]'s, which follow. 0, or -1 when the blob is
 * malformed (or no memory). */
int config_read(struct plugin_config *c, const struct shm_header *hdr, long stage);

#endif
