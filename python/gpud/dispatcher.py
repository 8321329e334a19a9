# SPDX-License-Identifier: MIT
"""gpud.Dispatcher: the gpu_dispatch library's Dispatcher on libgpud, in this process.

Its parts by job: _options (the keywords and callbacks checked, options to job keys'
values), _finding (the worker class found and named for the workers), _chunks (items
cut into gpud tasks), _stats (gpud's stats as the library's dict); this module puts
the job's keys together and runs it (gpud._gpud)."""
from __future__ import annotations

import os
import pickle
import signal
import sys
import time
import warnings
from typing import Any, Callable, Dict, Iterable, Optional, Sequence, Union

from . import JobError, MemoryWarning, RunAborted
from . import _memory, _stages
from ._chunks import CHUNK_SECONDS, MAX_BYTES, Chunks, byte_size, round_size
from ._constants import (CODEC_PARTS, CODEC_PICKLE, CODEC_RAW, RUN_FORCE, RUN_RESUME,
                         RUN_RETRY_FAILED, UI_MODES)
from ._finding import WORKER_SCRIPT, main_file, worker_keys
from ._options import OPTION_KEYS, OPTIONS, check_callbacks, value, with_key
from ._stats import library_stats

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


class StopScript(BaseException):
    """Raised by Dispatcher.run() in a worker process, where the calling program's
    script is loaded to find its classes: the script stops there (gpud._worker)."""


