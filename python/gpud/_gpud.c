/* SPDX-License-Identifier: MIT */
/*
 * gpud._gpud: the `gpud` Python package's bridge to libgpud (gpud/gpud.h). One call,
 * run(), builds a job from keys, gives it the calling program's iterator as the
 * generator and its callbacks as the sink, and runs it in this process.
 *
 * Built on CPython's stable ABI (Py_LIMITED_API 3.9): one build serves 3.9 to 3.13.
 *
 * Threads: run() lets go of the GIL while libgpud drives the run on the calling thread.
 * The generator and the sink are called on that thread, where they take the GIL back
 * and call the program's iterator and callbacks. The sink is GPUD_SINK_CALLING_THREAD:
 * what comes while the iterator blocks waits in libgpud and reaches the callbacks once
 * it returns (the library's callbacks run in the program's thread, never in another),
 * and an outcome is journaled only once its callback returned. When the run must end
 * while the iterator still blocks, libgpud's stand-in calls gen_interrupt, which makes
 * it return (below), so that run() returns and on_exit runs.
 *
 * Speed: the iterator is read ahead in batches (up to `prefetch` items while it
 * answers at once), each item pickled by one C call and copied into the task's shared
 * memory without the GIL; a result is unpickled straight from shared memory. An item
 * must travel as it was yielded: one whose buffers the program still holds (a buffer
 * it refills and yields again) ends the batch, so that it is copied into the ring
 * before the iterator runs again (gpud._worker.frame_one says which).
 */
#define _GNU_SOURCE 1 /* as pyconfig.h defines it */
/* CPython's stable ABI of 3.9 (<Python.h>), and the buffer protocol it leaves out. */
#include "limited_api.h" /* plugins/python/ */

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <gpud/gpud.h>

/* What travels in a task and a result (the package's _constants.py CODEC_*: the test
 * python_types checks they agree with the module constants below). */
enum codec {
	CODEC_RAW = 0,    /* bytes-like as is, str as UTF-8 (a C worker plugin) */
	CODEC_PICKLE = 1, /* pickle protocol 5 (the package's Python worker) */
	CODEC_PARTS = 2,  /* items encoded already: bytes, or a list of buffers written one
			     after another (the package's chunks); results as CODEC_RAW */
	/* CPU stages between (Dispatcher's stages=): what the first stage takes and what
	 * the last worker gives differ. */
	CODEC_RAW_PICKLE = 3, /* items as CODEC_RAW (a C stage first), results as
				 CODEC_PICKLE (a Python worker class last) */
	CODEC_PICKLE_RAW = 4, /* items as CODEC_PICKLE (a Python stage first), results as
				 CODEC_RAW (a C worker plugin last) */
};

/* The first bytes of a framed pickle (gpud._worker.frame; _constants.FRAME_MAGIC). */
#define FRAME_MAGIC "GPD5"

static bool results_pickled(enum codec c)
{
	return c == CODEC_PICKLE || c == CODEC_RAW_PICKLE;
}

static bool items_pickled(enum codec c)
{
	return c == CODEC_PICKLE || c == CODEC_PICKLE_RAW;
}

struct run_ctx {
	gpud_job *job;
	pthread_t caller;
	enum codec codec;
	/* generator */
	PyObject *iter; /* NULL: the job's generator plugin */
	int64_t total;  /* -1 unknown */
	Py_ssize_t prefetch;
	PyObject *batch;   /* list of the encoded items read ahead (bytes, or a list of
			      parts written one after another: gpud._worker.frame) */
	Py_ssize_t pos, n; /* next item in batch, items in batch */
	size_t *first;     /* item i's parts: part[first[i]] to part[first[i + 1] - 1] */
	struct part {
		const char *p; /* read without the GIL */
		size_t n;
	} * part;
	size_t parts, part_cap;
	Py_buffer *view; /* the parts' buffers held (not bytes), released at the refill */
	size_t views, view_cap;
	bool ended;
	bool gen_failed; /* the iterator raised: -1 once what it gave before is handed on */
	/* callbacks (NULL: not wanted) */
	PyObject *on_success, *on_error, *on_timeout, *on_setup_fail, *on_task_start;
	PyObject *loads, *dumps, *oob_loads;
	PyObject *weakrefs;  /* weakref.getweakrefcount */
	PyObject *on_resume; /* what the program already holds, on a resume (or NULL) */
	/* The run ended while the iterator blocked: libgpud's stand-in asked it to return
	 * (gen_interrupt). The KeyboardInterrupt that brings it back is ours. */
	atomic_bool interrupting;
	bool main_thread; /* run() was called on the main thread, where Python runs signal
			     handlers, and its SIGINT handler is one set from Python */
	/* what went wrong in Python: the first exception, kept for run() to raise */
	PyObject *exc;
	/* A callback raised (or a result could not be unpickled): no callback is called
	 * again, and the sink fails (libgpud then aborts the run, and what no callback got
	 * is not journaled as done). Read by the stand-in. */
	atomic_bool cb_failed;
	bool cb_failure_told; /* stop_msg reached libgpud through a failed sink call */
	char stop_msg[400];
	unsigned setup_failed;
	PyObject *first_setup_error; /* its message (str) */
};

static struct run_ctx *active; /* the run in progress, for the signal handler */
static volatile sig_atomic_t caught_signal;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The pending exception as the run's first one (later ones are printed), for run() to
 * raise. GIL held. */
static void stash_error(struct run_ctx *c)
{
	PyObject *type, *value, *tb;
	PyErr_Fetch(&type, &value, &tb);
	PyErr_NormalizeException(&type, &value, &tb);
	if (value && tb)
		PyException_SetTraceback(value, tb);
	if (!c->exc && value) {
		c->exc = value;
		value = NULL;
	} else if (value) {
		PyErr_Restore(type, value, tb);
		type = value = tb = NULL;
		PyErr_WriteUnraisable(NULL);
	}
	Py_XDECREF(type);
	Py_XDECREF(value);
	Py_XDECREF(tb);
}

/* A callback's exception (`where`: "on_success", "unpickling a result"...): kept for
 * run() to raise, and the run stops: no callback is called again, and the sink's next
 * call fails with a line saying why. GIL held. */
