/* SPDX-License-Identifier: MIT */
/* What the python worker, generator and sink share: starting the interpreter, finding
 * the user's code, and telling a Python exception in one line. */
#define _GNU_SOURCE
#include "common.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	const char *m = msg ? py_utf8(msg, NULL) : NULL;
	PyObject *tname = PyObject_GetAttrString(type, "__name__");
	const char *tn = tname ? py_utf8(tname, NULL) : NULL;
	PyErr_Clear();
	size_t used = (size_t)snprintf(buf, len, "%s: %s", tn ? tn : "?", m ? m : "");
	Py_XDECREF(tname);
	/* The last frames, where it happened. */
	PyObject *tbmod = tb ? PyImport_ImportModule("traceback") : NULL;
	PyObject *frames = tbmod ? PyObject_CallMethod(tbmod, "extract_tb", "O", tb) : NULL;
	Py_ssize_t n = frames ? PyList_Size(frames) : 0;
	for (Py_ssize_t k = n - 1; k >= 0 && k >= n - 3 && used + 1 < len; k--) {
		PyObject *f = PyList_GetItem(frames, k); /* borrowed */
		PyObject *file = PyObject_GetAttrString(f, "filename");
		PyObject *line = PyObject_GetAttrString(f, "lineno");
		PyObject *name = PyObject_GetAttrString(f, "name");
		const char *fs = file ? py_utf8(file, NULL) : NULL;
		const char *ns = name ? py_utf8(name, NULL) : NULL;
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

/* Which Python: the one whose libpython the stub loaded (stub.c), started as its own
 * executable. Its getpath then finds what `python` would: the venv's pyvenv.cfg next to
 * a venv's bin/python, the installation's standard library, site-packages. */
static int name_the_program(struct gpud_error *err)
{
	static wchar_t *program; /* Python keeps the pointer: for the process's life */
	const char *exe = getenv("GPUD_PYTHON_EXECUTABLE");
	if (!exe || !*exe)
		return gpud_fail(err, "python: no Python was chosen for this process "
				      "(GPUD_PYTHON_EXECUTABLE is not set)");
	if (!program)
		program = Py_DecodeLocale(exe, NULL);
	if (!program)
		return gpud_fail(err, "python: cannot decode the executable's name %s", exe);
		/* Deprecated from 3.11 for PyConfig, which the stable ABI does not have; present
		 * in 3.9 to 3.13 and part of the stable ABI. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
	Py_SetProgramName(program);
#pragma GCC diagnostic pop
	return 0;
}

int py_start(PyObject *(*module_init)(void), bool host, struct gpud_error *err)
{
	if (Py_IsInitialized())
		return 0; /* the generator's and the sink's plugins share one interpreter */
	if (name_the_program(err) < 0)
		return -1;
	if (module_init && PyImport_AppendInittab("gpud", module_init) < 0)
		return gpud_fail(err, "python: cannot register the gpud module");
	Py_InitializeEx(0); /* 0: gpud's signal handling stays in charge */
	if (!Py_IsInitialized())
		return gpud_fail(err, "python: cannot start the interpreter");
	/* print() shows up as it happens (PyConfig's buffered_stdio is not in the stable
	 * ABI): line buffered, so each line leaves in one write(2) with its newline (written
	 * through, print() wrote the text and the newline apart, and two workers' lines
	 * tore into each other). */
	if (py_run("import sys\n"
		   "for s in (sys.stdout, sys.stderr):\n"
		   "    if s is not None and hasattr(s, 'reconfigure'):\n"
		   "        s.reconfigure(line_buffering=True)\n") < 0)
		return gpud_fail(err, "python: cannot set up sys.stdout");
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

int py_run(const char *src)
{
	PyObject *main = PyImport_AddModule("__main__"); /* borrowed */
	PyObject *globals = main ? PyModule_GetDict(main) : NULL;
	PyObject *code = globals ? Py_CompileString(src, "<gpud>", Py_file_input) : NULL;
	PyObject *r = code ? PyEval_EvalCode(code, globals, globals) : NULL;
	Py_XDECREF(code);
	if (!r) {
		PyErr_Clear();
		return -1;
	}
	Py_DECREF(r);
	return 0;
}

const char *py_type_name(PyObject *o, char *buf, size_t len)
{
	PyObject *t = PyObject_Type(o);
	PyObject *n = t ? PyObject_GetAttrString(t, "__name__") : NULL;
	const char *s = n ? py_utf8(n, NULL) : NULL;
	snprintf(buf, len, "%s", s ? s : "?");
	PyErr_Clear();
	Py_XDECREF(n);
	Py_XDECREF(t);
	return buf;
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

/* The module already loaded from `script` in this process (a new reference), or NULL:
 * the one in sys.modules whose __gpud_script__ is the file's real path. */
static PyObject *loaded_script(const char *script)
{
	char real[PATH_MAX];
	if (!realpath(script, real))
		return NULL;
	/* A copy: a module's __getattr__ may import, changing sys.modules. */
	PyObject *mods = PyDict_Values(PyImport_GetModuleDict()), *found = NULL;
	Py_ssize_t n = mods ? PyList_Size(mods) : 0;
	for (Py_ssize_t i = 0; i < n && !found; i++) {
		PyObject *mod = PyList_GetItem(mods, i); /* borrowed */
		PyObject *key = PyObject_GetAttrString(mod, "__gpud_script__");
		const char *k = key && PyUnicode_Check(key) ? py_utf8(key, NULL) : NULL;
		if (k && strcmp(k, real) == 0) {
			found = mod;
			Py_INCREF(found);
		}
		PyErr_Clear();
		Py_XDECREF(key);
	}
	Py_XDECREF(mods);
	PyErr_Clear();
	return found;
}

/* The module holding the class: a script loaded from its file, or a module imported. */
PyObject *py_load_module(const char *script, const char *module, const char *name,
			 struct gpud_error *err)
{
	char why[900];
	PyObject *mod = NULL;
	if (script) {
		/* One file is one module: the generator and the sink of one script share
		 * its globals (state the generator keeps is there for the callbacks). */
		mod = loaded_script(script);
		if (mod)
			return mod;
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
			char real[PATH_MAX];
			PyObject *key =
				PyUnicode_DecodeFSDefault(realpath(script, real) ? real : script);
			if (!key || PyObject_SetAttrString(mod, "__gpud_script__", key) < 0)
				PyErr_Clear();
			Py_XDECREF(key);
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

int py_bytes_of(PyObject *o, PyObject *json_dumps, struct py_bytes *b)
{
	*b = (struct py_bytes){0};
	if (PyUnicode_Check(o)) {
		b->p = py_utf8(o, &b->n);
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
				b->p = PyBytes_AsString(b->text);
				b->n = PyBytes_Size(b->text);
			}
		}
	} else {
		b->text = py_call1(json_dumps, o);
		if (b->text)
			b->p = py_utf8(b->text, &b->n);
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
