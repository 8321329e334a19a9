/* SPDX-License-Identifier: MIT */
/* The `gpud` module a Python worker can import: BaseWorker, fatal(), reject() and their
 * exceptions, and TaskTimeout. Built into the plugin (PyImport_AppendInittab), so it needs no
 * install. */
#ifndef GPUD_PY_MODULE_H
#define GPUD_PY_MODULE_H

#include "common.h"
#include "gpud_module_py.h" /* daemon/shared/gpud_module.py: also gpud check --import's */

static PyObject *gpud_worker_fatal;  /* gpud.WorkerFatal */
static PyObject *gpud_task_rejected; /* gpud.TaskRejected */
static PyObject *gpud_task_timeout;  /* gpud.TaskTimeout */
static PyObject *gpud_module_times;  /* gpud._times (gpud_module.py) */

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
	PyObject *code = Py_CompileString(
		gpud_module_source, "<gpud module: daemon/shared/gpud_module.py>", Py_file_input);
	PyObject *r = code ? PyEval_EvalCode(code, d, d) : NULL;
	Py_XDECREF(code);
	if (!r)
		goto fail;
	Py_DECREF(r);
	gpud_worker_fatal = PyDict_GetItemString(d, "WorkerFatal");
	gpud_task_rejected = PyDict_GetItemString(d, "TaskRejected");
	Py_XINCREF(gpud_worker_fatal);
	Py_XINCREF(gpud_task_rejected);
	gpud_task_timeout = PyDict_GetItemString(d, "TaskTimeout");
	Py_XINCREF(gpud_task_timeout);
	gpud_module_times = PyDict_GetItemString(d, "_times");
	Py_XINCREF(gpud_module_times);
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}

#endif
