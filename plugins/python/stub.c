/* SPDX-License-Identifier: MIT */
/*
 * The python plugins as gpud loads them: worker-python.so, generator-python.so and
 * sink-python.so are this file, built once per kind (PY_KIND_WORKER, _GENERATOR,
 * _SINK). It links no libpython, so `gpud plugins` and `gpud check` load it whatever
 * Python there is.
 *
 * The first call that needs Python (setup, open) loads the libpython of the Python the
 * run chose (GPUD_PYTHON_LIBRARY: the host sets it, daemon/host/job/python.c, and every
 * worker inherits it) with RTLD_GLOBAL, since extension modules (NumPy's) look its
 * symbols up globally; then the glue beside this file (python/<kind>.so: worker.c,
 * generator.c or sink.c with common.c and guard.c, built against CPython's stable ABI
 * and linked to no libpython), whose entry points every call is forwarded to. The
 * check entry points are answered here, without Python: they look at the job's keys
 * and files only (the user's code is not imported: that would run it).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gpud/plugin.h>

#include "../check.h"

#if defined(PY_KIND_WORKER)
#define KIND "worker"
#elif defined(PY_KIND_GENERATOR)
#define KIND "generator"
#elif defined(PY_KIND_SINK)
#define KIND "sink"
#else
#error "define PY_KIND_WORKER, PY_KIND_GENERATOR or PY_KIND_SINK"
#endif

#define ON_CHOSEN "on the Python the job chooses ([job] python, $VIRTUAL_ENV, python3 on PATH)"

GPUD_PLUGIN(KIND, "python", "2.0");
#if defined(PY_KIND_WORKER)
GPUD_PLUGIN_DESCRIPTION("a Python worker class (script or module, class) " ON_CHOSEN);
#elif defined(PY_KIND_GENERATOR)
GPUD_PLUGIN_DESCRIPTION("the items of a Python generator function (script or module, "
			"function) " ON_CHOSEN);
#else
GPUD_PLUGIN_DESCRIPTION("Python callbacks (script or module, class): on_success, on_error, "
			"on_timeout, on_setup_fail, on_task_start, on_exit; " ON_CHOSEN);
#endif

static void *glue; /* python/<kind>.so, once loaded; never closed (nor is libpython) */

/* Loads the chosen libpython and the glue; 0, or -1 with err. */
static int load_glue(struct gpud_error *err)
{
	if (glue)
		return 0;
	const char *lib = getenv("GPUD_PYTHON_LIBRARY");
	if (!lib || !*lib)
		return gpud_fail(err,
				 "python: no Python was chosen for this process "
				 "(GPUD_PYTHON_LIBRARY is not set: gpud sets it from [job] python, "
				 "$VIRTUAL_ENV, $CONDA_PREFIX or the python3 on PATH)");
	dlerror();
	if (!dlopen(lib, RTLD_NOW | RTLD_GLOBAL)) {
		const char *why = dlerror();
		return gpud_fail(err, "python: cannot load %s: %s", lib, why ? why : "?");
	}
	Dl_info self;
	if (!dladdr((const void *)&gpud_plugin_info, &self) || !self.dli_fname)
		return gpud_fail(err, "python: cannot tell where the python plugin is");
	const char *slash = strrchr(self.dli_fname, '/');
	char path[4096];
	snprintf(path, sizeof path, "%.*s/python/" KIND ".so",
		 slash ? (int)(slash - self.dli_fname) : 1, slash ? self.dli_fname : ".");
	glue = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!glue) {
		const char *why = dlerror();
		return gpud_fail(err, "python: cannot load %s: %s", path, why ? why : "?");
	}
	return 0;
}

/* The glue's entry point `name`; set where load_glue succeeded. */
static void *glue_sym(const char *name)
{
	return dlsym(glue, name);
}

#if defined(PY_KIND_GENERATOR) || defined(PY_KIND_SINK)
/* Script or module given (one), `need` (a function, a class; NULL: none) given, the
 * script readable. */
static int check_source(const struct gpud_args *args, const char *need, struct gpud_error *err)
{
	const char *script = gpud_arg(args, "script", NULL),
		   *module = gpud_arg(args, "module", NULL);
	if (!script == !module)
		return gpud_fail(err,
				 "python: give script = FILE.py or module = NAME (one of them)");
	if (need && !gpud_arg(args, need, NULL))
		return gpud_fail(err, "python: %s = NAME is required", need);
	return script ? check_file_readable("python", script, err) : 0;
}
#endif

#if defined(PY_KIND_WORKER)

static int (*w_process_batch)(void *, struct gpud_task *, size_t);
static int (*w_cleanup)(void *, struct gpud_error *);
static int (*w_submit)(void *, struct gpud_task *);
static int (*w_poll)(void *, struct gpud_task **, size_t, int, struct gpud_error *);
static void (*w_interrupt)(void *);

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	if (load_glue(err) < 0)
		return -1;
	int (*setup)(const struct gpud_worker_info *, void **, struct gpud_error *) =
		(int (*)(const struct gpud_worker_info *, void **, struct gpud_error *))glue_sym(
			"gpud_worker_setup");
	w_process_batch =
		(int (*)(void *, struct gpud_task *, size_t))glue_sym("gpud_worker_process_batch");
	w_cleanup = (int (*)(void *, struct gpud_error *))glue_sym("gpud_worker_cleanup");
	w_submit = (int (*)(void *, struct gpud_task *))glue_sym("gpud_worker_submit");
	w_poll = (int (*)(void *, struct gpud_task **, size_t, int, struct gpud_error *))glue_sym(
		"gpud_worker_poll");
	w_interrupt = (void (*)(void *))glue_sym("gpud_worker_interrupt");
	if (!setup || !w_process_batch || !w_cleanup || !w_submit || !w_poll || !w_interrupt)
		return gpud_fail(err, "python: the glue python/worker.so lacks an entry point");
	return setup(info, state, err);
}

