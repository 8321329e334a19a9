# SPDX-License-Identifier: MIT
"""The library's no-op worker class through gpud.Dispatcher (a Python generator and an
on_success callback in this process) against the library gpud grew from (library.py,
the same class) and multiprocessing.Pool(2).imap_unordered(f, items, chunksize=256),
in one run, on the Python running this script:

    ./build.sh python /usr/bin/python3     # once: the gpud package into that Python
    /usr/bin/python3 bench/python/dispatcher.py [TASKS] [BATCH_SIZE] [CHUNKSIZE]

Prints tasks/s of each and gpud's cost per task on the host (the process's CPU time,
generator and callbacks included, over the tasks). TASKS 1000000, BATCH_SIZE 1 and
CHUNKSIZE 256 (as the Pool's) by default; CHUNKSIZE 1 is one gpud task per item.
"""
import multiprocessing
import os
import subprocess
import sys
import time

from gpud import BaseWorker, Dispatcher


class NoopWorker(BaseWorker):
    def setup(self, gpu_id, seed, **kwargs):
        pass

    def process(self, data):
        return data


def f(x):
    return x


def bench_gpud(n, batch):
    count = [0]

    def on_success(task_id, result, worker_id):
        count[0] += 1

    t0, c0 = time.perf_counter(), time.process_time()
    stats = Dispatcher(NoopWorker, [0, 1], queue_size=4096, batch_size=batch,
                       chunksize=CHUNK).run(
        (i for i in range(n)), on_success)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert count[0] == n and stats["completed"] == n, (count, stats["completed"])
    return dt, cpu


def bench_pool(n):
    t0 = time.perf_counter()
    k = 0
    with multiprocessing.Pool(2) as pool:
        for _ in pool.imap_unordered(f, range(n), chunksize=256):
            k += 1
    assert k == n
    return time.perf_counter() - t0


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    CHUNK = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    print(f"Python {sys.version.split()[0]} ({sys.executable}), {os.cpu_count()} CPUs, "
          f"{n} no-op tasks")
    dt, cpu = bench_gpud(n, batch)
    print(f"gpud.Dispatcher (chunksize={CHUNK}, batch_size={batch}): {n / dt:,.0f} tasks/s "
          f"({dt:.2f} s), "
          f"host process CPU {cpu / n * 1e6:.2f} us/task")
    dp = bench_pool(n)
    print(f"multiprocessing.Pool(2).imap_unordered(chunksize=256): {n / dp:,.0f} tasks/s "
          f"({dp:.2f} s)")
    here = os.path.dirname(os.path.abspath(__file__))
    nl = min(n, 200_000)  # the library is slow: fewer tasks, the same measure
    lib = subprocess.run([sys.executable, os.path.join(here, "library.py"),
                          os.path.join(here, "noop.py"), "Noop", str(nl), "0,1"],
                         capture_output=True, text=True, check=True)
    lib_rate = float(lib.stdout.split()[-1])
    print(f"the library (library.py, {nl} tasks): {lib_rate:,.0f} tasks/s")
    print(f"gpud.Dispatcher / Pool: {dp / dt:.2f}x; gpud.Dispatcher / the library: "
          f"{n / dt / lib_rate:.1f}x")
