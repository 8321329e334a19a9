# SPDX-License-Identifier: MIT
"""The proxy benchmark: a model over a stream of images as a user meets it, gpud
against a plain loop, with and without the model's setup, and the first result.

    ./build.sh python /usr/bin/python3        # once: the gpud package into that Python
    /usr/bin/python3 bench/python/proxy.py [--items 2048,8192] [--rounds 5]

Items are 224x224x3 uint8 images (150,528 bytes) as `bytes` from a Python generator
(a pool of 32, yielded in turn); batches of 256. The proxy's model plays an H100
running ResNet-50 (docs/benchmarks.md, "The proxy"): it stacks its items
(np.stack of np.frombuffer, the copy a first port of a loop makes), takes a float32
matmul over a strided sample of every image (the answer: the arg-max of 10 scores,
exact in float32, so every configuration's answers must equal the loop's), and sleeps
4 ms x (1 + n/64) for a call of n items: 20 ms for 256, 12,800 images/s at most. Its
setup (the "model": weights built, NumPy imported) is timed apart on both sides.

The configurations, each run in a process of its own (a user's program: its imports
included), alternated within each round so that all see the same load; with
--gpud old=PATH,new=PATH every gpud row runs with each of those packages:

  loop       a plain loop in this process: setup, then batches of 256 as they come
  gpud 1     gpud.Dispatcher(batch_size=256), one worker
  gpud 2     the same, workers_per_gpu=2 (two workers on one GPU)
  pool 2nd   a warm pool's second run(): not measured yet (POOL below: the place for
             it once Dispatcher is a context manager that keeps its workers)

For each: images/s over the wall time (setup included), images/s without the setup
(wall less the setup: the loop's own, gpud's largest worker setup), the steady rate
(from the result at 10% of the items to the last), and the first result's time from
the call (setup included) and after the setup. Medians of the rounds; then, for the
gpud rows, the stats' breakdown of the time before the first result (last round).
The load average is printed with the figures: on a busy machine say so.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

H, W, C = 224, 224, 3
SIZE = H * W * C
POOL = 32
BATCH = 256
STRIDE = 97  # the strided sample: 1,552 bytes of each image
CLASSES = 10


def images(n, seed=1):
    """n items: bytes of one 224x224x3 image each, from a pool of POOL."""
    import numpy as np

    rng = np.random.default_rng(seed)
    pool = [rng.integers(0, 256, SIZE, dtype=np.uint8).tobytes() for _ in range(POOL)]
    return (pool[i % POOL] for i in range(n))


def gpu_seconds(n):
    """The proxy GPU's time for a call of n items."""
    return 4e-3 * (1 + n / 64)


class ProxyModel:
    """The model: weights of small integers (exact float32 sums), then per call the
    stack, the matmul and the sleep."""

    def __init__(self):
        import numpy as np

        self.np = np
        rng = np.random.default_rng(0)
        cols = len(range(0, SIZE, STRIDE))
        self.w = rng.integers(-3, 4, (cols, CLASSES)).astype(np.float32)

    def __call__(self, items):
        np = self.np
        a = np.stack([np.frombuffer(b, np.uint8) for b in items])
        scores = a[:, ::STRIDE].astype(np.float32) @ self.w
        time.sleep(gpu_seconds(len(items)))
        return [int(v) for v in scores.argmax(axis=1)]


try:
    from gpud import BaseWorker
except ImportError:
    BaseWorker = object


class ProxyWorker(BaseWorker):
    def setup(self, gpu_id, seed):
        self.model = ProxyModel()

    def process(self, item):
        return self.model([item])[0]

    def process_batch(self, items):
        return self.model(items)


# ---- the configurations: each returns a dict of figures and the answers ----

