# SPDX-License-Identifier: MIT
"""gpud.Dispatcher: the gpu_dispatch library's Dispatcher on libgpud, in this process."""
from __future__ import annotations

from array import array
import base64
import os
from itertools import islice as _islice
import pickle
from pickle import dumps as _dumps, loads as _loads
import signal
import sys
from time import perf_counter as _clock, sleep as _sleep
from typing import Any, Callable, Dict, Iterable, Optional, Sequence, Union

# The public signatures' types (docs/python.md, "Types").
WorkerClass = Union[type, str, "os.PathLike[str]"]
"""A worker class (setup() and process()), or a C worker plugin's name or path."""
GpuIds = Union[Sequence[int], str]
"""GPU ids, or "all" / "auto"."""
OnSuccess = Callable[[int, Any, int], object]
"""on_success(task_id, result, worker_id)."""
OnError = Callable[[int, str, int], object]
"""on_error(task_id, error, worker_id)."""
OnTimeout = Callable[[int, float, int], object]
"""on_timeout(task_id, timeout, worker_id)."""
OnSetupFail = Callable[[int, str], object]
"""on_setup_fail(gpu_id, error)."""
OnTaskStart = Callable[[int, int], object]
"""on_task_start(task_id, worker_id)."""
OnResume = Callable[[], Iterable[Union[int, "tuple[int, str]"]]]
"""on_resume(): the ids the program holds results of (or (id, outcome) pairs)."""
Stats = Dict[str, Any]
"""run()'s result: the stats dict."""

from . import JobError, RunAborted
from . import _stages
from ._constants import (CODEC_PARTS, CODEC_PICKLE, CODEC_RAW, FRAME_MAGIC, RUN_FORCE,
                         RUN_RESUME, RUN_RETRY_FAILED, UI_MODES)

_WORKER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_worker.py")

# Dispatcher keyword -> gpud job key (values written as gpud reads them).
_OPTION_KEYS = {
    "workers_per_gpu": "job.workers_per_gpu",
    "gpus_per_worker": "job.gpus_per_worker",
    "retries": "job.max_retries",
    "max_retries": "job.max_retries",
    "retry_on": "job.retry_on",
    "batch_size": "job.batch_size",
    "batch_wait_ms": "job.batch_wait_ms",
    "setup_timeout": "job.setup_timeout",
    "cleanup_timeout": "job.cleanup_timeout",
    "timeout_grace": "job.timeout_grace",
    "drain_timeout": "job.drain_timeout",
    "sink_timeout": "job.sink_timeout",
    "max_task_bytes": "job.max_task_bytes",
    "max_result_bytes": "job.max_result_bytes",
    "max_worker_restarts": "job.max_worker_restarts",
    "ordered": "job.ordered",
    "log_dir": "job.log_dir",
    "pin_memory": "job.pin_memory",
    "rank": "job.rank",
    "ranks": "job.ranks",
    "metrics_listen": "ui.metrics_listen",
    "metrics_file": "ui.metrics_file",
    "refresh_rate": "ui.refresh_rate",
}


class StopScript(BaseException):
    """Raised by Dispatcher.run() in a worker process, where the calling program's
    script is loaded to find its classes: the script stops there (gpud._worker)."""


def _value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return str(v)


def _check_callbacks(o, on_success, on_error, on_timeout, on_setup_fail, on_task_start,
                     on_exit, on_resume=None):
    """TypeError for a callback that is not one, or no on_success and no sink."""
    if on_success is None:
        keys = o.get("keys") or {}
        if not (o.get("sink") or o.get("job") or "sink.plugin" in keys):
            raise TypeError("Dispatcher.run(): on_success is required (a callable "
                            "taking task_id, result, worker_id); for gpud's own output "
                            "name a sink plugin: sink={\"plugin\": \"jsonl\", ...}")
    for name, fn in (("on_success", on_success), ("on_error", on_error),
                     ("on_timeout", on_timeout), ("on_setup_fail", on_setup_fail),
                     ("on_task_start", on_task_start), ("on_exit", on_exit),
                     ("on_resume", on_resume)):
        if fn is not None and not callable(fn):
            raise TypeError(f"Dispatcher.run(): {name}={fn!r} is not callable")


def _check_methods(cls):
    """TypeError naming what a worker class lacks, before anything starts."""
    name = cls.__qualname__
    missing = []
    if not callable(getattr(cls, "setup", None)):
        missing.append("setup(self, gpu_id, seed, **kwargs)")
    if not (callable(getattr(cls, "process", None))
            or callable(getattr(cls, "process_batch", None))):
        missing.append("process(self, data) (or process_batch(self, items))")
    if missing:
        raise TypeError(f"Dispatcher: the worker class {name} has no {' and no '.join(missing)}; "
                        "a worker class defines both (gpud.BaseWorker's subclasses do)")
    import inspect

    for method in ("process", "process_batch"):
        if inspect.iscoroutinefunction(getattr(cls, method, None)):
            raise TypeError(f"Dispatcher: {name}.{method}() is an async def, which the "
                            "Dispatcher would call without awaiting it: make it a plain "
                            "def, or run the class from a job file's python worker with "
                            "[job] max_in_flight (README, Python plugins)")
    abstract = sorted(getattr(cls, "__abstractmethods__", None) or ())
    if abstract:
        raise TypeError(f"Dispatcher: the worker class {name} does not define "
                        f"{', '.join(m + '()' for m in abstract)} (abstract in "
                        f"{'gpud.BaseWorker' if set(abstract) <= {'setup', 'process'} else 'its bases'}), "
                        "so it cannot be instantiated")
    base = getattr(getattr(cls, "process", None), "__qualname__", "") == "BaseWorker.process"
    if base and not callable(getattr(cls, "process_batch", None)):
        raise TypeError(f"Dispatcher: the worker class {name} defines neither process(data) "
                        "nor process_batch(items)")


