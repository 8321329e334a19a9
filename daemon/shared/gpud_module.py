# SPDX-License-Identifier: MIT
# The `gpud` module the python plugins build in (plugins/python/gpud_module.h): what a
# job's Python code imports as `gpud` in a worker, generator or sink, also given to
# `gpud check --import`'s interpreter (python_import.py), so that the check runs the
# user's code with the very module the workers have. Embedded at build time as
# gpud_module_source[] (embed_py.py); checked by the test `embedded_python`.
class WorkerFatal(Exception):
    '''Raised (or gpud.fatal()) when this worker is beyond repair, like a CUDA
    error that poisons the context: the task fails and a fresh worker process
    (setup again) takes this one's place.'''

class TaskRejected(Exception):
    '''Raised (or gpud.reject()) when the input is bad and running the task
    again cannot help: it fails at once and is not retried.'''

class TaskTimeout(TimeoutError):
    '''Raised inside process() (or process_batch()) by gpud when the call runs past
    task_timeout: the task times out, and this worker, with what setup() loaded,
    goes on with the next tasks. A call that catches it still times out (what it
    returns is not kept); one that catches it and goes on is killed
    after [job] timeout_grace seconds more, as a call stuck in C code is.'''

def fatal(reason):
    raise WorkerFatal(reason)

def reject(reason):
    raise TaskRejected(reason)

# Where a call's time goes, as Python code inside a worker's call tells the worker:
# nanoseconds unpacking items, nanoseconds packing results, and the sizes of the
# calls of the user's code it made ({size: calls}). The worker reads and clears it
# after each call.
_times = [0, 0, {}]

class BaseWorker:
    '''What gpud calls: setup(gpu_id, seed, **kwargs) once, process(data) per
    task (or process_batch(items) with [job] batch_size), cleanup() at the end.'''
    def setup(self, gpu_id, seed, **kwargs):
        self.gpu_id = gpu_id
        self.seed = seed
    def process(self, data):
        raise NotImplementedError('process(data) is not defined')
    def cleanup(self):
        pass
