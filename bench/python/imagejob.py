# SPDX-License-Identifier: MIT
"""The image job end to end (issue 41's own check), three ways, alternated:

    PYTHONPATH=build/python /usr/bin/python3 bench/python/imagejob.py \\
        [--images 20000] [--shards 20] [--rounds 3] [--corrupt-images 3551]
        [--output float32|uint8] [--set job.KEY=V]... [--only PATHS] [--dir DIR]

The data: IMAGES photo-like JPEGs (gradients under noise, 500 x 375, one in four
375 x 500, Pillow quality 90: about 150 KB each) in SHARDS WebDataset tar shards, each
sample a `.jpg` and a `.cls` member (its label). The job: decode, resize the shorter
side to 224, centre crop 224, ToTensor and Normalize with ImageNet's mean and std
(float32 CHW), a batch-64 stand-in model on two GPU ids (gpus = 0,1; with no GPU the
model sleeps as a GPU would take, 4 ms x (1 + n/64) a call, after a small NumPy
reduction of every tensor), each result carrying the sample's key and label.

  job file     `gpud run`: tar `members = jpg,cls` -> the jpeg stage (`mode = exact`,
               `resize = 224`, `crop = 224`, `output = float32`, mean/std) -> this
               file's ImageModel (`input = sample`, process_batch) -> the jsonl sink
  Dispatcher   gpud.Dispatcher(ImageModel, [0, 1], batch_size=64, stages=[gpud.Stage(
               "jpeg", ...)], generator={"plugin": "tar", ..., "members": "jpg,cls"}),
               results to on_success(..., key=)
  library      bench/python/library.py (the library gpud grew from, its design
               rebuilt), the shards read by tarfile in its feeder, Pillow+NumPy decoding
               in the worker's process(), one item a call (the library has no batches)

There is no DataLoader row: torch is not a dependency of this benchmark.

Each path runs in a process tree of its own whose PSS is summed every 50 ms (memory.py's
sampler). Per path it prints images/s (the whole process's wall time, and the run less
its workers' largest setup where the stats give it), the peak PSS, the share of
process_batch calls that got a full 64 (counted in the worker), and checks: every sample
once, each with its key and its label (the shard's `.cls`), and for every
SAMPLE_EVERY-th image the tensor the model got against Pillow+NumPy's (within one grey
level: 1/255/std). Then, on CORRUPT_IMAGES images with two corrupt ones (one cut short,
one with garbage after its SOI marker), every path must give exactly those two
failures and every other sample once. Exit 1 when a check fails.
--output uint8: the stage gives uint8 pixels and the model normalises them (as it would
on its GPU: a quarter of the bytes in every ring). --set job.KEY=V: a job key for the
job file (gpud run --set) and the Dispatcher (keys=), e.g. job.max_task_bytes=256K.
--dir DIR keeps the data there and reuses it on the next run.
Needs NumPy, Pillow and a gpud build with the python plugins and libarchive.
"""
import argparse
import glob
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SIZE = 224
BATCH = 64
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
GPU_CALL_S = 4e-3  # the stand-in GPU: 4 ms x (1 + n/64) a call


# ---- the model, the same class in every path ----

