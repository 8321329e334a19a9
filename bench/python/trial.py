# SPDX-License-Identifier: MIT
"""A model over a stream of images, from Python: the job gpud is for, tried every way.

    ./build.sh python /usr/bin/python3        # once: the gpud package into that Python
    /usr/bin/python3 bench/python/trial.py [--proxy | --real] [--items N] [--repeats R]

Items are 224x224x3 uint8 images (150,528 bytes) as `bytes` from a Python generator;
the answer for each is a class index. The configurations, each run R times (3), the
rounds alternated so that every configuration sees the machine's swings alike:

  loop           a plain loop in one process, batches of 256
  loop x2        two such processes at once, half the items each (rates added up)
  loop, batch 1  the plain loop one item at a time
  library        the library gpud grew from (gpu_dispatch), 1 worker, per item; where
                 it is not installed, bench/python/library.py: its design rebuilt
  gpud per item  gpud.Dispatcher, 1 worker, process() per item
  gpud 256       gpud.Dispatcher, batch_size=256, every other key at its default
  gpud 256 x2    the same with workers_per_gpu=2 (two workers on one GPU)
  gpud 256 x2 copy  the same, the worker class stacking its items itself (a copy of
                 the batch, as a first port of the loop does) instead of gpud.stack

gpud's worker class hands the model one array of the batch, gpud.stack(items): no
copy (the items lie back to back in the ring; on a GPU the ring is pinned, so the
transfer is DMA from it), where the plain loop copies its items into one batch buffer
(pinned, in real mode).

It prints one table (the median images/s, and each as a share of the plain loop; the
two-worker row also as a share of two plain processes), then where each gpud worker's
time went in the last run of each gpud configuration (the stats' breakdown: waiting,
unpacking, the user's code, handing back, idle; the sizes its process_batch calls got;
its CPU time), and checks that every configuration gave every item once, with the
loop's answer.

--real: torchvision's ResNet-50 (random weights, seeded alike in every process), bf16,
channels_last, on cuda:0; the loop stages each batch in pinned memory; gpud's worker
moves its batch to the GPU in one transfer (torch.from_numpy(gpud.stack(items)); the
"copy" row: torch.frombuffer and torch.stack, then .to), normalises there and returns
the arg-max. Needs PyTorch, torchvision and a GPU; 20,000
items by default (about 5 minutes on one H100 for every row).

--proxy (the default without a GPU): a NumPy model that plays the GPU, as bench/work.c
does for C: it reads every item (a strided sum for the answer) and sleeps as long as
the H100 took for a batch of that size: 5 ms + 0.21 ms an item (batch 1: about 190
images/s, batch 256: 58.8 ms, about 4,350 images/s). 8,192 items by default (512 for
the per-item rows): a configuration then runs about 2.5 s, as long as one of the real
mode's on an H100 (20,000 items at about 12,000 images/s), so that gpud's fixed cost
at a run's start and end (the host's start, the first batch through the ring while the
worker waits, the workers' exit: about 0.1 s in all) weighs as it does there. Shorter
runs (--items 2048) show that fixed cost more: docs/benchmarks.md has both.

Rates leave out the model's setup: the plain loop's is timed apart, gpud's is each
worker's setup phase from the stats (the largest). The library's cannot be told apart:
its row includes it (negligible in proxy mode).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
H, W, C = 224, 224, 3
SIZE = H * W * C
POOL = 32  # distinct images, yielded in turn (the generator computes nothing)
BATCH = 256

# The proxy's GPU: the time a batch of n took on the H100 (ResNet-50, bf16).
GPU_FIXED_S, GPU_ITEM_S = 5e-3, 0.21e-3


def images(n, seed=1):
    """n items: bytes of one 224x224x3 image each, from a pool of POOL."""
    import numpy as np

    rng = np.random.default_rng(seed)
    pool = [rng.integers(0, 256, SIZE, dtype=np.uint8).tobytes() for _ in range(POOL)]
    return (pool[i % POOL] for i in range(n))


# ---- the models ----

class ProxyModel:
    """A NumPy stand-in for the GPU: the answer from the pixels, then a sleep."""

    def __call__(self, items):
        """items: a list of images (stacked here: the copy a plain loop makes into its
        batch buffer), or one (n, SIZE) uint8 array already (gpud.stack: no copy)."""
        import numpy as np

        a = items if isinstance(items, np.ndarray) else np.stack(
            [np.frombuffer(x, dtype=np.uint8) for x in items])
        s = a[:, ::61].astype(np.uint64).sum(axis=1)
        time.sleep(GPU_FIXED_S + GPU_ITEM_S * len(items))
        return [int(v * 2654435761 % 1000) for v in s]


class ResNet:
    """ResNet-50, random weights seeded alike everywhere, bf16, channels_last."""

    def __init__(self):
        import torch
        import torchvision
        import warnings

        warnings.filterwarnings("ignore", message=".*not writable.*")
        torch.manual_seed(0)
        self.torch = torch
        self.dev = torch.device("cuda:0")
        m = torchvision.models.resnet50()
        self.model = m.to(self.dev, dtype=torch.bfloat16).to(
            memory_format=torch.channels_last).eval()
        self.mean = torch.tensor([0.485, 0.456, 0.406], device=self.dev).view(1, 3, 1, 1) * 255
        self.std = torch.tensor([0.229, 0.224, 0.225], device=self.dev).view(1, 3, 1, 1) * 255
        self.pinned = None

    def on_gpu(self, x):
        """uint8 (n, H, W, C) on the GPU: normalised, through the model, arg-max."""
        torch = self.torch
        with torch.inference_mode():
            x = x.permute(0, 3, 1, 2).float().sub_(self.mean).div_(self.std)
            x = x.to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
            return self.model(x).argmax(1).cpu().tolist()

    def __call__(self, items):
        """As a user's worker does: frombuffer, stack, to the GPU; or, given one
        (n, SIZE) array (gpud.stack over a pinned ring), one transfer, no copy here."""
        torch = self.torch
        if not isinstance(items, (list, tuple)):
            x = torch.from_numpy(items).view(-1, H, W, C).to(self.dev, non_blocking=True)
            return self.on_gpu(x)
        x = torch.stack([torch.frombuffer(i, dtype=torch.uint8) for i in items])
        return self.on_gpu(x.view(-1, H, W, C).to(self.dev))

    def from_pinned(self, items):
        """As the plain loop does: the batch staged in one pinned buffer."""
        torch = self.torch
        if self.pinned is None:
            self.pinned = torch.empty((BATCH, H, W, C), dtype=torch.uint8).pin_memory()
        n = len(items)
        flat = self.pinned.view(BATCH, SIZE)
        for j, i in enumerate(items):
            flat[j].copy_(torch.frombuffer(i, dtype=torch.uint8))
        return self.on_gpu(self.pinned[:n].to(self.dev, non_blocking=True))


def make_model(real):
    return ResNet() if real else ProxyModel()


# ---- gpud's and the library's worker class ----

try:
    from gpud import BaseWorker
except ImportError:  # the loop alone can run without gpud
    BaseWorker = object


class ImageWorker(BaseWorker):
    """gpud's worker: the batch handed to the model as one array over the ring
    (gpud.stack: no copy; pinned where the worker has a GPU) unless copy=True, which
    stacks the items as a first port of a plain loop does (a copy of the batch)."""

    def setup(self, gpu_id, seed, real=False, copy=False):
        self.model = make_model(real)
        self.copy = copy

    def process(self, item):
        return self.model([item])[0]

    def process_batch(self, items):
        if self.copy:
            return self.model(items)
        import gpud

        return self.model(gpud.stack(items))


# ---- the configurations: each returns (images/s, answers {index: class}, stats) ----

def run_loop(n, real, batch=BATCH):
    t0 = time.perf_counter()
    model = make_model(real)
    call = model.from_pinned if real else model
    if real:  # the first call builds cuDNN's plans: part of the setup
        call([next(images(1))])
    setup = time.perf_counter() - t0
    answers, part, k = {}, [], 0
    t0 = time.perf_counter()
    for item in images(n):
        part.append(item)
        if len(part) == batch:
            for a in call(part):
                answers[k] = a
                k += 1
            part = []
    if part:
        for a in call(part):
            answers[k] = a
            k += 1
    dt = time.perf_counter() - t0
    return n / dt, answers, {"setup": setup}


def run_loop_twice(n, real):
    """Two plain loops in processes of their own at once: their rates added up."""
    cmd = [sys.executable, os.path.abspath(__file__), "--role", "loop",
           "--items", str(n // 2)] + (["--real"] if real else ["--proxy"])
    ps = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    rates = []
    for p in ps:
        out, _ = p.communicate()
        if p.returncode != 0:
            raise RuntimeError(f"a plain loop process failed (exit {p.returncode})")
        rates.append(float(out.split()[-1]))
    return sum(rates), None, {"each": rates}


def run_gpud(n, real, copy=False, **options):
    from gpud import Dispatcher

    answers = {}

    def on_success(i, r, worker_id):
        if i in answers:
            raise AssertionError(f"item {i} delivered twice")
        answers[i] = r

    t0 = time.perf_counter()
    stats = Dispatcher(ImageWorker, [0], ui="off", **options).run(
        images(n), on_success, real=real, copy=copy)
    dt = time.perf_counter() - t0
    setup = max((w.get("time_setup", 0.0) for w in stats.get("workers", [])), default=0.0)
    return n / max(dt - setup, 1e-9), answers, stats


def library_module():
    """gpu_dispatch where installed, else bench/python/library.py: the library as its
    design documents describe it (a feeder thread, multiprocessing queues, one process
    per GPU), with the same Dispatcher(worker_cls, gpu_ids).run(...) call."""
    try:
        import gpu_dispatch

        return gpu_dispatch
    except ImportError:
        sys.path.insert(0, HERE)
        import library

        return library


def run_library(n, real):
    answers = {}
    t0 = time.perf_counter()
    library_module().Dispatcher(ImageWorker, [0]).run(
        images(n), lambda i, r, w: answers.__setitem__(i, r), real=real)
    return n / (time.perf_counter() - t0), answers, {}


def library_installed():
    try:
        import gpu_dispatch  # noqa: F401
        return True
    except ImportError:
        return False


LIBRARY = ("gpu_dispatch" if library_installed() else
           "gpu_dispatch not installed: bench/python/library.py, its design rebuilt")


# ---- the table ----

def breakdown(stats):
    """Where each worker's time went, one line a worker (the stats' breakdown)."""
    lines = []
    for w in stats.get("workers", []):
        if "time_wall" not in w:
            lines.append(f"    worker {w['worker_id']}: (this gpud reports no breakdown)")
            continue
        run = max(w["time_wall"] - w["time_setup"], 1e-9)
        parts = " ".join(f"{p} {100 * w['time_' + p] / run:.0f}%" for p in
                         ("waiting", "unpacking", "user", "handing_back", "idle"))
        hist = ", ".join(f"{lo}-{hi}: {n}" if lo < hi else f"{lo}: {n}"
                         for lo, hi, n in w["call_sizes"])
        lines.append(
            f"    worker {w['worker_id']}: {parts} of {run:.2f} s after a "
            f"{w['time_setup']:.2f} s setup; {w['calls']} calls of {w['call_min']}/"
            f"{w['call_median']}/{w['call_max']} items (min/median/max; {hist}); "
            f"CPU {w['cpu']:.2f} s, main thread {w['main_thread_cpu']:.2f} s")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--real", action="store_true", help="ResNet-50 on a GPU")
    mode.add_argument("--proxy", action="store_true", help="a NumPy model that sleeps")
    ap.add_argument("--items", type=int, help="items per configuration")
    ap.add_argument("--per-item", type=int, help="items for the per-item rows")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", help="comma-separated configurations to run")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    a = ap.parse_args()
    real = a.real
    if not a.real and not a.proxy and a.role is None:
        try:
            import torch
            import torchvision  # noqa: F401
            real = torch.cuda.is_available()
        except ImportError:
            real = False
    n = a.items or (20000 if real else 8192)
    if a.role == "loop":
        rate, _, _ = run_loop(n, real)
        print(f"{rate:.1f}")
        return 0
    per_item = a.per_item or min(n, 2000 if real else 512)

    configs = [
        ("loop", "plain loop in one process, batches of 256", n,
         lambda k: run_loop(k, real)),
        ("loop x2", "two such processes at once on the same GPU", n,
         lambda k: run_loop_twice(k, real)),
        ("loop 1", "plain loop, batch 1", per_item, lambda k: run_loop(k, real, batch=1)),
        ("library", f"the library ({LIBRARY}), 1 worker, per item", per_item,
         lambda k: run_library(k, real)),
        ("gpud 1", "gpud.Dispatcher, 1 worker, per item", per_item,
         lambda k: run_gpud(k, real, chunksize=None)),
        ("gpud 256", "gpud.Dispatcher, batch_size=256, other keys default", n,
         lambda k: run_gpud(k, real, batch_size=BATCH)),
        ("gpud 256 x2", "the same with workers_per_gpu=2", n,
         lambda k: run_gpud(k, real, batch_size=BATCH, workers_per_gpu=2)),
        ("gpud 256 x2 copy", "the same, the class stacking its items (a copy)", n,
         lambda k: run_gpud(k, real, copy=True, batch_size=BATCH, workers_per_gpu=2)),
    ]
    if a.only:
        keep = set(a.only.split(","))
        configs = [c for c in configs if c[0] in keep or c[0] == "loop"]
    skipped = {}
    try:
        import gpud  # noqa: F401
    except ImportError:
        for c in configs:
            if c[0].startswith("gpud"):
                skipped[c[0]] = ("skipped: no gpud package in this Python (./build.sh "
                                 f"python {sys.executable})")

    where = "one GPU (--real)" if real else "proxy mode: a NumPy model that sleeps"
    print(f"trial: {n} items of {SIZE:,} bytes ({per_item} for the per-item rows), "
          f"{a.repeats} rounds, {where}; {sys.executable}", flush=True)
    rates = {c[0]: [] for c in configs}
    answers_of, last_stats = {}, {}
    for r in range(a.repeats):
        for key, _, k, fn in configs:
            if key in skipped:
                continue
            rate, answers, stats = fn(k)
            rates[key].append(rate)
            if answers is not None:
                answers_of.setdefault(key, []).append(answers)
            last_stats[key] = stats
            print(f"  round {r + 1}: {key:12s} {rate:10.1f} images/s", flush=True)

    loop = statistics.median(rates["loop"])
    two = statistics.median(rates["loop x2"]) if rates.get("loop x2") else None
    print()
    print(f"| configuration ({'one GPU' if real else 'proxy'}) | images/s | of the plain loop |")
    print("| --- | --- | --- |")
    for key, text, _, _ in configs:
        if key in skipped:
            print(f"| {text} | {skipped[key]} | |")
            continue
        m = statistics.median(rates[key])
        share = f"{100 * m / loop:.0f}%"
        if key == "gpud 256 x2" and two:
            share += f" ({100 * m / two:.0f}% of two processes)"
        if key == "loop x2":
            each = last_stats[key]["each"]
            print(f"| {text} | {each[0]:,.0f} + {each[1]:,.0f} (last round) | {share} |")
            continue
        print(f"| {text} | {m:,.0f} | {share} |")

    # every item once, with the loop's answer
    want = answers_of["loop"][0]
    wrong = []
    for key, runs in answers_of.items():
        for got in runs:
            k = len(got)
            if sorted(got) != list(range(k)) or any(got[i] != want[i] for i in got):
                bad = sum(1 for i in got if i not in want or got[i] != want[i])
                wrong.append(f"{key}: {k} items, {bad} answers unlike the loop's")
    print()
    for key, _, _, _ in configs:
        if key.startswith("gpud") and key in last_stats:
            print(f"where {key}'s workers' time went (last round):")
            for line in breakdown(last_stats[key]):
                print(line)
    print()
    if wrong:
        print("answers: NOT all equal to the loop's: " + "; ".join(wrong))
        return 1
    print("answers: every item once in every configuration, each the loop's answer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
