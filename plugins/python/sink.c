/* SPDX-License-Identifier: MIT */
/*
 * Sink `python`: the callbacks of the library gpud grew from, called by name where
 * defined.
 *
 *   [sink]
 *   plugin = python
 *   script = ./callbacks.py     ; or module = my_package.callbacks
 *   class = Callbacks           ; made with every other key as a keyword (a str);
 *                               ; without class, the module's own functions are used
 *   result = auto               ; what on_success gets: auto (str when the bytes are
 *                               ; UTF-8, else bytes), bytes, str, json (decoded) or
 *                               ; pickle (the object a worker with result = pickle
 *                               ; returned)
 *   python_path = ./src         ; optional, prepended to sys.path
 *
 *   on_success(task_id, result, worker_id)     on_error(task_id, error, worker_id)
 *   on_timeout(task_id, timeout, worker_id)    on_setup_fail(gpu_id, error)
 *   on_task_start(task_id, worker_id)          on_exit(stats) or on_exit()
 *   on_resume(done)
 *
 * Only the events of defined callbacks are asked for, so a sink without on_task_start
 * costs nothing for task starts. on_exit runs exactly once, with the final stats as a
 * dict when it takes an argument, exit_status and abort_reason included (the host gives
 * them through gpud_sink_finish, ABI 1.3). With --resume, on_resume runs once before any
 * other callback with the tasks earlier runs finished (gpud_sink_resumed, ABI 1.3), whose
 * events this run does not deliver again: a DoneTasks object (`id in done`, len, iteration
 * in id order, .ranges, .failed). A callback that raises aborts the run as a failing sink
 * does, with the exception in one line.
 */
#define _GNU_SOURCE
#include "common.h"
#include "gpud_module.h"
#include "py_keys.h" /* daemon/shared/: the keys check --import knows too */

#include <string.h>

/* The plugin gpud loads is stub.c: it loads this glue after the chosen libpython. */

enum result_mode { RES_AUTO, RES_BYTES, RES_STR, RES_JSON, RES_PICKLE };
static const char *const result_names[] = {"auto", "bytes", "str", "json", "pickle"};

/* The event callbacks first, in the order of gpud_sink_events' kinds. */
enum { CB_SUCCESS, CB_ERROR, CB_TIMEOUT, CB_SETUP_FAIL, CB_TASK_START, CB_EXIT, CB_RESUME, CB_N };
static const char *const cb_names[] = {PY_SINK_CALLBACKS}; /* py_keys.h */
_Static_assert(sizeof cb_names / sizeof *cb_names == CB_N, "py_keys.h's PY_SINK_CALLBACKS");

struct py_sink {
	PyObject *cb[CB_N];
	PyObject *json_loads;
	PyObject *pickle_loads; /* result = pickle */
	enum result_mode result;
	int exit_args; /* parameters on_exit takes: 0 or 1 */
};

static void release_all(struct py_sink *s)
{
	for (int i = 0; i < CB_N; i++)
		Py_XDECREF(s->cb[i]);
	Py_XDECREF(s->json_loads);
	Py_XDECREF(s->pickle_loads);
	free(s);
}

