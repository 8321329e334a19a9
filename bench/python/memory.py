# SPDX-License-Identifier: MIT
"""The memory an image job takes: gpud.Dispatcher with stages=[gpud.Stage("jpeg")]
against the same job as a job file (tar shards -> the jpeg stage -> a Python worker
class -> the null sink), both on two GPU ids with batch_size 64:

    PYTHONPATH=BUILD/python /usr/bin/python3 bench/python/memory.py [IMAGES] [--set K=V]...

IMAGES (2000) JPEGs of 500 x 375 (noise over gradients, quality 90: about 150 KB each,
made with Pillow) are decoded and resized to 224 x 224. Each case runs in a process of
its own; every 50 ms the PSS of that process and of every process below it (its
workers) is summed from /proc/PID/smaps_rollup, and the largest sum is the case's
figure. Prints, for each case, the peak PSS, the shared memory `check` plans for it, and
the images/s. `--set job.max_task_bytes=256K` (any job key) applies to both cases.
Needs NumPy and Pillow (Debian: python3-numpy, python3-pil) and libarchive for `tar`.
"""
import os
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
H = W = 224
BATCH = 64

WORKER = '''
import numpy as np


class Model:
    def setup(self, gpu_id, seed, **kw):
        pass

    def process_batch(self, imgs):
        out = []
        for m in imgs:
            a = np.frombuffer(m, np.uint8) if not isinstance(m, np.ndarray) else m
            out.append(a.reshape(-1, 3).mean(0).astype(np.float32).tobytes())
        return out

    def process(self, img):
        return self.process_batch([img])[0]
'''

DISPATCHER = '''
import glob, json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpud
from model import Model

files = sorted(glob.glob(os.path.join(sys.argv[1], "*.jpg")))
extra = json.loads(sys.argv[2])
ok = [0]

def on_success(task_id, result, worker_id):
    ok[0] += 1

def items():
    for f in files:
        with open(f, "rb") as fh:
            yield fh.read()

opts = dict(stages=[gpud.Stage("jpeg", height=%d, width=%d)], batch_size=%d, ui="off")
opts.update(extra)
d = gpud.Dispatcher(Model, [0, 1], **opts)
if hasattr(d, "check"):
    plan = d.check(items())
    print("PLAN", plan["total"], flush=True)
stats = d.run(items(), on_success)
print("OK", ok[0], flush=True)
''' % (H, W, BATCH)


def make_images(folder, n):
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(7)
    yy, xx = np.mgrid[0:375, 0:500]
    paths = []
    for i in range(n):
        base = np.stack([(xx * (i % 7 + 1) / 4) % 256, (yy * (i % 5 + 1) / 3) % 256,
                         ((xx + yy) * (i % 3 + 1) / 5) % 256], -1)
        img = np.clip(base + rng.normal(0, 48, base.shape), 0, 255).astype(np.uint8)
        p = os.path.join(folder, f"{i:06d}.jpg")
        Image.fromarray(img).save(p, quality=90)
        paths.append(p)
    return paths


def make_shards(folder, paths, per=500):
    shards = []
    for s in range(0, len(paths), per):
        t = os.path.join(folder, f"shard-{s // per:03d}.tar")
        with tarfile.open(t, "w") as tf:
            for p in paths[s:s + per]:
                tf.add(p, arcname=os.path.basename(p))
        shards.append(t)
    return shards


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure(cmd, env, cwd):
    """(peak PSS in bytes over the process tree, seconds, output)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    peak = 0
    while p.poll() is None:
        peak = max(peak, sum(pss_kib(x) for x in descendants(p.pid)))
        time.sleep(0.05)  # the sampling period, not a wait for a state
    out = p.stdout.read()
    return peak * 1024, time.monotonic() - t0, out, p.returncode


def main():
    args = sys.argv[1:]
    sets = []
    while "--set" in args:
        i = args.index("--set")
        sets.append(args[i + 1])
        del args[i:i + 2]
    n = int(args[0]) if args else 2000
    gpud_exe = os.environ.get("GPUD") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__import__("gpud").__file__))),
        "..", "daemon", "gpud")
    gpud_exe = os.path.abspath(gpud_exe)
    tmp = tempfile.mkdtemp(prefix="gpud-memory-")
    imgs = os.path.join(tmp, "images")
    os.mkdir(imgs)
    paths = make_images(imgs, n)
    sizes = [os.path.getsize(p) for p in paths]
    make_shards(tmp, paths)
    with open(os.path.join(tmp, "model.py"), "w") as f:
        f.write(WORKER)
    with open(os.path.join(tmp, "disp.py"), "w") as f:
        f.write(DISPATCHER)
    job = ["[job]", "gpus = 0,1", f"batch_size = {BATCH}", f"python = {sys.executable}",
           "[generator]", "plugin = tar", "path = shard-*.tar", "member = jpg",
           "[stage.jpeg]", "plugin = jpeg", f"height = {H}", f"width = {W}",
           "[worker]", "plugin = python", "script = model.py", "class = Model",
           "[sink]", "plugin = null"]
    with open(os.path.join(tmp, "job.ini"), "w") as f:
        f.write("\n".join(job) + "\n")
    print(f"{n} JPEGs of 500 x 375, mean {sum(sizes) / n / 1e3:.0f} KB "
          f"(largest {max(sizes) / 1e3:.0f} KB), to {H} x {W} x 3, batch_size {BATCH}, "
          f"2 GPU ids; --set {' '.join(sets) or '(none)'}", flush=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(x) for x in
                                        env.get("PYTHONPATH", "").split(os.pathsep) if x)
    extra = {}
    for s in sets:
        k, v = s.split("=", 1)
        extra.setdefault("keys", {})[k] = v
    setargs = [a for s in sets for a in ("--set", s)]
    check = subprocess.run([gpud_exe, "check", "job.ini"] + setargs, cwd=tmp, env=env,
                           capture_output=True, text=True)
    planned = [line for line in check.stdout.splitlines() if "shared memory:" in line]
    cases = [
        ("job file", [gpud_exe, "run", "job.ini", "--ui", "off"] + setargs,
         planned[0].split(":", 1)[1].split(",")[0].strip() if planned else "?"),
        ("Dispatcher", [sys.executable, "disp.py", imgs, __import__("json").dumps(extra)], None),
    ]
    for name, cmd, plan in cases:
        peak, secs, out, rc = measure(cmd, env, tmp)
        if plan is None:
            got = [line.split()[1] for line in out.splitlines() if line.startswith("PLAN ")]
            plan = f"{int(got[0]) / 2**20:.1f} MiB" if got else "? (no Dispatcher.check)"
        status = "ok" if rc in (0,) else f"exit {rc}: {out[-600:]}"
        print(f"{name:10s}  peak PSS {peak / 2**20:7.1f} MiB  planned shared memory {plan:>10s}"
              f"  {n / secs:6.0f} images/s  ({status})", flush=True)
    subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