static void keep_error(struct run_ctx *c, const char *where)
{
	PyObject *type, *value, *tb;
	PyErr_Fetch(&type, &value, &tb);
	PyErr_NormalizeException(&type, &value, &tb);
	/* 3.9's stable ABI has no PyUnicode_AsUTF8AndSize: through bytes. */
	PyObject *tn = type ? PyObject_GetAttrString(type, "__name__") : NULL;
	PyObject *str = value ? PyObject_Str(value) : NULL;
	PyObject *name = tn ? PyUnicode_AsUTF8String(tn) : NULL;
	PyObject *text = str ? PyUnicode_AsUTF8String(str) : NULL;
	Py_XDECREF(tn);
	Py_XDECREF(str);
	const char *n = name ? PyBytes_AsString(name) : NULL;
	const char *t = text ? PyBytes_AsString(text) : NULL;
	if (!n || !t)
		PyErr_Clear();
	if (!atomic_load(&c->cb_failed)) {
		/* One line: the message's first line, at most 200 bytes of it. */
		int len = t ? (int)strcspn(t, "\r\n") : 0;
		snprintf(c->stop_msg, sizeof c->stop_msg,
			 "%s raised %s%s%.*s; stopping (run() re-raises it)", where,
			 n ? n : "an exception", len ? ": " : "", len > 200 ? 200 : len,
			 t ? t : "");
		atomic_store(&c->cb_failed, true);
	}
	Py_XDECREF(name);
	Py_XDECREF(text);
	PyErr_Restore(type, value, tb);
	stash_error(c);
}

/* ---- delivering events to the callbacks (calling thread, GIL held) ---- */

/* A result's object: unpickled (a framed result with out-of-band buffers through the
 * package's decoder, which needs a copy of its own), or a copy of the bytes. */
static PyObject *decode_result(struct run_ctx *c, const void *data, size_t size)
{
	if (!results_pickled(c->codec) || size == 0)
		return size == 0 && results_pickled(c->codec)
			       ? (Py_INCREF(Py_None), Py_None)
			       : PyBytes_FromStringAndSize(data, (Py_ssize_t)size);
	if (size >= 4 && memcmp(data, FRAME_MAGIC, 4) == 0) {
		PyObject *copy = PyByteArray_FromStringAndSize(data, (Py_ssize_t)size);
		PyObject *r = copy ? PyObject_CallFunctionObjArgs(c->oob_loads, copy, NULL) : NULL;
		Py_XDECREF(copy);
		return r;
	}
	/* pickle.loads copies what it keeps: nothing points into the ring afterwards. */
	PyObject *mv = PyMemoryView_FromMemory((char *)data, (Py_ssize_t)size, PyBUF_READ);
	PyObject *r = mv ? PyObject_CallFunctionObjArgs(c->loads, mv, NULL) : NULL;
	Py_XDECREF(mv);
	return r;
}

/* The text of an error. A traceback from the package's worker (gpud._worker) comes as
 * "TaskFailed: " and its lines joined by U+2424 (the host turns control characters
 * into '?'), after "stage NAME: " when a CPU stage's class raised it (the host says
 * which stage: run/events.c; a name is letters, digits, _ and -): the callbacks get it
 * as the library gave it, lines and all, after the stage's name. */
static PyObject *message_of(const char *m)
{
	static const char prefix[] = "TaskFailed: ", stage[] = "stage ";
	static const char name_chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					 "0123456789_-";
	if (!m)
		m = "";
	size_t head = 0; /* "stage NAME: " */
	if (!strncmp(m, stage, sizeof stage - 1)) {
		size_t n = strspn(m + sizeof stage - 1, name_chars);
		const char *colon = m + sizeof stage - 1 + n;
		if (n && colon[0] == ':' && colon[1] == ' ')
			head = (size_t)(colon + 2 - m);
	}
	bool ours = !strncmp(m + head, prefix, sizeof prefix - 1);
	if (!ours)
		return PyUnicode_DecodeUTF8(m, (Py_ssize_t)strlen(m), "replace");
	const char *text = m + head + sizeof prefix - 1;
	PyObject *s = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
	PyObject *lines = s ? PyObject_CallMethod(s, "replace", "ss", "\xe2\x90\xa4", "\n") : NULL;
	Py_XDECREF(s);
	if (!lines || !head)
		return lines;
	PyObject *who = PyUnicode_DecodeUTF8(m, (Py_ssize_t)head, "replace");
	PyObject *r = who ? PyUnicode_Concat(who, lines) : NULL;
	Py_XDECREF(who);
	Py_DECREF(lines);
	return r;
}

/* The text of a setup failure: the traceback the package's worker sent (the library's
 * SetupFailed.error), from inside the plugin's "python: W.setup() failed: SetupFailed:
 * <the error's line>\u2424<traceback> (at .../_worker.py:N in setup)"; a message
 * without the traceback (no U+2424) whole; any other message as it is. */
static PyObject *setup_message_of(const char *m)
{
	static const char mark[] = "SetupFailed: ", nl[] = "\xe2\x90\xa4";
	const char *at = m ? strstr(m, mark) : NULL;
	if (!at)
		return message_of(m);
	at += sizeof mark - 1;
	const char *tb = strstr(at, nl);
	if (tb)
		at = tb + sizeof nl - 1;
	size_t n = strlen(at);
	const char *where = NULL;
	for (const char *p = strstr(at, " (at "); p; p = strstr(p + 1, " (at "))
		where = p; /* the last one: the plugin's note of where it was raised */
	if (where && strstr(where, "_worker.py"))
		n = (size_t)(where - at);
	PyObject *s = PyUnicode_DecodeUTF8(at, (Py_ssize_t)n, "replace");
	if (!s)
		return NULL;
	PyObject *r = PyObject_CallMethod(s, "replace", "ss", "\xe2\x90\xa4", "\n");
	Py_DECREF(s);
	return r;
}

/* The KeyboardInterrupt gen_interrupt asked for, when it is still pending (the
 * iterator returned before Python ran the handler): taken here, so that it reaches
 * neither a callback nor the program. GIL held. */
static void absorb_interrupt(struct run_ctx *c)
{
	if (!atomic_load(&c->interrupting) || !c->main_thread)
		return;
	if (PyErr_CheckSignals() < 0) {
		if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt))
			PyErr_Clear();
		else
			stash_error(c);
	}
}

