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

/* Sets a table entry to the plugin's symbol `name`, or NULL (POSIX lets dlsym's result be
 * used as a function's address). */
#define SYM(pl, field, name) ((pl)->field = (__typeof__((pl)->field))dlsym((pl)->handle, name))

/* Fills the table of the plugin's kind, once: the host never looks a symbol up again.
 * What a plugin's ABI minor does not have stays NULL, so the callers need not know
 * which minor added what (plugin.h's first comment lists it). */
static void resolve(struct plugin *pl)
{
	unsigned minor = pl->info->abi_minor;
	if (minor >= 1)
		SYM(pl, description, "gpud_plugin_description");
	if (minor >= 2)
		SYM(pl, keys, "gpud_plugin_keys");
	switch (pl->kind) {
	case LOADER_WORKER:
		SYM(pl, worker.setup, "gpud_worker_setup");
		SYM(pl, worker.process, "gpud_worker_process");
		SYM(pl, worker.process_batch, "gpud_worker_process_batch");
		SYM(pl, worker.cleanup, "gpud_worker_cleanup");
		if (minor >= 4) {
			SYM(pl, worker.submit, "gpud_worker_submit");
			SYM(pl, worker.poll, "gpud_worker_poll");
		}
		if (minor >= 5)
			SYM(pl, worker.interrupt, "gpud_worker_interrupt");
		break;
	case LOADER_GENERATOR:
		SYM(pl, gen.open, "gpud_generator_open");
		SYM(pl, gen.next, "gpud_generator_next");
		SYM(pl, gen.close, "gpud_generator_close");
		SYM(pl, gen.total, "gpud_generator_total");
		if (minor >= 2) {
			SYM(pl, gen.skip, "gpud_generator_skip");
			SYM(pl, gen.check, "gpud_generator_check");
		}
		if (minor >= 9)
			SYM(pl, gen.name, "gpud_generator_name");
		break;
	case LOADER_SINK:
		SYM(pl, sink.open, "gpud_sink_open");
		SYM(pl, sink.event, "gpud_sink_event");
		SYM(pl, sink.close, "gpud_sink_close");
		SYM(pl, sink.events, "gpud_sink_events");
		if (minor >= 2) {
			SYM(pl, sink.resume, "gpud_sink_resume");
			SYM(pl, sink.check, "gpud_sink_check");
		}
		if (minor >= 3) {
			SYM(pl, sink.finish, "gpud_sink_finish");
			SYM(pl, sink.resumed, "gpud_sink_resumed");
		}
		if (minor >= 6) {
			SYM(pl, sink.tasks, "gpud_sink_tasks");
			pl->sink.fail_task = true;
		}
		if (minor >= 8)
			SYM(pl, sink.job, "gpud_sink_job");
		pl->sink.names = minor >= 9;
		break;
	}
}

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
	resolve(pl);
	if (kind == LOADER_WORKER && !pl->worker.submit != !pl->worker.poll) {
		snprintf(err, errlen,
			 "worker plugin %s: exports %s without %s; tasks in flight need both", path,
			 pl->worker.submit ? "gpud_worker_submit" : "gpud_worker_poll",
			 pl->worker.submit ? "gpud_worker_poll" : "gpud_worker_submit");
		goto fail;
	}
	if (kind == LOADER_WORKER && !pl->worker.process && !pl->worker.process_batch &&
	    !pl->worker.submit) {
		snprintf(err, errlen,
			 "worker plugin %s: exports neither gpud_worker_process nor "
			 "gpud_worker_process_batch%s; a worker plugin needs one of them",
			 path,
			 pl->info->abi_minor >= 4 ? " nor gpud_worker_submit and gpud_worker_poll"
						  : "");
		goto fail;
	}
	pl->path = strdup(path);
	return 0;
fail:
	dlclose(pl->handle);
	*pl = (struct plugin){0};
	return -1;
}

void loader_close(struct plugin *pl)
{
	if (pl->handle)
		dlclose(pl->handle);
	free(pl->path);
	*pl = (struct plugin){0};
}
