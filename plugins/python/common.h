/* SPDX-License-Identifier: MIT */
/* What the python worker, generator and sink glue share (common.c). */
#ifndef GPUD_PY_COMMON_H
#define GPUD_PY_COMMON_H

/* CPython's stable ABI of 3.9, and what it leaves out that the glue needs. */
#include "limited_api.h"

#include <stdbool.h>

#include <gpud/plugin.h>

/* Starts the interpreter once per process (the libpython the stub loaded): named as
 * the chosen executable (GPUD_PYTHON_EXECUTABLE), so sys.executable, sys.prefix and a
 * venv's site-packages are that Python's; no signal handlers of Python's (gpud's stay
 * in charge); print() written through at each line. `module_init` adds an importable `gpud` module
 * (NULL: none). `host`: the gpud host process (generator, sink): gpud's signals and the process's
 * exit are guarded (py_guard_host), and the GIL is let go of after starting (called from more than
 * one thread, host plugins take it per call). 0, or -1 with err. */
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
/* A str's UTF-8 (NULL with the exception pending); n may be NULL. */
static inline const char *py_utf8(PyObject *s, Py_ssize_t *n)
{
	return PyUnicode_AsUTF8AndSize(s, n);
}
/* o's type's name, into buf. */
const char *py_type_name(PyObject *o, char *buf, size_t len);
/* f(arg): one positional argument (PyObject_CallOneArg is not in the stable ABI). */
static inline PyObject *py_call1(PyObject *f, PyObject *arg)
{
	return PyObject_CallFunctionObjArgs(f, arg, NULL);
}
/* Runs `src` (statements) in __main__'s namespace; 0, or -1 with the exception
 * cleared. */
int py_run(const char *src);
/* The section's keys but `ours` (NULL-terminated) as a dict of str, for **kwargs. */
PyObject *py_kwargs(const struct gpud_args *a, const char *const *ours);

#endif
