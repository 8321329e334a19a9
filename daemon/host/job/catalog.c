/* SPDX-License-Identifier: MIT */
/* `gpud plugins`: every plugin gpud can find by name, with its kind, version and
 * description: the folders of GPUD_PLUGIN_PATH first, then the built-in folder. */
#define _GNU_SOURCE
#include "job/catalog.h"
#include "util/log.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job/python.h"
#include "workers/spawner.h"
#include "paths.h"

static bool python_listed; /* a python plugin was listed: say which Python it gets */

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Lists one folder; returns how many plugins it printed. */
static int list_dir(const char *worker_exe, const char *dir, const char *origin)
{
	DIR *d = opendir(dir);
	if (!d) {
		printf("%s (%s): cannot read it\n", dir, origin);
		return 0;
	}
	char **names = NULL;
	size_t n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l < 4 || strcmp(e->d_name + l - 3, ".so") != 0)
			continue;
		if (strncmp(e->d_name, "worker-", 7) && strncmp(e->d_name, "generator-", 10) &&
		    strncmp(e->d_name, "sink-", 5))
			continue; /* not named <kind>-<name>.so: not found by name, not listed */
		char **nn = realloc(names, (n + 1) * sizeof *names);
		if (!nn)
			break;
		names = nn;
		names[n++] = strdup(e->d_name);
	}
	closedir(d);
	qsort(names, n, sizeof *names, by_name);
	printf("%s (%s):\n", dir, origin);
	int shown = 0;
	for (size_t i = 0; i < n; i++) {
		char path[4096], out[1024], err[1024];
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		if (spawn_describe(worker_exe, path, out, sizeof out, err, sizeof err) < 0) {
			printf("  %-40s  BROKEN: %s\n", names[i], err);
		} else {
			char *kind = strtok(out, "\t"), *name = strtok(NULL, "\t");
			char *version = strtok(NULL, "\t"), *desc = strtok(NULL, "\n");
			/* The name a job file uses is the file's: <kind>-<NAME>.so. */
			char use[256];
			const char *dash = strchr(names[i], '-');
			snprintf(use, sizeof use, "%.*s", (int)(strlen(dash + 1) - 3), dash + 1);
			char said[300] = "";
			if (name && strcmp(name, use) != 0)
				snprintf(said, sizeof said, " (it calls itself '%s')", name);
			bool kind_ok = kind && strncmp(names[i], kind, strlen(kind)) == 0 &&
				       names[i][strlen(kind)] == '-';
			if (strcmp(use, "python") == 0)
				python_listed = true;
			printf("  %-9s  %-10s  %-6s  %s%s%s\n", kind ? kind : "?", use,
			       version ? version : "?", desc ? desc : "", said,
			       kind_ok ? "" : "  [file name says another kind: not found by name]");
		}
		shown++;
		free(names[i]);
	}
	free(names);
	if (!shown)
		printf("  (none)\n");
	return shown;
}

int catalog_list(void)
{
	char *worker_exe = paths_worker_exe();
	if (!worker_exe) {
		fprintf(LOG_ERR, "gpud: cannot find gpud-worker next to %s\n",
			paths_exe_dir() ? paths_exe_dir() : "gpud");
		return 2;
	}
	printf("  %-9s  %-10s  %-6s  %s\n", "KIND", "NAME", "VERSION", "DESCRIPTION");
	const char *env = getenv("GPUD_PLUGIN_PATH");
	if (env && *env) {
		char *copy = strdup(env), *save = NULL;
		for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save))
			list_dir(worker_exe, d, "GPUD_PLUGIN_PATH");
		free(copy);
	}
	for (const char *const *d = paths_plugin_dirs(); *d; d++)
		list_dir(worker_exe, *d, "built-in");
	free(worker_exe);
	if (python_listed) {
		/* The one a job without [job] python would get. */
		char err[2048], py[2048];
		const struct python_choice *p = python_choose(NULL, err, sizeof err);
		if (p)
			python_describe(p, py, sizeof py);
		printf("python plugins run on: %s\n  ([job] python = PATH chooses another: "
		       "an interpreter or a venv folder)\n",
		       p ? py : err);
	}
	return 0;
}
