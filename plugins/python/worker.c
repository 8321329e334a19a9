/* SPDX-License-Identifier: MIT */
/*
 * Worker `python`: runs a Python worker class inside the worker process, on the
 * embedded CPython the run chose ([job] python, $VIRTUAL_ENV, ...: stub.c loads it;
 * `gpud check` names it).
 *
 *   [worker]
 *   plugin = python
 *   script = ./my_worker.py      ; or module = my_package.my_worker (found on sys.path)
 *   class = InferenceWorker
 *   python_path = ./src:./vendor ; optional, prepended to sys.path
 *   input = memoryview           ; memoryview (default) | bytes | str | json | sample
 *   result = auto                ; auto (default) | pickle | json | bytes
 *   model_path = ./model.bin     ; every other key reaches setup() as a keyword (a str)
 *
 * The class has setup(gpu_id, seed, **kwargs), process(data), optionally
 * process_batch(items) and cleanup(); it may inherit from gpud.BaseWorker (the `gpud`
 * module is importable inside the worker) or just have the methods. An `async def
 * process` runs on an asyncio event loop of the worker's, up to [job] max_in_flight
 * tasks at once (gpud_worker_submit/poll: each call is a coroutine started at submit;
 * the loop runs while gpud polls), finishing in any order. The interpreter
 * starts in setup, after CUDA_VISIBLE_DEVICES is set, and installs one signal handler
 * only (TIMEOUT_SIGNAL, below): gpud's stay in charge of the rest.
 *
 * Timeouts end in place (gpud_worker_interrupt, ABI 1.5): a call past task_timeout gets
 * gpud.TaskTimeout (a TimeoutError) raised inside the user's code, by a signal at the
 * calling thread, so a time.sleep or a blocking read is cut short too. Its task times
 * out, and so do the call's tasks not yet run; the worker and what setup() loaded go
 * on. Code that does not give Python a turn (a C extension's long loop) is killed
 * timeout_grace later, as before. Tasks in flight (max_in_flight > 1) time out as before.
 *
 * Input: a read-only memoryview straight over the task's bytes in shared memory. It is
 * made from a small exporter that counts the buffers taken from it, so a view kept past
 * the call (np.frombuffer(data) stored on self) is caught: the task fails saying so and
 * the worker is replaced, since that view would see later tasks' bytes. With `input =
 * sample`, a whole sample (the tar generator's `members`, framed as gpud/plugin.h says)
 * as a dict: {"__key__": key, "jpg": bytes, "cls": bytes, ...}, as WebDataset gives it.
 * Result, by `result`: auto, a buffer (bytes, bytearray, memoryview, NumPy array...) as
 * is, str as UTF-8, None as empty, anything else as JSON text; json, every result as JSON
 * text; bytes, buffers, str and None only (or a list of buffers, written one after
 * another); pickle, any picklable object, pickled
 * (protocol 5), which a python sink with result = pickle gets back as the object. A
 * result that cannot be had so fails its task with a message naming the user's method
 * (class, method, file and line), where in the result the culprit sits and what to
 * return instead: never a traceback into json/encoder.py.
 */
#define _GNU_SOURCE
#include "common.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <gpud/plugin.h>

#include "common.h"
#include "gpud_module.h"
#include "py_keys.h" /* daemon/shared/: the keys check --import knows too */

/* The signal that brings TaskTimeout into the calling thread: a real-time one, which
 * nothing else of gpud's and seldom a library uses. Its handler is Python's (signal.signal),
 * so that a sleeping call wakes up and the handler runs as soon as Python gets a turn. */
#define TIMEOUT_SIGNAL (SIGRTMAX)

/* One worker per process: the timeout's state is the process's.
 *   calls    plugin calls so far (the loop's thread writes it at each call's start)
 *   cut      the call gpud_worker_interrupt asked to end (0: none), from the watcher
 *   raised   the call TaskTimeout was raised in (once a call)
 *   in_user  the user's code runs now (not ours: making inputs, writing results) */
static pthread_t main_thread;
static _Atomic uint64_t calls, cut;
static uint64_t raised;
static bool in_user;

static bool armed; /* the handler is in place */

/* Whether the running call was asked to end (the loop's thread). */
static bool call_cut(void)
{
	uint64_t c = atomic_load(&calls);
	return c && atomic_load(&cut) == c;
}

/* TIMEOUT_SIGNAL's handler, run by Python on the calling thread (the GIL held) as soon
 * as it gets a turn: TaskTimeout in the user's code of the call asked to end, once. A
 * signal that arrives late (the call returned) is let go: the next call is not cut. */
static PyObject *timeout_signal(PyObject *self, PyObject *args)
{
	(void)self;
	(void)args;
	uint64_t c = atomic_load(&calls);
	if (!in_user || !call_cut() || raised == c || !gpud_task_timeout)
		Py_RETURN_NONE;
	raised = c;
	PyErr_SetString(gpud_task_timeout,
			"the call ran past task_timeout: gpud interrupted it (the worker goes on)");
	return NULL;
}

static PyMethodDef timeout_def = {"gpud_task_timeout", timeout_signal, METH_VARARGS, NULL};

/* A timed-out task's note, when its call returned or raised something else after the
 * interruption (caught TaskTimeout and went on). */
#define CUT_NOTE                                                                                   \
	"the call ran past task_timeout: gpud interrupted it, and what it returned or raised "     \
	"after that is not kept"

/* Whether r, what a process_batch returned, holds a TaskTimeout in an item's place: the
 * call ended at that item itself (gpud's Dispatcher class does), so the items before it
 * finished in time and keep their results. */
static bool holds_timeout(PyObject *r, size_t n)
{
	if (!gpud_task_timeout || !PySequence_Check(r) || PySequence_Size(r) != (Py_ssize_t)n) {
		PyErr_Clear();
		return false;
	}
	bool found = false;
	for (size_t i = 0; i < n && !found; i++) {
		PyObject *ri = PySequence_GetItem(r, (Py_ssize_t)i);
		found = ri && PyObject_IsInstance(ri, gpud_task_timeout) == 1;
		Py_XDECREF(ri);
	}
	PyErr_Clear();
	return found;
}

/* Python's handler for TIMEOUT_SIGNAL, set after the user's setup() (so it is ours). A
 * failure is said and leaves timeouts as they were without it: killed after the grace. */