def pillow_tensor(data):
    """Pillow+NumPy as torchvision's Resize(224), CenterCrop(224), ToTensor, Normalize
    do it on a PIL image: (3, 224, 224) float32."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        im = im.convert("RGB")
        w, h = im.size
        size = (SIZE, int(SIZE * h / w)) if w <= h else (int(SIZE * w / h), SIZE)
        im = im.resize(size, Image.BILINEAR)
        w, h = im.size
        top, left = int(round((h - SIZE) / 2.0)), int(round((w - SIZE) / 2.0))
        a = np.asarray(im.crop((left, top, left + SIZE, top + SIZE)), dtype=np.float32)
    a = a.transpose(2, 0, 1) / np.float32(255)
    return ((a - np.array(MEAN, np.float32)[:, None, None]) /
            np.array(STD, np.float32)[:, None, None]).astype(np.float32)


def sample_index(key):
    return int(key.rsplit("-", 1)[1])


class ImageModel:
    """The stand-in model: each sample's tensor reduced, then a sleep as long as the GPU
    would take for the call. With decode="pillow" (the library) it decodes the JPEG
    itself. Every SAVE_EVERY-th sample's tensor is saved to SAVE_DIR (KEY.npy) for the
    check against Pillow."""

    def setup(self, gpu_id, seed, save_dir="", save_every="0", decode="", **kw):
        self.save_dir, self.every = save_dir, int(save_every)
        self.decode = decode == "pillow"
        self.pid, self.calls = os.getpid(), 0

    def tensor(self, img):
        if self.decode:
            return pillow_tensor(bytes(img))
        if not isinstance(img, np.ndarray):
            img = np.frombuffer(img, np.uint8 if len(img) == SIZE * SIZE * 3 else np.float32)
        if img.dtype == np.float32:
            return img.reshape(3, SIZE, SIZE)
        # output = uint8: ToTensor and Normalize here, as the model would on its GPU
        a = img.reshape(SIZE, SIZE, 3).transpose(2, 0, 1) / np.float32(255)
        return ((a - np.array(MEAN, np.float32)[:, None, None]) /
                np.array(STD, np.float32)[:, None, None]).astype(np.float32)

    def process_batch(self, samples):
        self.calls += 1
        out = []
        for s in samples:
            key = s["__key__"]
            x = self.tensor(s["jpg"])
            if x.dtype != np.float32 or x.shape != (3, SIZE, SIZE):
                raise ValueError(f"sample {key}: a tensor of {x.dtype} {x.shape}")
            if self.every and sample_index(key) % self.every == 0:
                np.save(os.path.join(self.save_dir, key + ".npy"), x)
            cls = bytes(s["cls"]).decode()
            out.append({"key": key, "cls": int(cls), "pred": float(x[:, ::16, ::16].sum()),
                        "call": f"{self.pid}:{self.calls}", "n": len(samples)})
        time.sleep(GPU_CALL_S * (1 + len(samples) / BATCH))
        return out

    def process(self, sample):
        return self.process_batch([sample])[0]

    def cleanup(self):
        pass


# ---- the data ----

def make_dataset(folder, n, shards, corrupt=(), seed=5):
    """n samples in `shards` tar shards under folder; returns {key: label} and the
    corrupt keys."""
    from PIL import Image

    made = os.path.join(folder, "labels.json")
    want = [n, shards, sorted(corrupt), seed]
    if os.path.exists(made):  # made before in this --dir
        with open(made) as f:
            m = json.load(f)
        if m["made"] == want:
            return m["labels"], m["bad"]
    rng = np.random.default_rng(seed)
    noise = rng.normal(0, 56, (900, 900, 3)).astype(np.float32)
    yy, xx = np.mgrid[0:500, 0:500].astype(np.float32)
    labels, bad = {}, []
    per = -(-n // shards)
    os.makedirs(folder, exist_ok=True)
    for s in range(shards):
        with tarfile.open(os.path.join(folder, f"shard-{s:03d}.tar"), "w") as tf:
            for i in range(s * per, min(n, (s + 1) * per)):
                w, h = (375, 500) if i % 4 == 3 else (500, 375)
                oy, ox = rng.integers(0, 900 - h), rng.integers(0, 900 - w)
                f = (i % 7 + 1, i % 5 + 1, i % 3 + 1)
                base = np.stack([(xx[:h, :w] * f[0] / 4) % 256, (yy[:h, :w] * f[1] / 3) % 256,
                                 128 + 90 * np.sin((xx[:h, :w] + f[2] * yy[:h, :w]) / 29.0)], -1)
                img = np.clip(base + noise[oy:oy + h, ox:ox + w], 0, 255).astype(np.uint8)
                buf = io.BytesIO()
                Image.fromarray(img).save(buf, "JPEG", quality=90)
                data = buf.getvalue()
                key = f"s{s:03d}-{i:06d}"
                if i in corrupt:  # one cut short, the next garbage after SOI
                    data = (data[:len(data) * 2 // 5] if len(bad) % 2 == 0 else
                            data[:2] + bytes(rng.integers(0, 256, 4096, dtype=np.uint8)) +
                            data[4098:])
                    bad.append(key)
                label = int(i * 7919 % 1000)
                labels[key] = label
                for ext, b in (("jpg", data), ("cls", str(label).encode())):
                    ti = tarfile.TarInfo(f"{key}.{ext}")
                    ti.size = len(b)
                    tf.addfile(ti, io.BytesIO(b))
    with open(made, "w") as f:
        json.dump({"made": want, "labels": labels, "bad": bad}, f)
    return labels, bad


def read_shards(folder):
    """The library's feeder: every sample of the shards as a WebDataset dict."""
    for path in sorted(glob.glob(os.path.join(folder, "*.tar"))):
        with tarfile.open(path) as tf:
            sample = None
            for m in tf:
                key, ext = m.name.split(".", 1)
                if sample is not None and sample["__key__"] != key:
                    yield sample
                    sample = None
                if sample is None:
                    sample = {"__key__": key}
                sample[ext] = tf.extractfile(m).read()
            if sample is not None:
                yield sample


