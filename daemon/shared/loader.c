/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "paths.h"

static const char *const kind_names[] = {"worker", "generator", "sink"};

/* The entry points each kind must export. A worker exports gpud_worker_process or
 * gpud_worker_process_batch, or both (checked below). */
static const char *const required[][3] = {
	{"gpud_worker_setup", NULL},
	{"gpud_generator_open", "gpud_generator_next", NULL},
	{"gpud_sink_open", "gpud_sink_event", NULL},
};

const char *loader_kind_name(enum loader_kind kind)
{
	return kind_names[kind];
}

static char *try_dir(const char *dir, const char *spec, enum loader_kind kind)
{
	char *p;
	struct stat st;
	if (asprintf(&p, "%s/%s-%s.so", dir, kind_names[kind], spec) < 0)
		return NULL;
	if (stat(p, &st) == 0)
		return p;
	free(p);
	return NULL;
}

char *loader_find(const char *spec, enum loader_kind kind, char *err, size_t errlen)
{
	char looked[1024] = "";
	size_t used = 0;

	if (strchr(spec, '/') || strstr(spec, ".so"))
		return strdup(spec);

	const char *env = getenv("GPUD_PLUGIN_PATH");
	if (env && *env) {
		char *copy = strdup(env), *save = NULL;
		for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
			char *p = try_dir(d, spec, kind);
			if (p) {
				free(copy);
				return p;
			}
			used += (size_t)snprintf(looked + used,
						 used < sizeof looked ? sizeof looked - used : 0,
						 "%s%s", used ? ", " : "", d);
		}
		free(copy);
	}
	for (const char *const *d = paths_plugin_dirs(); *d; d++) {
		char *p = try_dir(*d, spec, kind);
		if (p)
			return p;
		if (used < sizeof looked)
			used += (size_t)snprintf(looked + used, sizeof looked - used, "%s%s",
						 used ? ", " : "", *d);
	}
	snprintf(err, errlen, "%s plugin '%s': no such built-in plugin (looked for %s-%s.so in %s)",
		 kind_names[kind], spec, kind_names[kind], spec, used ? looked : "no folder");
	return NULL;
}

int loader_open(struct plugin *pl, const char *path, enum loader_kind kind, char *err,
		size_t errlen)
{
	const char *kn = kind_names[kind];
	struct stat st;

	*pl = (struct plugin){.kind = kind};
	if (stat(path, &st) < 0) {
		snprintf(err, errlen, "%s plugin %s: %s", kn, path, strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s plugin %s: not a regular file", kn, path);
		return -1;
	}
	dlerror();
	pl->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!pl->handle) {
		/* dlerror names the file and the reason: not ELF, wrong class, an undefined
		 * symbol, a missing library. */
		const char *why = dlerror();
		snprintf(err, errlen, "%s plugin %s: cannot load: %s", kn, path,
			 why ? why : "unknown dlopen error");
		return -1;
	}
	pl->info = dlsym(pl->handle, "gpud_plugin_info");
	if (!pl->info) {
		snprintf(err, errlen,
			 "%s plugin %s: not a gpud plugin (it exports no gpud_plugin_info; "
			 "declare one with GPUD_PLUGIN(kind, name, version))",
			 kn, path);
		goto fail;
	}
	if (pl->info->abi_major != GPUD_ABI_MAJOR || pl->info->abi_minor > GPUD_ABI_MINOR) {
		snprintf(
			err, errlen,
			"%s plugin %s: built for plugin ABI %u.%u, this gpud supports %d.0 to %d.%d",
			kn, path, pl->info->abi_major, pl->info->abi_minor, GPUD_ABI_MAJOR,
			GPUD_ABI_MAJOR, GPUD_ABI_MINOR);
		goto fail;
	}
	if (!pl->info->kind || strcmp(pl->info->kind, kn) != 0) {
		snprintf(err, errlen, "%s plugin %s: is a '%s' plugin, not a '%s' plugin", kn, path,
			 pl->info->kind ? pl->info->kind : "(null)", kn);
		goto fail;
	}
	for (const char *const *s = required[kind]; *s; s++) {
		if (!dlsym(pl->handle, *s)) {
			snprintf(err, errlen,
				 "%s plugin %s: does not export %s, which every %s "
				 "plugin must",
				 kn, path, *s, kn);
			goto fail;
		}
	}
	if (kind == LOADER_WORKER && !dlsym(pl->handle, "gpud_worker_process") &&
	    !dlsym(pl->handle, "gpud_worker_process_batch")) {
		snprintf(err, errlen,
			 "worker plugin %s: exports neither gpud_worker_process nor "
			 "gpud_worker_process_batch; a worker plugin needs one of them",
			 path);
		goto fail;
	}
	pl->path = strdup(path);
	return 0;
fail:
	dlclose(pl->handle);
	*pl = (struct plugin){0};
	return -1;
}

void *loader_sym(const struct plugin *pl, const char *name)
{
	return dlsym(pl->handle, name);
}

void loader_close(struct plugin *pl)
{
	if (pl->handle)
		dlclose(pl->handle);
	free(pl->path);
	*pl = (struct plugin){0};
}
