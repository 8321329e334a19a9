# SPDX-License-Identifier: MIT
"""gpud for Python programs: the gpu_dispatch library's API on gpud's host.

    from gpud import BaseWorker, Dispatcher

    class Worker(BaseWorker):
        def setup(self, gpu_id, seed, model_path): ...
        def process(self, data: _Any) -> _Any: ...

    Dispatcher(Worker, gpu_ids=[0, 1]).run(items(), on_success=print, model_path="m.pt")

The host runs inside this process (libgpud, through gpud._gpud): the generator is any
iterable of the program, the callbacks run in the thread that called run(). The
workers are gpud's worker processes, one per GPU slot, running this same Python. See
docs/python.md in gpud's source.
"""
from __future__ import annotations

import abc as _abc
import sys as _sys
from typing import TYPE_CHECKING as _TYPE_CHECKING, Any as _Any, NoReturn as _NoReturn

if _TYPE_CHECKING:  # for type checkers (py.typed); loaded lazily at run time, below
    from ._stages import Stage as Stage
    from ._worker import stack as stack
    from .dispatcher import Dispatcher as Dispatcher
    from .ui import RichDispatcher as RichDispatcher

__version__ = "0.1.0"

# In a worker, the python worker plugin's built-in module holds the exceptions it
# recognises (gpud._worker keeps it as gpud._glue): raising them must mean the same.
_glue = _sys.modules.get("gpud._glue")
if _glue is None:

    class WorkerFatal(Exception):
        """Raised in process() when this worker is beyond repair (a CUDA error that
        poisons the context): the task fails and a fresh worker process takes this
        one's place."""

    class TaskRejected(Exception):
        """Raised in process() when the input is bad and running the task again cannot
        help: it fails at once and is not retried."""

    class TaskTimeout(TimeoutError):
        """Raised inside process() by gpud when the call runs past task_timeout: the
        item times out (on_timeout) and the worker, with what setup() loaded, goes
        on. A call that catches it still times out (what it returns is not kept); one
        that catches it and goes on is killed timeout_grace seconds later."""

else:
    WorkerFatal = _glue.WorkerFatal  # type: ignore[misc]
    TaskRejected = _glue.TaskRejected  # type: ignore[misc]
    TaskTimeout = _glue.TaskTimeout  # type: ignore[misc]


def fatal(reason: str) -> _NoReturn:
    """Raises WorkerFatal(reason)."""
    raise WorkerFatal(reason)


def reject(reason: str) -> _NoReturn:
    """Raises TaskRejected(reason)."""
    raise TaskRejected(reason)


class BaseWorker(_abc.ABC):
    """The library's worker: setup() once per worker process, process() per item,
    cleanup() at the end. The constructor takes no arguments and should stay light:
    load models in setup()."""

    @_abc.abstractmethod
    def setup(self, *args: _Any, **kwargs: _Any) -> None:
        """setup(gpu_id, seed, **kwargs): once, in the worker process, before any
        item. gpu_id is the GPU's id as given to the Dispatcher; the process sees that
        GPU as device 0 (cuda:0).
        seed is base_seed + gpu_id. kwargs: run()'s extra keywords. (Declared with
        *args, **kwargs so that a subclass's own keywords, `def setup(self, gpu_id:
        int, seed: int, model_path: str)`, type-check as an override.)"""

    def process(self, data: _Any) -> _Any:
        """One item as the generator yielded it; returns any picklable object. A class
        that defines process_batch(items) alone needs none: its batches of one go there
        too."""
        raise NotImplementedError("process(data) is not defined")

    def cleanup(self) -> None:
        """Once, when the worker ends."""


class JobError(ValueError):
    """The job cannot run (a bad option or key, a plugin that cannot load): nothing
    ran. The message names what and where."""


class RunAborted(RuntimeError):
    """The run was aborted (the generator or gpud itself failed); see the message."""


class MemoryWarning(UserWarning):
    """The shared memory a Dispatcher's run maps is far above what its items need (a
    max_task_bytes or max_result_bytes set much larger than they are): said before the
    run and by Dispatcher.check()."""


def __getattr__(name: str) -> _Any:
    # The host side (libgpud) is loaded only when a Dispatcher is used, never in the
    # workers, which import this package to find BaseWorker.
    if name == "Dispatcher":
        from .dispatcher import Dispatcher

        return Dispatcher
    if name == "stack":
        from ._worker import stack

        return stack
    if name == "Stage":
        from ._stages import Stage

        return Stage
    if name == "RichDispatcher":
        from .ui import RichDispatcher

        return RichDispatcher
    raise AttributeError(f"module 'gpud' has no attribute {name!r}")


__all__ = [
    "BaseWorker",
    "Dispatcher",
    "RichDispatcher",
    "Stage",
    "stack",
    "WorkerFatal",
    "TaskRejected",
    "TaskTimeout",
    "fatal",
    "reject",
    "JobError",
    "RunAborted",
    "MemoryWarning",
]
