/* SPDX-License-Identifier: MIT */
/* The `gpud` module a Python worker can import: BaseWorker, fatal(), reject() and their
 * exceptions. Built into the plugin (PyImport_AppendInittab), so it needs no install. */
#ifndef GPUD_PY_MODULE_H
#define GPUD_PY_MODULE_H

#include "common.h"

static PyObject *gpud_worker_fatal;  /* gpud.WorkerFatal */
static PyObject *gpud_task_rejected; /* gpud.TaskRejected */

static const char gpud_module_source[] =
	"class WorkerFatal(Exception):\n"
	"    '''Raised (or gpud.fatal()) when this worker is beyond repair, like a CUDA\n"
	"    error that poisons the context: the task fails and a fresh worker process\n"
	"    (setup again) takes this one's place.'''\n"
	"\n"
	"class TaskRejected(Exception):\n"
	"    '''Raised (or gpud.reject()) when the input is bad and running the task\n"
	"    again cannot help: it fails at once and is not retried.'''\n"
	"\n"
	"def fatal(reason):\n"
	"    raise WorkerFatal(reason)\n"
	"\n"
	"def reject(reason):\n"
	"    raise TaskRejected(reason)\n"
	"\n"
	"class BaseWorker:\n"
	"    '''What gpud calls: setup(gpu_id, seed, **kwargs) once, process(data) per\n"
	"    task (or process_batch(items) with [job] batch_size), cleanup() at the end.'''\n"
	"    def setup(self, gpu_id, seed, **kwargs):\n"
	"        self.gpu_id = gpu_id\n"
	"        self.seed = seed\n"
	"    def process(self, data):\n"
	"        raise NotImplementedError('process(data) is not defined')\n"
	"    def cleanup(self):\n"
	"        pass\n";

static struct PyModuleDef gpud_module_def = {
	PyModuleDef_HEAD_INIT,
	"gpud",
	"gpud's worker-side helpers",
	-1,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
};

static PyObject *gpud_module_init(void)
{
	PyObject *m = PyModule_Create(&gpud_module_def);
	if (!m)
		return NULL;
	PyObject *d = PyModule_GetDict(m); /* borrowed */
	if (PyDict_SetItemString(d, "__builtins__", PyEval_GetBuiltins()) < 0)
		goto fail;
	PyObject *code = Py_CompileString(gpud_module_source, "<gpud module>", Py_file_input);
	PyObject *r = code ? PyEval_EvalCode(code, d, d) : NULL;
	Py_XDECREF(code);
	if (!r)
		goto fail;
	Py_DECREF(r);
	gpud_worker_fatal = PyDict_GetItemString(d, "WorkerFatal");
	gpud_task_rejected = PyDict_GetItemString(d, "TaskRejected");
	Py_XINCREF(gpud_worker_fatal);
	Py_XINCREF(gpud_task_rejected);
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}

#endif
