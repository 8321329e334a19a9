/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "paths.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Set by meson: the install layout, relative to the folder of the installed gpud
 * (bindir) and to that of the installed libgpud (libdir). */
#ifndef GPUD_PLUGINDIR_REL
#define GPUD_PLUGINDIR_REL "../lib/gpud/plugins"
#endif
#ifndef GPUD_LIBEXECDIR_REL
#define GPUD_LIBEXECDIR_REL "../libexec/gpud"
#endif
#ifndef GPUD_PLUGINDIR_FROM_LIB
#define GPUD_PLUGINDIR_FROM_LIB "gpud/plugins"
#endif
#ifndef GPUD_LIBEXECDIR_FROM_LIB
#define GPUD_LIBEXECDIR_FROM_LIB "../libexec/gpud"
#endif

static char exe_dir[PATH_MAX];
static int in_library = -1; /* this code is in a shared object (libgpud), not the program */

/* The file this code was loaded from: libgpud.so when the host runs as the library
 * (the `gpud` command or a program that links it, wherever that program lives), else
 * the running program (gpud-worker, a test linked statically). */
static int code_file(char *buf, size_t len)
{
	Dl_info info;
	struct link_map *map = NULL;
	if (dladdr1((void *)code_file, &info, (void **)&map, RTLD_DL_LINKMAP) != 0 && map &&
	    map->l_name && map->l_name[0] == '/') {
		snprintf(buf, len, "%s", map->l_name);
		in_library = 1;
		return 0;
	}
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	in_library = 0;
	return 0;
}

const char *paths_exe_dir(void)
{
	if (!exe_dir[0]) {
		char buf[PATH_MAX];
		if (code_file(buf, sizeof buf) < 0)
			return NULL;
		char *real = realpath(buf, NULL); /* a symlinked libgpud.so.1 is found as itself */
		snprintf(buf, sizeof buf, "%s", real ? real : buf);
		free(real);
		char *slash = strrchr(buf, '/');
		if (!slash)
			return NULL;
		*slash = '\0';
		snprintf(exe_dir, sizeof exe_dir, "%s", buf);
	}
	return exe_dir;
}

static int is_dir(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *const *paths_plugin_dirs(void)
{
	static char dirs[2][PATH_MAX];
	static const char *list[3];
	if (list[0])
		return list;
	const char *exe = paths_exe_dir();
	size_t n = 0;
	if (exe) {
		/* The build tree: build/daemon/ (gpud, libgpud.so) next to build/plugins/. */
		snprintf(dirs[n], PATH_MAX, "%s/../plugins", exe);
		if (is_dir(dirs[n]))
			n++;
		snprintf(dirs[n], PATH_MAX, "%s/%s", exe,
			 in_library == 1 ? GPUD_PLUGINDIR_FROM_LIB : GPUD_PLUGINDIR_REL);
		if (is_dir(dirs[n]))
			n++;
	}
	for (size_t i = 0; i < n; i++) {
		char *real = realpath(dirs[i], NULL);
		if (real) {
			snprintf(dirs[i], PATH_MAX, "%s", real);
			free(real);
		}
		list[i] = dirs[i];
	}
	list[n] = NULL;
	return list;
}

char *paths_worker_exe(void)
{
	const char *env = getenv("GPUD_WORKER_EXE");
	if (env && *env)
		return access(env, X_OK) == 0 ? realpath(env, NULL) : NULL;
	const char *exe = paths_exe_dir();
	const char *installed = in_library == 1 ? "%s/" GPUD_LIBEXECDIR_FROM_LIB "/gpud-worker"
						: "%s/" GPUD_LIBEXECDIR_REL "/gpud-worker";
	const char *cands[] = {"%s/gpud-worker", installed};
	char buf[PATH_MAX];
	if (!exe)
		return NULL;
	for (size_t i = 0; i < 2; i++) {
		snprintf(buf, sizeof buf, cands[i], exe);
		if (access(buf, X_OK) == 0)
			return realpath(buf, NULL);
	}
	return NULL;
}
