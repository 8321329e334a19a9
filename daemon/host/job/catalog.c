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

/* The list being made: the public struct first (what the caller is handed and gives
 * back to catalog_free), then what its pointers point into. */
struct catalog {
	struct gpud_plugin_list pub;
	FILE *out; /* the text, as the command prints it */
	char *text;
	size_t text_len;
	struct gpud_plugin_entry *plugins;
	size_t n_plugins, cap_plugins;
	struct gpud_plugin_dir *dirs;
	size_t n_dirs, cap_dirs;
	char **strings; /* every string the entries point to */
	size_t n_strings, cap_strings;
	bool python_listed; /* a python plugin was listed: say which Python it gets */
	char python[4096];
	char error[1024];
	bool oom;
};

/* A copy of s the list owns ("" when out of memory, which is then remembered). */
static const char *keep(struct catalog *cat, const char *s)
{
	if (cat->n_strings == cat->cap_strings) {
		size_t cap = cat->cap_strings ? 2 * cat->cap_strings : 64;
		char **nn = realloc(cat->strings, cap * sizeof *nn);
		if (!nn) {
			cat->oom = true;
			return "";
		}
		cat->strings = nn;
		cat->cap_strings = cap;
	}
	char *copy = strdup(s ? s : "");
	if (!copy) {
		cat->oom = true;
		return "";
	}
	cat->strings[cat->n_strings++] = copy;
	return copy;
}

static struct gpud_plugin_entry *new_plugin(struct catalog *cat)
{
	if (cat->n_plugins == cat->cap_plugins) {
		size_t cap = cat->cap_plugins ? 2 * cat->cap_plugins : 16;
		struct gpud_plugin_entry *nn = realloc(cat->plugins, cap * sizeof *nn);
		if (!nn) {
			cat->oom = true;
			return NULL;
		}
		cat->plugins = nn;
		cat->cap_plugins = cap;
	}
	return &cat->plugins[cat->n_plugins++];
}

static struct gpud_plugin_dir *new_dir(struct catalog *cat, const char *dir, const char *origin)
{
	if (cat->n_dirs == cat->cap_dirs) {
		size_t cap = cat->cap_dirs ? 2 * cat->cap_dirs : 4;
		struct gpud_plugin_dir *nn = realloc(cat->dirs, cap * sizeof *nn);
		if (!nn) {
			cat->oom = true;
			return NULL;
		}
		cat->dirs = nn;
		cat->cap_dirs = cap;
	}
	struct gpud_plugin_dir *d = &cat->dirs[cat->n_dirs++];
	*d = (struct gpud_plugin_dir){
		.path = keep(cat, dir), .origin = origin, .readable = 1, .first = cat->n_plugins};
	return d;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The files of dir named <kind>-<name>.so, sorted; NULL when it cannot be read. */
static char **plugin_files(const char *dir, size_t *n)
{
	DIR *d = opendir(dir);
	if (!d)
		return NULL;
	char **names = NULL;
	*n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l < 4 || strcmp(e->d_name + l - 3, ".so") != 0)
			continue;
		if (strncmp(e->d_name, "worker-", 7) && strncmp(e->d_name, "generator-", 10) &&
		    strncmp(e->d_name, "sink-", 5))
			continue; /* not named <kind>-<name>.so: not found by name, not listed */
		char **nn = realloc(names, (*n + 1) * sizeof *names);
		if (nn)
			names = nn;
		char *name = nn ? strdup(e->d_name) : NULL;
		if (!name)
			break; /* out of memory: those so far */
		names[(*n)++] = name;
	}
	closedir(d);
	if (!names)
		return calloc(1, sizeof(char *));
	qsort(names, *n, sizeof *names, by_name);
	return names;
}

/* One plugin file described (in a short-lived gpud-worker) and listed. */
static void list_plugin(struct catalog *cat, const char *worker_exe, const char *dir,
			const char *origin, const char *file)
{
	char path[4096], out[1024], err[1024];
	snprintf(path, sizeof path, "%s/%s", dir, file);
	/* The name a job file uses is the file's: <kind>-<NAME>.so. */
	char use[256];
	const char *dash = strchr(file, '-');
	snprintf(use, sizeof use, "%.*s", (int)(strlen(dash + 1) - 3), dash + 1);
	struct gpud_plugin_entry *p = new_plugin(cat);
	struct gpud_plugin_entry info = {
		.dir = keep(cat, dir),
		.origin = origin,
		.file = keep(cat, file),
		.kind = "?",
		.name = keep(cat, use),
		.version = "?",
		.description = "",
		.calls_itself = "",
		.error = "",
	};
	if (spawn_describe(worker_exe, path, out, sizeof out, err, sizeof err) < 0) {
		fprintf(cat->out, "  %-40s  BROKEN: %s\n", file, err);
		info.broken = 1;
		info.error = keep(cat, err);
		if (p)
			*p = info;
		return;
	}
	char *kind = strtok(out, "\t"), *name = strtok(NULL, "\t");
	char *version = strtok(NULL, "\t"), *desc = strtok(NULL, "\n");
	char said[300] = "";
	if (name && strcmp(name, use) != 0)
		snprintf(said, sizeof said, " (it calls itself '%s')", name);
	bool kind_ok = kind && strncmp(file, kind, strlen(kind)) == 0 && file[strlen(kind)] == '-';
	if (strcmp(use, "python") == 0)
		cat->python_listed = true;
	fprintf(cat->out, "  %-9s  %-10s  %-6s  %s%s%s\n", kind ? kind : "?", use,
		version ? version : "?", desc ? desc : "", said,
		kind_ok ? "" : "  [file name says another kind: not found by name]");
	info.kind = kind ? keep(cat, kind) : "?";
	info.version = version ? keep(cat, version) : "?";
	info.description = desc ? keep(cat, desc) : "";
	info.calls_itself = name && strcmp(name, use) != 0 ? keep(cat, name) : "";
	info.kind_differs = !kind_ok;
	if (p)
		*p = info;
}

