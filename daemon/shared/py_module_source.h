/* SPDX-License-Identifier: MIT */
/* The Python source of the `gpud` module the python plugins build in
 * (plugins/python/gpud_module.h): here, with what both sides use, so that
 * `gpud check --import` (daemon/host/job/python.c), which runs the user's code in a
 * plain interpreter, gives it the very module the workers have. */
#ifndef GPUD_PY_MODULE_SOURCE_H
#define GPUD_PY_MODULE_SOURCE_H

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
	"class TaskTimeout(TimeoutError):\n"
	"    '''Raised inside process() (or process_batch()) by gpud when the call runs past\n"
	"    task_timeout: the task times out, and this worker, with what setup() loaded,\n"
	"    goes on with the next tasks. A call that catches it and goes on is killed\n"
	"    after [job] timeout_grace seconds more, as a call stuck in C code is.'''\n"
	"\n"
	"def fatal(reason):\n"
	"    raise WorkerFatal(reason)\n"
	"\n"
	"def reject(reason):\n"
	"    raise TaskRejected(reason)\n"
	"\n"
	"# Where a call's time goes, as Python code inside a worker's call tells the worker:\n"
	"# nanoseconds unpacking items, nanoseconds packing results, and the sizes of the\n"
	"# calls of the user's code it made ({size: calls}). The worker reads and clears it\n"
	"# after each call.\n"
	"_times = [0, 0, {}]\n"
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

#endif