def _equal(a, b):
    """a == b as a truth value; values without one (arrays) by identity."""
    try:
        return bool(a == b)
    except Exception:
        return a is b


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
    With one item a task, max_task_bytes and max_result_bytes left unset are sized
    from the first item and the stages' declared results; check() says what a run
    would map (docs/python.md, "Memory").
    """

    stats: Optional[Stats]

    def __init__(self, worker_cls: WorkerClass, gpu_ids: GpuIds, queue_size: int = 1024,
                 **options: Any) -> None:
        self.worker_cls = worker_cls
        self.gpu_ids = gpu_ids
        self.queue_size = queue_size
        self.options = dict(options)
        known = OPTIONS
        unknown = sorted(set(self.options) - known)
        if unknown:
            raise TypeError(
                f"Dispatcher(): unknown option {unknown[0]!r} (known: {', '.join(sorted(known))})")
        self._stages = _stages.parse(self.options.get("stages"))
        self.stats = None
        self._pool = None
        self._pool_setup = None  # the setup the pool's workers were started with

    # ---- a warm pool: `with Dispatcher(...) as d:` ----

    def __enter__(self) -> "Dispatcher":
        """Opens a pool: the workers the first run() inside the block starts stay started
        and set up (the model loaded once) for the next run()s; leaving the block runs
        their cleanup. Outside a with block every run() starts and ends its own."""
        import gpud

        if getattr(gpud, "_in_worker", False):
            return self  # the script loaded in a worker: its run() stops the script
        if self._pool is not None:
            raise RuntimeError("Dispatcher: already inside a with block of this Dispatcher")
        from . import _gpud

        self._pool = _gpud.pool_open()
        return self

    def __exit__(self, *exc: Any) -> None:
        pool, self._pool = self._pool, None
        self._pool_setup = None
        if pool is not None:
            from . import _gpud

            _gpud.pool_close(pool)

    # ---- the job's keys ----

    def _keys(self, base_seed, task_timeout, setup_kwargs, python_items=True, chunked=False):
        o = self.options
        keys = []
        g = self.gpu_ids
        keys.append(("job.gpus", g if isinstance(g, str) else ",".join(str(int(x)) for x in g)))
        keys.append(("job.queue_size", str(int(self.queue_size))))
        keys.append(("job.base_seed", str(int(base_seed))))
        if task_timeout is not None:
            keys.append(("job.task_timeout", value(task_timeout)))
        for name, key in OPTION_KEYS.items():
            # A chunk is a batch of items already: the worker cuts it into calls of
            # batch_size items; gpud hands out one chunk at a time.
            if chunked and name == "batch_size":
                continue
            if o.get(name) is not None:
                keys.append((key, value(o[name])))
        journal = o.get("journal")
        if journal is None and (o.get("resume") or o.get("retry_failed")):
            journal = True
        if journal is True:
            main = main_file()
            stem = os.path.splitext(os.path.basename(main))[0] if main else "gpud"
            journal = os.path.abspath(f"{stem}.journal")
        if journal is not None and journal is not False:
            keys.append(("job.journal", os.fspath(journal)))
        cls = self.worker_cls
        if isinstance(cls, (str, os.PathLike)):
            keys.append(("worker.plugin", os.fspath(cls)))
            for k, v in setup_kwargs.items():
                keys.append((f"worker.{k}", value(v)))
            codec = CODEC_RAW
        else:
            keys.append(("job.python", o.get("python") or sys.executable))
            keys.append(("worker.plugin", "python"))
            keys.append(("worker.script", WORKER_SCRIPT))
            # Named after the user's class (gpud._worker answers any name with its
            # Worker): the plugin's messages then say "Embedder.setup() failed: ...".
            keys.append(("worker.class", getattr(cls, "__name__", "Worker")))
            keys.append(("worker.result", "bytes"))  # gpud._worker pickles the results itself
            keys.extend(worker_keys(cls, base_seed, setup_kwargs))
            if o.get("isolate_failures") is not None:  # the class's batches split in Python
                keys.append(("worker.gpud_isolate", "1" if o["isolate_failures"] else "0"))
            # A generator plugin's items are its bytes, this program's are pickled.
            keys.append(("worker.gpud_input", "pickle" if python_items else self._plugin_input()))
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
                             str(byte_size(o.get("max_result_bytes"), 1 << 20))))
                codec = CODEC_PARTS  # the chunks come framed already (gpud._worker.frame)
        if self._stages:
            keys, codec = self._stage_keys(keys, base_seed, python_items)
        elif o.get("python") and isinstance(cls, (str, os.PathLike)):
            keys.append(("job.python", o["python"]))  # a Python class's is set above
        for section in ("generator", "sink"):
            for k, v in (o.get(section) or {}).items():
                keys.append((f"{section}.{k}", value(v)))
        for k, v in (o.get("keys") or {}).items():
            if str(k).startswith("stage.") and not isinstance(cls, (str, os.PathLike)):
                # A stage given as keys: the class would get a pickled item, which a
                # stage's result is not; stages= says what each one gives.
                raise JobError(
                    f"keys={{{k!r}: ...}}: CPU stages in front of a Python worker class "
                    "are given as stages=[gpud.Stage(...)] (a Python class, or a C worker "
                    "plugin such as gpud.Stage(\"jpeg\", height=64, width=64)), which says "
                    "what each stage's results are")
            keys.append((k, value(v)))
        return keys, codec

    def _stage_keys(self, keys, base_seed, python_items):
        """keys with the stages' sections added (gpud._stages), the worker told what
        the last stage gives it; and the codec."""
        cls, stages = self.worker_cls, self._stages
        worker_python = not isinstance(cls, (str, os.PathLike))
        items_pickled = python_items and stages[0].python
        more, given = _stages.keys(
            stages, lambda c, kw: worker_keys(c, base_seed, kw), WORKER_SCRIPT,
            value, "pickle" if items_pickled else self._plugin_input(), worker_python)
        keys = [(k, given) if k == "worker.gpud_input" else (k, v) for k, v in keys]
        if not worker_python and any(st.python for st in stages):
            keys.append(("job.python", self.options.get("python") or sys.executable))
        elif not worker_python and self.options.get("python"):
            keys.append(("job.python", self.options["python"]))
        return keys + more, _stages.codec(items_pickled, worker_python)

    def _plugin_input(self):
        """What a generator plugin's tasks are to a Python class: whole samples (a dict
        each) from the tar generator with `members`, else bytes."""
        o = self.options
        if "members" in (o.get("generator") or {}) or "generator.members" in (o.get("keys") or {}):
            return "sample"
        return "bytes"

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
        on_exit() (always, once). worker_id is the GPU id the task ran on. A task
        callback with a `key` parameter after those (on_success(task_id, result,
        worker_id, key=None)) gets the task's key too: the sample's, from the tar
        generator; None where the generator names none. setup_kwargs reach
        worker.setup(). Returns the stats (a dict).

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

        called = time.monotonic()
        if getattr(gpud, "_in_worker", False):
            raise StopScript()
        from . import _gpud, _worker

        try:
            check_callbacks(self.options, on_success, on_error, on_timeout, on_setup_fail,
                             on_task_start, on_exit, on_resume)
            key = _gpud.task_key
            outcome = self._run(_gpud, _worker, generator,
                                dict(on_success=with_key(on_success, 3, key),
                                     on_error=with_key(on_error, 3, key),
                                     on_timeout=with_key(on_timeout, 3, key),
                                     on_setup_fail=on_setup_fail,
                                     on_task_start=with_key(on_task_start, 2, key),
                                     on_resume=on_resume),
                                base_seed, task_timeout, setup_kwargs, called)
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
            if need > byte_size(given, 1 << 20):
                raise JobError(
                    f"Dispatcher: {name} with items of {per} bytes (the first "
                    f"item, framed) needs tasks of {need} bytes, over max_task_bytes={given}: "
                    f"raise max_task_bytes to {round_size(need)} or more, or leave it unset "
                    "(gpud then sizes it)")
            return []
        limit = max(1 << 20, need + need // 4 + (64 << 10))
        if limit > MAX_BYTES:
            raise JobError(
                f"Dispatcher: {name} with items of {per} bytes (the first "
                f"item, framed) needs tasks of {need} bytes, over gpud's largest task (1G): lower "
                "batch_size")
        text = round_size(limit)
        limit = byte_size(text, limit)
        chunk.max_task = limit
        chunk.whole = True
        out = [("job.max_task_bytes", text)]
        if o.get("max_result_bytes", keys.get("job.max_result_bytes")) is None:
            # A batch's results come back as one task's result: room for results as
            # large as the items.
            chunk.max_result = limit
            out.append(("job.max_result_bytes", text))
        return out

    def _same_setup(self, setup):
        """In a with block: a run asks for the setup its workers were started with, or
        JobError naming what differs."""
        had = self._pool_setup
        for name in ("base_seed", "task_timeout"):
            if not _equal(setup[name], had[name]):
                raise JobError(
                    f"Dispatcher.run() in a with block: {name}={setup[name]!r}, but the "
                    f"block's workers were started with {name}={had[name]!r}: a with "
                    "block's runs share its first run's workers and setup (leave the block "
                    "to start others)")
        new, old = setup["setup"], had["setup"]
        for key in sorted(set(new) | set(old)):
            if key not in new or key not in old or not _equal(new[key], old[key]):
                asked = f"{key}={new[key]!r}" if key in new else f"no {key}"
                given = f"{key}={old[key]!r}" if key in old else f"no {key}"
                raise JobError(
                    f"Dispatcher.run() in a with block: setup keyword {asked}, but the "
                    f"block's workers were set up with {given}: a with block's runs share "
                    "its first run's workers and setup (leave the block to set up others)")

    def _plan(self, _worker, generator, sample):
        """The program's items with their first `sample` read ahead (gpud._memory.Peeked),
        the max_task_bytes / max_result_bytes keys sized from them and from the stages
        where the program did not set them (docs/python.md, "Memory"), what each was
        sized from, and a warning line when a limit the program set makes the rings far
        larger than the items need (or None)."""
        o = self.options
        if o.get("job"):
            return generator, [], {}, None  # a job file may set anything: as it says
        keys = o.get("keys") or {}
        task_given = o.get("max_task_bytes", keys.get("job.max_task_bytes"))
        result_given = o.get("max_result_bytes", keys.get("job.max_result_bytes"))
        batch = max(int(o.get("batch_size") or keys.get("job.batch_size") or 1),
                    int(keys.get("job.max_in_flight") or 1))
        sizes = []
        if generator is not None:
            generator = _memory.Peeked(generator, sample)
            st = self._stages
            raw = (not st[0].python) if st else isinstance(self.worker_cls, (str, os.PathLike))
            sizes = [b for b in (_memory.item_bytes(x, raw, _worker.frame, _worker.frame_size)
                                 for x in generator.first) if b is not None]
        planned, why = _memory.plan_keys(self._stages, sizes, batch)
        given = {"job.max_task_bytes": task_given, "job.max_result_bytes": result_given}
        planned = [(k, v) for k, v in planned if given[k] is None]
        why = {k: v for k, v in why.items() if given[f"job.{k}"] is None}
        warn = _memory.warning(sizes, self._stages, batch,
                               byte_size(task_given, 0) if task_given is not None else None,
                               byte_size(result_given, 0) if result_given is not None else None)
        return generator, planned, why, warn

    def _job(self, _worker, generator, callbacks, base_seed, task_timeout, setup_kwargs,
             sample=1):
        """What a run of `generator` gives libgpud: (generator, callbacks, keys, codec,
        chunk, k, warn): the items as gpud reads them (chunks, or read ahead), the
        callbacks for them, the job's keys and codec, the Chunks or None, the items a
        task holds, a warning line on the plan or None, and what each key sized from the
        items was sized from."""
        o = self.options
        chunk = None
        warn, why = None, {}
        k = self._chunking(generator)
        if callbacks.get("on_resume") is not None and k != 1:
            raise JobError("Dispatcher.run(): on_resume names tasks by their ids, which are "
                           "the items' only with one item a task: chunksize=1 (or a journal, "
                           "which chooses it), not chunksize="
                           f"{k if k else 'None (automatic)'}")
        if k != 1:
            budget = CHUNK_SECONDS
            if task_timeout:
                budget = min(budget, float(task_timeout) / 50)
            chunk = Chunks(generator, k, callbacks, budget, int(o.get("batch_size") or 1),
                            byte_size(o.get("max_task_bytes"), 1 << 20),
                            byte_size(o.get("max_result_bytes"), 1 << 20), _worker.loads_framed,
                            _worker.frame, _worker.frame_size, not self._tied())
            generator, callbacks = chunk, chunk.callbacks()
            if o.get("batch_wait_ms") and chunk.batch > 1:
                chunk.wait = float(o["batch_wait_ms"]) / 1000
            sized = self._size_chunks(chunk)
        else:
            generator, sized, why, warn = self._plan(_worker, generator, sample)
            if why and callbacks.get("on_error") is not None:
                user = callbacks["on_error"]

                def on_error(task_id, error, worker_id):
                    return user(task_id, _memory.hint(error, why), worker_id)

                callbacks = dict(callbacks, on_error=on_error)
        keys, codec = self._keys(base_seed, task_timeout, setup_kwargs, generator is not None,
                                 chunk is not None)
        if chunk is not None and sized:
            # The workers' limit for a chunk's results is the one sized for it.
            keys = [(k, str(chunk.max_result)) if k == "worker.gpud_result_max" else (k, v)
                    for k, v in keys]
        keys.extend(sized)
        return generator, callbacks, keys, codec, chunk, k, warn, why

    def check(self, items: Optional[Iterable[Any]] = None, base_seed: int = 42,
              task_timeout: Optional[float] = None, **setup_kwargs: Any) -> Dict[str, Any]:
        """What run(items, ...) would map, without running it: gpud check on the same
        job (every plugin loaded and checked, no worker started). items: items like the
        run's (a list, or a sample: its first 16 are read, so a one-shot generator
        loses them; None: the items are not known, or the `generator` option's plugin
        gives them). Returns a dict of bytes: total (everything the run maps),
        run_memfd (its header and every worker's task ring), result_memfd (each
        worker's), per_worker (a task ring and a result memfd), task_ring, result_ring,
        workers (every stage's and the GPU workers'), max_task_bytes and
        max_result_bytes (as given, or as sized from the items and the stages), sized
        (what each sized key was sized from), warnings (lines, also given to
        warnings.warn as gpud.MemoryWarning), text (what `gpud check` prints). Raises
        JobError when the job could not run, with gpud's reason."""
        import gpud

        if getattr(gpud, "_in_worker", False):
            raise StopScript()  # as run(): the script stops where a worker loads it
        from . import _gpud, _worker

        o = self.options
        if items is None and not (o.get("generator") or "generator.plugin" in (o.get("keys") or {})):
            items = []  # the program's items, not known
        cbs = dict(on_success=lambda *a: None, on_error=None, on_timeout=None,
                   on_setup_fail=None, on_task_start=None, on_resume=None)
        gen, _, keys, _, _, _, warn, why = self._job(_worker, items, cbs, base_seed,
                                                    task_timeout, setup_kwargs,
                                                    _memory.SAMPLE)
        try:
            r = _gpud.check(job_file=os.fspath(o["job"]) if o.get("job") else None,
                            keys=keys, items=gen is not None)
        except ValueError as e:
            raise JobError(str(e)) from None
        if not r["ok"]:
            raise JobError(r["error"] or "gpud refused the job (its message is above, on "
                           "standard error)")
        given = dict(keys)
        out = {x: r[x] for x in ("total", "run_memfd", "result_memfd", "task_ring",
                                 "result_ring", "workers", "text")}
        out["per_worker"] = r["task_ring"] + r["result_memfd"]
        out["max_task_bytes"] = byte_size(given.get("job.max_task_bytes"), 1 << 20)
        out["max_result_bytes"] = byte_size(given.get("job.max_result_bytes"), 1 << 20)
        out["sized"] = why
        out["warnings"] = [warn] if warn else []
        if warn:
            warnings.warn(warn, MemoryWarning, stacklevel=2)
        return out

    def _run(self, _gpud, _worker, generator, callbacks, base_seed, task_timeout, setup_kwargs,
             called=None):
        """Runs the job; returns a function that gives run()'s result or raises its
        exception, called after on_exit."""
        o = self.options
        setup = dict(setup=dict(setup_kwargs), base_seed=base_seed, task_timeout=task_timeout)
        if self._pool is not None and self._pool_setup is not None:
            self._same_setup(setup)
        generator, callbacks, keys, codec, chunk, k, warn, _ = self._job(
            _worker, generator, callbacks, base_seed, task_timeout, setup_kwargs)
        if warn:
            warnings.warn(warn, MemoryWarning, stacklevel=3)
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
                helpers=(pickle.loads, _worker.frame_one, _worker.loads_framed),
                summary=chunk is not None, pool=self._pool)
        except ValueError as e:  # a key refused by libgpud, named with its place
            raise JobError(str(e)) from None
        status, error, sig, exc = r.status, r.error, r.signal, r.exception
        if self._pool is not None and self._pool_setup is None and status not in (-1, 2):
            self._pool_setup = setup  # the workers were started with it
        setup_failed, first = r.setup_failed, r.first_setup_error
        self.stats = stats = library_stats(r.stats_json, status, called)
        if chunk is not None:
            chunk.fix_stats(stats)
            if r.summary is not None:  # gpud's line counts chunks: said in items
                print("gpud: " + chunk.summary(stats, r.summary), file=sys.stderr, flush=True)

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