static void deliver(struct run_ctx *c, enum gpud_event_kind kind, uint64_t task_id, int gpu_id,
		    double seconds, const char *message, const void *data, size_t size)
{
	PyObject *fn = NULL, *args = NULL;
	const char *name = "a callback";
	long wid = gpu_id; /* the callbacks' worker_id is the GPU id (the library's) */
	if (atomic_load(&c->cb_failed))
		return; /* a callback raised: none is called again */
	absorb_interrupt(c);
	switch (kind) {
	case GPUD_TASK_OK:
		if (!(fn = c->on_success))
			return;
		name = "on_success";
		{
			PyObject *obj = decode_result(c, data, size);
			if (!obj) {
				keep_error(c, "unpickling a result");
				return;
			}
			args = Py_BuildValue("(KNl)", (unsigned long long)task_id, obj, wid);
		}
		break;
	case GPUD_TASK_ERROR:
		if (!(fn = c->on_error))
			return;
		name = "on_error";
		args = Py_BuildValue("(KNl)", (unsigned long long)task_id, message_of(message),
				     wid);
		break;
	case GPUD_TASK_TIMEOUT:
		if (!(fn = c->on_timeout))
			return;
		name = "on_timeout";
		args = Py_BuildValue("(Kdl)", (unsigned long long)task_id, seconds, wid);
		break;
	case GPUD_TASK_START:
		if (!(fn = c->on_task_start))
			return;
		name = "on_task_start";
		args = Py_BuildValue("(Kl)", (unsigned long long)task_id, wid);
		break;
	case GPUD_SETUP_FAILED:
		c->setup_failed++;
		if (!c->first_setup_error)
			c->first_setup_error = setup_message_of(message);
		if (!c->first_setup_error)
			PyErr_Clear();
		if (!(fn = c->on_setup_fail))
			return;
		name = "on_setup_fail";
		args = Py_BuildValue("(iN)", gpu_id, setup_message_of(message));
		break;
	default:
		return; /* kinds added later */
	}
	PyObject *r = args ? PyObject_CallObject(fn, args) : NULL;
	Py_XDECREF(args);
	if (!r)
		keep_error(c, name);
	Py_XDECREF(r);
}

/* ---- the sink ---- */

/* The sink's failure after a callback raised: libgpud aborts the run with stop_msg. */
static int told_failure(struct run_ctx *c, struct gpud_error *err)
{
	c->cb_failure_told = true;
	return gpud_fail(err, "%s", c->stop_msg);
}

/* The name of the task whose callback runs now (GPUD_SINK_NAMES: a sample's key from
 * the tar generator), or NULL: what task_key() answers. Only the calling thread, under
 * the GIL, sets and reads it (one run at a time per process). */
static const char *current_key;

/* Called on the calling thread only (GPUD_SINK_CALLING_THREAD). */
static int sink_event(void *ctx, const struct gpud_event *ev, struct gpud_error *err)
{
	struct run_ctx *c = ctx;
	if (atomic_load(&c->cb_failed)) /* stop_msg is written before the flag is set */
		return told_failure(c, err);
	PyGILState_STATE g = PyGILState_Ensure();
	current_key = ev->name;
	deliver(c, ev->kind, ev->task_id, ev->gpu_id, ev->seconds, ev->message, ev->result,
		ev->kind == GPUD_TASK_OK ? ev->result_size : 0);
	current_key = NULL;
	PyGILState_Release(g);
	/* This event's callback raised: the sink fails, and libgpud does not journal this
	 * outcome (nor any after it) as done. */
	return atomic_load(&c->cb_failed) ? told_failure(c, err) : 0;
}

static uint32_t sink_events(void *ctx)
{
	struct run_ctx *c = ctx;
	uint32_t m = GPUD_EVENT_BIT(GPUD_TASK_OK) | GPUD_EVENT_BIT(GPUD_SETUP_FAILED);
	if (c->on_error)
		m |= GPUD_EVENT_BIT(GPUD_TASK_ERROR);
	if (c->on_timeout)
		m |= GPUD_EVENT_BIT(GPUD_TASK_TIMEOUT);
	if (c->on_task_start)
		m |= GPUD_EVENT_BIT(GPUD_TASK_START);
	return m;
}

static int sink_close(void *ctx, const struct gpud_stats *stats, struct gpud_error *err)
{
	struct run_ctx *c = ctx;
	(void)stats;
	/* A callback raised and no sink call has said so yet (no outcome came after). */
	if (atomic_load(&c->cb_failed) && !c->cb_failure_told)
		return told_failure(c, err);
	return 0;
}

/* Task id `id` (an int), of on_resume()'s entry x, into *v: false with a ValueError
 * naming the entry when it is no task of the job: negative, past any id, or (the job's
 * size known) past its last task. */
static bool resume_id(const struct run_ctx *c, PyObject *x, PyObject *id, unsigned long long *v)
{
	int overflow = 0;
	long long sv = PyLong_AsLongLongAndOverflow(id, &overflow);
	if (PyErr_Occurred())
		return false;
	if (overflow < 0 || (!overflow && sv < 0)) {
		PyErr_Format(PyExc_ValueError,
			     "on_resume() gave %R: a task id is 0 or more (the position of its "
			     "item in the generator's stream)",
			     x);
		return false;
	}
	*v = PyLong_AsUnsignedLongLong(id);
	if (PyErr_Occurred()) {
		PyErr_Clear();
		PyErr_Format(PyExc_ValueError,
			     "on_resume() gave %R: larger than any task id (at most 2**64 - 1)", x);
		return false;
	}
	if (c->total >= 0 && *v >= (unsigned long long)c->total) {
		if (c->total)
			PyErr_Format(PyExc_ValueError,
				     "on_resume() gave %R: this job has %lld tasks, ids 0 to %lld",
				     x, (long long)c->total, (long long)c->total - 1);
		else
			PyErr_Format(PyExc_ValueError, "on_resume() gave %R: this job has no tasks",
				     x);
		return false;
	}
	return true;
}

/* A resume: the ids of the tasks whose results the program holds, from on_resume(),
 * each an int (a success) or a pair (id, "ok" | "error" | "timeout"). Those are not run
 * again; every other task is (on_resume's word over the journal's). Calling thread. */
