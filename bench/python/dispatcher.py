# SPDX-License-Identifier: MIT
"""The library's no-op worker class through gpud.Dispatcher (a Python generator and an
on_success callback in this process) against the library gpud grew from (library.py,
the same class) and multiprocessing.Pool(2).imap_unordered(f, items, chunksize=256),
side by side in one run, on the Python running this script:

    ./build.sh python /usr/bin/python3     # once: the gpud package into that Python
    /usr/bin/python3 bench/python/dispatcher.py [TASKS] [REPEATS]

Four cases, each run REPEATS times (3), the cases interleaved (one round runs each
once), TASKS items each (1000000):

  library      the library (library.py in a process of its own), as its README calls it
  gpud         gpud.Dispatcher(...).run(gen, on_success) as the library is called: the
               default, automatic chunks
  gpud-256     the same with chunksize=256
  pool-256     multiprocessing.Pool(2).imap_unordered(f, items, chunksize=256)

Prints each run, then the median tasks/s of each case, the ratios, and for the gpud
cases the host process's CPU time a task (generator, pickling and callbacks included)
and what the generator and the callback cost on their own in this Python.
"""
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
import timeit

from gpud import BaseWorker, Dispatcher

HERE = os.path.dirname(os.path.abspath(__file__))


class NoopWorker(BaseWorker):
    def setup(self, gpu_id, seed, **kwargs):
        pass

    def process(self, data):
        return data


def f(x):
    return x


def run_gpud(n, chunksize):
    count = [0]

    def on_success(task_id, result, worker_id):
        count[0] += 1

    t0, c0 = time.perf_counter(), time.process_time()
    stats = Dispatcher(NoopWorker, [0, 1], chunksize=chunksize).run(
        (i for i in range(n)), on_success)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert count[0] == n and stats["completed"] == n, (count, stats["completed"])
    return n / dt, cpu / n * 1e6, stats.get("largest_chunk")


def run_pool(n):
    t0 = time.perf_counter()
    k = 0
    with multiprocessing.Pool(2) as pool:
        for _ in pool.imap_unordered(f, range(n), chunksize=256):
            k += 1
    assert k == n
    return n / (time.perf_counter() - t0), None, 256


def run_library(n):
    out = subprocess.run([sys.executable, os.path.join(HERE, "library.py"),
                          os.path.join(HERE, "noop.py"), "Noop", str(n), "0,1"],
                         capture_output=True, text=True, check=True).stdout
    return float(out.split()[-1]), None, None


def in_process_costs():
    """ns a task of the generator expression and of the counting callback alone."""
    n = 1_000_000
    gen = min(timeit.repeat(lambda: sum(1 for _ in (i for i in range(n))), number=1,
                            repeat=3)) / n * 1e9
    count = [0]

    def on_success(task_id, result, worker_id):
        count[0] += 1

    g = {"r": range(n), "cb": on_success}
    loop = min(timeit.repeat("for i in r: pass", globals=g, number=1, repeat=3))
    calls = min(timeit.repeat("for i in r: cb(i, i, 0)", globals=g, number=1, repeat=3))
    return gen, (calls - loop) / n * 1e9


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    print(f"Python {sys.version.split()[0]} ({sys.executable}), {os.cpu_count()} CPUs, "
          f"{n} no-op tasks a run, {reps} rounds; load average {os.getloadavg()[0]:.2f}",
          flush=True)
    cases = {
        "library": lambda: run_library(n),
        "gpud": lambda: run_gpud(n, None),
        "gpud-256": lambda: run_gpud(n, 256),
        "pool-256": lambda: run_pool(n),
    }
    got = {c: [] for c in cases}
    for r in range(reps):
        for name, fn in cases.items():
            rate, cpu, chunk = fn()
            got[name].append((rate, cpu))
            extra = f", host CPU {cpu:.3f} us/task, largest chunk {chunk}" if cpu else ""
            print(f"round {r + 1} {name:9s} {rate:12,.0f} tasks/s{extra}", flush=True)
    med = {c: statistics.median(x[0] for x in v) for c, v in got.items()}
    cpu = {c: statistics.median(x[1] for x in v) for c, v in got.items() if v[0][1]}
    print(f"medians (load average now {os.getloadavg()[0]:.2f}):")
    for c, rate in med.items():
        spread = f"{min(x[0] for x in got[c]):,.0f} to {max(x[0] for x in got[c]):,.0f}"
        host = f", host CPU {cpu[c]:.3f} us/task" if c in cpu else ""
        print(f"  {c:9s} {rate:12,.0f} tasks/s ({spread}){host}")
    for c in ("gpud", "gpud-256"):
        print(f"  {c} / library {med[c] / med['library']:.1f}x, / pool-256 "
              f"{med[c] / med['pool-256']:.2f}x")
    gen, call = in_process_costs()
    print(f"  in this Python alone: the generator expression {gen:.0f} ns an item, the "
          f"on_success callback {call:.0f} ns a call")