GPUD_EXPORT int gpud_worker_process_batch(void *state, struct gpud_task *tasks, size_t n)
{
	return w_process_batch(state, tasks, n);
}

GPUD_EXPORT int gpud_worker_cleanup(void *state, struct gpud_error *err)
{
	return w_cleanup(state, err);
}

/* max_in_flight > 1: an async def process runs many tasks at once (worker.c). */
GPUD_EXPORT int gpud_worker_submit(void *state, struct gpud_task *task)
{
	return w_submit(state, task);
}

GPUD_EXPORT int gpud_worker_poll(void *state, struct gpud_task **done, size_t max, int timeout_ms,
				 struct gpud_error *err)
{
	return w_poll(state, done, max, timeout_ms, err);
}

/* A call past task_timeout: TaskTimeout raised in it (worker.c), from gpud's watcher. */
GPUD_EXPORT void gpud_worker_interrupt(void *state)
{
	w_interrupt(state);
}

#elif defined(PY_KIND_GENERATOR)

static int (*g_next)(void *, struct gpud_buf *, struct gpud_error *);
static int64_t (*g_total)(void *);
static void (*g_close)(void *);

GPUD_EXPORT int gpud_generator_open(const struct gpud_args *args, void **state,
				    struct gpud_error *err)
{
	if (load_glue(err) < 0)
		return -1;
	int (*open)(const struct gpud_args *, void **, struct gpud_error *) =
		(int (*)(const struct gpud_args *, void **, struct gpud_error *))glue_sym(
			"gpud_generator_open");
	g_next = (int (*)(void *, struct gpud_buf *, struct gpud_error *))glue_sym(
		"gpud_generator_next");
	g_total = (int64_t(*)(void *))glue_sym("gpud_generator_total");
	g_close = (void (*)(void *))glue_sym("gpud_generator_close");
	if (!open || !g_next || !g_total || !g_close)
		return gpud_fail(err, "python: the glue python/generator.so lacks an entry point");
	return open(args, state, err);
}

GPUD_EXPORT int gpud_generator_check(const struct gpud_args *args, struct gpud_error *err)
{
	return check_source(args, "function", err);
}

GPUD_EXPORT int gpud_generator_next(void *state, struct gpud_buf *item, struct gpud_error *err)
{
	return g_next(state, item, err);
}

GPUD_EXPORT int64_t gpud_generator_total(void *state)
{
	return g_total(state);
}

GPUD_EXPORT void gpud_generator_close(void *state)
{
	g_close(state);
}

#else /* PY_KIND_SINK */

static uint32_t (*s_events)(void *);
static int (*s_event)(void *, const struct gpud_event *, struct gpud_error *);
static int (*s_close)(void *, const struct gpud_stats *, struct gpud_error *);
static int (*s_finish)(void *, const struct gpud_stats *, const struct gpud_run_end *,
		       struct gpud_error *);
static int (*s_resumed)(void *, const struct gpud_resume_info *, struct gpud_error *);

GPUD_EXPORT int gpud_sink_open(const struct gpud_args *args, void **state, struct gpud_error *err)
{
	if (load_glue(err) < 0)
		return -1;
	int (*open)(const struct gpud_args *, void **, struct gpud_error *) = (int (*)(
		const struct gpud_args *, void **, struct gpud_error *))glue_sym("gpud_sink_open");
	s_events = (uint32_t(*)(void *))glue_sym("gpud_sink_events");
	s_event = (int (*)(void *, const struct gpud_event *, struct gpud_error *))glue_sym(
		"gpud_sink_event");
	s_close = (int (*)(void *, const struct gpud_stats *, struct gpud_error *))glue_sym(
		"gpud_sink_close");
	s_finish = (int (*)(void *, const struct gpud_stats *, const struct gpud_run_end *,
			    struct gpud_error *))glue_sym("gpud_sink_finish");
	s_resumed = (int (*)(void *, const struct gpud_resume_info *, struct gpud_error *))glue_sym(
		"gpud_sink_resumed");
	if (!open || !s_events || !s_event || !s_close || !s_finish || !s_resumed)
		return gpud_fail(err, "python: the glue python/sink.so lacks an entry point");
	return open(args, state, err);
}

GPUD_EXPORT int gpud_sink_check(const struct gpud_args *args, struct gpud_error *err)
{
	const char *res = gpud_arg(args, "result", "auto");
	if (strcmp(res, "auto") && strcmp(res, "bytes") && strcmp(res, "str") &&
	    strcmp(res, "json") && strcmp(res, "pickle"))
		return gpud_fail(err,
				 "python: result = '%s': expected auto, bytes, str, json or pickle",
				 res);
	return check_source(args, NULL, err);
}

GPUD_EXPORT uint32_t gpud_sink_events(void *state)
{
	return s_events(state);
}

GPUD_EXPORT int gpud_sink_event(void *state, const struct gpud_event *ev, struct gpud_error *err)
{
	return s_event(state, ev, err);
}

GPUD_EXPORT int gpud_sink_close(void *state, const struct gpud_stats *st, struct gpud_error *err)
{
	return s_close(state, st, err);
}

GPUD_EXPORT int gpud_sink_finish(void *state, const struct gpud_stats *st,
				 const struct gpud_run_end *end, struct gpud_error *err)
{
	return s_finish(state, st, end, err);
}

GPUD_EXPORT int gpud_sink_resumed(void *state, const struct gpud_resume_info *info,
				  struct gpud_error *err)
{
	return s_resumed(state, info, err);
}

#endif