GPUD_EXPORT int gpud_sink_open(const struct gpud_args *args, void **state, struct gpud_error *err)
{
	const char *script = gpud_arg(args, "script", NULL),
		   *module = gpud_arg(args, "module", NULL);
	const char *cls_name = gpud_arg(args, "class", NULL),
		   *res = gpud_arg(args, "result", "auto");
	const char *pypath = gpud_arg(args, "python_path", NULL);
	char why[900];
	if (!script == !module)
		return gpud_fail(err,
				 "python: give script = FILE.py or module = NAME (one of them)");
	struct py_sink *s = calloc(1, sizeof *s);
	if (!s)
		return gpud_fail(err, "python: out of memory");
	if (!strcmp(res, "auto"))
		s->result = RES_AUTO;
	else if (!strcmp(res, "bytes"))
		s->result = RES_BYTES;
	else if (!strcmp(res, "str"))
		s->result = RES_STR;
	else if (!strcmp(res, "json"))
		s->result = RES_JSON;
	else if (!strcmp(res, "pickle"))
		s->result = RES_PICKLE;
	else {
		free(s);
		return gpud_fail(err,
				 "python: result = '%s': expected auto, bytes, str, json or pickle",
				 res);
	}
	if (py_start(gpud_module_init, true, err) < 0) {
		free(s);
		return -1;
	}
	PyGILState_STATE gil = PyGILState_Ensure();
	int rc = -1;
	PyObject *mod = NULL, *holder = NULL, *json = NULL, *inspect = NULL;
	if (pypath && py_prepend_path(pypath, err) < 0)
		goto out;
	mod = py_load_module(script, module, "__gpud_sink__", err);
	if (!mod)
		goto out;
	if (cls_name) {
		PyObject *cls = PyObject_GetAttrString(mod, cls_name);
		if (!cls) {
			PyErr_Clear();
			gpud_fail(err, "python: %s has no class %s", script ? script : module,
				  cls_name);
			goto out;
		}
		PyObject *kwargs = py_kwargs(args, py_sink_keys), *noargs = PyTuple_New(0);
		holder = kwargs && noargs ? PyObject_Call(cls, noargs, kwargs) : NULL;
		Py_XDECREF(kwargs);
		Py_XDECREF(noargs);
		Py_DECREF(cls);
		if (!holder) {
			Py_XDECREF(py_take_error(why, sizeof why));
			gpud_fail(err, "python: %s(): %s", cls_name, why);
			goto out;
		}
	} else {
		holder = mod;
		Py_INCREF(holder);
	}
	int any = 0;
	for (int i = 0; i < CB_N; i++) {
		s->cb[i] = PyObject_GetAttrString(holder, cb_names[i]);
		if (!s->cb[i] || !PyCallable_Check(s->cb[i])) {
			PyErr_Clear();
			Py_CLEAR(s->cb[i]);
		}
		any += s->cb[i] != NULL;
	}
	if (!any) {
		gpud_fail(err,
			  "python: %s defines none of on_success, on_error, on_timeout, "
			  "on_setup_fail, on_task_start, on_exit, on_resume",
			  cls_name ? cls_name
			  : script ? script
				   : module);
		goto out;
	}
	json = PyImport_ImportModule("json");
	s->json_loads = json ? PyObject_GetAttrString(json, "loads") : NULL;
	if (s->cb[CB_EXIT]) {
		/* on_exit(stats) or on_exit(): as many arguments as it takes. */
		inspect = PyImport_ImportModule("inspect");
		PyObject *sig =
			inspect ? PyObject_CallMethod(inspect, "signature", "O", s->cb[CB_EXIT])
				: NULL;
		PyObject *params = sig ? PyObject_GetAttrString(sig, "parameters") : NULL;
		s->exit_args = params && PyObject_Length(params) > 0;
		PyErr_Clear();
		Py_XDECREF(params);
		Py_XDECREF(sig);
	}
	if (s->json_loads && s->result == RES_PICKLE) {
		PyObject *pickle = PyImport_ImportModule("pickle");
		s->pickle_loads = pickle ? PyObject_GetAttrString(pickle, "loads") : NULL;
		Py_XDECREF(pickle);
	}
	if (!s->json_loads || (s->result == RES_PICKLE && !s->pickle_loads)) {
		Py_XDECREF(py_take_error(why, sizeof why));
		gpud_fail(err, "python: %s", why);
		goto out;
	}
	*state = s;
	s = NULL;
	rc = 0;
out:
	if (s)
		release_all(s);
	Py_XDECREF(inspect);
	Py_XDECREF(json);
	Py_XDECREF(holder);
	Py_XDECREF(mod);
	PyGILState_Release(gil);
	return rc;
}

GPUD_EXPORT uint32_t gpud_sink_events(void *state)
{
	struct py_sink *s = state;
	static const enum gpud_event_kind kinds[] = {GPUD_TASK_OK, GPUD_TASK_ERROR,
						     GPUD_TASK_TIMEOUT, GPUD_SETUP_FAILED,
						     GPUD_TASK_START};
	uint32_t mask = 0;
	for (int i = 0; i < CB_EXIT; i++)
		if (s->cb[i])
			mask |= GPUD_EVENT_BIT(kinds[i]);
	return mask;
}

