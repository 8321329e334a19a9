# SPDX-License-Identifier: MIT
"""Dispatcher's stages and plugins (gpud.Stage, stages=[...], generator= and sink= by
plugin name): python3 stages.py MODE, printing PASS MODE.

jpeg: JPEGs made with Pillow through the built-in jpeg stage to a Python class that
  gets each image as a (64, 64, 3) uint8 array and returns its per-channel mean; every
  mean within 1% of 255 of Pillow's decode, resize and NumPy's mean; a corrupt JPEG
  fails alone with the decoder's message; the same with the stage as a dict; with
  resize, crop and output = float32 a (3, 56, 56) float32 array equal to Pillow's
  pixels through torchvision's arithmetic.
python: Python stage classes: pickled objects through a stage to the worker class,
  two stages in a row, a Python stage after the jpeg stage, a Python stage in front of
  a C worker plugin (its results as bytes), a stage's error failing its item alone.
samples: whole WebDataset samples (jpg, cls, json) from the tar generator's members:
  the class gets each as a dict with __key__ and its label, through the jpeg stage its
  jpg as the decoded array; the callbacks that take `key` get each task's sample key
  (a corrupt image's on_error too), 3-argument callbacks work as before.
plugins: a generator plugin and a sink plugin by name with their keys around stages
  and a Python class (range -> a Python stage -> the class -> jsonl), the class's
  results written as their bytes; bad stage specs refused in one line."""
import io
import json
import os
import sys

import gpud
from gpud import Dispatcher, Stage

GPUS = [0]
H = W = 64
FAILED = []


def check(cond, what):
    if not cond:
        FAILED.append(what)
        print(f"FAIL: {what}", flush=True)


class Mean:
    def setup(self, gpu_id, seed, scale=1.0):
        self.scale = scale

    def process(self, img):
        import numpy as np

        if img.shape != (H, W, 3) or img.dtype != np.uint8:
            raise ValueError(f"got {img.shape} {img.dtype}")
        return img.reshape(-1, 3).mean(0).astype(np.float32) * self.scale


class Square:
    """A stage: an int to a dict (pickled objects both ways)."""

    def setup(self, gpu_id, seed, offset=0):
        self.gpu, self.offset = gpu_id, offset

    def process(self, x):
        if x == 13:
            raise ValueError("thirteen is refused by the stage")
        return {"x": x, "sq": x * x + self.offset, "stage_gpu": self.gpu}


class Tag:
    """A second stage: adds a key."""

    def setup(self, gpu_id, seed):
        pass

    def process(self, d):
        d["tagged"] = True
        return d


class Model:
    def setup(self, gpu_id, seed):
        self.gpu = gpu_id

    def process(self, d):
        return (d["x"], d["sq"], d.get("tagged", False), d["stage_gpu"], self.gpu)


class Flip:
    """A stage after jpeg: the pixels mirrored, still an array."""

    def setup(self, gpu_id, seed):
        pass

    def process(self, img):
        return img[:, ::-1].copy()


class Text:
    """A stage in front of a C worker: str results reach it as UTF-8 bytes."""

    def setup(self, gpu_id, seed):
        pass

    def process(self, x):
        return f"item {int(x)}"


class Upper:
    def setup(self, gpu_id, seed):
        pass

    def process(self, data):
        return (data.encode() if isinstance(data, str) else bytes(data)).upper()


class Broken:
    def setup(self, gpu_id, seed):
        raise RuntimeError("no model here")

    def process(self, x):
        return x


class Vector:
    """float32 arrays, every other one a reversed (non-contiguous) view."""

    def setup(self, gpu_id, seed):
        pass

    def process(self, x):
        import numpy as np

        v = np.arange(3, dtype=np.float32) + int(x)
        return v[::-1] if int(x) % 2 else v


def jpegs(n):
    import numpy as np
    from PIL import Image

    out = []
    for i in range(n):
        y, x = np.mgrid[0 : 90 + 7 * i, 0 : 120 - 3 * i]
        a = np.stack([x * 2 + i, y * 2, (x + y + 10 * i) % 256], -1)
        b = io.BytesIO()
        Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(b, "JPEG", quality=90)
        out.append(b.getvalue())
    return out


def pillow_mean(data):
    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        a = np.asarray(im.convert("RGB").resize((W, H), Image.BILINEAR))
    return a.reshape(-1, 3).mean(0)