def run_loop(n):
    t0 = time.perf_counter()
    model = ProxyModel()
    setup = time.perf_counter() - t0
    answers, part, k, first, at10 = {}, [], 0, None, None
    mark = max(1, n // 10)
    for item in images(n):
        part.append(item)
        if len(part) == BATCH:
            for a in model(part):
                answers[k] = a
                k += 1
            part = []
            now = time.perf_counter()
            first = first or now
            if at10 is None and k >= mark:
                at10 = (now, k)
    if part:
        for a in model(part):
            answers[k] = a
            k += 1
        now = time.perf_counter()
        first = first or now
        if at10 is None:
            at10 = (now, k)
    end = time.perf_counter()
    return figures(n, t0, end, setup, first, at10, now), answers


def run_gpud(n, workers):
    from gpud import Dispatcher

    answers = {}
    state = {"first": None, "at10": None, "last": None}
    mark = max(1, n // 10)

    def on_success(i, r, worker_id):
        if i in answers:
            raise AssertionError(f"item {i} delivered twice")
        answers[i] = r
        now = state["last"] = time.perf_counter()
        if state["first"] is None:
            state["first"] = now
        if state["at10"] is None and len(answers) >= mark:
            state["at10"] = (now, len(answers))

    t0 = time.perf_counter()
    stats = Dispatcher(ProxyWorker, [0], ui="off", batch_size=BATCH,
                       workers_per_gpu=workers).run(images(n), on_success)
    end = time.perf_counter()
    setup = max((w.get("time_setup", 0.0) for w in stats.get("workers", [])), default=0.0)
    f = figures(n, t0, end, setup, state["first"], state["at10"], state["last"])
    f["stats"] = {k: stats.get(k) for k in ("first_result", "workers")}
    return f, answers


def run_pool_second(n):
    """A warm pool's second run(): the place for it (issue 40, part 3)."""
    return None, None


def figures(n, t0, end, setup, first, at10, last=None):
    wall = end - t0
    steady = (n - at10[1]) / max(end - at10[0], 1e-9) if at10 and at10[1] < n else 0.0
    return {
        "wall": wall, "setup": setup,
        "rate": n / wall,
        "rate_no_setup": n / max(wall - setup, 1e-9),
        "steady": steady,
        "first": (first - t0) if first else float("nan"),
        "first_after_setup": (first - t0 - setup) if first else float("nan"),
        "tail": (end - last) if last else 0.0,
    }


CONFIGS = [
    ("loop", "plain loop, batches of 256", run_loop),
    ("gpud 1", "gpud, batch_size=256, 1 worker", lambda n: run_gpud(n, 1)),
    ("gpud 2", "gpud, batch_size=256, 2 workers on one GPU", lambda n: run_gpud(n, 2)),
    ("pool 2nd", "gpud, a warm pool's second run()", run_pool_second),
]


def start_breakdown(stats):
    s = stats.get("first_result") or {}
    if not s:
        return "    (this gpud reports no first_result breakdown)"
    skip = ("seconds", "worker", "started_monotonic", "from_call")
    parts = ", ".join(f"{k} {1e3 * v:.1f}" for k, v in s.items() if k not in skip)
    return (f"    first result at {1e3 * s.get('from_call', s.get('seconds', 0)):.1f} ms from "
            f"the call (worker {s.get('worker')}): {parts} (ms)")


def one(key, n):
    """--role: one configuration in this fresh process; its figures and answers as JSON."""
    fn = {k: f for k, _, f in CONFIGS}[key]
    f, answers = fn(n)
    if f is None:
        return {"figures": None}
    return {"figures": f, "answers": [answers.get(i) for i in range(n)],
            "count": len(answers)}


def spawn(key, n, path):
    """Runs one configuration in a process of its own (a user's program: its imports and
    setup included), with `path` (a gpud package's folder) first on PYTHONPATH."""
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--role", key,
                        "--items", str(n)], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{key} at {n} items failed (exit {r.returncode}): {r.stderr}")
    return json.loads(r.stdout.splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", default="2048,8192", help="item counts, comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", help="comma-separated configurations (loop always runs)")
    ap.add_argument("--gpud", help="NAME=PATH,...: gpud packages to compare (each PATH a "
                    "folder holding gpud/), every gpud row run with each; default: the "
                    "gpud this Python imports")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role:
        print(json.dumps(one(a.role, int(a.items))))
        return 0
    counts = [int(x) for x in a.items.split(",")]
    builds = [("", None)]
    if a.gpud:
        builds = [tuple(x.split("=", 1)) for x in a.gpud.split(",")]
        builds = [(name, os.path.abspath(path)) for name, path in builds]
    rows = []  # (label, key, text, path)
    for key, text, _ in CONFIGS:
        if a.only and key != "loop" and key not in a.only.split(","):
            continue
        if key == "loop":
            rows.append(("loop", key, text, None))
            continue
        for name, path in builds:
            label = f"{key} {name}".strip()
            rows.append((label, key, f"{text}{f' ({name})' if name else ''}", path))
    load0 = os.getloadavg()
    print(f"proxy: items {counts}, {a.rounds} rounds alternated, each run a process of its "
          f"own, {os.cpu_count()} CPUs, load average {load0[0]:.2f} {load0[1]:.2f} "
          f"{load0[2]:.2f}; {sys.executable}", flush=True)
    got = {(n, r[0]): [] for n in counts for r in rows}
    wrong, loads = [], [load0[0]]
    for rnd in range(a.rounds):
        for n in counts:
            want = None
            for label, key, _, path in rows:
                out = spawn(key, n, path)
                f = out["figures"]
                if f is None:
                    continue
                got[(n, label)].append(f)
                if key == "loop":
                    want = out["answers"]
                elif out["count"] != n or out["answers"] != want:
                    wrong.append(f"{label} at {n} items, round {rnd + 1}")
                print(f"  round {rnd + 1}, {n} items: {label:12s} {f['rate']:8.0f} images/s, "
                      f"first result {f['first']:.3f} s", flush=True)
        loads.append(os.getloadavg()[0])
    load1 = os.getloadavg()
    print(f"\nload average at the end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}; "
          f"1-minute load over the rounds {min(loads):.2f} to {max(loads):.2f}")
    print()
    print("| items | configuration | images/s, wall | without setup | steady (10% to the "
          "last) | first result (from the call / after setup) | setup | tail |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in counts:
        loop = {k: statistics.median(f[k] for f in got[(n, "loop")])
                for k in ("rate", "rate_no_setup", "steady")}
        for label, _, text, _ in rows:
            fs = got[(n, label)]
            if not fs:
                print(f"| {n} | {text} | not measured yet | | | | | |")
                continue
            m = {k: statistics.median(f[k] for f in fs) for k in fs[0] if k != "stats"}
            print(f"| {n:,} | {text} | {m['rate']:,.0f} ({m['rate'] / loop['rate']:.2f}x) | "
                  f"{m['rate_no_setup']:,.0f} ({m['rate_no_setup'] / loop['rate_no_setup']:.2f}x)"
                  f" | {m['steady']:,.0f} ({m['steady'] / loop['steady']:.2f}x) | "
                  f"{m['first']:.3f} / {m['first_after_setup']:.3f} s | {m['setup']:.3f} s | "
                  f"{1e3 * m['tail']:.0f} ms |")
    print()
    for n in counts:
        for label, _, _, _ in rows:
            fs = got[(n, label)]
            if fs and "stats" in fs[-1]:
                print(f"before the first result, {label} at {n} items (last round):")
                print(start_breakdown(fs[-1]["stats"]))
    print()
    if wrong:
        print("answers: NOT all equal to the loop's: " + "; ".join(wrong))
        return 1
    print("answers: every item once in every configuration, each the loop's answer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