static int sink_resume(void *ctx, void (*done)(void *done_ctx, uint64_t task_id, int status),
		       void *done_ctx, struct gpud_error *err)
{
	struct run_ctx *c = ctx;
	static const char *const kinds[] = {"ok", "error", "timeout"};
	PyGILState_STATE g = PyGILState_Ensure();
	PyObject *held = PyObject_CallObject(c->on_resume, NULL);
	PyObject *it = held ? PyObject_GetIter(held) : NULL, *x;
	Py_XDECREF(held);
	while (it && (x = PyIter_Next(it))) {
		PyObject *id = x, *kind = NULL;
		int status = -1;
		if (PyTuple_Check(x) && PyTuple_Size(x) == 2) {
			id = PyTuple_GetItem(x, 0);
			kind = PyTuple_GetItem(x, 1);
		}
		unsigned long long v = 0;
		if (PyLong_Check(id) && !resume_id(c, x, id, &v)) {
			Py_DECREF(x);
			break;
		}
		for (int k = 0; k < 3 && status < 0; k++) {
			PyObject *name = PyUnicode_FromString(kinds[k]);
			if (!kind || (name && PyObject_RichCompareBool(kind, name, Py_EQ) == 1))
				status = k;
			Py_XDECREF(name);
		}
		if (!PyLong_Check(id) || status < 0) {
			PyErr_Format(PyExc_TypeError,
				     "on_resume() gave %R: expected a task id (int) or (id, \"ok\" "
				     "| \"error\" | \"timeout\")",
				     x);
			Py_DECREF(x);
			break;
		}
		Py_DECREF(x);
		done(done_ctx, (uint64_t)v, status);
	}
	Py_XDECREF(it);
	int rc = 0;
	if (PyErr_Occurred()) {
		keep_error(c, "on_resume");
		rc = told_failure(c, err);
	}
	PyGILState_Release(g);
	return rc;
}

/* ---- the generator ---- */

/* The item's bytes: pickled (gpud._worker.frame_one: a list of parts, some of them
 * the item's own buffers), or (raw) the bytes of a buffer or a str's UTF-8. New
 * reference to a bytes object or a list of parts, or NULL with an exception. *live:
 * a part is memory the program may still change (a buffer it refills and yields
 * again): the item must be written into the ring before the iterator is asked for the
 * next one. GIL held; `item` is the reference PyIter_Next gave. */
static PyObject *encode_item(struct run_ctx *c, PyObject *item, bool *live)
{
	*live = false;
	if (items_pickled(c->codec)) {
		/* Held by anything but us: the program may change it after this call. A weak
		 * reference counts (it can give the object back to be refilled); asked only
		 * of an object that nothing else holds, not of immutable ones. */
		PyObject *held = Py_REFCNT(item) > 1 ? Py_True : Py_False;
		if (held == Py_False && !PyBytes_CheckExact(item) && !PyUnicode_CheckExact(item) &&
		    !PyLong_CheckExact(item) && !PyFloat_CheckExact(item) &&
		    !PyTuple_CheckExact(item)) {
			PyObject *n = PyObject_CallFunctionObjArgs(c->weakrefs, item, NULL);
			if (!n)
				return NULL;
			int some = PyObject_IsTrue(n);
			Py_DECREF(n);
			if (some < 0)
				return NULL;
			if (some)
				held = Py_True;
		}
		PyObject *r = PyObject_CallFunctionObjArgs(c->dumps, item, held, NULL);
		if (!r)
			return NULL;
		if (!PyTuple_Check(r) || PyTuple_Size(r) != 2) {
			PyErr_SetString(PyExc_TypeError,
					"gpud: the item encoder gave no (parts, live) pair");
			Py_DECREF(r);
			return NULL;
		}
		PyObject *parts = PyTuple_GetItem(r, 0);
		int l = PyObject_IsTrue(PyTuple_GetItem(r, 1));
		Py_INCREF(parts);
		Py_DECREF(r);
		if (l < 0) {
			Py_DECREF(parts);
			return NULL;
		}
		*live = l;
		return parts;
	}
	if (PyBytes_Check(item) || (c->codec == CODEC_PARTS && PyList_Check(item))) {
		Py_INCREF(item);
		return item;
	}
	if (PyUnicode_Check(item))
		return PyUnicode_AsUTF8String(item);
	PyObject *b = PyBytes_FromObject(item); /* a buffer's bytes (3.9's stable ABI has no
						   PyObject_CheckBuffer) */
	if (b || !PyErr_ExceptionMatches(PyExc_TypeError))
		return b;
	PyErr_Clear();
	PyErr_Format(PyExc_TypeError,
		     "gpud: the generator yielded %R, of %S; a C worker plugin's tasks are "
		     "bytes, a bytes-like object or str",
		     item, (PyObject *)Py_TYPE(item));
	return NULL;
}

/* Reads the next batch from the iterator: up to `prefetch` items, fewer when one takes
 * more than a millisecond to come (a live source: what it gave is handed on). GIL held.
 * 1 items ready, 0 the end, -1 the iterator raised (kept for run(); the items it gave
 * before are handed on first, as a generator plugin's are: the host then aborts the run
 * with status 3). */
static void release_views(struct run_ctx *c)
{
	for (size_t i = 0; i < c->views; i++)
		PyBuffer_Release(&c->view[i]);
	c->views = c->parts = 0;
}

/* Notes one part of the item being read (o: bytes, or any contiguous buffer, held by
 * c->batch). 0, or -1 with an exception. GIL held. */
static int add_part(struct run_ctx *c, PyObject *o)
{
	if (c->parts == c->part_cap) {
		size_t cap = c->part_cap ? 2 * c->part_cap : 256;
		struct part *p = realloc(c->part, cap * sizeof *p);
		if (!p) {
			PyErr_NoMemory();
			return -1;
		}
		c->part = p;
		c->part_cap = cap;
	}
	if (PyBytes_Check(o)) {
		c->part[c->parts++] = (struct part){PyBytes_AsString(o), (size_t)PyBytes_Size(o)};
		return 0;
	}
	if (c->views == c->view_cap) {
		size_t cap = c->view_cap ? 2 * c->view_cap : 256;
		Py_buffer *v = realloc(c->view, cap * sizeof *v);
		if (!v) {
			PyErr_NoMemory();
			return -1;
		}
		c->view = v;
		c->view_cap = cap;
	}
	Py_buffer *v = &c->view[c->views];
	if (PyObject_GetBuffer(o, v, PyBUF_SIMPLE) < 0)
		return -1;
	c->views++;
	c->part[c->parts++] = (struct part){v->buf, (size_t)v->len};
	return 0;
}

/* The encoded item b's parts noted (a list of parts, or one bytes). GIL held. */
static int add_parts(struct run_ctx *c, PyObject *b)
{
	if (!PyList_Check(b))
		return add_part(c, b);
	Py_ssize_t k = PyList_Size(b);
	for (Py_ssize_t i = 0; i < k; i++)
		if (add_part(c, PyList_GetItem(b, i)) < 0)
			return -1;
	return 0;
}

