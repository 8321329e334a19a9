# SPDX-License-Identifier: MIT
"""The jpeg stage's two modes measured side by side in one run:
    /usr/bin/python3 bench/jpeg_modes.py [BUILD_DIR] [REPEATS] [IMAGES]
IMAGES tasks over 40 photo-like JPEGs (gradients, edges and noise) of 500 x 375 and
375 x 500 (quality 95, about 130 KB: mode = fast has no smaller scale there and decodes
whole), then of 1000 x 750 (quality 90, about 350 KB: fast decodes at 1/2); each job `resize = 224`, `crop = 224` through ONE stage worker (one
core) in front of the echo worker, results to the null sink; mode = exact and mode =
fast alternate REPEATS times, the best of each printed as images/s. Then each mode's
pixels against Pillow's (Image.open(f).convert("RGB"), resize (bilinear) as
torchvision's Resize(224), CenterCrop(224)): largest and mean difference in grey
levels and the relative L2 difference; and Pillow's own rate doing the same in this
process, for scale. Needs Pillow and NumPy (python3-pil,
python3-numpy)."""
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from PIL import Image

B = sys.argv[1] if len(sys.argv) > 1 else "build"
R = int(sys.argv[2]) if len(sys.argv) > 2 else 3
N = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
GPUD = os.path.abspath(os.path.join(B, "daemon", "gpud"))

GEN = '''import json
import os
def inputs(folder, count):
    names = sorted(os.listdir(folder))
    for i in range(int(count)):
        with open(os.path.join(folder, names[i % len(names)]), "rb") as f:
            yield f.read()
'''


def photo(rng, w, h):
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x * 255.0 / w, y * 255.0 / h, 128 + 80 * np.sin((x + 2 * y) / 23.0)], -1)
    edges = 60 * (((x // 37) + (y // 29)) % 2)[..., None]
    return Image.fromarray(np.clip(a + edges + rng.normal(0, 16, a.shape), 0, 255)
                           .astype(np.uint8))


def job(d, mode, count, sink):
    with open(os.path.join(d, "job.ini"), "w") as f:
        f.write(f"[job]\ngpus = 0\npython = {sys.executable}\n"
                f"[stage.decode]\nplugin = jpeg\nresize = 224\ncrop = 224\nmode = {mode}\n"
                "workers = 1\n[worker]\nplugin = echo\n"
                "[generator]\nplugin = python\nscript = gen.py\nfunction = inputs\n"
                f"folder = imgs\ncount = {count}\n[sink]\n{sink}\n")
    t = time.monotonic()
    r = subprocess.run([GPUD, "run", "job.ini", "--ui", "off", "--stats-json", "stats.json"],
                       cwd=d, capture_output=True, text=True, env=dict(os.environ, TMPDIR=d))
    if r.returncode != 0:
        sys.exit(f"{mode}: exit {r.returncode}: {r.stderr[-800:]}")
    wall = time.monotonic() - t
    with open(os.path.join(d, "stats.json")) as f:
        stats = json.load(f)
    # The stage worker's time in process(): its busy fraction of the run.
    busy = next(s["busy"] for s in stats["stages"] if s["name"] == "decode")
    return wall, busy * stats["elapsed"]


def pillow(path):
    with Image.open(path) as im:
        im = im.convert("RGB")
        w, h = im.size
        size = (224, int(224 * h / w)) if w <= h else (int(224 * w / h), 224)
        im = im.resize(size, Image.BILINEAR)
        w, h = im.size
        top, left = int(round((h - 224) / 2.0)), int(round((w - 224) / 2.0))
        return np.asarray(im.crop((left, top, left + 224, top + 224))).astype(np.float64)


def main():
    for w, h, q in ((500, 375, 95), (1000, 750, 90)):
        bench(w, h, q)


def bench(w, h, quality):
    with tempfile.TemporaryDirectory(prefix="gpud-jpegbench-") as d:
        os.makedirs(os.path.join(d, "imgs"))
        rng = np.random.default_rng(1)
        sizes = []
        for i in range(40):
            p = os.path.join(d, "imgs", f"{i:03d}.jpg")
            photo(rng, *((w, h) if i % 2 else (h, w))).save(p, quality=quality)
            sizes.append(os.path.getsize(p))
        with open(os.path.join(d, "gen.py"), "w") as f:
            f.write(GEN)
        print(f"{N} tasks over 40 JPEGs of {w} x {h} / {h} x {w}, quality {quality}, "
              f"{np.mean(sizes) / 1e3:.0f} KB on average; resize 224, crop 224; one stage "
              "worker")
        best = {"exact": (1e9, 1e9), "fast": (1e9, 1e9)}
        for _ in range(R):
            for mode in best:
                wall, inside = job(d, mode, N, "plugin = null")
                best[mode] = (min(best[mode][0], wall), min(best[mode][1], inside))
        for mode, (wall, inside) in best.items():
            print(f"  mode = {mode:5}: {N / wall:5.0f} images/s the job, {N / inside:5.0f} "
                  f"images/s in the stage worker's process() (best of {R})")
        names = sorted(os.listdir(os.path.join(d, "imgs")))
        paths = [os.path.join(d, "imgs", n) for n in names]
        t = time.monotonic()
        for i in range(N):
            pillow(paths[i % len(paths)])
        print(f"  Pillow itself (open, convert, resize, crop, as an array; this process): "
              f"{N / (time.monotonic() - t):5.0f} images/s")
        for mode in best:
            job(d, mode, len(names), "plugin = files\ndir = out_" + mode)
            diffs, l2 = [], []
            for i, name in enumerate(names):
                ref = pillow(os.path.join(d, "imgs", name))
                got = np.frombuffer(open(os.path.join(d, f"out_{mode}", str(i)), "rb").read(),
                                    np.uint8).reshape(ref.shape).astype(np.float64)
                diffs.append(np.abs(got - ref))
                l2.append(np.linalg.norm(got - ref) / np.linalg.norm(ref))
            print(f"  mode = {mode:5} against Pillow: largest difference "
                  f"{max(x.max() for x in diffs):.0f} levels, mean "
                  f"{np.mean([x.mean() for x in diffs]):.3f}, relative L2 "
                  f"{100 * np.mean(l2):.2f}%")


if __name__ == "__main__":
    main()