static void arm_timeouts(void)
{
	main_thread = pthread_self();
	PyObject *mod = PyImport_ImportModule("signal");
	PyObject *fn = mod ? PyCFunction_NewEx(&timeout_def, NULL, NULL) : NULL;
	PyObject *r = fn ? PyObject_CallMethod(mod, "signal", "iO", (int)TIMEOUT_SIGNAL, fn) : NULL;
	armed = r != NULL;
	if (!armed) {
		char why[900];
		Py_XDECREF(py_take_error(why, sizeof why));
		fprintf(stderr,
			"python: cannot handle signal %d, so a call past task_timeout cannot "
			"be interrupted (its worker is killed timeout_grace later): %s\n",
			(int)TIMEOUT_SIGNAL, why);
	}
	Py_XDECREF(r);
	Py_XDECREF(fn);
	Py_XDECREF(mod);
}

/* (ABI 1.5) From gpud's watcher thread, while a call runs past task_timeout: marks the
 * call cut (its tasks not yet run time out) and signals the calling thread, whose
 * handler raises TaskTimeout there. No Python here: the GIL may be the call's. */
GPUD_EXPORT void gpud_worker_interrupt(void *state)
{
	(void)state;
	atomic_store(&cut, atomic_load(&calls));
	if (armed)
		pthread_kill(main_thread, TIMEOUT_SIGNAL);
}

/* The plugin gpud loads is stub.c: it loads this glue after the chosen libpython. */
/* script/module, class, python_path and input are ours; every other key is the class's
 * (setup's keywords), so none can be refused here. */

enum input_mode { IN_MEMORYVIEW, IN_BYTES, IN_STR, IN_JSON, IN_SAMPLE };
enum result_mode { RES_AUTO, RES_JSON, RES_BYTES, RES_PICKLE };
static const char *const result_names[] = {"auto", "json", "bytes", "pickle", NULL};

struct py_worker {
	PyObject *obj;           /* the worker instance */
	PyObject *process;       /* its bound process */
	PyObject *process_batch; /* its bound process_batch, or NULL */
	PyObject *json_loads, *json_dumps;
	PyObject *pickle_dumps; /* result = pickle: pickle.dumps */
	PyObject *protocol;     /* 5, for it */
	enum input_mode input;
	enum result_mode result;
	char where[512]; /* "Cls.process() (file.py:12)": what results are said to come from */
	char batch_where[512]; /* the same for process_batch() */
	size_t batch;
	struct input_obj *spare;      /* an exporter nobody holds, for the next task */
	PyThreadState *ts;            /* between calls the GIL is let go: threads the class
				       * started (data loaders, a model library's) run then too */
	PyObject *release_name;       /* "release", interned */
	struct gpud_call_times times; /* the last call's account (gpud_call_times_set) */

	/* async def process: the event loop's driver (drive_source), and the tasks in
	 * flight by slot: the task, its input object and exporter (max_in_flight each). */
	bool is_async;
	PyObject *driver;
	size_t flight;
	struct flying {
		struct gpud_task *task; /* NULL: a free slot */
		PyObject *data;
		struct input_obj *in;
	} * fly;
	struct gpud_task **ready; /* finished at submit (a plain process), not yet polled */
	size_t n_ready;
};

/* ---- the input exporter: a buffer over shared memory that counts its exports ---- */

typedef struct input_obj {
	PyObject_HEAD const void *data;
	Py_ssize_t len;
	Py_ssize_t exports;
} input_obj;

static int input_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
	input_obj *in = (input_obj *)self;
	if (!in->data) {
		PyErr_SetString(PyExc_BufferError,
				"gpud: this task's input is gone (its process() call returned)");
		return -1;
	}
	if (PyBuffer_FillInfo(view, self, (void *)in->data, in->len, 1, flags) < 0)
		return -1;
	in->exports++;
	return 0;
}

static void input_releasebuffer(PyObject *self, Py_buffer *view)
{
	(void)view;
	((input_obj *)self)->exports--;
}

static void input_dealloc(PyObject *self)
{
	PyTypeObject *type = Py_TYPE(self); /* a heap type: its instances hold it */
	PyObject_Free(self);
	Py_DECREF(type);
}

/* A heap type (the stable ABI has no static ones). */
static PyType_Slot input_slots[] = {
	{Py_bf_getbuffer, (void *)input_getbuffer},
	{Py_bf_releasebuffer, (void *)input_releasebuffer},
	{Py_tp_dealloc, (void *)input_dealloc},
	{0, NULL},
};
static PyType_Spec input_spec = {"gpud.Input", sizeof(input_obj), 0, Py_TPFLAGS_DEFAULT,
				 input_slots};
static PyTypeObject *input_type;

/* ---- messages ---- */

/* ---- setup ---- */

/* The event loop an async def process runs on. submit(coro, key) starts a coroutine as
 * a task; poll(timeout, most) runs the loop until a task has finished or `timeout`
 * seconds have passed, and returns up to `most` (key, task) pairs of finished ones;
 * run(coro) runs one to its end (max_in_flight = 1). */
#include "driver_py.h" /* drive_source[]: driver.py, embedded at build time */

/* An async def process gets the loop's driver, and max_in_flight > 1 its slots. 0, or -1
 * with err (the GIL held). */
static int start_flight(struct py_worker *pw, const struct gpud_worker_info *info,
			struct gpud_error *err)
{
	char why[900];
	pw->flight = info->max_in_flight > 1 ? info->max_in_flight : 1;
	PyObject *inspect = PyImport_ImportModule("inspect");
	PyObject *is = pw->process && inspect ? PyObject_CallMethod(inspect, "iscoroutinefunction",
								    "O", pw->process)
					      : NULL;
	pw->is_async = is && PyObject_IsTrue(is) == 1;
	Py_XDECREF(is);
	Py_XDECREF(inspect);
	PyErr_Clear();
	if (pw->is_async) {
		PyObject *g = PyDict_New();
		PyObject *code =
			g ? Py_CompileString(drive_source, "<gpud: plugins/python/driver.py>",
					     Py_file_input)
			  : NULL;
		PyObject *ok =
			code && PyDict_SetItemString(g, "__builtins__", PyEval_GetBuiltins()) == 0
				? PyEval_EvalCode(code, g, g)
				: NULL;
		PyObject *cls = ok ? PyDict_GetItemString(g, "Driver") : NULL; /* borrowed */
		pw->driver = cls ? PyObject_CallObject(cls, NULL) : NULL;
		Py_XDECREF(ok);
		Py_XDECREF(code);
		Py_XDECREF(g);
		if (!pw->driver) {
			Py_XDECREF(py_take_error(why, sizeof why));
			return gpud_fail(err, "python: cannot start the asyncio event loop: %s",
					 why);
		}
	}
	if (pw->flight > 1) {
		pw->fly = calloc(pw->flight, sizeof *pw->fly);
		pw->ready = calloc(pw->flight, sizeof *pw->ready);
		if (!pw->fly || !pw->ready)
			return gpud_fail(err, "python: out of memory");
	}
	return 0;
}