def mode_jpeg():
    import numpy as np

    items = jpegs(12)
    items.insert(5, b"\xff\xd8\xff\xe0 this is no JPEG")
    got, errors = {}, {}
    stats = Dispatcher(Mean, GPUS, stages=[Stage("jpeg", height=H, width=W)]).run(
        items, lambda t, r, g: got.__setitem__(t, r), on_error=lambda t, e, g: errors.__setitem__(t, e))
    check(sorted(got) == [i for i in range(13) if i != 5], f"every good image once: {sorted(got)}")
    check(list(errors) == [5] and "stage jpeg: jpeg:" in errors[5],
          f"the corrupt one fails alone with the decoder's message: {errors}")
    check(stats["completed"] == 12 and stats["failed"] == 1, f"stats: {stats}")
    worst = 0.0
    for t, mean in got.items():
        check(isinstance(mean, np.ndarray) and mean.dtype == np.float32 and mean.shape == (3,),
              f"the class's result as it returned it: {mean!r}")
        worst = max(worst, float(np.abs(mean - pillow_mean(items[t])).max()))
    check(worst <= 0.01 * 255, f"per-channel means within 1% of 255 of Pillow's: {worst:.3f}")
    # The same as a dict, with the stage's own workers and the class's keywords.
    got2 = {}
    Dispatcher(Mean, GPUS, stages=[{"plugin": "jpeg", "height": H, "width": W, "workers": 1}]).run(
        items[:3], lambda t, r, g: got2.__setitem__(t, r), scale=2.0)
    check(sorted(got2) == [0, 1, 2] and all(np.allclose(got2[t], 2 * got[t]) for t in got2),
          f"a dict stage and setup keywords: {got2}")


class Pixels:
    """The stage's array as it came."""

    def setup(self, gpu_id, seed):
        pass

    def process(self, img):
        return img


def mode_jpeg_exact():
    """resize + crop + float32 normalised: the class gets a (3, 56, 56) float32 array,
    torchvision's Resize(60), CenterCrop(56), ToTensor and Normalize on Pillow's
    pixels, exactly."""
    import numpy as np
    from PIL import Image

    items = jpegs(6)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    got = {}
    Dispatcher(Pixels, GPUS, stages=[Stage("jpeg", resize=60, crop=56, output="float32",
                                           mean="0.485,0.456,0.406",
                                           std="0.229,0.224,0.225")]).run(
        items, lambda t, r, g: got.__setitem__(t, r))
    check(sorted(got) == list(range(6)), f"every image once: {sorted(got)}")
    worst = 0.0
    for t, a in got.items():
        with Image.open(io.BytesIO(items[t])) as im:
            w, h = im.size
            size = (60, int(60 * h / w)) if w <= h else (int(60 * w / h), 60)
            im = im.convert("RGB").resize(size, Image.BILINEAR)
            left, top = int(round((size[0] - 56) / 2.0)), int(round((size[1] - 56) / 2.0))
            ref = np.asarray(im.crop((left, top, left + 56, top + 56)))
        want = ((ref.transpose(2, 0, 1).astype(np.float32) / np.float32(255)
                 - np.array(mean, np.float32)[:, None, None])
                / np.array(std, np.float32)[:, None, None])
        check(isinstance(a, np.ndarray) and a.dtype == np.float32 and a.shape == (3, 56, 56),
              f"a (3, 56, 56) float32 array: {getattr(a, 'shape', a)}")
        if getattr(a, "shape", None) == (3, 56, 56):
            worst = max(worst, float(np.abs(a - want).max()))
    check(worst == 0.0, f"equal to Pillow + torchvision's arithmetic: {worst}")
    try:
        Stage("jpeg", height=64)
        check(False, "Stage(\"jpeg\", height=64) refused")
    except TypeError as e:
        check("width is required" in str(e), f"height alone refused: {e}")


class Labelled:
    """Gets whole samples: its key, its label and its image's mean back."""

    def setup(self, gpu_id, seed):
        pass

    def process(self, sample):
        import numpy as np

        img = sample["jpg"]
        mean = (img.reshape(-1, 3).mean(0).astype(np.float32) if isinstance(img, np.ndarray)
                else len(img))
        return (sample["__key__"], int(sample["cls"]), json.loads(sample["json"])["i"],
                sorted(sample), mean)