def _is_main_guard(test):
    """Whether an `if` tests `__name__ == "__main__"` (either way round)."""
    import ast

    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return (any(isinstance(x, ast.Name) and x.id == "__name__" for x in sides)
            and any(isinstance(x, ast.Constant) and x.value == "__main__" for x in sides))


def _only_in_main_block(path, name):
    """Whether the script binds `name` only inside its `if __name__ == "__main__":`
    blocks, which the workers do not run. False when the script cannot be read or
    parsed, or when it binds the name elsewhere at its top level (or in a way this
    does not see): the workers then say what they find."""
    import ast

    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return False
    top, guarded = set(), set()

    def bound(stmts, into):
        for st in stmts:
            if isinstance(st, ast.If) and _is_main_guard(st.test):
                bound(st.body, guarded)
                bound(st.orelse, into)
                continue
            for node in ast.walk(st):
                if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    into.add(node.name)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    into.add(node.id)
                elif isinstance(node, ast.alias):
                    into.add((node.asname or node.name).split(".")[0])
                elif isinstance(node, (ast.Global, ast.Nonlocal)):
                    into.update(node.names)

    bound(tree.body, top)
    return name in guarded and name not in top


def _main_file():
    main = sys.modules.get("__main__")
    f = getattr(main, "__file__", None)
    return os.path.abspath(f) if f else None