/* "Cls.method() (file.py:12)", the method's own class, file and first line, into buf:
 * how a result's trouble names the user's code (the frame of its return is gone by the
 * time the result is looked at). */
/* Whether `bound` is gpud.BaseWorker's own process() (the package's or the workers'
 * module's), which only raises: a class that defines process_batch() alone then has its
 * batches of one go to process_batch() too. */
static bool is_base_process(PyObject *bound)
{
	PyObject *func = PyObject_GetAttrString(bound, "__func__");
	PyObject *qual = func ? PyObject_GetAttrString(func, "__qualname__") : NULL;
	PyObject *mod = func ? PyObject_GetAttrString(func, "__module__") : NULL;
	PyErr_Clear();
	const char *q = qual && PyUnicode_Check(qual) ? py_utf8(qual, NULL) : NULL;
	const char *m = mod && PyUnicode_Check(mod) ? py_utf8(mod, NULL) : NULL;
	PyErr_Clear();
	bool base = q && m && !strcmp(q, "BaseWorker.process") && !strcmp(m, "gpud");
	Py_XDECREF(func);
	Py_XDECREF(qual);
	Py_XDECREF(mod);
	return base;
}

static void describe_method(PyObject *bound, const char *fallback, char *buf, size_t len)
{
	snprintf(buf, len, "%s()", fallback);
	if (!bound)
		return;
	PyObject *qual = PyObject_GetAttrString(bound, "__qualname__");
	PyObject *func = PyObject_GetAttrString(bound, "__func__");
	PyObject *code = PyObject_GetAttrString(func ? func : bound, "__code__");
	PyObject *file = code ? PyObject_GetAttrString(code, "co_filename") : NULL;
	PyObject *line = code ? PyObject_GetAttrString(code, "co_firstlineno") : NULL;
	PyErr_Clear();
	const char *q = qual && PyUnicode_Check(qual) ? py_utf8(qual, NULL) : NULL;
	const char *f = file && PyUnicode_Check(file) ? py_utf8(file, NULL) : NULL;
	long l = line ? PyLong_AsLong(line) : 0;
	PyErr_Clear();
	if (q && f)
		snprintf(buf, len, "%s() (%s:%ld)", q, f, l);
	else if (q)
		snprintf(buf, len, "%s()", q);
	Py_XDECREF(qual);
	Py_XDECREF(func);
	Py_XDECREF(code);
	Py_XDECREF(file);
	Py_XDECREF(line);
}

