/* SPDX-License-Identifier: MIT */
/* What the python worker, generator and sink share: starting the interpreter, finding
 * the user's code, and telling a Python exception in one line. */
#define _GNU_SOURCE
#include "common.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "../check.h"

/* The pending exception as one line, "Type: message (traceback, innermost last:
 * file:line in function <- ...)", into buf; clears it. Returns the exception's type (a
 * new reference) for the caller to classify, or NULL. */
PyObject *py_take_error(char *buf, size_t len)
{
	PyObject *type, *value, *tb;
	PyErr_Fetch(&type, &value, &tb);
	PyErr_NormalizeException(&type, &value, &tb);
	buf[0] = '\0';
	if (!type)
		return NULL;
	PyObject *msg = value ? PyObject_Str(value) : NULL;
	const char *m = msg ? PyUnicode_AsUTF8(msg) : NULL;
	size_t used =
		(size_t)snprintf(buf, len, "%s: %s", ((PyTypeObject *)type)->tp_name, m ? m : "");
	/* The last frames, where it happened. */
	PyObject *tbmod = tb ? PyImport_ImportModule("traceback") : NULL;
	PyObject *frames = tbmod ? PyObject_CallMethod(tbmod, "extract_tb", "O", tb) : NULL;
	Py_ssize_t n = frames ? PyList_Size(frames) : 0;
	for (Py_ssize_t k = n - 1; k >= 0 && k >= n - 3 && used + 1 < len; k--) {
		PyObject *f = PyList_GetItem(frames, k); /* borrowed */
		PyObject *file = PyObject_GetAttrString(f, "filename");
		PyObject *line = PyObject_GetAttrString(f, "lineno");
		PyObject *name = PyObject_GetAttrString(f, "name");
		const char *fs = file ? PyUnicode_AsUTF8(file) : NULL;
		const char *ns = name ? PyUnicode_AsUTF8(name) : NULL;
		long ln = line ? PyLong_AsLong(line) : 0;
		used += (size_t)snprintf(buf + used, len - used, "%s%s:%ld in %s",
					 k == n - 1 ? " (at " : " <- ", fs ? fs : "?", ln,
					 ns ? ns : "?");
		Py_XDECREF(file);
		Py_XDECREF(line);
		Py_XDECREF(name);
	}
	if (n > 0 && used + 1 < len)
		snprintf(buf + used, len - used, ")");
	PyErr_Clear();
	Py_XDECREF(frames);
	Py_XDECREF(tbmod);
	Py_XDECREF(msg);
	Py_XDECREF(value);
	Py_XDECREF(tb);
	return type;
}

/* Extension modules (NumPy's .so files) look up libpython's symbols globally; a plugin
 * loaded RTLD_LOCAL keeps them local. Re-open libpython RTLD_GLOBAL before starting. */
static void libpython_global(void)
{
	Dl_info info;
	if (dladdr((void *)Py_Initialize, &info) && info.dli_fname)
		dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
}

int py_start(PyObject *(*module_init)(void), bool host, struct gpud_error *err)
{
	if (Py_IsInitialized())
		return 0; /* the generator's and the sink's plugins share one interpreter */
	libpython_global();
	if (module_init && PyImport_AppendInittab("gpud", module_init) < 0)
		return gpud_fail(err, "python: cannot register the gpud module");
	PyConfig config;
	PyConfig_InitPythonConfig(&config);
	config.install_signal_handlers = 0; /* gpud's handling stays in charge */
	config.buffered_stdio = 0;          /* print() shows up as it happens */
	config.parse_argv = 0;
	PyStatus st = Py_InitializeFromConfig(&config);
	PyConfig_Clear(&config);
	if (PyStatus_Exception(st))
		return gpud_fail(err, "python: cannot start the interpreter: %s",
				 st.err_msg ? st.err_msg : "?");
	if (host) {
		/* gpud's signals and the process's exit stay gpud's (guard.c). */
		int guarded = py_guard_host(err);
		/* Calls come from more than one thread (the loop's stand-in): each takes
		 * the GIL for itself (PyGILState_Ensure), so the starter lets go of it. */
		PyEval_SaveThread();
		if (guarded < 0)
			return -1;
	}
	return 0;
}