class Dispatcher:
    """Dispatcher(worker_cls, gpu_ids, queue_size=1024, **options)

    worker_cls: a BaseWorker subclass (any class with setup() and process()), found in
    the workers by its module and name; or a str naming a C worker plugin (a built-in
    name or a path to a .so), which then gets bytes (str items as UTF-8) and returns
    bytes. gpu_ids: a list of GPU ids, or "all" / "auto" as gpud's [job] gpus.
    queue_size: tasks in flight at most (backpressure on the generator).

    Options (gpud's job keys, all optional): workers_per_gpu, gpus_per_worker, retries (max_retries),
    retry_on, batch_size, batch_wait_ms, setup_timeout, cleanup_timeout, timeout_grace,
    drain_timeout, sink_timeout, max_task_bytes, max_result_bytes,
    max_worker_restarts, ordered, log_dir, pin_memory, rank, ranks, metrics_listen,
    metrics_file, refresh_rate; journal (a path, or True for "<script>.journal" in the
    current folder), resume=True, retry_failed=True, force=True; python (the
    workers' interpreter: this one by default); ui ("off", "plain", "dashboard");
    stats_json (a path); stages (a list of CPU stages in front of the worker:
    gpud.Stage(Class or "plugin", **keys), or dicts {"plugin": "jpeg", ...} /
    {"class": Decode, ...}; each item goes through them in turn, the last one's result
    is the worker's input; docs/python.md); job (a job file the options apply on top of); keys (a dict
    {"section.key": value} of any other key); generator / sink (a dict of a built-in
    or .so generator / sink plugin's keys, with "plugin"); prefetch (items read ahead
    from the generator at most, 256, and never more than queue_size); chunksize (items per gpud task: None, the
    default, measures it (automatic chunks: several fast items to a task, each item
    still its own task id, callbacks, error and count; one item a task with a journal
    or ranks); K fixes it, as multiprocessing.Pool's chunksize; 1: one item a task).
    """

    stats: Optional[Stats]

    def __init__(self, worker_cls: WorkerClass, gpu_ids: GpuIds, queue_size: int = 1024,
                 **options: Any) -> None:
        self.worker_cls = worker_cls
        self.gpu_ids = gpu_ids
        self.queue_size = queue_size
        self.options = dict(options)
        known = set(_OPTION_KEYS) | {
            "journal", "resume", "retry_failed", "force", "python", "ui", "stats_json",
            "job", "keys", "generator", "sink", "prefetch", "tty", "chunksize", "stages",
        }
        unknown = sorted(set(self.options) - known)
        if unknown:
            raise TypeError(
                f"Dispatcher(): unknown option {unknown[0]!r} (known: {', '.join(sorted(known))})")
        self._stages = _stages.parse(self.options.get("stages"))
        self.stats = None

    # ---- the job's keys ----

    def _keys(self, base_seed, task_timeout, setup_kwargs, python_items=True, chunked=False):
        o = self.options
        keys = []
        g = self.gpu_ids
        keys.append(("job.gpus", g if isinstance(g, str) else ",".join(str(int(x)) for x in g)))
        keys.append(("job.queue_size", str(int(self.queue_size))))
        keys.append(("job.base_seed", str(int(base_seed))))
        if task_timeout is not None:
            keys.append(("job.task_timeout", _value(task_timeout)))
        for name, key in _OPTION_KEYS.items():
            # A chunk is a batch of items already: the worker cuts it into calls of
            # batch_size items; gpud hands out one chunk at a time.
            if chunked and name == "batch_size":
                continue
            if o.get(name) is not None:
                keys.append((key, _value(o[name])))
        journal = o.get("journal")
        if journal is None and (o.get("resume") or o.get("retry_failed")):
            journal = True
        if journal is True:
            main = _main_file()
            stem = os.path.splitext(os.path.basename(main))[0] if main else "gpud"
            journal = os.path.abspath(f"{stem}.journal")
        if journal is not None and journal is not False:
            keys.append(("job.journal", os.fspath(journal)))
        cls = self.worker_cls
        if isinstance(cls, (str, os.PathLike)):
            keys.append(("worker.plugin", os.fspath(cls)))
            for k, v in setup_kwargs.items():
                keys.append((f"worker.{k}", _value(v)))
            codec = CODEC_RAW
        else:
            keys.append(("job.python", o.get("python") or sys.executable))
            keys.append(("worker.plugin", "python"))
            keys.append(("worker.script", _WORKER_SCRIPT))
            # Named after the user's class (gpud._worker answers any name with its
            # Worker): the plugin's messages then say "Embedder.setup() failed: ...".
            keys.append(("worker.class", getattr(cls, "__name__", "Worker")))
            keys.append(("worker.result", "bytes"))  # gpud._worker pickles the results itself
            keys.extend(self._worker_keys(cls, base_seed, setup_kwargs))
            # A generator plugin's items are its bytes, this program's are pickled.
            keys.append(("worker.gpud_input", "pickle" if python_items else "bytes"))
            if self._sink_plugin():
                # A sink plugin takes the results' own bytes (an array's data), not
                # their pickles.
                keys.append(("worker.gpud_output", "raw"))
            codec = CODEC_PICKLE
            if chunked:
                # Each task is a pickled list of items, pickled here (_Chunks), and its
                # result a pickled (results, errors, seconds), unpickled there: gpud
                # carries both as bytes.
                keys.append(("worker.gpud_chunked", "1"))
                keys.append(("worker.gpud_batch", str(int(o.get("batch_size") or 1))))
                keys.append(("worker.gpud_retries", str(self._item_retries())))
                keys.append(("worker.gpud_result_max",
                             str(_size(o.get("max_result_bytes"), 1 << 20))))
                codec = CODEC_PARTS  # the chunks come framed already (gpud._worker.frame)
        if self._stages:
            keys, codec = self._stage_keys(keys, base_seed, python_items)
        elif o.get("python") and isinstance(cls, (str, os.PathLike)):
            keys.append(("job.python", o["python"]))  # a Python class's is set above
        for section in ("generator", "sink"):
            for k, v in (o.get(section) or {}).items():
                keys.append((f"{section}.{k}", _value(v)))
        for k, v in (o.get("keys") or {}).items():
            if str(k).startswith("stage.") and not isinstance(cls, (str, os.PathLike)):
                # A stage given as keys: the class would get a pickled item, which a
                # stage's result is not; stages= says what each one gives.
                raise JobError(
                    f"keys={{{k!r}: ...}}: CPU stages in front of a Python worker class "
                    "are given as stages=[gpud.Stage(...)] (a Python class, or a C worker "
                    "plugin such as gpud.Stage(\"jpeg\", height=64, width=64)), which says "
                    "what each stage's results are")
            keys.append((k, _value(v)))
        return keys, codec

    def _stage_keys(self, keys, base_seed, python_items):
        """keys with the stages' sections added (gpud._stages), the worker told what
        the last stage gives it; and the codec."""
        cls, stages = self.worker_cls, self._stages
        worker_python = not isinstance(cls, (str, os.PathLike))
        items_pickled = python_items and stages[0].python
        more, given = _stages.keys(
            stages, lambda c, kw: self._worker_keys(c, base_seed, kw), _WORKER_SCRIPT,
            _value, "pickle" if items_pickled else "bytes", worker_python)
        keys = [(k, given) if k == "worker.gpud_input" else (k, v) for k, v in keys]
        if not worker_python and any(st.python for st in stages):
            keys.append(("job.python", self.options.get("python") or sys.executable))
        elif not worker_python and self.options.get("python"):
            keys.append(("job.python", self.options["python"]))
        return keys + more, _stages.codec(items_pickled, worker_python)

    def _sink_plugin(self):
        """Whether a sink plugin, not the callbacks, takes the results."""
        o = self.options
        return bool((o.get("sink") or {}).get("plugin") or "sink.plugin" in (o.get("keys") or {}))

    def _item_retries(self):
        """How often a worker runs an item of a chunk again when process() raised
        (max_retries when retry_on has "error", as gpud retries a failed task)."""
        o = self.options
        n = o.get("retries", o.get("max_retries"))
        if not n:
            return 0
        retry_on = o.get("retry_on")
        if retry_on is not None:
            kinds = retry_on if isinstance(retry_on, (list, tuple)) else str(retry_on).split(",")
            if "error" not in [str(x).strip() for x in kinds]:
                return 0
        return int(n)

    @staticmethod
    def _worker_keys(cls, base_seed, setup_kwargs):
        if not isinstance(cls, type):
            raise TypeError(f"Dispatcher: worker_cls must be a class or a plugin name, not {cls!r}")
        module, qualname = cls.__module__, cls.__qualname__
        _check_methods(cls)
        if "<locals>" in qualname:
            raise JobError(
                f"Dispatcher: the worker class {qualname} is defined inside a function; the "
                "workers find it by module and name: define it at a module's top level")
        main = ""
        if module == "__main__":
            main = _main_file()
            if not main:
                raise JobError(
                    f"Dispatcher: the worker class {qualname} is defined in an interactive "
                    "session; the workers cannot find it: define it in a script or a module")
            if _only_in_main_block(main, qualname.split(".")[0]):
                raise JobError(
                    f"Dispatcher: the worker class {qualname} is defined inside the "
                    f"script's `if __name__ == \"__main__\":` block ({main}); the workers "
                    "import the script as a module, without running that block: define "
                    "the class at the top level of the script")
        path = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
        try:
            setup = base64.b64encode(pickle.dumps(setup_kwargs, 5)).decode("ascii")
        except Exception as e:
            raise JobError(f"Dispatcher.run(): the keywords for setup() cannot be pickled: {e}") from e
        return [
            ("worker.gpud_target", f"{module}:{qualname}"),
            ("worker.gpud_main", main),
            ("worker.gpud_path", os.pathsep.join(path)),
            ("worker.gpud_setup", setup),
            ("worker.gpud_seed", str(int(base_seed))),
            # The program's arguments, as multiprocessing's spawn gives its children.
            ("worker.gpud_argv", base64.b64encode(pickle.dumps(list(sys.argv))).decode("ascii")),
        ]

    # ---- the run ----

    def run(self, generator: Optional[Iterable[Any]], on_success: Optional[OnSuccess],
            on_error: Optional[OnError] = None, on_timeout: Optional[OnTimeout] = None,
            on_setup_fail: Optional[OnSetupFail] = None,
            on_task_start: Optional[OnTaskStart] = None,
            on_exit: Optional[Callable[[], object]] = None, base_seed: int = 42,
            task_timeout: Optional[float] = None, on_resume: Optional[OnResume] = None,
            **setup_kwargs: Any) -> Stats:
        """Runs every item of `generator` (any iterable; None: the `generator` option's
        plugin) through the workers and blocks until it is exhausted and the workers
        are cleaned up. Callbacks, in the calling thread: on_success(task_id, result,
        worker_id), on_error(task_id, error, worker_id), on_timeout(task_id, timeout,
        worker_id), on_setup_fail(gpu_id, error), on_task_start(task_id, worker_id),
        on_exit() (always, once). worker_id is the GPU id the task ran on. setup_kwargs
        reach worker.setup(). Returns the stats (a dict).

        on_resume(): with resume=True, called before anything runs; returns the ids of
        the tasks whose results the program already holds (ints for successes, or
        (id, "ok" | "error" | "timeout") pairs), read back from its own output. Those
        are not run again and every other task is, so each result reaches on_success
        exactly once across runs, even after the program was killed (kill -9).

        Raises RuntimeError("All workers failed during setup ...") when no worker
        could be set up; KeyboardInterrupt after a Ctrl-C (the run drained; with a
        journal, resume=True finishes it); the exception a callback raised (no
        callback is called again, the run stops) or the generator raised (what it
        yielded before ran); JobError when the job cannot start."""
        import gpud

        if getattr(gpud, "_in_worker", False):
            raise StopScript()
        from . import _gpud, _worker

        try:
            _check_callbacks(self.options, on_success, on_error, on_timeout, on_setup_fail,
                             on_task_start, on_exit, on_resume)
            outcome = self._run(_gpud, _worker, generator,
                                dict(on_success=on_success, on_error=on_error,
                                     on_timeout=on_timeout, on_setup_fail=on_setup_fail,
                                     on_task_start=on_task_start, on_resume=on_resume),
                                base_seed, task_timeout, setup_kwargs)
        finally:
            if on_exit is not None:
                on_exit()
        return outcome()

    def _chunking(self, generator):
        """The items a gpud task holds: K (chunksize=K), None (automatic), or 1."""
        o = self.options
        k = o.get("chunksize")
        python_pair = not isinstance(self.worker_cls, (str, os.PathLike)) and generator is not None
        if self._stages or self._sink_plugin():
            # A stage's task is one item (what it gives is the next's input), and a
            # sink plugin takes one result a task.
            if k is not None and int(k) > 1:
                raise JobError(f"Dispatcher: chunksize={k} with stages or a sink plugin: "
                               "each item is a task of its own (chunksize=1)")
            return 1
        if k is not None:
            k = int(k)
            if k < 1:
                raise JobError(f"Dispatcher: chunksize={k}: expected 1 or more, or None "
                               "(automatic)")
            if k > 1 and not python_pair:
                raise JobError("Dispatcher: chunksize needs a Python worker class and this "
                               "program's generator")
            return k
        # Automatic: not where a task must stand for the same items in another run
        # (a journal's records, a rank's share of the ids) or where gpud cannot see
        # the items (a C worker, a generator plugin).
        if not python_pair or self._tied():
            return 1
        return None

    def _tied(self):
        """Whether a task must stand for the same items in every run: a journal's
        records, a rank's share of the ids (or a job file, which may name either)."""
        o = self.options
        if any(o.get(x) for x in ("journal", "resume", "retry_failed", "rank", "ranks")):
            return True
        keys = o.get("keys") or {}
        return any(k in keys for k in ("job.journal", "job.rank", "job.ranks")) or bool(o.get("job"))

    def _size_chunks(self, chunk):
        """The task limits a chunk of batch_size items (or chunksize) needs, from the
        first item's size: the keys raising max_task_bytes and max_result_bytes where
        the program did not set them; JobError in one line where it set one too small."""
        want = chunk.fixed or chunk.batch
        if want <= 1:
            return []
        per = chunk.first_item_bytes()
        if per is None:
            return []
        need = want * per
        o = self.options
        keys = o.get("keys") or {}
        given = o.get("max_task_bytes", keys.get("job.max_task_bytes"))
        name = f"chunksize={chunk.fixed}" if chunk.fixed else f"batch_size={chunk.batch}"
        if given is not None:
            if need > _size(given, 1 << 20):
                raise JobError(
                    f"Dispatcher: {name} with items of {per} bytes (the first "
                    f"item, framed) needs tasks of {need} bytes, over max_task_bytes={given}: "
                    f"raise max_task_bytes to {_round_size(need)} or more, or leave it unset "
                    "(gpud then sizes it)")
            return []
        limit = max(1 << 20, need + need // 4 + (64 << 10))
        if limit > _MAX_BYTES:
            raise JobError(
                f"Dispatcher: {name} with items of {per} bytes (the first "
                f"item, framed) needs tasks of {need} bytes, over gpud's largest task (1G): lower "
                "batch_size")
        text = _round_size(limit)
        limit = _size(text, limit)
        chunk.max_task = limit
        chunk.whole = True
        out = [("job.max_task_bytes", text)]
        if o.get("max_result_bytes", keys.get("job.max_result_bytes")) is None:
            # A batch's results come back as one task's result: room for results as
            # large as the items.
            chunk.max_result = limit
            out.append(("job.max_result_bytes", text))
        return out

    def _run(self, _gpud, _worker, generator, callbacks, base_seed, task_timeout, setup_kwargs):
        """Runs the job; returns a function that gives run()'s result or raises its
        exception, called after on_exit."""
        o = self.options
        chunk = None
        k = self._chunking(generator)
        if callbacks.get("on_resume") is not None and k != 1:
            raise JobError("Dispatcher.run(): on_resume names tasks by their ids, which are "
                           "the items' only with one item a task: chunksize=1 (or a journal, "
                           "which chooses it), not chunksize="
                           f"{k if k else 'None (automatic)'}")
        if k != 1:
            budget = _CHUNK_SECONDS
            if task_timeout:
                budget = min(budget, float(task_timeout) / 50)
            chunk = _Chunks(generator, k, callbacks, budget, int(o.get("batch_size") or 1),
                            _size(o.get("max_task_bytes"), 1 << 20),
                            _size(o.get("max_result_bytes"), 1 << 20), _worker.loads_framed,
                            _worker.frame, _worker.frame_size, not self._tied())
            generator, callbacks = chunk, chunk.callbacks()
            if o.get("batch_wait_ms") and chunk.batch > 1:
                chunk.wait = float(o["batch_wait_ms"]) / 1000
            sized = self._size_chunks(chunk)
        keys, codec = self._keys(base_seed, task_timeout, setup_kwargs, generator is not None,
                                 chunk is not None)
        if chunk is not None and sized:
            # The workers' limit for a chunk's results is the one sized for it.
            keys = [(k, str(chunk.max_result)) if k == "worker.gpud_result_max" else (k, v)
                    for k, v in keys]
            keys.extend(sized)
        total = -1
        if generator is not None:
            try:
                total = len(generator)
            except TypeError:
                pass
        prefetch = int(o.get("prefetch", 256 if chunk is None else max(2, 256 // (k or 64))))
        # The read-ahead is tasks in flight too: queue_size bounds it, as the library's
        # feeder blocks at queue_size items.
        prefetch = max(1, min(prefetch, int(self.queue_size)))
        ui = o.get("ui", "off")
        if ui not in UI_MODES:
            raise JobError(f"Dispatcher: ui={ui!r}: expected one of {', '.join(UI_MODES)}")
        flags = ((RUN_RESUME if o.get("resume") else 0)
                 | (RUN_RETRY_FAILED if o.get("retry_failed") else 0)
                 | (RUN_FORCE if o.get("force") else 0))
        # Results whose classes the script defines name __mp_main__ when a worker
        # pickled them (it loaded the script under that name): the same module here.
        main = sys.modules.get("__main__")
        if main is not None:
            sys.modules.setdefault("__mp_main__", main)
        try:
            r = _gpud.run(
                job_file=os.fspath(o["job"]) if o.get("job") else None, keys=keys,
                iterable=generator, total=total, codec=codec, callbacks=callbacks,
                prefetch=prefetch, ui=UI_MODES[ui], flags=flags, tty=o.get("tty"),
                stats_json=os.fspath(o["stats_json"]) if o.get("stats_json") else None,
                helpers=(pickle.loads, _worker.frame_one, _worker.loads_framed))
        except ValueError as e:  # a key refused by libgpud, named with its place
            raise JobError(str(e)) from None
        status, error, sig, exc = r.status, r.error, r.signal, r.exception
        setup_failed, first = r.setup_failed, r.first_setup_error
        self.stats = stats = _stats(r.stats_json, status)
        if chunk is not None:
            chunk.fix_stats(stats)

        def outcome():
            if exc is not None:
                raise exc
            if sig == signal.SIGINT:
                raise KeyboardInterrupt
            if sig:
                signal.raise_signal(sig)  # the program's own handling of SIGTERM, SIGHUP
            if status == -1:
                raise RuntimeError(error)
            if status == 2:
                raise JobError(error or "gpud refused the job (its message is above, on "
                               "standard error)")
            if status == 3:
                if setup_failed and stats.get("ok", 0) == 0 and "set up" in error:
                    # A traceback's last line says what went wrong.
                    lines = (first or "").strip().splitlines()
                    raise RuntimeError(
                        f"All workers failed during setup ({setup_failed} setup failures; "
                        f"the first: {lines[-1] if lines else first})")
                lines = (first or "").strip().splitlines()
                if setup_failed and lines and "stage" in error:
                    # A stage whose workers all failed their setup: why, as for the
                    # GPU workers above.
                    raise RunAborted(f"{error} ({setup_failed} setup failures; the first: "
                                     f"{lines[-1]})")
                raise RunAborted(error)
            return stats

        return outcome


# Automatic chunking: a chunk is cut to take about this long in a worker (less with a
# task_timeout: a fiftieth of it), and holds at most _CHUNK_MAX items.
_CHUNK_SECONDS = 0.002
_CHUNK_MAX = 1024


_BATCH_WAIT = 0.01
_MAX_BYTES = 1 << 30  # gpud's largest max_task_bytes


def _run_delay():
    """Seconds the calling thread has spent runnable but waiting for a CPU (the
    kernel's schedstat), or None where that cannot be read."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _round_size(n):
    """n rounded up to whole MiB (K under 1 MiB)."""
    if n >= 1 << 20:
        return f"{-(-n // (1 << 20))}M"
    return f"{-(-n // 1024)}K"


def _size(v, default):
    """A byte count as gpud reads one (4096, "64K", "1M", "1G")."""
    if v is None:
        return default
    if isinstance(v, int):
        return v
    t = str(v).strip().upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        return int(float(t[:-1] if mult > 1 else t) * mult)
    except ValueError:
        return default


class _Chunks:
    """Several of the program's items to a gpud task, each item still its own task for
    the callbacks and the stats.

    k: a fixed chunksize (every chunk full but the last, so that a resume's skip of c
    tasks is c*k items), or None: automatic. Then a chunk starts at one item (at
    `batch` items with batch_size) and grows (at most doubling from one result to the
    next) while the workers report that its items take little time, up to `budget`
    seconds of process() a chunk, _CHUNK_MAX items, half of max_task_bytes (by the
    largest item seen) and a quarter of max_result_bytes of results; it shrinks at once
    when items turn slow. With batch_size a chunk is a whole number of batches, and
    max_task_bytes was sized for one (Dispatcher._size_chunks, which may set `whole`:
    a chunk may then fill all of max_task_bytes), so process_batch() gets full batches.
    A chunk also ends when the program's iterator takes over a millisecond for its
    items, or with batch_size when it pauses (a live source's items are not held back).

    Chunk c (the gpud task id) holds items starts[c] to starts[c + 1] - 1. A task is
    its items framed (gpud._worker.frame: their data out of band, written into the ring
    by gpud._gpud straight from the items); its result is the pickled (results,
    {index: error text}, seconds in process()), unpickled here in one call and given
    to the callbacks item by item.

    Each item its own outcome (reissue: where no journal or rank ties a task to its
    items): a chunk of several items that fails as a whole (its worker died running
    it, retries or not, or it ended its worker) is not its items' outcome: each of them
    runs again as a chunk of its own (`again`, task `single[c]`), so that only an item
    that kills its worker alone is called a poison task, with its own retries; so does
    an item whose result fitted alone but not beside the others' (None in errors).
    Until every chunk of several items has its outcome, the end of the iterable is not
    the end of the tasks: empty chunks (`fillers`, 0.3 ms apart) keep the run asking."""

    def __init__(self, iterable, k, callbacks, budget, batch, max_task, max_result,
                 loads_framed, frame, frame_size, reissue=True):
        self.it = iter(iterable)
        self.fixed = k
        # With batch_size, the first chunk is a full batch already.
        self.k = k or max(1, batch)
        self.cb = callbacks
        self.budget = budget
        self.batch = batch
        self.max_task = max_task
        self.max_result = max_result
        self.loads_framed = loads_framed
        self.frame, self.frame_size = frame, frame_size
        # How long a chunk waits for the iterator's items: a millisecond, or with
        # batch_size while they come at least one per _BATCH_WAIT (batch_wait_ms when
        # set), to fill a batch.
        self.wait = 1e-3 if batch <= 1 else _BATCH_WAIT
        self.whole = False  # max_task_bytes sized for a batch: a chunk may fill all of it
        self.per_item = 0  # the largest bytes an item took in a chunk so far
        self.warned = False  # a batch cut short by its bytes was said
        self.starts = array("q")  # chunk -> its first item
        self.items = 0  # read from the program's iterable so far
        self.carry = []  # items read but left for the next chunk (a chunk too large)
        self.ended = False
        self.raised = None  # the iterator's exception, raised at the next call
        self._partial = []
        self.largest = 1  # the largest chunk sent
        self.per_gpu = {}  # gpu -> [completed, failed, timeouts]
        self.reissue = reissue
        self.sent = {}  # chunk of several items -> its items, until its outcome
        self.again = []  # (item id, item) to run again alone
        self.single = {}  # chunk -> the item id it runs again
        self.fillers = 0
        self.waits = 0  # empty chunks in a row (each waits 0.3 ms, after 200 longer)
        self.total = None
        if k:
            try:
                self.total = (len(iterable) + k - 1) // k
            except TypeError:
                pass

    def first_item_bytes(self):
        """The first item's bytes as a chunk carries it (read now and kept for the
        first chunk); None when there is none or it cannot be read or pickled (the
        first chunk then says so)."""
        try:
            self.carry = self._read(1)
        except BaseException as e:
            self.carry, self.ended = self._partial, True
            self.raised = e
            return None
        if not self.carry:
            return None
        try:
            return self.frame_size(self.frame(self.carry, True))
        except BaseException:
            return None

    def _limit(self):
        """The most bytes a chunk of several items may take."""
        return self.max_task if self.whole else self.max_task // 2

    def __len__(self):
        if self.total is None:
            raise TypeError("no length")
        return self.total

    def __iter__(self):
        return self

    def _read(self, k):
        chunk, self.carry = self.carry[:k], self.carry[k:]
        self._partial = chunk  # what was read when the iterator raises
        if self.ended:  # an iterator is not asked again once it has ended
            return chunk
        it = self.it
        if self.fixed:
            want = k - len(chunk)
            chunk.extend(_islice(it, want))
            self.ended = len(chunk) < k
            return chunk
        # Blocks of 1, 2, 4 ... 64 items, the clock read between them.
        t0 = _clock()
        waited = _run_delay() if self.batch > 1 else None
        block = 1
        while len(chunk) < k:
            want = min(block, k - len(chunk))
            n = len(chunk)
            t1 = _clock()
            chunk.extend(_islice(it, want))
            if len(chunk) - n < want:
                self.ended = True
                break
            t2 = _clock()
            # A live source's items are not held back: a chunk ends after a
            # millisecond, or with batch_size when the source pauses (its items came
            # slower than one per `wait` seconds).
            # Time this thread spent waiting for a CPU (a loaded machine) is not the
            # source pausing: it is taken off (at most all of it since the chunk began).
            if (t2 - t1 > self.wait * want) if self.batch > 1 else (t2 - t0 > self.wait):
                now = _run_delay() if waited is not None else None
                if now is None or t2 - t1 - (now - waited) > self.wait * want:
                    break
            block = min(block * 2, 64)
        return chunk

    def _single(self):
        """The next item to run again, as a chunk of its own."""
        i, item = self.again.pop()
        self.waits = 0
        self.single[len(self.starts)] = i
        self.starts.append(self.items)  # no items of the stream
        return self.frame([item], True)

    def _end(self):
        """No more items from the iterable: an empty chunk while chunks of several
        items may still give theirs back, then the iterator's exception or the end."""
        if self.sent:
            # Their outcomes come meanwhile (the stand-in keeps them for the next call).
            # Short (below the 0.5 ms after which libgpud's stand-in takes the loop
            # over), so that this thread keeps taking the results in; longer after
            # many in a row (workers being replaced), up to 50 ms.
            _sleep(min(0.0003 * 2 ** max(0, self.waits - 200), 0.05))
            self.waits = min(self.waits + 1, 210)
            self.fillers += 1
            self.starts.append(self.items)
            return _dumps([], 5)
        if self.raised is not None:  # after the items before it went
            e, self.raised = self.raised, None
            raise e
        raise StopIteration

    def __next__(self):
        if self.again:
            return self._single()
        if self.raised is not None:
            return self._end()
        try:
            chunk = self._read(self.k)
        except BaseException as e:  # the iterator raised: what it gave before goes first
            chunk, self.ended = self._partial, True
            self.raised = e
        if not chunk:
            return self._end()
        frame = self.frame
        try:
            parts = frame(chunk, True)
        except BaseException as e:  # an item that cannot be pickled: those before it go
            good = 0
            for x in chunk:
                try:
                    _dumps(x, 5)
                except BaseException:
                    break
                good += 1
            self.ended = True
            self.raised = e
            if not good:
                return self._end()
            del chunk[good:]
            parts = frame(chunk, True)
        size = self.frame_size(parts)
        per = -(-size // len(chunk))
        if per > self.per_item:
            self.per_item = per
        # Past the limit (items larger than those before): the tail waits for the next
        # chunk, cut once by the items' sizes; one item too large fails alone, as a
        # task does. The next chunks are sized by the largest item seen, so the cut is
        # not done again (not below batch_size: the limit was sized for full batches).
        limit = self._limit()
        if size > limit and len(chunk) > 1 and not self.fixed:
            keep = max(1, min(len(chunk) - 1, int(limit * 0.9) // per))
            if keep > self.batch:  # whole batches
                keep -= keep % self.batch
            self.carry[:0] = chunk[keep:]
            del chunk[keep:]
            parts = frame(chunk, True)
            fits, b = self._fits(), self.batch
            self.k = max(b, fits - fits % b)
            if b > 1 and keep < b and not self.warned:  # said once, not silently
                self.warned = True
                print(f"gpud: batch_size={b}: items of about {per} bytes (larger than the "
                      f"first) pass max_task_bytes ({self.max_task} bytes) at {keep} items: "
                      "process_batch() gets fewer; raise max_task_bytes", file=sys.stderr,
                      flush=True)
        if self.reissue and len(chunk) > 1:
            self.sent[len(self.starts)] = chunk  # its items, to run again one by one
        self.starts.append(self.items)
        self.items += len(chunk)
        if len(chunk) > self.largest:
            self.largest = len(chunk)
        return parts

    def _fits(self):
        """The most items a chunk holds by bytes (the largest item seen so far)."""
        return max(1, int(self._limit() * 0.9) // self.per_item) if self.per_item else _CHUNK_MAX

    def ids(self, task_id):
        if self.single:
            i = self.single.get(task_id)
            if i is not None:
                return range(i, i + 1)
        s = self.starts
        return range(s[task_id], s[task_id + 1] if task_id + 1 < len(s) else self.items)

    def count(self, gpu, slot, n):
        v = self.per_gpu.get(gpu)
        if v is None:
            v = self.per_gpu[gpu] = [0, 0, 0]
        v[slot] += n

    def _run_again(self, task_id, only=None):
        """Chunk task_id's items (those in `only`, else all) run again, each alone."""
        data = self.sent.get(task_id)
        if data is None:
            return False
        ids = self.ids(task_id)
        items = data
        self.again.extend(reversed([(i, x) for j, (i, x) in enumerate(zip(ids, items))
                                    if only is None or j in only]))
        return True

    def _adapt(self, n, seconds, size):
        """The next chunks' size from a result: n items took `seconds` in process()."""
        if not n:
            return  # an empty chunk
        per = seconds / n if n else 0.0
        target = self.budget / per if per > 0 else _CHUNK_MAX
        if size > self.max_result // 4:
            target = min(target, n * (self.max_result // 4) / size)
        k = self.k
        k = int(min(target, 2 * k, _CHUNK_MAX, self._fits()) if target > k else target)
        # With batch_size, process_batch() gets full batches: a chunk holds a whole
        # number of them (max_task_bytes was sized for one: _size_chunks).
        b = self.batch
        self.k = max(1, b if k < b else k - k % b)

    def callbacks(self):
        cb = self.cb
        on_success, on_error = cb["on_success"], cb["on_error"]
        on_timeout, on_start = cb["on_timeout"], cb["on_task_start"]
        loads, loads_framed, adaptive = _loads, self.loads_framed, not self.fixed

        def success(task_id, payload, gpu):
            if payload[:4] == FRAME_MAGIC:
                results, errors, seconds = loads_framed(bytearray(payload))
            else:
                results, errors, seconds = loads(payload)
            ids = self.ids(task_id)
            if adaptive:
                self._adapt(len(ids), seconds, len(payload))
            if not errors:
                self.sent.pop(task_id, None)
                self.count(gpu, 0, len(results))
                for i, r in zip(ids, results):
                    on_success(i, r, gpu)
                return
            # Items whose results did not fit beside the others' run again alone.
            later = [j for j, e in errors.items() if e is None]
            if later and not self._run_again(task_id, set(later)):
                for j in later:
                    errors[j] = ("its result did not fit beside the others' in a chunk of "
                                 f"{len(ids)} items (max_result_bytes {self.max_result})")
                later = ()
            self.sent.pop(task_id, None)
            self.count(gpu, 1, len(errors) - len(later))
            self.count(gpu, 0, len(results) - len(errors))
            for i, r in zip(ids, results):
                j = i - ids.start
                if j in errors:
                    if on_error is not None and errors[j] is not None:
                        on_error(i, errors[j], gpu)
                else:
                    on_success(i, r, gpu)

        def error(task_id, text, gpu):
            # A chunk of several items that failed as a whole: its items run again,
            # each alone, and get their own outcomes.
            if self._run_again(task_id):
                del self.sent[task_id]
                if adaptive:
                    self.k = max(1, self.k // 2)
                return
            ids = self.ids(task_id)
            self.count(gpu, 1, len(ids))
            if on_error is not None:
                for i in ids:
                    on_error(i, text, gpu)

        def timeout(task_id, seconds, gpu):
            self.sent.pop(task_id, None)
            ids = self.ids(task_id)
            self.count(gpu, 2, len(ids))
            if adaptive:
                self.k = 1
            if on_timeout is not None:
                for i in ids:
                    on_timeout(i, seconds, gpu)

        def start(task_id, gpu):
            for i in self.ids(task_id):
                on_start(i, gpu)

        # on_error and on_timeout are always wanted: the stats count items.
        return dict(cb, on_success=success, on_error=error, on_timeout=timeout,
                    on_task_start=start if on_start is not None else None)

    def fix_stats(self, stats):
        """The stats in items, not chunks (gpud's own are kept as chunk_*)."""
        for key in ("total", "completed", "failed", "timeouts"):
            stats["chunk_" + key] = stats[key]
        # The empty chunks sent while others could still give items back are no work.
        stats["chunk_total"] -= self.fillers
        stats["chunk_completed"] -= self.fillers
        done = [sum(v[i] for v in self.per_gpu.values()) for i in range(3)]
        stats.update(total=self.items, completed=done[0], failed=done[1], timeouts=done[2],
                     chunksize=self.fixed or "auto", largest_chunk=self.largest)
        for gpu, st in stats["gpu_status"].items():
            v = self.per_gpu.get(gpu, [0, 0, 0])
            st.update(completed=v[0], failed=v[1], timeouts=v[2])


def _stats(stats_json, status):
    """gpud's final stats as the library's dict (total, completed, failed, timeouts,
    gpu_status, start_time, end_time) with gpud's own keys beside them."""
    import json

    g = json.loads(stats_json) if stats_json else {}
    stats = dict(g)
    stats.update(
        total=g.get("generated", 0),
        completed=g.get("ok", 0),
        failed=g.get("failed", 0),
        timeouts=g.get("timed_out", 0),
        start_time=g.get("start_time"),
        end_time=g.get("end_time"),
        exit_status=status,
    )
    gpu_status = {}
    for gpu in g.get("gpus", []):
        gpu_status[gpu["gpu_id"]] = {
            "status": "retired" if gpu.get("retired") else "finished",
            "completed": gpu.get("ok", 0),
            "failed": gpu.get("failed", 0),
            "timeouts": gpu.get("timed_out", 0),
            "restarts": gpu.get("restarts", 0),
        }
    stats["gpu_status"] = gpu_status
    return stats
