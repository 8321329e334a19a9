/* SPDX-License-Identifier: MIT */
/* What `gpud check` verifies beyond the job file's syntax, without side effects: the
 * keys each plugin declares, the plugins' own checks, the folders a run would write. */
#ifndef GPUD_CHECKS_H
#define GPUD_CHECKS_H

#include <stddef.h>
#include <stdio.h>

#include "job/config.h"

struct plugin;
struct gen_ops;
struct sink_ops;

/* A file a run will write (create or replace): an existing regular file we may write,
 * or a new name in an existing folder we may write in. Touches nothing. 0, or -1 with
 * why. */
int check_file_writable(const char *path, char *why, size_t len);

/* A folder a run will use, creating it (not its parents) when missing. 0, or -1. */
int check_dir_usable(const char *dir, char *why, size_t len);

/* The keys in a worker helper's answer ("name version\nkeys\nk1\n..."): the lines
 * after "keys", as a NULL-terminated array (the caller frees) pointing into `text`,
 * which is cut into lines. NULL when the plugin declared none. */
const char **checks_worker_keys(char *text);

/* Every key of the three plugin sections, against the keys each plugin declares
 * (gpud_plugin_keys): the loaded generator and sink (gen_pl, sink_pl: not loaded, no
 * keys declared). `worker_out` is what the worker plugin's helper printed
 * (spawn_check_worker_plugin). 0, or -1 with one line on standard error. */
int checks_keys(const struct plugin *gen_pl, const struct plugin *sink_pl, const struct cfg *c,
		const char *worker_out);

/* `gpud check` only: the generator's and the sink's check entry points, log_dir, the
 * journal, the metrics file. Says on `out` what could not be checked. 0, or -1 with one line on
 * standard error. */
int checks_dry(const struct gen_ops *gen, const struct sink_ops *sink, const struct cfg *c,
	       FILE *out);

#endif
