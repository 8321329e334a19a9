# SPDX-License-Identifier: MIT
"""Feeding a batch model from Python: 150,528-byte items (a 224x224x3 uint8 image)
from a generator, a NumPy model that sleeps per batch to play the GPU, run as a plain
loop and through gpud.Dispatcher, side by side in one run:

    ./build.sh python /usr/bin/python3     # once: the gpud package into that Python
    /usr/bin/python3 bench/python/feed.py [ITEMS] [REPEATS] [SITE ...]

Cases, each run REPEATS times (3), interleaved (one round runs each once), ITEMS items
each (10240):

  loop         one process reads the generator in batches of 256 and runs the model
  batch-1w     Dispatcher(Model, [0], batch_size=256), every other key at its default
  batch-2w     the same with workers_per_gpu=2
  item         Dispatcher(Model, [0]) and process() per item (no batch_size)

The model, per batch: the batch as one array (numpy.stack in the loop, gpud.stack in a
worker), copied once into a preallocated "device" buffer (the host-to-device copy),
then SLEEP_MS (20) of sleep (the GPU's work), then each row's arg-max of a few bytes.
Per item: the same for a batch of one, with SLEEP_ITEM_MS (0.5) of sleep.

With SITE folders (each a `--target` install of the package), the gpud cases run once
per SITE, interleaved too, to compare two versions of the package. Prints each run,
then the medians in items/s and each gpud case's ratio to the loop's median; checks
that every item came back once with the loop's answer.
"""
import os
import statistics
import subprocess
import sys
import time

SIZE = 150_528
BATCH = 256
SLEEP_MS = float(os.environ.get("SLEEP_MS", "20"))
SLEEP_ITEM_MS = float(os.environ.get("SLEEP_ITEM_MS", "0.5"))


def items(n):
    import numpy as np

    rng = np.random.default_rng(7)
    pool = [rng.integers(0, 256, SIZE, dtype=np.uint8).tobytes() for _ in range(61)]
    return (pool[i % 61] for i in range(n))


def answer(a):
    """The model's answer per row: the arg-max of every 4096th byte."""
    return a[:, ::4096].argmax(axis=1)


class Model:
    def setup(self, gpu_id, seed):
        import numpy as np

        self.np = np
        self.dev = np.empty((BATCH, SIZE), np.uint8)

    def process_batch(self, items):
        import gpud

        if hasattr(gpud, "stack"):
            a = gpud.stack(items)
        else:  # a version of the package without it
            a = self.np.stack([self.np.frombuffer(x, self.np.uint8) for x in items])
        dev = self.dev[: len(items)]
        dev[...] = a  # the one copy to the "device"
        time.sleep(SLEEP_MS / 1000)
        return answer(dev).tolist()


class ItemModel:
    """The model one item a call (no process_batch)."""

    def setup(self, gpu_id, seed):
        import numpy as np

        self.np = np
        self.dev = np.empty((1, SIZE), np.uint8)

    def process(self, item):
        a = self.np.frombuffer(item, self.np.uint8)[None]
        dev = self.dev[:1]
        dev[...] = a
        time.sleep(SLEEP_ITEM_MS / 1000)
        return int(answer(dev)[0])


def run_loop(n):
    import numpy as np
    from itertools import islice

    it = items(n)
    dev = np.empty((BATCH, SIZE), np.uint8)
    out = []
    t0 = time.perf_counter()
    while True:
        batch = list(islice(it, BATCH))
        if not batch:
            break
        a = np.stack([np.frombuffer(x, np.uint8) for x in batch])
        d = dev[: len(batch)]
        d[...] = a
        time.sleep(SLEEP_MS / 1000)
        out.extend(answer(d).tolist())
    return time.perf_counter() - t0, out


def run_gpud(case, n):
    import gpud

    got = {}
    opts = {}
    if case != "item":
        opts["batch_size"] = BATCH
    if case == "batch-2w":
        opts["workers_per_gpu"] = 2
    t0 = time.perf_counter()
    gpud.Dispatcher(Model if case != "item" else ItemModel, [0], **opts).run(items(n), lambda t, r, w: got.__setitem__(t, r))
    return time.perf_counter() - t0, [got.get(i) for i in range(n)]


def child(case, n):
    if case == "loop":
        secs, out = run_loop(n)
    else:
        secs, out = run_gpud(case, n)
    print(f"RESULT {secs:.4f} {hash(tuple(out))} {sum(x is None for x in out)}", flush=True)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10240
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    sites = sys.argv[3:] or [None]
    cases = [("loop", None)] + [(c, s) for s in sites for c in ("batch-1w", "batch-2w", "item")]
    times = {c: [] for c in cases}
    want = None
    for r in range(reps):
        for case, site in cases:
            env = dict(os.environ)
            if site:
                env["PYTHONPATH"] = site
            m = n if case != "item" else n // 8
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", case,
                                str(m)], env=env, capture_output=True, text=True)
            line = [x for x in p.stdout.splitlines() if x.startswith("RESULT")]
            if p.returncode or not line:
                print(f"{case}: failed\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
                return 1
            secs, h, missing = line[0].split()[1:]
            if m == n:
                if want is None and case == "loop":
                    want = h
                ok = h == want and missing == "0"
            else:
                ok = missing == "0"
            times[(case, site)] = times.get((case, site), []) + [m / float(secs)]
            print(f"round {r + 1}: {case:9} {site or '':30} {m / float(secs):9.0f} items/s"
                  f"{'' if ok else '  WRONG ANSWERS'}", flush=True)
    base = statistics.median(times[("loop", None)])
    print(f"\nmedians of {reps} ({SIZE}-byte items, {SLEEP_MS} ms a batch of {BATCH}):")
    for key, v in times.items():
        if not v:
            continue
        med = statistics.median(v)
        print(f"  {key[0]:9} {key[1] or '':30} {med:9.0f} items/s  {med / base:5.2f}x the loop")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(main())
