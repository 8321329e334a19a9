# SPDX-License-Identifier: MIT
"""Dispatcher's shared memory follows the data (docs/python.md, "Memory"): python3
memplan.py, printing PASS memplan. Needs NumPy and Pillow (the jpeg stage's items).

- plan: a Dispatcher with the jpeg stage and small JPEGs (about 3 KB, to 32 x 32,
  batch_size 8) plans rings within a bound derived from its items: each ring at most
  four times two batches of them (a task: 1.5 times the largest item; a result: the
  stage's 3072 bytes, or 64 KiB), or 4 MiB; with the 1 MiB defaults each task ring
  took 32 MiB.
- figures: Dispatcher.check() returns the figures `gpud check` prints for the same
  job as a job file (its total in bytes), which add up (the run memfd, a result memfd
  per worker, a page), without running anything.
- warning: max_task_bytes="16M" for those items is said, as a gpud.MemoryWarning,
  by check() and before run(); the sized default is not.
- larger: an item larger than the size derived from the first ones fails alone, its
  error naming max_task_bytes, what it was sized from and the option to raise it; the
  rest succeed.
"""
import io
import os
import re
import subprocess
import sys
import tempfile
import warnings

import gpud
from gpud import Dispatcher, Stage

FAILED = []
H = W = 32
BATCH = 8
FLOOR = 4 << 20


def check(cond, what):
    if not cond:
        FAILED.append(what)
        print(f"FAIL: {what}", flush=True)


def jpeg(seed, w=64, h=48):
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    b = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(b, "JPEG",
                                                                         quality=90)
    return b.getvalue()


class Mean:
    def setup(self, gpu_id, seed):
        pass

    def process(self, img):
        return img.reshape(-1, 3).mean(0)


def dispatcher(**kw):
    return Dispatcher(Mean, [0, 1], queue_size=64, batch_size=BATCH,
                      stages=[Stage("jpeg", height=H, width=W)], **kw)


def mode_plan(items):
    p = dispatcher().check(items)
    largest = max(len(x) for x in items)
    # Two batches of the items in a task ring, of the stage's results in a result
    # ring: a ring may be four times that (a power of two, room for larger items).
    task_bound = max(FLOOR, 4 * 2 * BATCH * (64 + int(largest * 1.5) + 64))
    result_bound = max(FLOOR, 4 * 2 * BATCH * (64 + max(H * W * 3, 64 << 10) + 256))
    check(p["task_ring"] <= task_bound,
          f"task ring {p['task_ring']} over {task_bound} for items of {largest} bytes")
    check(p["result_ring"] <= result_bound,
          f"result ring {p['result_ring']} over {result_bound} for results of "
          f"{H * W * 3} bytes")
    n = p["workers"]
    bound = n * (task_bound + result_bound + (64 << 10)) + (1 << 20)
    check(p["total"] <= bound, f"plan of {p['total']} bytes over {bound} for {n} workers")
    check(p["max_task_bytes"] >= largest and p["max_task_bytes"] >= H * W * 3,
          f"max_task_bytes {p['max_task_bytes']} cannot carry the items ({largest}) and "
          f"the stage's results ({H * W * 3})")
    check(p["max_result_bytes"] >= H * W * 3, f"max_result_bytes {p['max_result_bytes']}")
    check(set(p["sized"]) == {"max_task_bytes", "max_result_bytes"}, f"sized {p['sized']}")
    # The package's ring arithmetic (gpud._memory) is libgpud's.
    from gpud import _memory

    check(p["task_ring"] == _memory.capacity_for(BATCH * _memory.span(p["max_task_bytes"])),
          f"task ring {p['task_ring']}: gpud._memory says otherwise")
    check(p["result_ring"] == _memory.capacity_for(BATCH * _memory.slot(p["max_result_bytes"])),
          f"result ring {p['result_ring']}: gpud._memory says otherwise")
    check(not p["warnings"], f"a warning for the sized plan: {p['warnings']}")


