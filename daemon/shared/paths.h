/* SPDX-License-Identifier: MIT */
/* Where gpud's own files are: found from the running executable, so the build tree, an
 * install prefix and a moved prefix all work. */
#ifndef GPUD_PATHS_H
#define GPUD_PATHS_H

#include <stddef.h>

/* The folder holding the running executable (static storage; NULL if unknown). */
const char *paths_exe_dir(void);

/* The built-in plugin folders to search, in order, NULL-terminated (static storage). */
const char *const *paths_plugin_dirs(void);

/* The worker executable's path, malloc'd, or NULL when it cannot be found. */
char *paths_worker_exe(void);

#endif /* GPUD_PATHS_H */
