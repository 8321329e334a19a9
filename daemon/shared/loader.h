/* SPDX-License-Identifier: MIT */
/* Finding and loading plugins: dlopen, then the descriptor and symbols checked before
 * anything in the plugin is called. */
#ifndef GPUD_LOADER_H
#define GPUD_LOADER_H

#include <stddef.h>

#include <gpud/plugin.h>

enum loader_kind { LOADER_WORKER, LOADER_GENERATOR, LOADER_SINK };

struct plugin {
	void *handle;
	const struct gpud_plugin_info *info;
	char *path;
	enum loader_kind kind;
};

const char *loader_kind_name(enum loader_kind kind);

/*
 * The file for a plugin spec: a path is returned as it is (the job file resolved it);
 * a name (no '/' and no ".so") is looked up as <kind>-<name>.so in each folder of
 * GPUD_PLUGIN_PATH, then in the built-in plugin folder. Returns a malloc'd path, or
 * NULL with one line in err.
 */
char *loader_find(const char *spec, enum loader_kind kind, char *err, size_t errlen);

/* Loads `path` as a plugin of `kind` (RTLD_NOW | RTLD_LOCAL). Returns 0, or -1 with one
 * line in err naming the file and what is wrong. Calls nothing in the plugin. */
int loader_open(struct plugin *pl, const char *path, enum loader_kind kind, char *err,
		size_t errlen);

/* An exported symbol of the plugin, or NULL. */
void *loader_sym(const struct plugin *pl, const char *name);

void loader_close(struct plugin *pl);

#endif /* GPUD_LOADER_H */