static int refill(struct run_ctx *c)
{
	release_views(c);
	Py_CLEAR(c->batch);
	c->pos = c->n = 0;
	c->first[0] = 0;
	if (c->gen_failed)
		return -1;
	if (c->ended || c->exc)
		return 0;
	c->batch = PyList_New(0);
	if (!c->batch)
		goto fail;
	double start = now();
	while (c->n < c->prefetch) {
		PyObject *item = PyIter_Next(c->iter);
		if (!item) {
			if (PyErr_Occurred())
				goto fail;
			c->ended = true;
			break;
		}
		bool live;
		PyObject *b = encode_item(c, item, &live);
		Py_DECREF(item);
		if (!b || PyList_Append(c->batch, b) < 0) {
			Py_XDECREF(b);
			goto fail;
		}
		Py_DECREF(b);
		if (add_parts(c, b) < 0)
			goto fail;
		c->first[++c->n] = c->parts;
		/* Its buffers may change once the iterator goes on (a refilled buffer):
		 * gen_next copies it into the ring first, as it is now. */
		if (live || now() - start > 1e-3)
			break;
	}
	return c->n > 0;
fail:
	c->ended = true;
	if (atomic_load(&c->interrupting) && PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
		PyErr_Clear(); /* ours (gen_interrupt): the run is over, nothing more is read */
		return 0;
	}
	stash_error(c);
	c->gen_failed = true;
	return c->n > 0 ? 1 : -1;
}

static int gen_next(void *ctx, struct gpud_buf *item, struct gpud_error *err)
{
	struct run_ctx *c = ctx;
	if (atomic_load(&c->cb_failed))
		return 0; /* a callback raised: nothing more is read */
	if (c->pos == c->n) {
		PyGILState_STATE g = PyGILState_Ensure();
		int r = refill(c);
		absorb_interrupt(c);
		PyGILState_Release(g);
		/* Interrupted (the run is over): what it gave is not run. */
		if (atomic_load(&c->cb_failed) || atomic_load(&c->interrupting))
			return 0;
		if (r < 0)
			return gpud_fail(err,
					 "the Python generator raised an exception (re-raised by "
					 "run())");
		if (r == 0)
			return 0;
	}
	/* The item's parts, each copied once, straight into the task's record. */
	size_t n = 0, from = c->first[c->pos], to = c->first[c->pos + 1];
	for (size_t i = from; i < to; i++)
		n += c->part[i].n;
	item->size = n;
	if (n <= item->capacity) {
		char *at = item->data;
		for (size_t i = from; i < to; i++) {
			memcpy(at, c->part[i].p, c->part[i].n);
			at += c->part[i].n;
		}
	}
	/* else: too large, the host fails this task saying so */
	c->pos++;
	return 1;
}

static int64_t gen_total(void *ctx)
{
	return ((struct run_ctx *)ctx)->total;
}

/* libgpud's stand-in, when the run must end while the iterator blocks in next(): the
 * iterator is made to raise KeyboardInterrupt where it waits, as Ctrl-C would make it
 * (Python runs signal handlers on the main thread only, so only there): Python's SIGINT
 * handler is tripped (no GIL needed), and SIGINT sent to the calling thread cuts a
 * blocking system call short (on_stop_signal ignores it). refill takes the exception
 * for the end. Elsewhere the iterator cannot be interrupted: libgpud waits for it, then
 * ends the process. */
static void gen_interrupt(void *ctx)
{
	struct run_ctx *c = ctx;
	if (!c->main_thread)
		return;
	atomic_store(&c->interrupting, true);
	PyErr_SetInterrupt();
	pthread_kill(c->caller, SIGINT);
}

static int gen_skip(void *ctx, uint64_t n, struct gpud_error *err)
{
	struct run_ctx *c = ctx;
	int rc = 0;
	PyGILState_STATE g = PyGILState_Ensure();
	while (n > 0) {
		if (c->pos < c->n) {
			uint64_t k = (uint64_t)(c->n - c->pos);
			if (k > n)
				k = n;
			c->pos += (Py_ssize_t)k;
			n -= k;
			continue;
		}
		PyObject *item = PyIter_Next(c->iter);
		if (!item) {
			if (PyErr_Occurred()) {
				stash_error(c);
				rc = gpud_fail(err, "the Python generator raised an exception "
						    "(re-raised by run())");
			}
			c->ended = true;
			break;
		}
		Py_DECREF(item);
		n--;
	}
	PyGILState_Release(g);
	return rc;
}

/* ---- signals: Ctrl-C drains the run; run() raises KeyboardInterrupt after on_exit ---- */

static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define N_STOP_SIGNALS (sizeof stop_signals / sizeof stop_signals[0])

static void on_stop_signal(int sig)
{
	if (active && atomic_load(&active->interrupting))
		return; /* gen_interrupt's SIGINT, or one after the run ended */
	if (!caught_signal)
		caught_signal = sig;
	if (active)
		gpud_job_stop(active->job); /* async-signal-safe; a second one stops at once */
}

/* ---- run() ---- */

static int set_keys(gpud_job *job, PyObject *keys)
{
	PyObject *it = PyObject_GetIter(keys);
	if (!it)
		return -1;
	PyObject *kv;
	while ((kv = PyIter_Next(it))) {
		const char *k, *v;
		if (!PyArg_ParseTuple(kv, "ss", &k, &v)) {
			Py_DECREF(kv);
			Py_DECREF(it);
			return -1;
		}
		if (gpud_job_set(job, k, v) < 0) {
			PyErr_SetString(PyExc_ValueError, gpud_job_error(job));
			Py_DECREF(kv);
			Py_DECREF(it);
			return -1;
		}
		Py_DECREF(kv);
	}
	Py_DECREF(it);
	return PyErr_Occurred() ? -1 : 0;
}

static PyObject *callback_or_null(PyObject *cbs, const char *name)
{
	PyObject *f = PyDict_GetItemString(cbs, name); /* borrowed */
	if (!f || f == Py_None)
		return NULL;
	Py_INCREF(f);
	return f;
}

PyDoc_STRVAR(run_doc,
	     "run(*, job_file, keys, iterable, total, codec, callbacks, prefetch, ui,\n"
	     "    flags, tty, stats_json, helpers, pool) -> result\n\n"
	     "Runs one job in this process (gpud.Dispatcher calls it; not for direct use),\n"
	     "on a pool's workers when pool is one of pool_open()'s (None: its own).\n"
	     "All arguments by keyword. result (types.SimpleNamespace): status (gpud's exit\n"
	     "status, -1 when the run could not start), error (str or None), stats_json,\n"
	     "signal (a stop signal caught, 0 if none), exception (a callback's or the\n"
	     "iterator's, or None), setup_failed (workers whose setup failed),\n"
	     "first_setup_error (the first one's text, or None), summary (with summary=True:\n"
	     "gpud's summary line, kept from standard error for the caller to say, or None).");