# ---- the three paths, each run as a process of its own ----

STAGE = {"resize": "224", "crop": "224", "output": "float32", "mode": "exact",
         "mean": ",".join(map(str, MEAN)), "std": ",".join(map(str, STD))}


def stage_keys(output):
    """The jpeg stage's keys: float32 with mean/std, or uint8 (the model normalises)."""
    if output == "float32":
        return dict(STAGE)
    return {k: v for k, v in STAGE.items() if k not in ("mean", "std", "output")}


def role_dispatcher(data, out, save_dir, every, output, sets):
    import gpud

    ok, failed = [], []

    def on_success(task_id, result, worker_id, key=None):
        ok.append([task_id, key, result])

    def on_error(task_id, error, worker_id, key=None):
        failed.append([task_id, key, error])

    t0 = time.perf_counter()
    d = gpud.Dispatcher(ImageModel, [0, 1], batch_size=BATCH, ui="off",
                        keys=dict(kv.split("=", 1) for kv in sets),
                        stages=[gpud.Stage("jpeg", **stage_keys(output))],
                        generator={"plugin": "tar", "path": os.path.join(data, "*.tar"),
                                   "members": "jpg,cls"})
    stats = d.run(None, on_success, on_error=on_error, save_dir=save_dir,
                  save_every=str(every))
    wall = time.perf_counter() - t0
    setup = max((w.get("time_setup", 0.0) for w in stats.get("workers", [])), default=0.0)
    with open(out, "w") as f:
        json.dump({"ok": ok, "failed": failed, "run": wall, "setup": setup,
                   "stats": {k: stats.get(k) for k in ("completed", "failed", "total")}}, f)


def role_library(data, out, save_dir, every, output, sets):
    sys.path.insert(0, HERE)
    import library

    ok, failed, keys = [], [], {}

    def items():
        for i, s in enumerate(read_shards(data)):
            keys[i] = s["__key__"]
            yield s

    t0 = time.perf_counter()
    library.Dispatcher(ImageModel, [0, 1]).run(
        items(), lambda i, r, w: ok.append([i, keys[i], r]),
        on_error=lambda i, e, w: failed.append([i, keys[i], e.strip().splitlines()[-1]]),
        save_dir=save_dir, save_every=str(every), decode="pillow")
    wall = time.perf_counter() - t0
    with open(out, "w") as f:
        json.dump({"ok": ok, "failed": failed, "run": wall, "setup": None}, f)