/* Lists one folder. */
static void list_dir(struct catalog *cat, const char *worker_exe, const char *dir,
		     const char *origin)
{
	size_t n = 0;
	char **names = plugin_files(dir, &n);
	size_t at = cat->n_dirs;
	if (!new_dir(cat, dir, origin))
		at = SIZE_MAX;
	if (!names) {
		fprintf(cat->out, "%s (%s): cannot read it\n", dir, origin);
		if (at != SIZE_MAX)
			cat->dirs[at].readable = 0;
		return;
	}
	fprintf(cat->out, "%s (%s):\n", dir, origin);
	for (size_t i = 0; i < n; i++) {
		list_plugin(cat, worker_exe, dir, origin, names[i]);
		free(names[i]);
	}
	free(names);
	if (!n)
		fprintf(cat->out, "  (none)\n");
	if (at != SIZE_MAX)
		cat->dirs[at].count = cat->n_plugins - cat->dirs[at].first;
}

/* The public struct's pointers, once nothing more is added. */
static void catalog_seal(struct catalog *cat, bool ok)
{
	if (cat->out) {
		fclose(cat->out);
		cat->out = NULL;
	}
	cat->pub = (struct gpud_plugin_list){
		.size = sizeof cat->pub,
		.ok = ok,
		.text = ok && cat->text ? cat->text : "",
		.error = cat->error,
		.n_dirs = cat->n_dirs,
		.dirs = cat->dirs,
		.n_plugins = cat->n_plugins,
		.plugins = cat->plugins,
		.python = cat->python,
	};
}

struct gpud_plugin_list *catalog_list(int *rc)
{
	struct catalog *cat = calloc(1, sizeof *cat);
	if (!cat) {
		fprintf(LOG_ERR, "gpud: plugins: out of memory\n");
		*rc = 2;
		return NULL;
	}
	cat->out = open_memstream(&cat->text, &cat->text_len);
	char *worker_exe = paths_worker_exe();
	if (!cat->out || !worker_exe) {
		if (!worker_exe)
			snprintf(cat->error, sizeof cat->error,
				 "cannot find gpud-worker next to %s",
				 paths_exe_dir() ? paths_exe_dir() : "gpud");
		else
			snprintf(cat->error, sizeof cat->error, "plugins: out of memory");
		fprintf(LOG_ERR, "gpud: %s\n", cat->error);
		free(worker_exe);
		catalog_seal(cat, false);
		*rc = 2;
		return &cat->pub;
	}
	fprintf(cat->out, "  %-9s  %-10s  %-6s  %s\n", "KIND", "NAME", "VERSION", "DESCRIPTION");
	const char *env = getenv("GPUD_PLUGIN_PATH");
	if (env && *env) {
		char *copy = strdup(env), *save = NULL;
		for (char *d = copy ? strtok_r(copy, ":", &save) : NULL; d;
		     d = strtok_r(NULL, ":", &save))
			list_dir(cat, worker_exe, d, "GPUD_PLUGIN_PATH");
		free(copy);
	}
	for (const char *const *d = paths_plugin_dirs(); *d; d++)
		list_dir(cat, worker_exe, *d, "built-in");
	free(worker_exe);
	if (cat->python_listed) {
		/* The one a job without [job] python would get. */
		char err[2048];
		const struct python_choice *p = python_choose(NULL, err, sizeof err);
		if (p)
			python_describe(p, cat->python, sizeof cat->python);
		else
			snprintf(cat->python, sizeof cat->python, "%s", err);
		fprintf(cat->out,
			"python plugins run on: %s\n  ([job] python = PATH chooses another: "
			"an interpreter or a venv folder)\n",
			cat->python);
	}
	if (cat->oom) {
		snprintf(cat->error, sizeof cat->error, "plugins: out of memory");
		fprintf(LOG_ERR, "gpud: %s\n", cat->error);
		catalog_seal(cat, false);
		*rc = 2;
		return &cat->pub;
	}
	catalog_seal(cat, true);
	*rc = 0;
	return &cat->pub;
}

void catalog_free(struct gpud_plugin_list *list)
{
	if (!list)
		return;
	struct catalog *cat = (struct catalog *)list; /* pub is its first member */
	for (size_t i = 0; i < cat->n_strings; i++)
		free(cat->strings[i]);
	free(cat->strings);
	free(cat->plugins);
	free(cat->dirs);
	free(cat->text);
	free(cat);
}