static int start_python(struct gpud_error *err)
{
	if (py_start(gpud_module_init, false, err) < 0)
		return -1;
	if (!input_type)
		input_type = (PyTypeObject *)PyType_FromSpec(&input_spec);
	if (!input_type)
		return gpud_fail(err, "python: cannot make the input type");
	return 0;
}

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	const struct gpud_args *a = info->args;
	const char *script = gpud_arg(a, "script", NULL), *module = gpud_arg(a, "module", NULL);
	const char *cls_name = gpud_arg(a, "class", NULL), *in = gpud_arg(a, "input", "memoryview");
	const char *pypath = gpud_arg(a, "python_path", NULL);
	char why[900];

	if (!script == !module)
		return gpud_fail(err,
				 "python: give script = FILE.py or module = NAME (one of them)");
	if (!cls_name)
		return gpud_fail(err, "python: class = NAME is required (the worker class)");
	struct py_worker *pw = calloc(1, sizeof *pw);
	if (!pw)
		return gpud_fail(err, "python: out of memory");
	if (!strcmp(in, "memoryview"))
		pw->input = IN_MEMORYVIEW;
	else if (!strcmp(in, "bytes"))
		pw->input = IN_BYTES;
	else if (!strcmp(in, "str"))
		pw->input = IN_STR;
	else if (!strcmp(in, "json"))
		pw->input = IN_JSON;
	else if (!strcmp(in, "sample"))
		pw->input = IN_SAMPLE;
	else {
		free(pw);
		return gpud_fail(
			err,
			"python: input = '%s': expected memoryview, bytes, str, json or sample",
			in);
	}
	const char *res = gpud_arg(a, "result", "auto");
	int rm = 0;
	while (result_names[rm] && strcmp(res, result_names[rm]))
		rm++;
	if (!result_names[rm]) {
		free(pw);
		return gpud_fail(
			err, "python: [worker] result = '%s': expected auto, pickle, json or bytes",
			res);
	}
	pw->result = (enum result_mode)rm;
	pw->batch = info->batch_size ? info->batch_size : 1;
	if (start_python(err) < 0 || (pypath && py_prepend_path(pypath, err) < 0)) {
		free(pw);
		return -1;
	}
	/* The built-in `gpud` module, so that gpud.TaskTimeout is known even to a class
	 * that never imports it (built-in modules are found before sys.path's). */
	Py_XDECREF(PyImport_ImportModule("gpud"));
	PyErr_Clear();
	PyObject *mod = py_load_module(script, module, "__gpud_worker__", err);
	if (!mod) {
		free(pw);
		return -1;
	}
	PyObject *cls = PyObject_GetAttrString(mod, cls_name);
	Py_DECREF(mod);
	if (!cls) {
		PyErr_Clear();
		free(pw);
		return gpud_fail(err, "python: %s has no class %s", script ? script : module,
				 cls_name);
	}
	pw->obj = PyObject_CallObject(cls, NULL);
	Py_DECREF(cls);
	if (pw->obj && !PyObject_HasAttrString(pw->obj, "setup")) {
		Py_DECREF(pw->obj);
		free(pw);
		return gpud_fail(err,
				 "python: class %s has no setup(gpu_id, seed, **kwargs) (inherit "
				 "gpud.BaseWorker, or define it)",
				 cls_name);
	}
	PyObject *json = PyImport_ImportModule("json");
	PyObject *kwargs = py_kwargs(a, py_worker_keys);
	PyObject *setup = pw->obj ? PyObject_GetAttrString(pw->obj, "setup") : NULL;
	PyObject *args = Py_BuildValue("(iK)", info->gpu_id, (unsigned long long)info->seed);
	PyObject *r = setup ? PyObject_Call(setup, args, kwargs) : NULL;
	Py_XDECREF(args);
	Py_XDECREF(kwargs);
	Py_XDECREF(setup);
	if (!r || !json) {
		Py_XDECREF(py_take_error(why, sizeof why));
		Py_XDECREF(pw->obj);
		Py_XDECREF(json);
		free(pw);
		return gpud_fail(err, "python: %s.setup() failed: %s", cls_name, why);
	}
	Py_DECREF(r);
	pw->process = PyObject_GetAttrString(pw->obj, "process");
	if (!pw->process)
		PyErr_Clear();
	pw->process_batch = PyObject_GetAttrString(pw->obj, "process_batch");
	if (!pw->process_batch)
		PyErr_Clear();
	if (pw->process && pw->process_batch && is_base_process(pw->process))
		Py_CLEAR(pw->process);
	pw->release_name = PyUnicode_InternFromString("release");
	pw->json_loads = PyObject_GetAttrString(json, "loads");
	pw->json_dumps = PyObject_GetAttrString(json, "dumps");
	Py_DECREF(json);
	if (pw->result == RES_PICKLE) {
		PyObject *pickle = PyImport_ImportModule("pickle");
		pw->pickle_dumps = pickle ? PyObject_GetAttrString(pickle, "dumps") : NULL;
		pw->protocol = PyLong_FromLong(5);
		Py_XDECREF(pickle);
		if (!pw->pickle_dumps || !pw->protocol) {
			Py_XDECREF(py_take_error(why, sizeof why));
			Py_DECREF(pw->obj);
			free(pw);
			return gpud_fail(err, "python: result = pickle: %s", why);
		}
	}
	describe_method(pw->process, "process", pw->where, sizeof pw->where);
	describe_method(pw->process_batch, "process_batch", pw->batch_where,
			sizeof pw->batch_where);
	if (!pw->process && !pw->process_batch) {
		Py_DECREF(pw->obj);
		free(pw);
		return gpud_fail(err, "python: class %s has neither process() nor process_batch()",
				 cls_name);
	}
	if (start_flight(pw, info, err) < 0) {
		Py_DECREF(pw->obj);
		free(pw);
		return -1;
	}
	arm_timeouts();
	pw->ts = PyEval_SaveThread();
	*state = pw;
	return 0;
}

/* ---- one task ---- */

/* `input = sample`: the task's whole sample as a dict, {"__key__": key, name: bytes...}
 * (names and key as str, bytes that are not UTF-8 kept as surrogates); NULL with the
 * task failed: rejected when its bytes are no sample or a damaged one. */
static PyObject *make_sample(struct gpud_task *t)
{
	struct gpud_sample s;
	struct gpud_sample_member m;
	char why[900];
	int rc;
	if (gpud_sample_open(&s, t->input, t->input_size) < 0) {
		gpud_task_reject(t,
				 "python: input = sample, but this task's %zu bytes are not a "
				 "whole sample (the tar generator gives one with `members`)",
				 t->input_size);
		return NULL;
	}
	PyObject *d = PyDict_New();
	PyObject *k =
		d ? PyUnicode_DecodeUTF8(s.key, (Py_ssize_t)s.key_len, "surrogateescape") : NULL;
	if (!k || PyDict_SetItemString(d, "__key__", k) < 0)
		goto fail;
	Py_CLEAR(k);
	while ((rc = gpud_sample_next(&s, &m)) == 1) {
		PyObject *n =
			PyUnicode_DecodeUTF8(m.name, (Py_ssize_t)m.name_len, "surrogateescape");
		PyObject *v = n ? PyBytes_FromStringAndSize(m.data, (Py_ssize_t)m.size) : NULL;
		int set = v ? PyDict_SetItem(d, n, v) : -1;
		Py_XDECREF(n);
		Py_XDECREF(v);
		if (set < 0)
			goto fail;
	}
	if (rc < 0) {
		Py_DECREF(d);
		gpud_task_reject(t,
				 "python: input = sample: sample '%.*s' is damaged (%zu bytes): a "
				 "member's length runs past its end",
				 (int)(s.key_len > 200 ? 200 : s.key_len), s.key, t->input_size);
		return NULL;
	}
	return d;
fail:
	Py_XDECREF(k);
	Py_XDECREF(d);
	Py_XDECREF(py_take_error(why, sizeof why));
	gpud_task_fail(t, "python: cannot make the sample's dict: %s", why);
	return NULL;
}

/* The Python object for a task's input; NULL with the task failed. *exporter gets the
 * exporter behind a memoryview (a new reference), to be checked after the call. */
static PyObject *make_input(struct py_worker *pw, struct gpud_task *t, input_obj **exporter)
{
	char why[900];
	*exporter = NULL;
	switch (pw->input) {
	case IN_MEMORYVIEW: {
		/* The last task's exporter when nothing kept it, else a new one. */
		input_obj *in = pw->spare;
		pw->spare = NULL;
		if (!in)
			in = PyObject_New(input_obj, input_type);
		if (!in)
			break;
		in->data = t->input;
		in->len = (Py_ssize_t)t->input_size;
		in->exports = 0;
		PyObject *mv = PyMemoryView_FromObject((PyObject *)in);
		if (!mv) {
			Py_DECREF(in);
			break;
		}
		*exporter = in;
		return mv;
	}
	case IN_BYTES:
		return PyBytes_FromStringAndSize(t->input, (Py_ssize_t)t->input_size);
	case IN_STR:
	case IN_JSON: {
		PyObject *s = PyUnicode_DecodeUTF8(t->input, (Py_ssize_t)t->input_size, "strict");
		if (!s) {
			Py_XDECREF(py_take_error(why, sizeof why));
			gpud_task_reject(t, "python: input is not valid UTF-8 (input = %s): %s",
					 pw->input == IN_STR ? "str" : "json", why);
			return NULL;
		}
		if (pw->input == IN_STR)
			return s;
		PyObject *v = py_call1(pw->json_loads, s);
		Py_DECREF(s);
		if (!v) {
			Py_XDECREF(py_take_error(why, sizeof why));
			gpud_task_reject(t, "python: input is not JSON (input = json): %s", why);
		}
		return v;
	}
	case IN_SAMPLE:
		return make_sample(t);
	}
	Py_XDECREF(py_take_error(why, sizeof why));
	gpud_task_fail(t, "python: cannot make the input: %s", why);
	return NULL;
}