def mode_samples():
    import tarfile

    import numpy as np

    items = jpegs(10)
    items[4] = b"\xff\xd8\xff\xe0 this is no JPEG"
    d = os.environ.get("GPUD_TEST_TMP") or "/tmp"
    path = os.path.join(d, f"samples-{os.getpid()}.tar")
    keys = [f"dir/{i:04d}" for i in range(len(items))]
    with tarfile.open(path, "w") as t:
        for i, (key, data) in enumerate(zip(keys, items)):
            for ext, b in (("jpg", data), ("cls", str(i % 3).encode()),
                           ("json", json.dumps({"i": i}).encode())):
                ti = tarfile.TarInfo(f"{key}.{ext}")
                ti.size = len(b)
                t.addfile(ti, io.BytesIO(b))
    got, errors = {}, {}

    def on_success(task_id, result, worker_id, key=None):
        got[task_id] = (key, result)

    def on_error(task_id, error, worker_id, key=None):
        errors[task_id] = (key, error)

    gen = {"plugin": "tar", "path": path, "members": "jpg,cls,json"}
    stats = Dispatcher(Labelled, GPUS, generator=gen,
                       stages=[Stage("jpeg", height=H, width=W)]).run(None, on_success,
                                                                      on_error=on_error)
    check(sorted(got) == [i for i in range(10) if i != 4] and stats["failed"] == 1,
          f"every good sample once through the jpeg stage: {sorted(got)}, {stats}")
    check(list(errors) == [4] and errors[4][0] == keys[4] and "sample 'dir/0004', member "
          "'jpg'" in errors[4][1], f"the corrupt image fails its sample alone, key given: {errors}")
    worst = 0.0
    for t, (key, (k, label, i, names, mean)) in got.items():
        check(key == keys[t] and k == keys[t] and label == t % 3 and i == t and
              names == ["__key__", "cls", "jpg", "json"],
              f"task {t}: the callback's key {key!r} and the class's sample {k!r} {label} {i} "
              f"{names}")
        worst = max(worst, float(np.abs(mean - pillow_mean(items[t])).max()))
    check(worst <= 0.01 * 255, f"the decoded jpg's means within 1% of 255 of Pillow's: {worst:.3f}")
    # No stage: the members as bytes; 3-argument callbacks as before.
    plain = {}
    Dispatcher(Labelled, GPUS, generator=dict(gen, members="*")).run(
        None, lambda t, r, g: plain.__setitem__(t, r))
    check(sorted(plain) == list(range(10)) and all(
        plain[t] == (keys[t], t % 3, t, ["__key__", "cls", "jpg", "json"], len(items[t]))
        for t in plain), f"members = * without a stage: bytes, 3-argument callbacks: {plain}")
    os.unlink(path)


def mode_python():
    import numpy as np

    got, errors = {}, {}
    Dispatcher(Model, GPUS, stages=[Stage(Square, offset=1)]).run(
        range(20), lambda t, r, g: got.__setitem__(t, r), on_error=lambda t, e, g: errors.__setitem__(t, e))
    check(all(got[x] == (x, x * x + 1, False, -1, 0) for x in range(20) if x != 13)
          and len(got) == 19, f"a Python stage (gpu_id -1) then the class: {got}")
    check(list(errors) == [13] and "thirteen is refused by the stage" in errors[13],
          f"a stage's error fails its item alone, with its traceback: {errors}")
    # Its text as raised: the stage named, then the traceback's lines, none of gpud's
    # own class names or line joiners.
    e13 = errors[13]
    check(e13.startswith("stage square: Traceback (most recent call last):\n")
          and e13.endswith("\nValueError: thirteen is refused by the stage")
          and "TaskFailed" not in e13 and "\u2424" not in e13, f"the stage's error: {e13!r}")
    got = {}
    Dispatcher(Model, GPUS, stages=[Square, {"class": Tag, "workers": 1}]).run(
        [2, 3], lambda t, r, g: got.__setitem__(t, r))
    check(got == {0: (2, 4, True, -1, 0), 1: (3, 9, True, -1, 0)}, f"two stages: {got}")
    # jpeg, then a Python stage on its array, then the class.
    items = jpegs(3)
    got = {}
    Dispatcher(Mean, GPUS, stages=[Stage("jpeg", height=H, width=W), Stage(Flip)]).run(
        items, lambda t, r, g: got.__setitem__(t, r))
    check(len(got) == 3 and all(float(np.abs(got[t] - pillow_mean(items[t])).max()) <= 2.55
                                for t in got), f"jpeg, a Python stage, the class: {got}")
    # A Python stage in front of a C worker plugin: its results go as bytes.
    got = {}
    Dispatcher("echo", GPUS, stages=[Stage(Text)]).run(range(3), lambda t, r, g: got.__setitem__(t, r))
    check(got == {i: f"item {i}".encode() for i in range(3)}, f"a Python stage, a C worker: {got}")