def job_file(work, data, save_dir, every, output):
    room = ["; the largest JPEG, and the stage's float32 sample: 3 x 224 x 224 x 4 = 588 KiB",
            "max_task_bytes = 640K", "max_result_bytes = 640K"] if output == "float32" else [
            "; the largest JPEG, and the stage's uint8 sample: 224 x 224 x 3 = 147 KiB",
            "max_task_bytes = 256K", "max_result_bytes = 256K"]
    lines = ["[job]", "gpus = 0,1", f"batch_size = {BATCH}", f"python = {sys.executable}"] + room + [
             "[generator]", "plugin = tar", f"path = {os.path.join(data, '*.tar')}",
             "members = jpg,cls", "[stage.decode]", "plugin = jpeg"]
    lines += [f"{k} = {v}" for k, v in stage_keys(output).items()]
    lines += ["[worker]", "plugin = python", f"script = {os.path.abspath(__file__)}",
              "class = ImageModel", "input = sample", "result = json",
              f"save_dir = {save_dir}", f"save_every = {every}",
              "[sink]", "plugin = jsonl", f"path = {os.path.join(work, 'out.jsonl')}"]
    path = os.path.join(work, "job.ini")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def read_job_output(work):
    ok, failed = [], []
    with open(os.path.join(work, "out.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            if e["status"] == "ok":
                ok.append([e["task_id"], e.get("key"), json.loads(e["result"])])
            else:
                failed.append([e["task_id"], e.get("key"), e.get("error", e["status"])])
    with open(os.path.join(work, "stats.json")) as f:
        stats = json.load(f)
    setup = max((w.get("time_setup", 0.0) for w in stats.get("workers", [])), default=0.0)
    return {"ok": ok, "failed": failed, "run": stats["elapsed"], "setup": setup}


def gpud_exe():
    import gpud

    exe = os.environ.get("GPUD") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(gpud.__file__))), "..", "daemon", "gpud")
    return os.path.abspath(exe)


def run_path(name, data, work, every, output="float32", sets=()):
    """One path in a process tree of its own: (results, peak PSS bytes, wall s)."""
    sys.path.insert(0, HERE)
    from memory import measure

    if os.path.isdir(work):
        subprocess.run(["rm", "-rf", work], check=True)
    save = os.path.join(work, "tensors")
    os.makedirs(save)
    out = os.path.join(work, "result.json")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(x) for x in
                                        env.get("PYTHONPATH", "").split(os.pathsep) if x)
    if name == "job file":
        cmd = [gpud_exe(), "run", job_file(work, data, save, every, output), "--ui", "off",
               "--stats-json", os.path.join(work, "stats.json")]
        cmd += [x for kv in sets for x in ("--set", kv)]
    else:
        cmd = [sys.executable, os.path.abspath(__file__), "--role",
               "dispatcher" if name == "Dispatcher" else "library", data, out, save, str(every),
               output, json.dumps(list(sets))]
    peak, wall, text, rc = measure(cmd, env, work)
    if name == "job file":
        if rc not in (0, 1):  # 1: some tasks failed
            sys.exit(f"{name}: exit {rc}: {text[-1500:]}")
        res = read_job_output(work)
    else:
        if rc != 0:
            sys.exit(f"{name}: exit {rc}: {text[-1500:]}")
        with open(out) as f:
            res = json.load(f)
    res["save"] = save
    return res, peak, wall


# ---- the checks ----

REFS = {}