/* Whether the call kept a view of its input; the exporter is cut off either way. */
static bool kept_view(struct py_worker *pw, PyObject *mv, input_obj *in)
{
	if (!in)
		return false;
	/* Our own reference to the memoryview goes: only views taken from it by the call
	 * (np.frombuffer, a slice stored on self) keep exports alive. */
	PyObject *r = PyObject_CallMethodObjArgs(mv, pw->release_name, NULL);
	if (!r)
		PyErr_Clear();
	Py_XDECREF(r);
	bool kept = in->exports > 0;
	in->data = NULL; /* later buffer requests fail instead of reading another task */
	in->len = 0;
	if (!kept && !pw->spare && Py_REFCNT(in) == 1)
		pw->spare = in; /* nobody else holds it: the next task's */
	else
		Py_DECREF(in);
	return kept;
}

/* Whether an exception of class `type` says memory ran out: a MemoryError, or a class
 * named OutOfMemoryError anywhere in its MRO (torch.cuda.OutOfMemoryError), found by
 * name so that torch is never imported for it. The task then runs again in a smaller
 * call (gpud_task_oom). */
static bool oom_type(PyObject *type)
{
	if (!type)
		return false;
	if (PyErr_GivenExceptionMatches(type, PyExc_MemoryError))
		return true;
	PyObject *mro = PyObject_GetAttrString(type, "__mro__");
	bool oom = false;
	Py_ssize_t n = mro && PyTuple_Check(mro) ? PyTuple_Size(mro) : 0;
	for (Py_ssize_t i = 0; i < n && !oom; i++) {
		PyObject *name = PyObject_GetAttrString(PyTuple_GetItem(mro, i), "__name__");
		const char *s = name && PyUnicode_Check(name) ? py_utf8(name, NULL) : NULL;
		oom = s && !strcmp(s, "OutOfMemoryError");
		Py_XDECREF(name);
	}
	Py_XDECREF(mro);
	PyErr_Clear();
	return oom;
}

/* Fails task t from the pending exception, by its kind. */
static void task_error(struct gpud_task *t)
{
	char why[900];
	PyObject *type = py_take_error(why, sizeof why);
	if (oom_type(type))
		gpud_task_oom(t, "%s", why);
	else if (type && PyErr_GivenExceptionMatches(type, gpud_worker_fatal))
		gpud_task_fatal(t, "%s", why);
	else if (type && PyErr_GivenExceptionMatches(type, gpud_task_rejected))
		gpud_task_reject(t, "%s", why);
	else if (type && PyErr_GivenExceptionMatches(type, gpud_task_timeout))
		gpud_task_timed_out(t, "%s", why);
	else
		gpud_task_fail(t, "%s", why);
	Py_XDECREF(type);
}

/* Where in a result JSON cannot follow: culprit(r) names the first value (by its path,
 * `result['emb'][2]`) that is not None, bool, int, float, str, or a list, tuple or dict
 * of them, with its type; None when there is none (the trouble is elsewhere: a cycle). */
#include "culprit_py.h" /* culprit_source[]: culprit.py, embedded at build time */

/* culprit(r) as text into buf ("" when it finds none or cannot run). */
static void json_culprit(PyObject *r, char *buf, size_t len)
{
	static PyObject *culprit;
	buf[0] = '\0';
	if (!culprit) {
		PyObject *g = PyDict_New();
		PyObject *code =
			g ? Py_CompileString(culprit_source, "<gpud: plugins/python/culprit.py>",
					     Py_file_input)
			  : NULL;
		if (code && PyDict_SetItemString(g, "__builtins__", PyEval_GetBuiltins()) == 0) {
			PyObject *ok = PyEval_EvalCode(code, g, g);
			Py_XDECREF(ok);
			culprit = ok ? PyDict_GetItemString(g, "culprit") : NULL;
			Py_XINCREF(culprit);
		}
		Py_XDECREF(code);
		Py_XDECREF(g);
	}
	PyObject *c = culprit ? py_call1(culprit, r) : NULL;
	if (c && PyUnicode_Check(c))
		snprintf(buf, len, "%s", py_utf8(c, NULL));
	Py_XDECREF(c);
	PyErr_Clear();
}

/* The pending exception as "Type: message", without its traceback (which would point
 * into json/encoder.py or pickle, not at the user's code). */
static void take_error_plain(char *buf, size_t len)
{
	PyObject *type, *value, *tb;
	PyErr_Fetch(&type, &value, &tb);
	Py_XDECREF(tb);
	PyErr_Restore(type, value, NULL);
	Py_XDECREF(py_take_error(buf, len));
}

/* The bytes of result r by the worker's `result` mode; 0, or -1 with the task failed,
 * naming `where` (the user's method) and what to return instead. */