def mode_plugins():
    tmp = os.environ.get("GPUD_TEST_TMP", "/tmp")
    out = os.path.join(tmp, f"stages-{os.getpid()}.jsonl")
    # range's items (decimal text as bytes) -> a Python stage -> the class -> jsonl.
    stats = Dispatcher(Upper, GPUS, stages=[Stage(Text)], generator={"plugin": "range", "stop": 6},
                       sink={"plugin": "jsonl", "path": out}).run(None, None)
    with open(out) as f:
        lines = [json.loads(x) for x in f]
    check(stats["completed"] == 6 and sorted(x["task_id"] for x in lines) == list(range(6))
          and all(x["result"] == f"ITEM {x['task_id']}" for x in lines),
          f"generator and sink plugins by name, the results' own bytes: {lines}")
    # The class straight to a sink plugin: its str results as UTF-8, not pickles.
    out2 = out + ".2"
    Dispatcher(Upper, GPUS, sink={"plugin": "jsonl", "path": out2}).run([b"ab", b"cd"], None)
    with open(out2) as f:
        lines = sorted((json.loads(x)["task_id"], json.loads(x)["result"]) for x in f)
    check(lines == [(0, "AB"), (1, "CD")], f"a Python class's results to a sink plugin: {lines}")
    # Arrays to a sink plugin: their data in C order (a view reversed, too).
    try:
        import numpy as np
    except ImportError:
        print("SKIP: arrays to a sink plugin (no NumPy)", flush=True)
    else:
        folder = out + ".arrays"
        Dispatcher(Vector, GPUS, sink={"plugin": "files", "dir": folder}).run(range(4), None)
        rows = {i: np.fromfile(os.path.join(folder, str(i)), np.float32).tolist() for i in range(4)}
        check(rows == {i: ([i, i + 1.0, i + 2.0] if i % 2 == 0 else [i + 2.0, i + 1.0, i])
                       for i in range(4)}, f"arrays' data to a sink plugin: {rows}")
    # Specs refused before anything runs, saying what is wrong.
    for bad, words in (({"height": 3}, "names its \"plugin\""),
                       ("jpeg", "height and width are required"),
                       ({"plugin": "jpeg", "height": 3}, "width is required"),
                       (42, "is not a stage"),
                       ({"plugin": "jpeg", "class": Mean}, "not both")):
        try:
            Dispatcher(Mean, GPUS, stages=[bad])
        except TypeError as e:
            check(words in str(e), f"{bad!r}: {e}")
        else:
            check(False, f"{bad!r} refused")
    try:
        Dispatcher(Mean, GPUS, stages=[Stage("jpeg", height=H, width=W)], chunksize=8).run(
            [b"x"], lambda *a: None)
    except gpud.JobError as e:
        check("chunksize=8 with stages" in str(e), f"chunksize with stages: {e}")
    else:
        check(False, "chunksize=8 with stages refused")
    # A stage none of whose workers could be set up: RunAborted says why.
    try:
        Dispatcher(Mean, GPUS, stages=[Stage(Broken)]).run([1], lambda *a: None)
    except gpud.RunAborted as e:
        check("stage broken" in str(e) and "no model here" in str(e), f"why: {e}")
    else:
        check(False, "RunAborted for a stage that cannot be set up")
    try:
        Dispatcher(Mean, GPUS, keys={"stage.d.plugin": "jpeg"}).run([b"x"], lambda *a: None)
    except gpud.JobError as e:
        check("stages=[gpud.Stage(...)]" in str(e), f"a stage as keys points to stages=: {e}")
    else:
        check(False, "a stage as keys in front of a Python class refused")


if __name__ == "__main__":
    mode = sys.argv[1]
    {"jpeg": lambda: (mode_jpeg(), mode_jpeg_exact()), "python": mode_python,
     "plugins": mode_plugins, "samples": mode_samples}[mode]()
    if FAILED:
        print(f"{len(FAILED)} checks failed", flush=True)
        sys.exit(1)
    print(f"PASS {mode}", flush=True)