def check(name, res, labels, bad, data_tensors):
    """Problems found (a list of lines) and the figures: full-batch share, tensors
    compared, their largest difference in grey levels."""
    problems, seen = [], {}
    for task_id, key, r in res["ok"]:
        if key != r["key"]:
            problems.append(f"{name}: task {task_id}: key {key!r} arrived with the result "
                            f"of sample {r['key']!r}")
        if r["key"] in seen:
            problems.append(f"{name}: sample {r['key']} arrived twice")
        seen[r["key"]] = r
        if labels.get(r["key"]) != r["cls"]:
            problems.append(f"{name}: sample {r['key']}: label {r['cls']}, the shard's "
                            f"{labels.get(r['key'])}")
    failed = sorted(k for _, k, _ in res["failed"])
    if failed != sorted(bad):
        problems.append(f"{name}: failures {failed} ({[e[:120] for _, _, e in res['failed']]})"
                        f", expected {sorted(bad)}")
    missing = set(labels) - set(seen) - set(failed)
    if missing:
        problems.append(f"{name}: {len(missing)} samples with no outcome, e.g. "
                        f"{sorted(missing)[:3]}")
    calls = {}
    for _, _, r in res["ok"]:
        calls[r["call"]] = r["n"]
    full = sum(1 for n in calls.values() if n == BATCH) / max(len(calls), 1)
    short = sorted((n for n in calls.values() if n != BATCH), reverse=True)
    worst, compared = 0.0, 0
    for p in sorted(glob.glob(os.path.join(res["save"], "*.npy"))):
        key = os.path.basename(p)[:-4]
        if key not in REFS:
            REFS[key] = pillow_tensor(data_tensors(key))
        got = np.load(p)
        levels = (np.abs(got - REFS[key]) * np.array(STD, np.float32)[:, None, None] * 255).max()
        worst, compared = max(worst, float(levels)), compared + 1
        if levels > 1.0 + 1e-3:
            problems.append(f"{name}: sample {key}: tensor {levels:.2f} grey levels from "
                            "Pillow+NumPy's")
    if compared == 0 and res["ok"]:
        problems.append(f"{name}: no tensor was saved to compare")
    return problems, {"full": full, "calls": len(calls), "compared": compared,
                      "worst": worst, "ok": len(seen), "failed": len(failed), "short": short}


def jpeg_reader(folder):
    index = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.tar"))):
        with tarfile.open(path) as tf:
            for m in tf:
                if m.name.endswith(".jpg"):
                    index[m.name[:-4]] = (path, m.offset_data, m.size)

    def read(key):
        path, off, size = index[key]
        with open(path, "rb") as f:
            f.seek(off)
            return f.read(size)
    return read