static int result_bytes(struct py_worker *pw, struct gpud_task *t, PyObject *r, const char *where,
			struct py_bytes *b)
{
	char why[600], tn[128], path[400];
	*b = (struct py_bytes){0};
	if (pw->result == RES_PICKLE) {
		b->text = PyObject_CallFunctionObjArgs(pw->pickle_dumps, r, pw->protocol, NULL);
		if (b->text && PyBytes_AsStringAndSize(b->text, (char **)&b->p, &b->n) == 0)
			return 0;
		take_error_plain(why, sizeof why);
		py_bytes_release(b);
		gpud_task_fail(t,
			       "python: %s returned a %s that cannot be pickled (result = "
			       "pickle): %s",
			       where, py_type_name(r, tn, sizeof tn), why);
		return -1;
	}
	if (pw->result == RES_BYTES && !PyUnicode_Check(r) && !PyObject_CheckBuffer(r)) {
		gpud_task_fail(t,
			       "python: %s returned a %s: result = bytes takes bytes (or any "
			       "buffer: bytearray, memoryview, a NumPy array), str or None; "
			       "return one, or set [worker] result = pickle",
			       where, py_type_name(r, tn, sizeof tn));
		return -1;
	}
	if (pw->result == RES_JSON) {
		b->text = py_call1(pw->json_dumps, r);
		b->p = b->text ? py_utf8(b->text, &b->n) : NULL;
	} else if (py_bytes_of(r, pw->json_dumps, b) == 0) {
		return 0;
	}
	if (b->p)
		return 0;
	take_error_plain(why, sizeof why);
	py_bytes_release(b);
	json_culprit(r, path, sizeof path);
	gpud_task_fail(t,
		       "python: %s returned a %s that JSON cannot hold (result = %s)%s%s: %s; "
		       "return bytes (or a NumPy array itself), a str, or a dict or list of "
		       "plain values (str, int, float, bool, None), or set [worker] result = "
		       "pickle (and result = pickle in a python [sink]) to send any picklable "
		       "object",
		       where, py_type_name(r, tn, sizeof tn), result_names[pw->result],
		       path[0] ? ": " : "", path, why);
	return -1;
}

/* result = bytes and a list of buffers (the gpud package's framed results: a pickle
 * and its out-of-band buffers): written one after another, each copied once. 1 done
 * (the result set or the task failed), 0 not such a list (nothing done). */
static int put_parts(struct gpud_task *t, PyObject *r, const char *where)
{
	Py_ssize_t k = PyList_Size(r);
	size_t at = 0;
	for (Py_ssize_t i = 0; i < k; i++)
		if (!PyObject_CheckBuffer(PyList_GetItem(r, i)))
			return 0;
	for (Py_ssize_t i = 0; i < k; i++) {
		Py_buffer v;
		if (PyObject_GetBuffer(PyList_GetItem(r, i), &v, PyBUF_SIMPLE) < 0) {
			char why[300];
			take_error_plain(why, sizeof why);
			gpud_task_fail(t,
				       "python: %s returned a list whose part %zd is not "
				       "contiguous: %s",
				       where, i, why);
			return 1;
		}
		size_t n = (size_t)v.len;
		if (n > t->result.capacity - at) {
			PyBuffer_Release(&v);
			size_t total = at;
			for (Py_ssize_t j = i; j < k; j++) {
				Py_buffer u;
				if (PyObject_GetBuffer(PyList_GetItem(r, j), &u, PyBUF_SIMPLE) ==
				    0) {
					total += (size_t)u.len;
					PyBuffer_Release(&u);
				} else {
					PyErr_Clear();
				}
			}
			gpud_task_fail(t,
				       "python: result of %zu bytes exceeds max_result_bytes (%zu)",
				       total, t->result.capacity);
			return 1;
		}
		memcpy((char *)t->result.data + at, v.buf, n);
		at += n;
		PyBuffer_Release(&v);
	}
	t->result.size = at;
	return 1;
}

/* Writes a Python result into the task's buffer; fails the task when it cannot. */
static void put_result(struct py_worker *pw, struct gpud_task *t, PyObject *r, const char *where)
{
	struct py_bytes b;
	if (r == Py_None && (pw->result == RES_AUTO || pw->result == RES_BYTES)) {
		t->result.size = 0;
		return;
	}
	if (pw->result == RES_BYTES && PyList_Check(r) && put_parts(t, r, where))
		return;
	if (result_bytes(pw, t, r, where, &b) < 0)
		return;
	if ((size_t)b.n > t->result.capacity) {
		gpud_task_fail(t, "python: result of %zd bytes exceeds max_result_bytes (%zu)", b.n,
			       t->result.capacity);
	} else {
		memcpy(t->result.data, b.p, (size_t)b.n);
		t->result.size = (size_t)b.n;
	}
	py_bytes_release(&b);
}

static void finish_one(struct py_worker *pw, struct gpud_task *t, PyObject *r, PyObject *data,
		       input_obj *in);

/* fn(arg), the user's process or process_batch (in_user set by the caller: from here on
 * the timeout handler raises inside it); not started, with the timeout's exception, when
 * the call was cut before the user's code began (the handler let it go while the input
 * was made). NULL with the exception set when it raised. */
static PyObject *call_user(PyObject *fn, PyObject *arg)
{
	if (call_cut()) {
		PyErr_SetString(gpud_task_timeout ? gpud_task_timeout : PyExc_TimeoutError,
				"not run: its call ran past task_timeout");
		return NULL;
	}
	return py_call1(fn, arg);
}

static void run_one(struct py_worker *pw, struct gpud_task *t)
{
	input_obj *in;
	PyObject *data = make_input(pw, t, &in);
	if (!data)
		return;
	in_user = true;
	PyObject *r = call_user(pw->process, data);
	if (r && pw->is_async) { /* one at a time (max_in_flight = 1): run to its end */
		PyObject *coro = r;
		r = PyObject_CallMethod(pw->driver, "run", "O", coro);
		Py_DECREF(coro);
	}
	in_user = false;
	finish_one(pw, t, r, data, in);
}

/* Task t's call returned r (NULL: raised): its result or failure set, its input cut off.
 * A call that ran past task_timeout (cut: TaskTimeout was raised in it, or was to be)
 * times out whatever its code did with TaskTimeout: a result it returned or another
 * exception it raised instead is not kept (only WorkerFatal still replaces the worker). */