/* Prepends each folder of a colon-separated list to sys.path (in order). */
int py_prepend_path(const char *list, struct gpud_error *err)
{
	PyObject *path = PySys_GetObject("path"); /* borrowed */
	if (!path)
		return gpud_fail(err, "python: no sys.path");
	char *copy = strdup(list), *save = NULL;
	Py_ssize_t at = 0;
	for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		PyObject *s = PyUnicode_DecodeFSDefault(d);
		if (!s || PyList_Insert(path, at++, s) < 0) {
			Py_XDECREF(s);
			free(copy);
			return gpud_fail(err, "python: cannot extend sys.path with %s", d);
		}
		Py_DECREF(s);
	}
	free(copy);
	return 0;
}

/* The module holding the class: a script loaded from its file, or a module imported. */
PyObject *py_load_module(const char *script, const char *module, const char *name,
			 struct gpud_error *err)
{
	char why[900];
	PyObject *mod = NULL;
	if (script) {
		/* Its folder first on sys.path, as `python script.py` would have it. */
		const char *slash = strrchr(script, '/');
		char dir[4096];
		snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - script) : 1,
			 slash ? script : ".");
		if (py_prepend_path(dir, err) < 0)
			return NULL;
		PyObject *util = PyImport_ImportModule("importlib.util");
		PyObject *spec = util ? PyObject_CallMethod(util, "spec_from_file_location", "ss",
							    name, script)
				      : NULL;
		if (spec == Py_None) {
			Py_DECREF(spec);
			Py_XDECREF(util);
			gpud_fail(err, "python: cannot load %s as a Python file", script);
			return NULL;
		}
		mod = spec ? PyObject_CallMethod(util, "module_from_spec", "O", spec) : NULL;
		if (mod) {
			PyObject *sys_modules = PyImport_GetModuleDict();
			PyDict_SetItemString(sys_modules, name, mod);
			PyObject *loader = PyObject_GetAttrString(spec, "loader");
			PyObject *r = loader ? PyObject_CallMethod(loader, "exec_module", "O", mod)
					     : NULL;
			if (!r)
				Py_CLEAR(mod);
			Py_XDECREF(r);
			Py_XDECREF(loader);
		}
		Py_XDECREF(spec);
		Py_XDECREF(util);
		if (!mod) {
			Py_XDECREF(py_take_error(why, sizeof why));
			gpud_fail(err, "python: loading %s: %s", script, why);
		}
		return mod;
	}
	mod = PyImport_ImportModule(module);
	if (!mod) {
		Py_XDECREF(py_take_error(why, sizeof why));
		gpud_fail(err, "python: importing module %s: %s", module, why);
	}
	return mod;
}

PyObject *py_kwargs(const struct gpud_args *a, const char *const *ours)
{
	PyObject *kwargs = PyDict_New();
	for (size_t i = 0; kwargs && a && i < a->count; i++) {
		bool skip = false;
		for (const char *const *o = ours; *o && !skip; o++)
			skip = strcmp(a->items[i].key, *o) == 0;
		if (skip)
			continue;
		PyObject *v = PyUnicode_DecodeFSDefault(a->items[i].value);
		if (!v || PyDict_SetItemString(kwargs, a->items[i].key, v) < 0) {
			Py_XDECREF(v);
			Py_DECREF(kwargs);
			return NULL;
		}
		Py_DECREF(v);
	}
	return kwargs;
}

int py_check_source(const struct gpud_args *args, const char *need, struct gpud_error *err)
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

int py_bytes_of(PyObject *o, PyObject *json_dumps, struct py_bytes *b)
{
	*b = (struct py_bytes){0};
	if (PyUnicode_Check(o)) {
		b->p = PyUnicode_AsUTF8AndSize(o, &b->n);
	} else if (PyObject_CheckBuffer(o)) {
		if (PyObject_GetBuffer(o, &b->view, PyBUF_C_CONTIGUOUS) == 0) {
			b->have_view = true;
			b->p = b->view.buf;
			b->n = b->view.len;
		} else {
			/* Not contiguous (a strided NumPy slice): bytes() lays it out. */
			PyErr_Clear();
			b->text = PyBytes_FromObject(o);
			if (b->text) {
				b->p = PyBytes_AS_STRING(b->text);
				b->n = PyBytes_GET_SIZE(b->text);
			}
		}
	} else {
		b->text = PyObject_CallOneArg(json_dumps, o);
		if (b->text)
			b->p = PyUnicode_AsUTF8AndSize(b->text, &b->n);
	}
	return b->p ? 0 : -1;
}

void py_bytes_release(struct py_bytes *b)
{
	if (b->have_view)
		PyBuffer_Release(&b->view);
	Py_XDECREF(b->text);
	*b = (struct py_bytes){0};
}