PATHS = ("job file", "Dispatcher", "library")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=20000)
    ap.add_argument("--shards", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--corrupt-images", type=int, default=3551)
    ap.add_argument("--corrupt-at", default="1000,2600", help="positions of the 2 corrupt")
    ap.add_argument("--sample-every", type=int, default=97)
    ap.add_argument("--only", help="comma-separated paths (job file,Dispatcher,library)")
    ap.add_argument("--dir", help="work folder (kept; default: a temporary one, removed)")
    ap.add_argument("--output", choices=("float32", "uint8"), default="float32",
                    help="the stage's output (uint8: the model normalises)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=V",
                    help="a job key (section.key=value) for the job file (gpud run --set) "
                    "and the Dispatcher (keys=)")
    ap.add_argument("--role", nargs=7, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role:
        role, data, out, save, every, output, sets = a.role
        (role_dispatcher if role == "dispatcher" else role_library)(data, out, save, int(every),
                                                                    output, json.loads(sets))
        return 0
    paths = [p for p in PATHS if not a.only or p in a.only.split(",")]
    top = a.dir or tempfile.mkdtemp(prefix="gpud-imagejob-")
    os.makedirs(top, exist_ok=True)
    print(f"imagejob: {a.images} images in {a.shards} shards, {a.rounds} rounds, the stage's "
          f"output {a.output}; --set {' '.join(a.set) or '(none)'}; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; {sys.executable}; "
          f"{time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    t = time.monotonic()
    data = os.path.join(top, "shards")
    labels, _ = make_dataset(data, a.images, a.shards)
    sizes = [m.size for p in glob.glob(os.path.join(data, "*.tar"))
             for m in tarfile.open(p) if m.name.endswith(".jpg")]
    print(f"  data: {len(sizes)} JPEGs, mean {np.mean(sizes) / 1e3:.0f} KB, largest "
          f"{max(sizes) / 1e3:.0f} KB ({time.monotonic() - t:.0f} s to make)", flush=True)
    read = jpeg_reader(data)
    problems, figs, loads = [], {p: [] for p in paths}, []
    for r in range(a.rounds):
        for p in paths:
            l0 = os.getloadavg()[0]
            res, peak, wall = run_path(p, data, os.path.join(top, "run"), a.sample_every,
                                       a.output, a.set)
            loads.append((l0, os.getloadavg()[0]))
            bad, f = check(p, res, labels, [], read)
            problems += bad
            f.update(wall=wall, rate=a.images / wall, peak=peak, run=res["run"],
                     rate_run=a.images / (res["run"] - (res["setup"] or 0.0)))
            figs[p].append(f)
            print(f"  round {r + 1} {p:10s} {f['rate']:6.0f} images/s wall ({wall:.1f} s), "
                  f"{f['rate_run']:6.0f} less setup; peak PSS {peak / 2**20:6.0f} MiB; full "
                  f"batches {100 * f['full']:5.1f}% of {f['calls']} calls; {f['ok']} ok, "
                  f"{f['failed']} failed; {f['compared']} tensors, largest difference "
                  f"{f['worst']:.3f} levels; load {l0:.2f}->{loads[-1][1]:.2f}"
                  + ("" if not bad else f"; {len(bad)} PROBLEMS"), flush=True)
            if p != "library" and f["short"]:
                print(f"    the calls short of {BATCH}: {f['short'][:24]}", flush=True)
    med = {p: {k: statistics.median(x[k] for x in figs[p]) for k in
               ("rate", "rate_run", "peak", "full")} for p in paths}
    print(f"\nmedians of {a.rounds} rounds, {a.images} images (load average over the rounds "
          f"{statistics.mean(x for ab in loads for x in ab):.2f}, the machine shared):")
    print("| path | images/s (wall) | images/s (less setup) | peak PSS | full batches |")
    print("| --- | --- | --- | --- | --- |")
    for p in paths:
        m = med[p]
        full = "n/a (one item a call)" if p == "library" else f"{100 * m['full']:.1f}%"
        print(f"| {p} | {m['rate']:,.0f} | {m['rate_run']:,.0f} | {m['peak'] / 2**20:,.0f} MiB "
              f"| {full} |")
    if "library" in med:
        for p in paths[:-1] if paths[-1] == "library" else []:
            print(f"  {p} / library: {med[p]['rate'] / med['library']['rate']:.2f}x (wall), "
                  f"{med[p]['rate_run'] / med['library']['rate_run']:.2f}x (less setup)")
    print("  DataLoader: no row (torch is not installed for this benchmark)")

    if a.corrupt_images:
        at = {int(x) for x in a.corrupt_at.split(",")}
        cdata = os.path.join(top, "corrupt")
        clabels, cbad = make_dataset(cdata, a.corrupt_images, max(1, a.corrupt_images // 1000),
                                     corrupt=at, seed=9)
        cread = jpeg_reader(cdata)
        REFS.clear()  # the same keys name other images here
        print(f"\n{a.corrupt_images} images, corrupt: {', '.join(cbad)} (cut short; garbage "
              "after SOI)")
        for p in paths:
            res, peak, wall = run_path(p, cdata, os.path.join(top, "run"), a.sample_every,
                                       a.output, a.set)
            bad, f = check(p, res, clabels, cbad, cread)
            problems += bad
            print(f"  {p:10s} {f['ok']} ok, {f['failed']} failed", flush=True)
            for _, k, e in sorted(res["failed"], key=lambda x: str(x[1])):
                print(f"    {k}: {e.strip().splitlines()[-1][:240]}")
    if not a.dir:
        subprocess.run(["rm", "-rf", top])
    print()
    if problems:
        print(f"PROBLEMS ({len(problems)}):")
        for line in problems[:40]:
            print("  " + line)
        return 1
    print("checks: every sample once with its key and label in every path; tensors within "
          "one grey level of Pillow+NumPy's; exactly the corrupt images failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