static void finish_one(struct py_worker *pw, struct gpud_task *t, PyObject *r, PyObject *data,
		       input_obj *in)
{
	bool late = call_cut() &&
		    (r || !(PyErr_GivenExceptionMatches(PyErr_Occurred(), gpud_worker_fatal) ||
			    PyErr_GivenExceptionMatches(PyErr_Occurred(), gpud_task_timeout)));
	if (late) {
		Py_XDECREF(r);
		PyErr_Clear();
		gpud_task_timed_out(t, "%s", CUT_NOTE);
	} else if (!r) {
		task_error(t);
	} else {
		put_result(pw, t, r, pw->where); /* first: the result may be the input itself */
		Py_DECREF(r);
	}
	bool kept = kept_view(pw, data, in);
	Py_DECREF(data);
	if (kept)
		gpud_task_fatal(t,
				"python: process() kept a view of its input past the call (a "
				"memoryview slice, np.frombuffer...), which would see later tasks' "
				"bytes; copy what you keep (bytes(data)). The worker is replaced.");
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t as_ns(PyObject *v)
{
	unsigned long long n = v && PyLong_Check(v) ? PyLong_AsUnsignedLongLong(v) : 0;
	if (PyErr_Occurred()) {
		PyErr_Clear();
		n = 0;
	}
	return n;
}

/* What Python code in the call said of its time (gpud._times: unpacking and packing
 * in ns, the user's calls by size) added to the call's account, and cleared. */
static void take_python_times(struct gpud_call_times *ct)
{
	PyObject *l = gpud_module_times;
	if (!l || !PyList_Check(l) || PyList_Size(l) != 3)
		return;
	ct->unpack_ns += as_ns(PyList_GetItem(l, 0));
	ct->pack_ns += as_ns(PyList_GetItem(l, 1));
	PyObject *zero = PyLong_FromLong(0);
	if (zero) {
		Py_INCREF(zero);
		PyList_SetItem(l, 0, zero); /* steals */
		PyList_SetItem(l, 1, zero);
	}
	PyObject *sizes = PyList_GetItem(l, 2), *k, *v;
	Py_ssize_t pos = 0;
	while (sizes && PyDict_Check(sizes) && PyDict_Next(sizes, &pos, &k, &v)) {
		uint64_t size = as_ns(k), calls = as_ns(v);
		if (!size) /* the code counts its calls itself, and may have made none */
			ct->counted = 1;
		if (!size || !calls)
			continue;
		ct->calls[gpud_call_bucket((size_t)size)] += (uint32_t)calls;
		ct->items += size * calls;
		if (size > UINT32_MAX)
			size = UINT32_MAX;
		if (!ct->min_items || size < ct->min_items)
			ct->min_items = (uint32_t)size;
		if (size > ct->max_items)
			ct->max_items = (uint32_t)size;
	}
	if (sizes && PyDict_Check(sizes))
		PyDict_Clear(sizes);
	PyErr_Clear();
}

/* process_batch(items): a list in, a list of as many results out; an exception object
 * in a result's place fails that task alone. -1 when it raised (every item marked with
 * its error): the call failed as a whole. The call's account (gpud_call_times):
 * making the items is unpacking, writing the results packing, and what Python code
 * in between says of its own (gpud._times). */
static int run_batch(struct py_worker *pw, struct gpud_task *t, size_t n)
{
	int rc = 0;
	struct gpud_call_times *ct = &pw->times;
	*ct = (struct gpud_call_times){0};
	uint64_t t0 = now_ns(), t1 = t0, t2 = t0;
	PyObject *items = PyList_New((Py_ssize_t)n);
	input_obj **ins = calloc(n, sizeof *ins);
	bool *made = calloc(n, sizeof *made);
	if (!items || !ins || !made) {
		for (size_t i = 0; i < n; i++)
			gpud_task_fail(&t[i], "python: out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		PyObject *d = make_input(pw, &t[i], &ins[i]);
		made[i] = d != NULL;
		Py_INCREF(d ? d : Py_None);
		PyList_SetItem(items, (Py_ssize_t)i, d ? d : Py_None); /* steals */
		Py_XDECREF(d);
	}
	t1 = now_ns();
	in_user = true;
	PyObject *r = call_user(pw->process_batch, items);
	in_user = false;
	t2 = now_ns();
	/* Past task_timeout, the call times out whatever its code did with TaskTimeout
	 * (finish_one), unless it ended at an item itself (holds_timeout). */
	bool cut = call_cut();
	if (cut && r && !holds_timeout(r, n)) {
		Py_CLEAR(r);
		PyErr_SetString(gpud_task_timeout ? gpud_task_timeout : PyExc_TimeoutError,
				CUT_NOTE);
	}
	if (!r) {
		char why[900];
		PyObject *type = py_take_error(why, sizeof why);
		bool fatal = type && PyErr_GivenExceptionMatches(type, gpud_worker_fatal);
		bool timeout =
			!fatal &&
			(cut || (type && PyErr_GivenExceptionMatches(type, gpud_task_timeout)));
		bool oom = !timeout && oom_type(type);
		Py_XDECREF(type);
		for (size_t i = 0; i < n; i++)
			if (made[i]) {
				if (oom) /* the call ran out: its tasks run again in smaller ones */
					gpud_task_oom(&t[i], "%s", why);
				else if (timeout) /* interrupted: the whole call timed out */
					gpud_task_timed_out(&t[i], "%s", why);
				else if (fatal)
					gpud_task_fatal(&t[i], "%s", why);
				else
					gpud_task_fail(&t[i], "%s", why);
			}
		/* It raised: a failure of the call as a whole, which gpud-worker splits to
		 * find the items that fail alone ([job] isolate_failures). */
		if (!oom && !timeout && !fatal)
			rc = -1;
	} else if (!PySequence_Check(r) || PySequence_Size(r) != (Py_ssize_t)n) {
		PyErr_Clear();
		for (size_t i = 0; i < n; i++)
			if (made[i])
				gpud_task_fail(&t[i],
					       "python: process_batch() must return a list of "
					       "%zu results, one per item",
					       n);
	} else {
		for (size_t i = 0; i < n; i++) {
			if (!made[i])
				continue;
			PyObject *ri = PySequence_GetItem(r, (Py_ssize_t)i);
			if (ri && PyExceptionInstance_Check(ri)) {
				PyErr_SetObject((PyObject *)Py_TYPE(ri), ri);
				task_error(&t[i]);
			} else if (ri) {
				put_result(pw, &t[i], ri, pw->batch_where);
			}
			Py_XDECREF(ri);
		}
	}
	Py_XDECREF(r);
	/* After the results are written (one may be an input itself): were views kept? */
	bool kept = false;
	for (size_t i = 0; i < n; i++)
		if (made[i])
			kept |= kept_view(pw, PyList_GetItem(items, (Py_ssize_t)i), ins[i]);
	if (kept)
		for (size_t i = 0; i < n; i++)
			gpud_task_fatal(&t[i],
					"python: process_batch() kept a view of an input past "
					"the call; copy what you keep. The worker is replaced.");
out:
	Py_XDECREF(items);
	free(ins);
	free(made);
	ct->unpack_ns += t1 - t0;
	ct->pack_ns += now_ns() - t2;
	take_python_times(ct);
	gpud_call_times_set(&t[0], ct);
	return rc;
}

GPUD_EXPORT int gpud_worker_process_batch(void *state, struct gpud_task *tasks, size_t n)
{
	struct py_worker *pw = state;
	int rc = 0;
	PyEval_RestoreThread(pw->ts);
	atomic_fetch_add(&calls, 1);
	if (pw->process_batch && (n > 1 || !pw->process))
		rc = run_batch(pw, tasks, n);
	else
		for (size_t i = 0; i < n; i++) {
			if (call_cut()) /* the call ran past task_timeout: the rest too */
				gpud_task_timed_out(&tasks[i],
						    "not run: its call ran past task_timeout");
			else
				run_one(pw, &tasks[i]);
		}
	pw->ts = PyEval_SaveThread();
	return rc;
}

/* ---- tasks in flight (max_in_flight > 1) ---- */

/* Starts task t: an async def process as a task on the loop; a plain one runs now and
 * waits in `ready` for the next poll. 0, or -1 with t failed (finished now). */
GPUD_EXPORT int gpud_worker_submit(void *state, struct gpud_task *t)
{
	struct py_worker *pw = state;
	int rc = 0;
	PyEval_RestoreThread(pw->ts);
	if (!pw->is_async) {
		if (pw->process)
			run_one(pw, t);
		else
			run_batch(pw, t, 1);
		pw->ready[pw->n_ready++] = t;
		goto out;
	}
	size_t slot = 0;
	while (slot < pw->flight && pw->fly[slot].task)
		slot++;
	if (slot == pw->flight) {
		gpud_task_fail(t, "python: more than max_in_flight (%zu) tasks submitted",
			       pw->flight);
		rc = -1;
		goto out;
	}
	input_obj *in;
	PyObject *data = make_input(pw, t, &in);
	if (!data) {
		rc = -1;
		goto out;
	}
	PyObject *coro = py_call1(pw->process, data);
	PyObject *ok =
		coro ? PyObject_CallMethod(pw->driver, "submit", "On", coro, (Py_ssize_t)slot)
		     : NULL;
	Py_XDECREF(coro);
	if (!ok) {
		finish_one(pw, t, NULL, data, in);
		rc = -1;
		goto out;
	}
	Py_DECREF(ok);
	pw->fly[slot] = (struct flying){.task = t, .data = data, .in = in};
out:
	pw->ts = PyEval_SaveThread();
	return rc;
}

/* One finished asyncio task (key, task) of the driver's: its task's result or error. */
static struct gpud_task *land_async(struct py_worker *pw, PyObject *pair)
{
	PyObject *key =
		PyTuple_Check(pair) && PyTuple_Size(pair) == 2 ? PyTuple_GetItem(pair, 0) : NULL;
	PyObject *task = key ? PyTuple_GetItem(pair, 1) : NULL;
	Py_ssize_t slot = key ? PyLong_AsSsize_t(key) : -1;
	if (slot < 0 || (size_t)slot >= pw->flight || !pw->fly[slot].task) {
		PyErr_Clear();
		return NULL;
	}
	struct flying f = pw->fly[slot];
	pw->fly[slot] = (struct flying){0};
	/* task.result() raises what the coroutine raised, with its traceback. */
	PyObject *r = PyObject_CallMethod(task, "result", NULL);
	finish_one(pw, f.task, r, f.data, f.in);
	return f.task;
}

/* Hands back what finished: the plain ones at once, the async ones after running the
 * loop for up to timeout_ms. */
GPUD_EXPORT int gpud_worker_poll(void *state, struct gpud_task **done, size_t max, int timeout_ms,
				 struct gpud_error *err)
{
	struct py_worker *pw = state;
	size_t n = 0;
	int rc = 0;
	while (pw->n_ready && n < max)
		done[n++] = pw->ready[--pw->n_ready];
	if (!pw->is_async || n == max)
		return (int)n;
	PyEval_RestoreThread(pw->ts);
	PyObject *list = PyObject_CallMethod(pw->driver, "poll", "dn", n ? 0.0 : timeout_ms * 1e-3,
					     (Py_ssize_t)(max - n));
	if (!list || !PyList_Check(list)) {
		char why[900];
		Py_XDECREF(py_take_error(why, sizeof why));
		rc = gpud_fail(err, "python: the asyncio event loop failed: %s",
			       list ? "poll returned no list" : why);
		goto out;
	}
	for (Py_ssize_t i = 0; i < PyList_Size(list) && n < max; i++) {
		struct gpud_task *t = land_async(pw, PyList_GetItem(list, i));
		if (t)
			done[n++] = t;
	}
	rc = (int)n;
out:
	Py_XDECREF(list);
	pw->ts = PyEval_SaveThread();
	return rc;
}

GPUD_EXPORT int gpud_worker_cleanup(void *state, struct gpud_error *err)
{
	struct py_worker *pw = state;
	int rc = 0;
	PyEval_RestoreThread(pw->ts);
	PyObject *cleanup = PyObject_GetAttrString(pw->obj, "cleanup");
	if (!cleanup) {
		PyErr_Clear();
	} else {
		PyObject *r = PyObject_CallObject(cleanup, NULL);
		if (!r) {
			char why[900];
			Py_XDECREF(py_take_error(why, sizeof why));
			rc = gpud_fail(err, "python: cleanup() failed: %s", why);
		}
		Py_XDECREF(r);
		Py_DECREF(cleanup);
	}
	/* What print() left in Python's own buffers reaches the log now. The interpreter is
	 * not finalized: threads a model library started could hang that, and the process
	 * ends right after. */
	py_run("import sys\nsys.stdout.flush()\nsys.stderr.flush()\n");
	return rc;
}