/* The result as on_success gets it. */
static PyObject *result_object(struct py_sink *s, const struct gpud_event *ev)
{
	const char *p = ev->result ? ev->result : "";
	Py_ssize_t n = (Py_ssize_t)ev->result_size;
	if (s->result == RES_BYTES)
		return PyBytes_FromStringAndSize(p, n);
	if (s->result == RES_PICKLE) {
		/* Straight from the shared memory: no bytes object in between. */
		PyObject *mv = PyMemoryView_FromMemory((char *)p, n, PyBUF_READ);
		PyObject *v = mv ? py_call1(s->pickle_loads, mv) : NULL;
		Py_XDECREF(mv);
		return v;
	}
	PyObject *str = PyUnicode_DecodeUTF8(p, n, "strict");
	if (!str && s->result == RES_AUTO) {
		PyErr_Clear();
		return PyBytes_FromStringAndSize(p, n);
	}
	if (!str || s->result != RES_JSON)
		return str;
	PyObject *v = py_call1(s->json_loads, str);
	Py_DECREF(str);
	return v;
}

static PyObject *text(const char *m)
{
	return PyUnicode_DecodeUTF8(m ? m : "", (Py_ssize_t)strlen(m ? m : ""), "replace");
}

GPUD_EXPORT int gpud_sink_event(void *state, const struct gpud_event *ev, struct gpud_error *err)
{
	struct py_sink *s = state;
	PyGILState_STATE gil = PyGILState_Ensure();
	PyObject *r = NULL, *a = NULL;
	int cb = -1;
	unsigned long long id = (unsigned long long)ev->task_id;
	switch (ev->kind) {
	case GPUD_TASK_OK:
		cb = CB_SUCCESS;
		a = result_object(s, ev);
		if (a) {
			PyObject *t = Py_BuildValue("(KOi)", id, a, ev->worker_id);
			Py_DECREF(a);
			a = t;
		}
		break;
	case GPUD_TASK_ERROR:
		cb = CB_ERROR;
		a = Py_BuildValue("(KNi)", id, text(ev->message), ev->worker_id);
		break;
	case GPUD_TASK_TIMEOUT:
		cb = CB_TIMEOUT;
		a = Py_BuildValue("(Kdi)", id, ev->seconds, ev->worker_id);
		break;
	case GPUD_SETUP_FAILED:
		cb = CB_SETUP_FAIL;
		a = Py_BuildValue("(iN)", ev->gpu_id, text(ev->message));
		break;
	case GPUD_TASK_START:
		cb = CB_TASK_START;
		a = Py_BuildValue("(Ki)", id, ev->worker_id);
		break;
	default:
		break; /* kinds it does not know */
	}
	int rc = 0;
	if (cb >= 0 && s->cb[cb]) {
		r = a ? PyObject_Call(s->cb[cb], a, NULL) : NULL;
		if (!r) {
			char why[900];
			Py_XDECREF(py_take_error(why, sizeof why));
			if (!a && cb == CB_SUCCESS)
				rc = gpud_fail(err,
					       "python: task %llu's result cannot be made for "
					       "on_success (result = %s): %s",
					       id, result_names[s->result], why);
			else
				rc = gpud_fail(err, "python: %s raised %s", cb_names[cb], why);
		}
	}
	Py_XDECREF(r);
	Py_XDECREF(a);
	PyGILState_Release(gil);
	return rc;
}

/* What on_resume gets: the tasks earlier runs finished, as ranges (a run resumed after
 * millions of tasks holds a few ranges, not millions of ids). */
#include "done_tasks_py.h" /* done_tasks_source[]: done_tasks.py, embedded at build time */

