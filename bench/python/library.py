"""The library gpud grew from (gpu_dispatch), as its design documents describe it, for
the benchmark: a feeder thread filling one multiprocessing.Queue (backpressure at
queue_size), one persistent process per GPU running the worker class (signal.alarm
timeouts), a result queue of typed messages, and a monitor loop calling the callbacks;
poison pills at the end. Run the same worker class it runs under gpud:

    /usr/bin/python3 library.py noop.py Noop COUNT GPUS [starts]

(`starts`: with an on_task_start callback, so every task also sends TaskStarted.)
"""
import dataclasses
import importlib.util
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any


@dataclasses.dataclass
class TaskSuccess:
    task_id: int
    data: Any
    worker_id: int


@dataclasses.dataclass
class TaskError:
    task_id: int
    error: str
    worker_id: int


@dataclasses.dataclass
class TaskTimeout:
    task_id: int
    timeout: float
    worker_id: int


@dataclasses.dataclass
class TaskStarted:
    task_id: int
    worker_id: int


@dataclasses.dataclass
class SetupFailed:
    gpu_id: int
    error: str


@dataclasses.dataclass
class WorkerDone:
    worker_id: int


def _alarm(signum, frame):
    raise TimeoutError()


def _worker_main(worker_cls, gpu_id, worker_id, seed, tasks, results, timeout, starts, kwargs):
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu_id)
    worker = worker_cls()
    try:
        worker.setup(gpu_id, seed, **kwargs)
    except Exception:
        results.put(SetupFailed(gpu_id, traceback.format_exc()))
        results.put(WorkerDone(worker_id))
        return
    if timeout:
        signal.signal(signal.SIGALRM, _alarm)
    while True:
        item = tasks.get()
        if item is None:  # poison pill
            break
        task_id, data = item
        if starts:
            results.put(TaskStarted(task_id, worker_id))
        try:
            if timeout:
                signal.setitimer(signal.ITIMER_REAL, timeout)
            out = worker.process(data)
            if timeout:
                signal.setitimer(signal.ITIMER_REAL, 0)
            results.put(TaskSuccess(task_id, out, worker_id))
        except TimeoutError:
            results.put(TaskTimeout(task_id, timeout, worker_id))
        except Exception:
            if timeout:
                signal.setitimer(signal.ITIMER_REAL, 0)
            results.put(TaskError(task_id, traceback.format_exc(), worker_id))
    try:
        worker.cleanup()
    finally:
        results.put(WorkerDone(worker_id))


class Dispatcher:
    def __init__(self, worker_cls, gpu_ids, queue_size=1024):
        self.worker_cls, self.gpu_ids, self.queue_size = worker_cls, gpu_ids, queue_size

    def run(self, generator, on_success, on_error=None, on_timeout=None, on_setup_fail=None,
            on_task_start=None, on_exit=None, base_seed=42, task_timeout=None, **setup_kwargs):
        tasks = mp.Queue(maxsize=self.queue_size)
        results = mp.Queue()
        procs = [mp.Process(target=_worker_main,
                            args=(self.worker_cls, g, k, base_seed + k, tasks, results,
                                  task_timeout, on_task_start is not None, setup_kwargs))
                 for k, g in enumerate(self.gpu_ids)]
        for p in procs:
            p.start()

        def feed():
            for task_id, data in enumerate(generator):
                tasks.put((task_id, data))  # blocks when full: backpressure
            for _ in procs:
                tasks.put(None)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        done = 0
        try:
            while done < len(procs):
                msg = results.get()
                if isinstance(msg, TaskSuccess):
                    on_success(msg.task_id, msg.data, msg.worker_id)
                elif isinstance(msg, TaskError):
                    if on_error:
                        on_error(msg.task_id, msg.error, msg.worker_id)
                elif isinstance(msg, TaskTimeout):
                    if on_timeout:
                        on_timeout(msg.task_id, msg.timeout, msg.worker_id)
                elif isinstance(msg, TaskStarted):
                    on_task_start(msg.task_id, msg.worker_id)
                elif isinstance(msg, SetupFailed):
                    if on_setup_fail:
                        on_setup_fail(msg.gpu_id, msg.error)
                elif isinstance(msg, WorkerDone):
                    done += 1
        finally:
            for p in procs:
                p.join()
            if on_exit:
                on_exit()


def main():
    script, cls_name, count, gpus = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    starts = len(sys.argv) > 5 and sys.argv[5] == "starts"  # on_task_start given
    spec = importlib.util.spec_from_file_location("bench_worker", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    worker_cls = getattr(mod, cls_name)
    ok = 0

    def on_success(task_id, result, worker_id):
        nonlocal ok
        ok += 1

    t0 = time.perf_counter()
    Dispatcher(worker_cls, [int(g) for g in gpus.split(",")]).run(
        (str(i).encode() for i in range(count)), on_success,
        on_task_start=(lambda task_id, worker_id: None) if starts else None)
    elapsed = time.perf_counter() - t0
    if ok != count:
        sys.exit(f"library: {ok} of {count} tasks succeeded")
    print(f"{count / elapsed:.0f}")


if __name__ == "__main__":
    main()