def mode_figures(items, gpud_exe):
    p = dispatcher().check(items)
    check(p["total"] == p["run_memfd"] + p["workers"] * p["result_memfd"] + 4096,
          f"the figures do not add up: {p}")
    check(p["run_memfd"] >= p["workers"] * p["task_ring"], f"run memfd {p}")
    check(p["result_memfd"] >= p["result_ring"], f"result memfd {p}")
    check(p["per_worker"] == p["task_ring"] + p["result_memfd"], f"per worker {p}")
    check(p["workers"] >= 3, f"2 GPU workers and at least one stage worker: {p['workers']}")
    check(f"{p['total']} bytes" in p["text"], f"the text says another total: {p['text']}")
    # The same job as a job file, with the limits check() chose: gpud check's figure.
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "job.ini"), "w") as f:
            f.write(f"[job]\ngpus = 0,1\nqueue_size = 64\nbatch_size = {BATCH}\n"
                    f"max_task_bytes = {p['max_task_bytes']}\n"
                    f"max_result_bytes = {p['max_result_bytes']}\n"
                    f"python = {sys.executable}\n"
                    f"[stage.jpeg]\nplugin = jpeg\nheight = {H}\nwidth = {W}\n"
                    f"[worker]\nplugin = python\nscript = {os.path.abspath(__file__)}\n"
                    "class = Mean\n[generator]\nplugin = range\nstop = 1\n"
                    "[sink]\nplugin = null\n")
        r = subprocess.run([gpud_exe, "check", os.path.join(d, "job.ini")],
                           capture_output=True, text=True)
    m = re.search(r"shared memory: [^,]* in all, (\d+) bytes", r.stdout)
    check(m is not None and int(m.group(1)) == p["total"],
          f"gpud check says {m.group(1) if m else r.stdout + r.stderr!r}, "
          f"Dispatcher.check() {p['total']}")
    # Not known items: the plan still comes, with the stage's results sized.
    q = dispatcher().check()
    check(q["total"] > 0 and "max_result_bytes" in q["sized"], f"check() without items: {q}")


def mode_warning(items):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        p = dispatcher(max_task_bytes="16M").check(items)
    said = [w for w in got if issubclass(w.category, gpud.MemoryWarning)]
    check(len(said) == 1 and "max_task_bytes=16777216" in str(said[0].message),
          f"check() with max_task_bytes=16M: {[str(w.message) for w in got]}")
    check(p["warnings"] and "far above" in p["warnings"][0], f"warnings {p['warnings']}")
    ok = []
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        dispatcher(max_task_bytes="16M").run(items, lambda t, r, w: ok.append(t))
    said = [w for w in got if issubclass(w.category, gpud.MemoryWarning)]
    check(len(said) == 1 and "max_task_bytes" in str(said[0].message),
          f"run() with max_task_bytes=16M: {[str(w.message) for w in got]}")
    check(len(ok) == len(items), f"{len(ok)} of {len(items)} ran")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        dispatcher().run(items, lambda t, r, w: None)
    check(not [w for w in got if issubclass(w.category, gpud.MemoryWarning)],
          f"a warning for the sized default: {[str(w.message) for w in got]}")


def mode_larger(items):
    big = jpeg(99, 1500, 1000)  # about 1.3 MB of noise: over the sized limit
    order = items[:5] + [big] + items[5:]
    ok, errs = [], {}
    stats = dispatcher().run(order, lambda t, r, w: ok.append(t),
                             on_error=lambda t, e, w: errs.__setitem__(t, e))
    check(sorted(ok) == [i for i in range(len(order)) if i != 5] and list(errs) == [5],
          f"ok {sorted(ok)}, failed {sorted(errs)}")
    e = errs.get(5, "")
    check(f"task input of {len(big)} bytes exceeds max_task_bytes" in e
          and "sized by the Dispatcher from the first item" in e
          and "Dispatcher(..., max_task_bytes=...)" in e, f"the error: {e!r}")
    check(stats.get("failed") == 1, f"stats {stats}")


def main():
    gpud_exe = os.environ.get("GPUD") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(gpud.__file__)))),
        "daemon", "gpud")
    items = [jpeg(i) for i in range(24)]
    mode_plan(items)
    mode_figures(items, gpud_exe)
    mode_warning(items)
    mode_larger(items)
    if FAILED:
        sys.exit(1)
    print("PASS memplan", flush=True)


if __name__ == "__main__":
    main()