/* A DoneTasks of info; NULL with the exception pending. */
static PyObject *done_tasks(const struct gpud_resume_info *info)
{
	PyObject *g = PyDict_New(), *cls = NULL, *ranges = NULL, *failed = NULL, *r = NULL;
	PyObject *code = Py_CompileString(done_tasks_source, "<gpud: plugins/python/done_tasks.py>",
					  Py_file_input);
	if (!g || !code || PyDict_SetItemString(g, "__builtins__", PyEval_GetBuiltins()) < 0)
		goto out;
	PyObject *ok = PyEval_EvalCode(code, g, g);
	if (!ok)
		goto out;
	Py_DECREF(ok);
	cls = PyDict_GetItemString(g, "DoneTasks");                            /* borrowed */
	PyObject *range = PyDict_GetItemString(PyEval_GetBuiltins(), "range"); /* borrowed */
	ranges = PyList_New((Py_ssize_t)info->n_done);
	failed = PyList_New((Py_ssize_t)info->n_failed);
	if (!cls || !range || !ranges || !failed)
		goto out;
	for (size_t i = 0; i < info->n_done; i++) {
		unsigned long long first = info->done[2 * i], n = info->done[2 * i + 1];
		PyObject *one = PyObject_CallFunction(range, "KK", first, first + n);
		if (!one)
			goto out;
		PyList_SetItem(ranges, (Py_ssize_t)i, one); /* steals */
	}
	for (size_t i = 0; i < info->n_failed; i++) {
		PyObject *id = PyLong_FromUnsignedLongLong(info->failed[i]);
		if (!id)
			goto out;
		PyList_SetItem(failed, (Py_ssize_t)i, id);
	}
	r = PyObject_CallFunctionObjArgs(cls, ranges, failed, NULL);
out:
	Py_XDECREF(code);
	Py_XDECREF(ranges);
	Py_XDECREF(failed);
	Py_XDECREF(g);
	return r;
}

GPUD_EXPORT int gpud_sink_resumed(void *state, const struct gpud_resume_info *info,
				  struct gpud_error *err)
{
	struct py_sink *s = state;
	if (!s->cb[CB_RESUME])
		return 0;
	int rc = 0;
	PyGILState_STATE gil = PyGILState_Ensure();
	PyObject *done = done_tasks(info);
	PyObject *r = done ? py_call1(s->cb[CB_RESUME], done) : NULL;
	if (!r) {
		char why[900];
		Py_XDECREF(py_take_error(why, sizeof why));
		rc = gpud_fail(err, "python: on_resume raised %s", why);
	}
	Py_XDECREF(r);
	Py_XDECREF(done);
	PyGILState_Release(gil);
	return rc;
}

GPUD_EXPORT int gpud_sink_finish(void *state, const struct gpud_stats *st,
				 const struct gpud_run_end *end, struct gpud_error *err)
{
	struct py_sink *s = state;
	int rc = 0;
	PyGILState_STATE gil = PyGILState_Ensure();
	if (s->cb[CB_EXIT]) {
		PyObject *stats = Py_BuildValue(
			"{sKsKsKsKsKsKsIsIsd}", "generated", (unsigned long long)st->generated,
			"ok", (unsigned long long)st->ok, "failed", (unsigned long long)st->failed,
			"timed_out", (unsigned long long)st->timed_out, "not_run",
			(unsigned long long)st->not_run, "retried", (unsigned long long)st->retried,
			"worker_restarts", st->worker_restarts, "setup_failures",
			st->setup_failures, "elapsed", st->elapsed);
		/* How the run ends: None where the host did not say (gpud_sink_close). */
		PyObject *status = end ? PyLong_FromLong(end->exit_status) : Py_None;
		PyObject *reason = end && end->abort_reason ? text(end->abort_reason) : Py_None;
		if (status == Py_None)
			Py_INCREF(status);
		if (reason == Py_None)
			Py_INCREF(reason);
		if (stats &&
		    (!status || !reason || PyDict_SetItemString(stats, "exit_status", status) < 0 ||
		     PyDict_SetItemString(stats, "abort_reason", reason) < 0))
			Py_CLEAR(stats);
		Py_XDECREF(status);
		Py_XDECREF(reason);
		PyObject *r = !stats         ? NULL
			      : s->exit_args ? py_call1(s->cb[CB_EXIT], stats)
					     : PyObject_CallObject(s->cb[CB_EXIT], NULL);
		if (!r) {
			char why[900];
			Py_XDECREF(py_take_error(why, sizeof why));
			rc = gpud_fail(err, "python: on_exit raised %s", why);
		}
		Py_XDECREF(r);
		Py_XDECREF(stats);
	}
	/* print() output of the callbacks reaches the terminal now. */
	py_run("import sys\nsys.stdout.flush()\n");
	release_all(s);
	PyGILState_Release(gil);
	return rc;
}

GPUD_EXPORT int gpud_sink_close(void *state, const struct gpud_stats *st, struct gpud_error *err)
{
	return gpud_sink_finish(state, st, NULL, err);
}