/* summary=True: every engine line goes to standard error as gpud writes it, but the
 * summary line ("N tasks: ..."), which the Dispatcher says itself in items. */
struct kept_summary {
	char line[512];
	bool kept;
};

static void keep_summary(void *data, int level, const char *message)
{
	struct kept_summary *k = data;
	const char *p = message;
	while (*p >= '0' && *p <= '9')
		p++;
	if (level == GPUD_LOG_INFO && !k->kept && p != message && strncmp(p, " tasks: ", 8) == 0) {
		snprintf(k->line, sizeof k->line, "%s", message);
		k->kept = true;
		return;
	}
	fprintf(stderr, "gpud: %s\n", message);
}

/* run()'s result: a types.SimpleNamespace with these attributes. */
static PyObject *run_result(int status, const char *error, const char *stats_json, int sig,
			    PyObject *exc, unsigned setup_failed, PyObject *first,
			    const char *summary)
{
	PyObject *types = PyImport_ImportModule("types");
	PyObject *ns = types ? PyObject_GetAttrString(types, "SimpleNamespace") : NULL;
	PyObject *kw = ns ? Py_BuildValue("{s:i,s:z,s:z,s:i,s:O,s:I,s:O,s:z}", "status", status,
					  "error", error, "stats_json", stats_json, "signal", sig,
					  "exception", exc, "setup_failed", setup_failed,
					  "first_setup_error", first, "summary", summary)
			  : NULL;
	PyObject *empty = kw ? PyTuple_New(0) : NULL;
	PyObject *r = empty ? PyObject_Call(ns, empty, kw) : NULL;
	Py_XDECREF(empty);
	Py_XDECREF(kw);
	Py_XDECREF(ns);
	Py_XDECREF(types);
	return r;
}

/* A warm pool (gpud_pool_open) as a capsule; its workers live until pool_close or the
 * capsule's end. */
struct py_pool {
	gpud_pool *pool; /* NULL once closed */
};
#define POOL_CAPSULE "gpud._gpud.pool"

static void pool_shut(struct py_pool *p)
{
	gpud_pool *pool = p->pool;
	p->pool = NULL;
	if (pool) {
		/* Its workers' cleanup may take a while: other threads run meanwhile. */
		Py_BEGIN_ALLOW_THREADS gpud_pool_close(pool);
		Py_END_ALLOW_THREADS
	}
}

static void pool_capsule_end(PyObject *cap)
{
	struct py_pool *p = PyCapsule_GetPointer(cap, POOL_CAPSULE);
	if (!p)
		return;
	if (p->pool)
		gpud_pool_close(p->pool);
	free(p);
}

/* The open pool a capsule holds, or NULL with an exception. */
static struct py_pool *pool_of(PyObject *cap)
{
	struct py_pool *p = PyCapsule_GetPointer(cap, POOL_CAPSULE);
	if (p && !p->pool) {
		PyErr_SetString(PyExc_RuntimeError, "gpud: the pool is closed");
		return NULL;
	}
	return p;
}

static PyObject *py_pool_open(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	struct py_pool *p = calloc(1, sizeof *p);
	if (!p || !(p->pool = gpud_pool_open())) {
		free(p);
		return PyErr_NoMemory();
	}
	PyObject *cap = PyCapsule_New(p, POOL_CAPSULE, pool_capsule_end);
	if (!cap) {
		gpud_pool_close(p->pool);
		free(p);
	}
	return cap;
}

static PyObject *py_pool_close(PyObject *self, PyObject *cap)
{
	(void)self;
	struct py_pool *p = PyCapsule_GetPointer(cap, POOL_CAPSULE);
	if (!p)
		return NULL;
	if (active) {
		PyErr_SetString(PyExc_RuntimeError,
				"gpud: a pool cannot be closed while a run is in progress");
		return NULL;
	}
	pool_shut(p);
	Py_RETURN_NONE;
}

