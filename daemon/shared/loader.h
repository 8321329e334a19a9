/* SPDX-License-Identifier: MIT */
/* Finding and loading plugins: dlopen, then the descriptor and symbols checked before
 * anything in the plugin is called. */
#ifndef GPUD_LOADER_H
#define GPUD_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <gpud/plugin.h>

enum loader_kind { LOADER_WORKER, LOADER_GENERATOR, LOADER_SINK };

/*
 * A plugin's entry points, resolved once by loader_open with the ABI minor rules
 * applied: an entry point newer than the plugin's minor is NULL even when the plugin
 * exports a symbol of that name. Required ones are never NULL in a loaded plugin;
 * optional ones are NULL when absent, and the caller supplies the default the ABI
 * states (plugin.h). The host calls generators and sinks only through these tables
 * and their state pointer, so a table filled by something other than the loader (a
 * caller's in-process functions) runs the same way. Nothing here may be called before
 * loader_open has returned 0, nor after loader_close.
 */
struct gen_ops {
	int (*open)(const struct gpud_args *args, void **state, struct gpud_error *err);
	int (*next)(void *state, struct gpud_buf *item, struct gpud_error *err);
	void (*close)(void *state);                                         /* optional */
	int64_t (*total)(void *state);                                      /* optional */
	int (*skip)(void *state, uint64_t n, struct gpud_error *err);       /* optional, 1.2 */
	int (*check)(const struct gpud_args *args, struct gpud_error *err); /* optional, 1.2 */
	void (*interrupt)(void *state);   /* optional: libgpud's in-process generators only */
	const char *(*name)(void *state); /* optional, 1.9: the last item's name */
};

struct sink_ops {
	int (*open)(const struct gpud_args *args, void **state, struct gpud_error *err);
	int (*event)(void *state, const struct gpud_event *ev, struct gpud_error *err);
	int (*close)(void *state, const struct gpud_stats *stats,
		     struct gpud_error *err); /* optional */
	uint32_t (*events)(void *state);      /* optional: absent, every kind */
	int (*resume)(const struct gpud_args *args, void **state,
		      void (*done)(void *ctx, uint64_t task_id, int status), void *ctx,
		      struct gpud_error *err);                              /* optional, 1.2 */
	int (*check)(const struct gpud_args *args, struct gpud_error *err); /* optional, 1.2 */
	int (*finish)(void *state, const struct gpud_stats *stats, const struct gpud_run_end *end,
		      struct gpud_error *err); /* optional, 1.3: instead of close */
	int (*resumed)(void *state, const struct gpud_resume_info *info,
		       struct gpud_error *err);                           /* optional, 1.3 */
	int (*tasks)(void *state, int64_t total, struct gpud_error *err); /* optional, 1.6 */
	int (*job)(void *state, const struct gpud_job_info *info,
		   struct gpud_error *err); /* optional, 1.8 */
	bool fail_task;      /* 1.6: GPUD_SINK_TASK_FAILED from event fails the task */
	bool calling_thread; /* GPUD_SINK_CALLING_THREAD (gpud.h): in-process sinks only */
	bool no_input;       /* GPUD_SINK_NO_INPUT (gpud.h): in-process sinks only */
	bool names;          /* 1.9: gpud_event.name is set (older sinks get it NULL) */
};

/* At least one of process, process_batch and the pair submit and poll is set (1.2
 * allows process_batch alone, 1.4 submit and poll alone); submit and poll are both set
 * or both NULL. */
struct worker_ops {
	int (*setup)(const struct gpud_worker_info *info, void **state, struct gpud_error *err);
	int (*process)(void *state, struct gpud_task *task);
	int (*process_batch)(void *state, struct gpud_task *tasks, size_t n); /* optional */
	int (*cleanup)(void *state, struct gpud_error *err);                  /* optional */
	int (*submit)(void *state, struct gpud_task *task); /* optional, 1.4, with poll */
	int (*poll)(void *state, struct gpud_task **done, size_t max, int timeout_ms,
		    struct gpud_error *err); /* optional, 1.4, with submit */
	void (*interrupt)(void *state);      /* optional, 1.5: from the watcher thread */
};

/* A loaded plugin. Only the table of its kind is filled; the other two stay zero. The
 * pointers into the plugin (info, description, keys, the tables) are valid until
 * loader_close. */
struct plugin {
	void *handle;
	const struct gpud_plugin_info *info;
	char *path;
	enum loader_kind kind;
	const char *description; /* gpud_plugin_description (1.1), or NULL */
	const char *const *keys; /* gpud_plugin_keys (1.2), NULL-terminated, or NULL */
	struct gen_ops gen;
	struct sink_ops sink;
	struct worker_ops worker;
};

const char *loader_kind_name(enum loader_kind kind);

/*
 * The file for a plugin spec: a path is returned as it is (the job file resolved it);
 * a name (no '/' and no ".so") is looked up as <kind>-<name>.so in each folder of
 * GPUD_PLUGIN_PATH, then in the built-in plugin folder. Returns a malloc'd path, or
 * NULL with one line in err.
 */
char *loader_find(const char *spec, enum loader_kind kind, char *err, size_t errlen);

/* Loads `path` as a plugin of `kind` (RTLD_NOW | RTLD_LOCAL) and fills the table of its
 * kind. Returns 0, or -1 with one line in err naming the file and what is wrong (a
 * required entry point missing among them). Calls nothing in the plugin. */
int loader_open(struct plugin *pl, const char *path, enum loader_kind kind, char *err,
		size_t errlen);

void loader_close(struct plugin *pl);

#endif /* GPUD_LOADER_H */
