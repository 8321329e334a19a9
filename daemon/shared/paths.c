/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "paths.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Set by meson: the install layout, relative to the folder of the installed gpud. */
#ifndef GPUD_PLUGINDIR_REL
#define GPUD_PLUGINDIR_REL "../lib/gpud/plugins"
#endif
#ifndef GPUD_LIBEXECDIR_REL
#define GPUD_LIBEXECDIR_REL "../libexec/gpud"
#endif

static char exe_dir[PATH_MAX];

const char *paths_exe_dir(void)
{
	if (!exe_dir[0]) {
		char buf[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
		if (n <= 0)
			return NULL;
		buf[n] = '\0';
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
		/* The build tree: build/daemon/gpud next to build/plugins/. */
		snprintf(dirs[n], PATH_MAX, "%s/../plugins", exe);
		if (is_dir(dirs[n]))
			n++;
		snprintf(dirs[n], PATH_MAX, "%s/%s", exe, GPUD_PLUGINDIR_REL);
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
	const char *exe = paths_exe_dir();
	const char *cands[] = {"%s/gpud-worker", "%s/" GPUD_LIBEXECDIR_REL "/gpud-worker"};
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
