# SPDX-License-Identifier: MIT
"""What a run's start asks once a process: python3 startup.py, printing PASS startup.

A program that runs job after job (Dispatcher.run() in a loop) asks its Python what it
is and counts the GPUs through a helper process once, not at every run (each a process
start: tens of milliseconds), and asks again when what the answer depends on changed:
the interpreter's file, or CUDA_VISIBLE_DEVICES; a helper that did not answer (killed)
is not kept. Counted by wrappers that log each call:
[job] python = a script that execs /usr/bin/python3, and GPUD_WORKER_EXE = a script that
execs the real gpud-worker."""
import os
import stat
import sys
import tempfile

from gpud import Dispatcher

FAILED = []


def check(cond, what):
    if not cond:
        FAILED.append(what)
        print(f"FAIL: {what}", flush=True)


class Double:
    def setup(self, gpu_id, seed):
        pass

    def process(self, item):
        return 2 * item


def script(path, body):
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body)
    os.chmod(path, stat.S_IRWXU)


def main():
    real_worker = os.environ.get("GPUD_WORKER_EXE") or os.environ["GPUD_TEST_WORKER"]
    tmp = tempfile.mkdtemp(prefix="gpud-startup-")
    log = os.path.join(tmp, "calls")
    py, worker = os.path.join(tmp, "python3"), os.path.join(tmp, "gpud-worker")
    script(py, f'echo python >> "{log}"\nexec {sys.executable} "$@"\n')
    die = os.path.join(tmp, "die")
    script(worker, f'echo "worker $1" >> "{log}"\n'
           f'if [ "$1" = --count-gpus ] && [ -e "{die}" ]; then kill -9 $$; fi\n'
           f'exec "{real_worker}" "$@"\n')
    os.environ["GPUD_WORKER_EXE"] = worker
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)

    def run_once():
        got = {}
        Dispatcher(Double, [0], python=py, ui="off").run(
            range(20), lambda i, r, w: got.__setitem__(i, r))
        check(got == {i: 2 * i for i in range(20)}, f"results: {got}")
        with open(log) as f:
            lines = f.read().splitlines()
        return lines.count("python"), lines.count("worker --count-gpus")

    asks, counts = run_once()
    check((asks, counts) == (1, 1), f"first run: {asks} asks, {counts} counts (1 and 1)")
    asks, counts = run_once()
    check((asks, counts) == (1, 1),
          f"second run: {asks} asks, {counts} counts in all (still 1 and 1: nothing changed)")
    st = os.stat(py)
    os.utime(py, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    asks, counts = run_once()
    check(asks == 2, f"after the interpreter's file changed: {asks} asks in all (2)")
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"
    asks, counts = run_once()
    check(counts == 2, f"after CUDA_VISIBLE_DEVICES changed: {counts} counts in all (2)")
    # A helper that did not answer (killed) is not kept: the next run counts again, and
    # keeps the answer once one comes.
    open(die, "w").close()
    os.environ["CUDA_VISIBLE_DEVICES"] = "1"
    asks, counts = run_once()
    asks, counts = run_once()
    check(counts == 4, f"a killed count is asked again: {counts} counts in all (4)")
    os.unlink(die)
    asks, counts = run_once()
    asks, counts = run_once()
    check(counts == 5, f"then answered once and kept: {counts} counts in all (5)")
    if FAILED:
        return 1
    print("PASS startup", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