static PyObject *py_run(PyObject *self, PyObject *args, PyObject *kwargs)
{
	(void)self;
	static char *names[] = {"job_file",   "keys",     "iterable", "total", "codec",
				"callbacks",  "prefetch", "ui",       "flags", "tty",
				"stats_json", "helpers",  "summary",  "pool",  NULL};
	/* Optional: job_file, tty, stats_json (None), total (-1: unknown), prefetch,
	 * ui (off), flags (0). */
	const char *job_file = NULL, *tty = NULL, *stats_json = NULL;
	PyObject *keys = NULL, *iterable = NULL, *cbs = NULL, *helpers = NULL, *pool_obj = NULL;
	long long total = -1;
	int codec = -1, ui = GPUD_UI_OFF, flags = 0, summary = 0;
	Py_ssize_t prefetch = 256;
	static struct kept_summary kept; /* one run at a time per process */
	/* Keyword-only arguments are optional ones to PyArg_ParseTupleAndKeywords. */
	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$zOOLiO!niizzOpO", names, &job_file, &keys,
					 &iterable, &total, &codec, &PyDict_Type, &cbs, &prefetch,
					 &ui, &flags, &tty, &stats_json, &helpers, &summary,
					 &pool_obj))
		return NULL;
	struct py_pool *pool = NULL;
	if (pool_obj && pool_obj != Py_None && !(pool = pool_of(pool_obj)))
		return NULL;
	if (!keys || !iterable || !cbs || !helpers || codec < CODEC_RAW ||
	    codec > CODEC_PICKLE_RAW) {
		PyErr_SetString(PyExc_TypeError,
				"gpud._gpud.run(): keys, iterable, callbacks, helpers and codec "
				"(CODEC_RAW to CODEC_PICKLE_RAW) are required, by keyword");
		return NULL;
	}
	if (active) {
		PyErr_SetString(
			PyExc_RuntimeError,
			"gpud: a run is already in progress in this process (one at a time)");
		return NULL;
	}
	if (prefetch < 1)
		prefetch = 1;

	struct run_ctx c = {.codec = (enum codec)codec, .total = total, .prefetch = prefetch};
	PyObject *result = NULL, *sigmod = NULL, *old_int = NULL;
	c.caller = pthread_self();
	if (!PyArg_ParseTuple(helpers, "OOO", &c.loads, &c.dumps, &c.oob_loads))
		goto out;
	PyObject *weakref_mod = PyImport_ImportModule("weakref");
	c.weakrefs = weakref_mod ? PyObject_GetAttrString(weakref_mod, "getweakrefcount") : NULL;
	Py_XDECREF(weakref_mod);
	if (!c.weakrefs)
		goto out;
	c.on_success = callback_or_null(cbs, "on_success");
	c.on_error = callback_or_null(cbs, "on_error");
	c.on_timeout = callback_or_null(cbs, "on_timeout");
	c.on_setup_fail = callback_or_null(cbs, "on_setup_fail");
	c.on_task_start = callback_or_null(cbs, "on_task_start");
	c.on_resume = callback_or_null(cbs, "on_resume");
	c.first = calloc((size_t)prefetch + 1, sizeof *c.first);
	c.job = gpud_job_new();
	if (!c.first || !c.job) {
		PyErr_NoMemory();
		goto out;
	}
	if (job_file && gpud_job_load(c.job, job_file) < 0) {
		PyErr_SetString(PyExc_ValueError, gpud_job_error(c.job));
		goto out;
	}
	if (set_keys(c.job, keys) < 0)
		goto out;
	if (iterable != Py_None) {
		c.iter = PyObject_GetIter(iterable);
		if (!c.iter)
			goto out;
		struct gpud_generator_ops g = {.size = sizeof g,
					       .next = gen_next,
					       .total = gen_total,
					       .skip = gen_skip,
					       .interrupt = gen_interrupt};
		if (gpud_job_set_generator(c.job, &g, &c) < 0) {
			PyErr_SetString(PyExc_RuntimeError, gpud_job_error(c.job));
			goto out;
		}
	}
	if (c.on_success || c.on_error || c.on_timeout || c.on_setup_fail || c.on_task_start) {
		struct gpud_sink_ops s = {.size = sizeof s,
					  .event = sink_event,
					  .close = sink_close,
					  .events = sink_events,
					  .resume = c.on_resume ? sink_resume : NULL,
					  .flags = GPUD_SINK_CALLING_THREAD | GPUD_SINK_NO_INPUT |
						   GPUD_SINK_NAMES};
		if (gpud_job_set_sink(c.job, &s, &c) < 0) {
			PyErr_SetString(PyExc_RuntimeError, gpud_job_error(c.job));
			goto out;
		}
	}

	struct gpud_run_options o = {.size = sizeof o,
				     .ui = (enum gpud_ui)ui,
				     .tty = tty,
				     .flags = (unsigned)flags | GPUD_RUN_KEEP_SIGNALS,
				     .stats_json = stats_json};
	kept = (struct kept_summary){0};
	if (summary) {
		o.log = keep_summary;
		o.log_data = &kept;
	}
	/* On the main thread, Python's own SIGINT handler (KeyboardInterrupt) for the run:
	 * gen_interrupt trips it to bring a blocked iterator back. The signal itself is
	 * on_stop_signal's meanwhile. */
	if (!(sigmod = PyImport_ImportModule("signal")))
		goto out;
	{
		PyObject *th = PyImport_ImportModule("threading");
		PyObject *m = th ? PyObject_CallMethod(th, "main_thread", NULL) : NULL;
		PyObject *t = th ? PyObject_CallMethod(th, "current_thread", NULL) : NULL;
		c.main_thread = m && m == t;
		Py_XDECREF(th);
		Py_XDECREF(m);
		Py_XDECREF(t);
		if (PyErr_Occurred())
			goto out;
	}
	if (c.main_thread) {
		old_int = PyObject_CallMethod(sigmod, "getsignal", "i", SIGINT);
		if (!old_int)
			goto out;
		/* None: a handler not set from Python, which could not be put back. The
		 * iterator is then not interrupted. */
		c.main_thread = old_int != Py_None;
	}
	if (c.main_thread) {
		PyObject *dih = PyObject_GetAttrString(sigmod, "default_int_handler");
		PyObject *r = dih ? PyObject_CallMethod(sigmod, "signal", "iO", SIGINT, dih) : NULL;
		Py_XDECREF(dih);
		Py_XDECREF(r);
		if (!r)
			goto out;
	}
	struct sigaction sa = {.sa_handler = on_stop_signal}, old[N_STOP_SIGNALS];
	sigemptyset(&sa.sa_mask);
	caught_signal = 0;
	active = &c;
	for (size_t i = 0; i < N_STOP_SIGNALS; i++)
		sigaction(stop_signals[i], &sa, &old[i]);
	PyThreadState *ts = PyEval_SaveThread();
	int status = pool ? gpud_pool_run(pool->pool, c.job, &o) : gpud_job_run(c.job, &o);
	PyEval_RestoreThread(ts);
	for (size_t i = 0; i < N_STOP_SIGNALS; i++)
		sigaction(stop_signals[i], &old[i], NULL);
	absorb_interrupt(&c); /* before Python's handler goes back */
	active = NULL;

	const char *json = gpud_job_stats_json(c.job);
	PyObject *exc = c.exc ? c.exc : Py_None;
	result = run_result(status, gpud_job_error(c.job), json, (int)caught_signal, exc,
			    c.setup_failed, c.first_setup_error ? c.first_setup_error : Py_None,
			    kept.kept ? kept.line : NULL);
out:
	if (old_int && old_int != Py_None) {
		/* The program's handler back (None: not one set from Python). */
		PyObject *type, *value, *tb;
		PyErr_Fetch(&type, &value, &tb);
		PyObject *r = PyObject_CallMethod(sigmod, "signal", "iO", SIGINT, old_int);
		if (r) {
			Py_DECREF(r);
			PyErr_Restore(type, value, tb);
		} else { /* its error stands */
			Py_CLEAR(result);
			Py_XDECREF(type);
			Py_XDECREF(value);
			Py_XDECREF(tb);
		}
	}
	Py_XDECREF(old_int);
	Py_XDECREF(sigmod);
	Py_XDECREF(c.on_resume);
	Py_XDECREF(c.weakrefs);
	release_views(&c);
	Py_XDECREF(c.batch);
	Py_XDECREF(c.iter);
	Py_XDECREF(c.exc);
	Py_XDECREF(c.first_setup_error);
	Py_XDECREF(c.on_success);
	Py_XDECREF(c.on_error);
	Py_XDECREF(c.on_timeout);
	Py_XDECREF(c.on_setup_fail);
	Py_XDECREF(c.on_task_start);
	free(c.first);
	free(c.part);
	free(c.view);
	gpud_job_free(c.job);
	return result;
}

