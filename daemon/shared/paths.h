/* SPDX-License-Identifier: MIT */
/* Where gpud's own files are: found from the file gpud's code was loaded from (libgpud.so,
 * else the running program), so the build tree, an install prefix, a moved prefix and a
 * program in another folder that links libgpud all work. */
#ifndef GPUD_PATHS_H
#define GPUD_PATHS_H

#include <stddef.h>

/* The folder holding libgpud.so, or the running program when gpud's code is linked into
 * it (static storage; NULL if unknown). */
const char *paths_exe_dir(void);

/* The built-in plugin folders to search, in order, NULL-terminated (static storage). */
const char *const *paths_plugin_dirs(void);

/* The worker executable's path, malloc'd, or NULL when it cannot be found:
 * GPUD_WORKER_EXE when set, else next to paths_exe_dir(), else in the install layout. */
char *paths_worker_exe(void);

#endif /* GPUD_PATHS_H */
