/* SPDX-License-Identifier: MIT */
/* What the python worker, generator and sink plugins share (common.c). */
#ifndef GPUD_PY_COMMON_H
#define GPUD_PY_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>

#include <gpud/plugin.h>

/* Starts the interpreter once per process: libpython's symbols made global (so
 * extension modules like NumPy's load), no signal handlers of Python's (gpud's stay in
 * charge), unbuffered print(). `module_init` adds an importable `gpud` module (NULL:
 * none). `host`: the gpud host process (generator, sink): gpud's signals and the
 * process's exit are guarded (py_guard_host), and the GIL is let go of after starting
 * (called from more than one thread, host plugins take it per call). 0, or -1 with err. */
int py_start(PyObject *(*module_init)(void), bool host, struct gpud_error *err);
/* In the host, with the GIL held, once: signal.signal() and the other Python calls that
 * would take gpud's signals leave them alone (with a RuntimeWarning); os._exit() and
 * os.abort() raise gpud.ExitRefused (guard.c). Needs the `gpud` module. 0, or -1 with err. */
int py_guard_host(struct gpud_error *err);
/* Prepends each folder of a colon-separated list to sys.path, in order. */
int py_prepend_path(const char *list, struct gpud_error *err);
/* The user's module: `script` loaded from its file as module `name` (its folder first
 * on sys.path), or `module` imported. NULL with err (the exception in one line). */
PyObject *py_load_module(const char *script, const char *module, const char *name,
			 struct gpud_error *err);
/* The pending exception as one line, "Type: message (at file:line in function <- ...)"
 * into buf, cleared; returns its type (a new reference) or NULL. */
PyObject *py_take_error(char *buf, size_t len);
/* gpud check: script or module given (one), `need` (function, class; NULL: none) given,
 * the script readable. The user's code is not imported: that would run it. */
int py_check_source(const struct gpud_args *args, const char *need, struct gpud_error *err);
/* The bytes of a Python object as a task input or a result: a buffer as it is (a strided
 * one laid out by bytes()), a str as UTF-8, anything else as JSON text (json_dumps).
 * 0 with p and n set, valid until py_bytes_release; -1 with the exception pending. */
struct py_bytes {
	const char *p;
	Py_ssize_t n;
	Py_buffer view;
	bool have_view;
	PyObject *text;
};
int py_bytes_of(PyObject *o, PyObject *json_dumps, struct py_bytes *b);
void py_bytes_release(struct py_bytes *b);
/* The section's keys but `ours` (NULL-terminated) as a dict of str, for **kwargs. */
PyObject *py_kwargs(const struct gpud_args *a, const char *const *ours);

#endif