static PyObject *py_versions(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	unsigned v = gpud_api_version();
	return Py_BuildValue("(s(II)(II))", gpud_version(), v >> 16, v & 0xffff, GPUD_API_MAJOR,
			     GPUD_API_MINOR);
}

static PyObject *py_task_key(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	if (!current_key)
		Py_RETURN_NONE;
	return PyUnicode_DecodeUTF8(current_key, (Py_ssize_t)strlen(current_key),
				    "surrogateescape");
}

/* check()'s generator: the program's items are not read by a check (never called). */
static int gen_none(void *ctx, struct gpud_buf *item, struct gpud_error *err)
{
	(void)ctx;
	(void)item;
	(void)err;
	return 0;
}

PyDoc_STRVAR(check_doc,
	     "check(*, job_file=None, keys, items=False) -> dict\n"
	     "gpud check on the job the keys make (gpud.Dispatcher.check calls it): ok, text\n"
	     "(what `gpud check` prints), error, and the shared memory the run would map in\n"
	     "bytes (total, run_memfd, result_memfd, task_ring, result_ring, workers). items:\n"
	     "the program gives the items (a generator that is never read stands for it).");

static PyObject *py_check(PyObject *self, PyObject *args, PyObject *kwargs)
{
	(void)self;
	static char *names[] = {"job_file", "keys", "items", NULL};
	const char *job_file = NULL;
	PyObject *keys = NULL;
	int items = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$zOp", names, &job_file, &keys, &items))
		return NULL;
	if (!keys) {
		PyErr_SetString(PyExc_TypeError, "gpud._gpud.check(): keys is required");
		return NULL;
	}
	if (active) {
		PyErr_SetString(
			PyExc_RuntimeError,
			"gpud: a run is already in progress in this process (one at a time)");
		return NULL;
	}
	PyObject *result = NULL;
	gpud_job *job = gpud_job_new();
	if (!job)
		return PyErr_NoMemory();
	if (job_file && gpud_job_load(job, job_file) < 0) {
		PyErr_SetString(PyExc_ValueError, gpud_job_error(job));
		goto out;
	}
	if (set_keys(job, keys) < 0)
		goto out;
	struct gpud_generator_ops g = {.size = sizeof g, .next = gen_none};
	if (items && gpud_job_set_generator(job, &g, NULL) < 0) {
		PyErr_SetString(PyExc_RuntimeError, gpud_job_error(job));
		goto out;
	}
	struct gpud_run_options o = {.size = sizeof o, .ui = GPUD_UI_OFF};
	int status;
	PyThreadState *ts = PyEval_SaveThread();
	status = gpud_job_check(job, &o);
	PyEval_RestoreThread(ts);
	const struct gpud_check_report *r = gpud_job_check_report(job);
	if (!r) {
		PyErr_SetString(PyExc_RuntimeError, gpud_job_error(job));
		goto out;
	}
	result = Py_BuildValue("{s:O,s:s,s:s,s:K,s:K,s:K,s:K,s:K,s:I,s:i}", "ok",
			       r->ok ? Py_True : Py_False, "text", r->text ? r->text : "", "error",
			       r->error ? r->error : "", "total", (unsigned long long)r->shm_total,
			       "run_memfd", (unsigned long long)r->shm_run_memfd, "result_memfd",
			       (unsigned long long)r->shm_result_memfd, "task_ring",
			       (unsigned long long)r->shm_task_ring, "result_ring",
			       (unsigned long long)r->shm_result_ring, "workers", r->shm_workers,
			       "status", status);
out:
	gpud_job_free(job);
	return result;
}

static PyMethodDef methods[] = {
	{"check", (PyCFunction)(void (*)(void))py_check, METH_VARARGS | METH_KEYWORDS, check_doc},
	{"run", (PyCFunction)(void (*)(void))py_run, METH_VARARGS | METH_KEYWORDS, run_doc},
	{"pool_open", py_pool_open, METH_NOARGS,
	 "pool_open() -> a pool of workers kept between runs (run(pool=...)); closed by "
	 "pool_close(pool), which runs the workers' cleanup"},
	{"pool_close", py_pool_close, METH_O, "pool_close(pool): its workers cleaned up and ended"},
	{"versions", py_versions, METH_NOARGS,
	 "versions() -> (gpud release, libgpud API (major, minor), the API built against)"},
	{"task_key", py_task_key, METH_NOARGS,
	 "task_key() -> the name of the task whose callback runs now (a sample's key), or "
	 "None"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT,
	"gpud._gpud",
	"gpud's host (libgpud) in this process",
	-1,
	methods,
	NULL,
	NULL,
	NULL,
	NULL,
};

PyMODINIT_FUNC PyInit__gpud(void)
{
	unsigned v = gpud_api_version();
	if (v >> 16 != GPUD_API_MAJOR || (int)(v & 0xffff) < GPUD_API_MINOR) {
		PyErr_Format(PyExc_ImportError,
			     "gpud: this package was built for libgpud API %d.%d, the library "
			     "loaded is %u.%u: reinstall the package (./build.sh python)",
			     GPUD_API_MAJOR, GPUD_API_MINOR, v >> 16, v & 0xffff);
		return NULL;
	}
	PyObject *m = PyModule_Create(&module);
	if (!m)
		return NULL;
	/* The numbers the package's _constants.py holds, as this build knows them. */
	static const struct {
		const char *name;
		long value;
	} ints[] = {
		{"RUN_RESUME", GPUD_RUN_RESUME},
		{"RUN_RETRY_FAILED", GPUD_RUN_RETRY_FAILED},
		{"RUN_FORCE", GPUD_RUN_FORCE},
		{"UI_OFF", GPUD_UI_OFF},
		{"UI_PLAIN", GPUD_UI_PLAIN},
		{"UI_DASHBOARD", GPUD_UI_DASHBOARD},
		{"CODEC_RAW", CODEC_RAW},
		{"CODEC_PICKLE", CODEC_PICKLE},
		{"CODEC_PARTS", CODEC_PARTS},
		{"CODEC_RAW_PICKLE", CODEC_RAW_PICKLE},
		{"CODEC_PICKLE_RAW", CODEC_PICKLE_RAW},
	};
	for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
		if (PyModule_AddIntConstant(m, ints[i].name, ints[i].value) < 0)
			goto fail;
	PyObject *magic = PyBytes_FromStringAndSize(FRAME_MAGIC, 4);
	if (!magic || PyModule_AddObject(m, "FRAME_MAGIC", magic) < 0) {
		Py_XDECREF(magic);
		goto fail;
	}
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
