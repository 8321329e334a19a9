/* SPDX-License-Identifier: MIT */
/*
 * Generator `python`: the items of a Python generator function (or any iterable it
 * returns), one task each.
 *
 *   [generator]
 *   plugin = python
 *   script = ./inputs.py          ; or module = my_package.inputs
 *   function = path_generator     ; called with every other key as a keyword (a str)
 *   python_path = ./src           ; optional, prepended to sys.path
 *
 * An item that is bytes (or any buffer) is the task's input as is, a str is UTF-8, any
 * other object JSON text. When what the function returns has a length (a list, or an
 * object with __len__), that is the total the dashboard shows. An exception ends the
 * run as a generator failure, with the exception in one line.
 *
 * It runs in the gpud host process; each call takes the GIL for itself, so a Python
 * sink can run beside it.
 */
#define _GNU_SOURCE
#include "common.h"
#include "gpud_module.h"
#include "py_keys.h" /* daemon/shared/: the keys check --import knows too */

#include <string.h>

/* The plugin gpud loads is stub.c: it loads this glue after the chosen libpython. */

struct py_gen {
	PyObject *iter;
	PyObject *json_dumps;
	int64_t total;
	char name[128];
};

GPUD_EXPORT int gpud_generator_open(const struct gpud_args *args, void **state,
				    struct gpud_error *err)
{
	const char *script = gpud_arg(args, "script", NULL),
		   *module = gpud_arg(args, "module", NULL);
	const char *fn_name = gpud_arg(args, "function", NULL);
	const char *pypath = gpud_arg(args, "python_path", NULL);
	char why[900];
	if (!script == !module)
		return gpud_fail(err,
				 "python: give script = FILE.py or module = NAME (one of them)");
	if (!fn_name)
		return gpud_fail(err,
				 "python: function = NAME is required (the generator function)");
	if (py_start(gpud_module_init, true, err) < 0)
		return -1;
	PyGILState_STATE gil = PyGILState_Ensure();
	int rc = -1;
	PyObject *mod = NULL, *fn = NULL, *kwargs = NULL, *noargs = NULL, *obj = NULL, *json = NULL;
	struct py_gen *g = calloc(1, sizeof *g);
	if (!g) {
		gpud_fail(err, "python: out of memory");
		goto out;
	}
	snprintf(g->name, sizeof g->name, "%s", fn_name);
	if (pypath && py_prepend_path(pypath, err) < 0)
		goto out;
	mod = py_load_module(script, module, "__gpud_generator__", err);
	if (!mod)
		goto out;
	fn = PyObject_GetAttrString(mod, fn_name);
	if (!fn) {
		PyErr_Clear();
		gpud_fail(err, "python: %s has no function %s", script ? script : module, fn_name);
		goto out;
	}
	kwargs = py_kwargs(args, py_generator_keys);
	noargs = PyTuple_New(0);
	obj = kwargs && noargs ? PyObject_Call(fn, noargs, kwargs) : NULL;
	g->iter = obj ? PyObject_GetIter(obj) : NULL;
	json = PyImport_ImportModule("json");
	g->json_dumps = json ? PyObject_GetAttrString(json, "dumps") : NULL;
	if (!g->iter || !g->json_dumps) {
		Py_XDECREF(py_take_error(why, sizeof why));
		gpud_fail(err, "python: %s(): %s", fn_name, why);
		goto out;
	}
	g->total = -1;
	if (obj != g->iter && PyObject_HasAttrString(obj, "__len__")) {
		Py_ssize_t n = PyObject_Length(obj);
		if (n >= 0)
			g->total = n;
		else
			PyErr_Clear();
	}
	*state = g;
	g = NULL;
	rc = 0;
out:
	if (g) {
		Py_XDECREF(g->iter);
		Py_XDECREF(g->json_dumps);
		free(g);
	}
	Py_XDECREF(json);
	Py_XDECREF(obj);
	Py_XDECREF(noargs);
	Py_XDECREF(kwargs);
	Py_XDECREF(fn);
	Py_XDECREF(mod);
	PyGILState_Release(gil);
	return rc;
}

GPUD_EXPORT int gpud_generator_next(void *state, struct gpud_buf *item, struct gpud_error *err)
{
	struct py_gen *g = state;
	char why[900];
	int rc = 1;
	PyGILState_STATE gil = PyGILState_Ensure();
	PyObject *o = PyIter_Next(g->iter);
	struct py_bytes b = {0};
	if (!o) {
		if (PyErr_Occurred()) {
			Py_XDECREF(py_take_error(why, sizeof why));
			rc = gpud_fail(err, "python: %s() raised %s", g->name, why);
		} else {
			rc = 0;
		}
		goto out;
	}
	if (py_bytes_of(o, g->json_dumps, &b) < 0) {
		char tn[128];
		Py_XDECREF(py_take_error(why, sizeof why));
		rc = gpud_fail(err,
			       "python: %s() yielded a %s that cannot be a task (bytes, str or "
			       "JSON-able): %s",
			       g->name, py_type_name(o, tn, sizeof tn), why);
		goto out;
	}
	item->size = (size_t)b.n;
	if ((size_t)b.n <= item->capacity)
		memcpy(item->data, b.p,
		       (size_t)b.n); /* larger: the host reports it, we write nothing */
out:
	py_bytes_release(&b);
	Py_XDECREF(o);
	PyGILState_Release(gil);
	return rc;
}

GPUD_EXPORT int64_t gpud_generator_total(void *state)
{
	return ((struct py_gen *)state)->total;
}

GPUD_EXPORT void gpud_generator_close(void *state)
{
	struct py_gen *g = state;
	PyGILState_STATE gil = PyGILState_Ensure();
	Py_XDECREF(g->iter);
	Py_XDECREF(g->json_dumps);
	PyGILState_Release(gil);
	free(g);
}
