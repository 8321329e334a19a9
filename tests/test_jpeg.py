# SPDX-License-Identifier: MIT
"""The jpeg stage ([stage.decode] plugin = jpeg) through real jobs of the gpud binary:
JPEGs made with Pillow (RGB, grayscale, CMYK, progressive, larger and smaller than the
target, fine detail) decoded to height x width x 3 uint8 and compared with Pillow's own
decode and bilinear resize (mode = exact, the default: equal); 240 images of random
sizes (1 to 700 a side, both orientations; JPEG grey and colour, 4:2:0, 4:2:2, 4:4:4,
progressive; PNG of every colour type and bit depth, palette and transparency,
interlaced, written by hand) against Pillow's Image.open(f).convert("RGB").resize() for
every filter, with resize and crop as torchvision's Resize and CenterCrop, and as
float32 normalised as ToTensor and Normalize; mode = fast's difference measured; bad
keys refused naming them; damaged and hostile PNGs failing alone; a damaged and a
non-JPEG input fail alone with the decoder's message while the others succeed; a target
over max_result_bytes and a missing key are said; progressive files whose decoder
memory would pass the stage's cap and multi-scan ones (crafted headers claiming 16000
and 65500 pixels a side, and max_memory_mb set low for a real one) are refused before
decoding, the run's peak RSS staying small.

Run by meson (test `jpeg`) with $GPUD set; needs Pillow and NumPy (Debian: python3-pil,
python3-numpy): on a Python without them it runs itself again on /usr/bin/python3, and
skips (exit 77, one line) where no Python has them."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

SKIP = 77


def _reexec_or_skip():
    try:
        import numpy  # noqa: F401
        import PIL  # noqa: F401

        return
    except ImportError as e:
        missing = e.name
    other = "/usr/bin/python3"
    if os.path.realpath(sys.executable) != os.path.realpath(other) and os.access(other, os.X_OK):
        ok = subprocess.run([other, "-c", "import numpy, PIL"], capture_output=True).returncode == 0
        if ok:
            os.execv(other, [other] + sys.argv)
    print(f"SKIP: the jpeg stage's test needs Pillow and NumPy ({missing} is missing: "
          "python3-pil, python3-numpy)")
    sys.exit(SKIP)


_reexec_or_skip()

import numpy as np  # noqa: E402
from PIL import Image, ImageFile  # noqa: E402

GPUD = os.environ.get("GPUD")
H, W = 64, 48
FAILED = 0


def check(cond, what):
    global FAILED
    if not cond:
        FAILED += 1
        print(f"FAIL: {what}", flush=True)
    else:
        print(f"ok: {what}", flush=True)


def smooth(w, h):
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x * 255 / w, y * 255 / h, (x + y) * 127 / (w + h) + 60 * np.sin(x / 9.0)], -1)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def detailed(w, h, seed):
    """Fine detail (noise on stripes): where a DCT-scaled decode and a full one differ
    most."""
    rng = np.random.default_rng(seed)
    base = np.asarray(smooth(w, h)).astype(float)
    stripes = 40 * ((np.arange(w)[None, :, None] // 3) % 2)
    a = base + stripes + rng.normal(0, 12, base.shape)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def make_images(folder):
    """name -> how the image was made; good ones first (sorted by name)."""
    os.makedirs(folder)
    made = {
        "a_rgb_640x480.jpg": lambda p: smooth(640, 480).save(p, quality=92),
        "b_rgb_100x37.jpg": lambda p: smooth(100, 37).save(p),
        "c_upscale_33x20.jpg": lambda p: smooth(33, 20).save(p),
        "d_gray_300x300.jpg": lambda p: smooth(300, 300).convert("L").save(p),
        "e_cmyk_256x200.jpg": lambda p: smooth(256, 200).convert("CMYK").save(p),
        "f_progressive_512x384.jpg": lambda p: smooth(512, 384).save(p, progressive=True),
        "g_detail_800x600.jpg": lambda p: detailed(800, 600, 1).save(p, quality=95),
        "h_detail_420_subsampled_97x131.jpg": lambda p: detailed(97, 131, 2).save(p, subsampling=2),
        "i_exact_48x64.jpg": lambda p: smooth(W, H).save(p, quality=100),
    }
    for name, make in made.items():
        make(os.path.join(folder, name))
    return sorted(made)


GEN = '''import os
def inputs(folder, names):
    for n in names.split(","):
        with open(os.path.join(folder, n), "rb") as f:
            yield f.read()
'''


def job(d, names, stage="", job_keys="", sink="[sink]\nplugin = files\ndir = out\n",
        prefix=(), size=f"height = {H}\nwidth = {W}\n"):
    with open(os.path.join(d, "gen.py"), "w") as f:
        f.write(GEN)
    text = (f"[job]\ngpus = 0\npython = {sys.executable}\n{job_keys}\n"
            f"[stage.decode]\nplugin = jpeg\n{size}{stage}\n"
            "[worker]\nplugin = echo\n"
            "[generator]\nplugin = python\nscript = gen.py\nfunction = inputs\n"
            f"folder = imgs\nnames = {','.join(names)}\n{sink}")
    with open(os.path.join(d, "job.ini"), "w") as f:
        f.write(text)
    env = dict(os.environ, TMPDIR=d)
    return subprocess.run([*prefix, GPUD, "run", "job.ini"], cwd=d, capture_output=True,
                          text=True, env=env, timeout=240)


def reference(path):
    """Pillow's full decode, made RGB, resized (bilinear) to W x H."""
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB").resize((W, H), Image.BILINEAR)).astype(int)


def test_pixels(d):
    names = make_images(os.path.join(d, "imgs"))
    r = job(d, names)
    check(r.returncode == 0, f"a job of {len(names)} JPEGs decodes them all (exit {r.returncode}: "
          f"{r.stderr.strip()[-600:]})")
    for i, name in enumerate(names):
        path = os.path.join(d, "out", str(i))
        if not os.path.exists(path):
            check(False, f"{name}: a result")
            continue
        data = open(path, "rb").read()
        if len(data) != H * W * 3:
            check(False, f"{name}: {len(data)} bytes, expected {H}x{W}x3 = {H * W * 3}")
            continue
        got = np.frombuffer(data, np.uint8).reshape(H, W, 3).astype(int)
        ref = reference(os.path.join(d, "imgs", name))
        diff = np.abs(got - ref)
        # mode = exact (the default): Pillow's decode and resize, pixel for pixel
        # (within 1 level at most).
        check(diff.max() <= 1,
              f"{name}: pixels as Pillow's decode and resize (largest difference "
              f"{diff.max()} <= 1, mean {diff.mean():.3f})")
    exact = names.index("i_exact_48x64.jpg")
    got = np.frombuffer(open(os.path.join(d, "out", str(exact)), "rb").read(), np.uint8)
    with Image.open(os.path.join(d, "imgs", names[exact])) as im:
        plain = np.asarray(im.convert("RGB")).reshape(-1).astype(int)
    check(np.abs(got.astype(int) - plain).max() <= 1,
          "an image already height x width is its decode as it is")


def odd_image(rng, w, h, grey):
    """Smooth gradients with noise and stripes: detail where resizes differ."""
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x * 255.0 / max(w, 1), y * 255.0 / max(h, 1),
                  128 + 90 * np.sin((x + 2 * y) / 7.0)], -1)
    a = a + 50 * ((x // 2 + y // 3) % 2)[..., None] + rng.normal(0, 20, a.shape)
    im = Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))
    return im.convert("L") if grey else im


def make_odd(folder, n, seed):
    """n JPEGs and PNGs of random sizes (1 to 700 a side, both orientations): grey and
    colour, 4:2:0, 4:2:2 and 4:4:4, progressive; PNG grey (1, 2, 4, 8, 16 bits), grey
    with alpha, palette with and without transparency, RGB(A) of 8 and 16 bits,
    interlaced. Names in order."""
    os.makedirs(folder, exist_ok=True)
    # Pillow's JPEG writer suspends on a progressive scan larger than its buffer.
    ImageFile.MAXBLOCK = 1 << 24
    rng = np.random.default_rng(seed)
    names = []
    for i in range(n):
        w, h = (int(v) for v in rng.integers(1, 701, 2))
        if i % 7 == 0:  # thin ones
            w, h = (w, int(rng.integers(1, 9))) if i % 2 else (int(rng.integers(1, 9)), h)
        kind = i % 4 if os.environ.get("HAVE_PNG") != "0" else i % 3  # PNG: kind 3
        grey = i % 5 == 1
        im = odd_image(rng, w, h, grey)
        if kind < 3:
            name = f"{i:04d}.jpg"
            kw = {"quality": int(rng.integers(60, 98)), "progressive": kind == 1}
            if not grey:
                kw["subsampling"] = (0, 1, 2)[i % 3]
            im.save(os.path.join(folder, name), **kw)
        else:
            name = f"{i:04d}.png"
            save_png(os.path.join(folder, name), im, i // 4, rng, (i // 4) % 3 == 0)
        names.append(name)
    return names


ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2))


def write_png(path, a, colour, depth, palette=None, trns=None, interlace=False):
    """A PNG written by hand (Pillow writes neither 16-bit colour nor interlaced ones):
    samples `a` (h x w x channels), colour type and bit depth as the PNG spec names
    them, Adam7 where `interlace`."""
    h, w = a.shape[:2]
    a = a.reshape(h, w, -1)

    def rows(sub):
        out = []
        for row in sub:
            v = row.reshape(-1)
            if depth == 16:
                b = v.astype(">u2").tobytes()
            elif depth == 8:
                b = v.astype(np.uint8).tobytes()
            else:
                per = 8 // depth
                v = np.concatenate([v, np.zeros((-len(v)) % per, v.dtype)]).astype(int)
                shifts = np.array([8 - depth * (k + 1) for k in range(per)])
                b = (v.reshape(-1, per) << shifts).sum(axis=1).astype(np.uint8).tobytes()
            out.append(b"\0" + b)
        return b"".join(out)

    if interlace:
        raw = b"".join(rows(a[y0::dy, x0::dx]) for x0, y0, dx, dy in ADAM7
                       if a[y0::dy, x0::dx].size)
    else:
        raw = rows(a)

    def chunk(t, data):
        return (struct.pack(">I", len(data)) + t + data
                + struct.pack(">I", zlib.crc32(t + data) & 0xffffffff))
    body = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, colour,
                                                               0, 0, int(interlace)))
    if palette is not None:
        body += chunk(b"PLTE", bytes(palette))
    if trns is not None:
        body += chunk(b"tRNS", trns)
    body += chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(body)


PNG_KINDS = ["RGB", "RGBA", "L", "LA", "P", "Ptrns", "P4", "1", "L2", "L4", "I16", "LA16",
             "RGB16", "RGBA16", "Ltrns", "RGBtrns"]


def save_png(path, im, k, rng, interlace):
    """The image as PNG kind k (PNG_KINDS), written by hand."""
    a = np.asarray(im.convert("RGB"))
    g = np.asarray(im.convert("L"))
    h, w = g.shape
    noise16 = rng.integers(0, 256, a.shape).astype(np.uint16)
    alpha = rng.integers(0, 256, (h, w, 1)).astype(np.uint8)
    kind = PNG_KINDS[k % len(PNG_KINDS)]
    if kind == "RGB":
        args = (a, 2, 8)
    elif kind == "RGBA":
        args = (np.dstack([a, alpha]), 6, 8)
    elif kind == "L":
        args = (g, 0, 8)
    elif kind == "LA":
        args = (np.dstack([g, alpha[..., 0]]), 4, 8)
    elif kind in ("P", "Ptrns", "P4"):
        n = 16 if kind == "P4" else 64
        p = im.convert("RGB").quantize(n)
        pal = p.getpalette()[:3 * n]
        pal += [0] * (3 * n - len(pal))
        trns = bytes(range(0, 255, 40)) if kind == "Ptrns" else None
        return write_png(path, np.asarray(p), 3, 4 if kind == "P4" else 8, pal, trns, interlace)
    elif kind in ("1", "L2", "L4"):
        depth = {"1": 1, "L2": 2, "L4": 4}[kind]
        args = (g >> (8 - depth), 0, depth)
    elif kind == "I16":
        # Mostly over 255 where scaled: Pillow clips those at 255 when it makes RGB.
        args = (g.astype(np.uint16) * int(rng.integers(1, 3)), 0, 16)
    elif kind == "LA16":
        args = (np.dstack([g.astype(np.uint16) * 257 + noise16[..., 0],
                           alpha[..., 0].astype(np.uint16) * 257]), 4, 16)
    elif kind in ("RGB16", "RGBA16"):
        c = a.astype(np.uint16) * 257 + noise16
        if kind == "RGBA16":
            c = np.dstack([c, alpha.astype(np.uint16) * 255])
        args = (c, 6 if kind == "RGBA16" else 2, 16)
    elif kind == "Ltrns":
        return write_png(path, g, 0, 8, trns=struct.pack(">H", int(g[0, 0])),
                         interlace=interlace)
    else:  # RGBtrns
        return write_png(path, a, 2, 8, trns=struct.pack(">HHH", *map(int, a[0, 0])),
                         interlace=interlace)
    write_png(path, *args, interlace=interlace)


FILTERS = {"nearest": Image.NEAREST, "box": Image.BOX, "bilinear": Image.BILINEAR,
           "hamming": Image.HAMMING, "bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS}


def torch_size(w, h, n):
    """torchvision's Resize(n) of a w x h image: the shorter side n, the other
    int(n * long / short)."""
    if w <= h:
        return n, int(n * h / w)
    return int(n * w / h), n


def pillow(path, size=None, resize=None, crop=None, filt="bilinear"):
    """What Pillow (and torchvision's Resize and CenterCrop on it) make of a file."""
    with Image.open(path) as im:
        im = im.convert("RGB")
        if size:
            im = im.resize(size, FILTERS[filt])
        elif resize:
            im = im.resize(torch_size(*im.size, resize), FILTERS[filt])
        if crop:
            w, h = im.size
            top, left = int(round((h - crop) / 2.0)), int(round((w - crop) / 2.0))
            im = im.crop((left, top, left + crop, top + crop))
        return np.asarray(im).astype(int)


def results(d, n):
    """The files sink's results, by task id; None where a task has none."""
    out = []
    for i in range(n):
        p = os.path.join(d, "out", str(i))
        out.append(open(p, "rb").read() if os.path.exists(p) else None)
    return out


def compare(d, names, cfg, size, ref_kw, what, dtype=np.uint8, norm=None):
    """One job over the images with stage keys `cfg`; each result against Pillow's.
    The largest difference of all, or None where a result is missing or misshapen."""
    shutil.rmtree(os.path.join(d, "out"), ignore_errors=True)
    r = job(d, names, stage=cfg, size=size,
            job_keys="max_task_bytes = 4M\nmax_result_bytes = 4M")
    check(r.returncode == 0, f"{what}: the job decodes all {len(names)} images (exit "
          f"{r.returncode}: {r.stderr.strip()[-400:]})")
    worst, worst_name, diffs = 0.0, "", []
    for name, data in zip(names, results(d, len(names))):
        ref = pillow(os.path.join(d, "imgs", name), **ref_kw)
        if data is None or len(data) != ref.size * np.dtype(dtype).itemsize:
            check(False, f"{what}: {name}: {None if data is None else len(data)} bytes for "
                  f"{ref.shape}")
            return None
        if dtype == np.uint8:
            got = np.frombuffer(data, np.uint8).reshape(ref.shape).astype(int)
            diff = np.abs(got - ref)
        else:
            mean, std = norm
            got = np.frombuffer(data, np.float32).reshape(3, *ref.shape[:2])
            want = ((ref.transpose(2, 0, 1).astype(np.float32) / np.float32(255)
                     - np.array(mean, np.float32)[:, None, None])
                    / np.array(std, np.float32)[:, None, None])
            # In grey levels: a level is 1 / (255 std).
            diff = np.abs(got - want) * 255 * np.array(std, np.float32)[:, None, None]
        diffs.append(diff)
        if diff.max() > worst:
            worst, worst_name = float(diff.max()), name
    print(f"   {what}: largest difference {worst:g} ({worst_name or 'none'}), mean "
          f"{np.mean([x.mean() for x in diffs]):.4f} levels over {len(names)} images",
          flush=True)
    return worst


def test_exact(d):
    """mode = exact (the default) against Pillow on a few hundred odd images."""
    imgs = os.path.join(d, "imgs")
    names = make_odd(imgs, 240, 7)
    png = sum(n.endswith(".png") for n in names)
    print(f"   {len(names)} images ({png} PNG), sizes 1 to 700 a side", flush=True)
    rand = np.random.default_rng(3)
    cases = [
        ("height 61, width 47 (bilinear)", "", "height = 61\nwidth = 47\n",
         {"size": (47, 61)}),
        ("resize 224, crop 224", "", "resize = 224\ncrop = 224\n",
         {"resize": 224, "crop": 224}),
        ("resize 37 (no crop: the size follows each image)", "", "resize = 37\n",
         {"resize": 37}),
        ("crop 1 alone", "", "crop = 1\n", {"crop": 1}),
    ]
    for filt in ("bicubic", "lanczos", "box", "hamming", "nearest"):
        w, h = (int(v) for v in rand.integers(5, 300, 2))
        cases.append((f"filter {filt}, {h} x {w}", f"filter = {filt}\n",
                      f"height = {h}\nwidth = {w}\n", {"size": (w, h), "filt": filt}))
    for what, cfg, size, kw in cases:
        worst = compare(d, names, cfg, size, kw, what)
        check(worst is not None and worst <= 1,
              f"exact, {what}: every image Pillow's pixels within 1 level ({worst})")
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    worst = compare(d, names, "output = float32\nmean = 0.485, 0.456, 0.406\n"
                    "std = [0.229,0.224,0.225]\n", "resize = 256\ncrop = 224\n",
                    {"resize": 256, "crop": 224}, "float32 normalised, resize 256, crop 224",
                    np.float32, (mean, std))
    check(worst is not None and worst <= 1e-3,
          f"exact float32: torchvision's ToTensor + Normalize of Pillow's pixels ({worst})")
    worst = compare(d, names[:40], "output = float32\n", "height = 30\nwidth = 20\n",
                    {"size": (20, 30)}, "float32, no mean or std", np.float32,
                    ((0, 0, 0), (1, 1, 1)))
    check(worst is not None and worst <= 1e-3,
          f"float32 without mean and std: x / 255 ({worst})")


def test_fast(d):
    """mode = fast: DCT scaling, its difference from Pillow measured (JPEGs of 1000 x 750
    made 224, where it decodes at 1/2)."""
    imgs = os.path.join(d, "imgs")
    os.makedirs(imgs)
    rng = np.random.default_rng(5)
    names = []
    for i in range(20):
        w, h = (1000, 750) if i % 2 else (750, 1000)
        name = f"{i:02d}.jpg"
        odd_image(rng, w, h, False).save(os.path.join(imgs, name), quality=90)
        names.append(name)
    worst = compare(d, names, "mode = fast\n", "resize = 224\ncrop = 224\n",
                    {"resize": 224, "crop": 224}, "fast, resize 224, crop 224")
    check(worst is not None and worst > 1,
          f"mode = fast is not Pillow's pixels: it decodes at a DCT scale ({worst})")
    # 400 needs more than half of 750: no smaller scale (1/2, 1/4, 1/8) covers it.
    worst = compare(d, names, "mode = fast\n", "resize = 400\ncrop = 300\n",
                    {"resize": 400, "crop": 300}, "fast where no scale is smaller (400)")
    check(worst is not None and worst <= 1,
          f"mode = fast with no DCT scale to take is exact ({worst})")


def test_keys(d):
    """Bad keys: the stage's setup fails naming the key and what it takes."""
    make_images(os.path.join(d, "imgs"))
    bad = [("mode = quick\n", "mode = 'quick': expected exact or fast"),
           ("filter = cubic\n", "filter = 'cubic': expected nearest, box, bilinear, "
            "hamming, bicubic or lanczos"),
           ("output = float16\n", "output = 'float16': expected uint8 or float32"),
           ("output = float32\nmean = 0.5,0.5\n", "mean = '0.5,0.5': expected three numbers"),
           ("output = float32\nstd = 0.5,0,0.5\n", "std = '0.5,0,0.5': expected three "
            "positive numbers"),
           ("mean = 0.5,0.5,0.5\n", "mean and std need output = float32"),
           ("resize = 224\n", "resize = 224 and height/width: give one"),
           ("crop = 0\n", "crop = 0: expected 1 to 16384")]
    for cfg, want in bad:
        r = job(d, ["a_rgb_640x480.jpg"], stage=cfg)
        check(r.returncode == 3 and want in r.stderr,
              f"{cfg.strip()!r}: refused, saying {want!r} ({r.returncode}: "
              f"{r.stderr.strip()[-200:]})")
    r = job(d, ["a_rgb_640x480.jpg", "b_rgb_100x37.jpg"], size="crop = 200\n",
            sink="[sink]\nplugin = jsonl\npath = out.jsonl\n")
    lines = {x["task_id"]: x for x in outcomes(os.path.join(d, "out.jsonl"))}
    check(lines.get(0, {}).get("status") == "ok" and lines.get(1, {}).get("status") == "error"
          and "crop = 200 is larger than this 100 x 37 image" in lines[1].get("error", ""),
          f"an image smaller than the crop fails alone, saying so: {lines.get(1)}")


def test_png_damaged(d):
    """Damaged and hostile PNGs fail alone with libpng's message (or the stage's, for a
    size over the memory cap, before decoding), not retried; the good ones around them
    succeed on the same stage worker."""
    if os.environ.get("HAVE_PNG") == "0":
        print("SKIP: PNG input: the jpeg stage was built without libpng (libpng-dev)")
        return
    imgs = os.path.join(d, "imgs")
    os.makedirs(imgs)
    good = os.path.join(imgs, "good.png")
    write_png(good, np.asarray(smooth(90, 70)), 2, 8)
    data = open(good, "rb").read()
    ihdr = data.index(b"IHDR")

    def claim(w, h):
        body = data[ihdr:ihdr + 4] + struct.pack(">II", w, h) + data[ihdr + 12:ihdr + 17]
        return (data[:ihdr] + body + struct.pack(">I", zlib.crc32(body) & 0xffffffff)
                + data[ihdr + 21:])
    idat = data.index(b"IDAT")
    bad = {"z_truncated.png": data[: len(data) // 2],
           "z_signature_only.png": data[:8],
           "z_bad_crc.png": data[:ihdr + 20] + bytes([data[ihdr + 20] ^ 0xff]) + data[ihdr + 21:],
           "z_bad_data.png": data[:idat + 6] + bytes([data[idat + 6] ^ 0xff]) + data[idat + 7:],
           "z_huge.png": claim(16384, 16384),
           "z_too_many_pixels.png": claim(65535, 65535)}
    for name, b in bad.items():
        with open(os.path.join(imgs, name), "wb") as f:
            f.write(b)
    names = ["good.png", "z_truncated.png", "good.png", "z_signature_only.png", "good.png",
             "z_bad_crc.png", "good.png", "z_huge.png", "good.png", "z_too_many_pixels.png",
             "good.png", "z_bad_data.png", "good.png"]
    r = job(d, names, job_keys="max_retries = 2", stage="workers = 1",
            sink="[sink]\nplugin = jsonl\npath = out.jsonl\n")
    by_id = {x["task_id"]: x for x in outcomes(os.path.join(d, "out.jsonl"))}
    check(r.returncode == 1 and sorted(by_id) == list(range(len(names))),
          f"a run with damaged PNGs ends 1, every task one line ({r.returncode})")
    check(all(by_id[i]["status"] == "ok" for i in range(0, len(names), 2)),
          "the good PNGs around the damaged ones succeed")
    want = {1: "ends early", 3: "ends early", 5: "CRC error",
            7: "this 16384 x 16384 PNG needs about 768 MiB to decode, over max_memory_mb = 256",
            9: "this 65535 x 65535 PNG is larger than this stage decodes",
            11: "IDAT: "}
    for i, text in want.items():
        e = by_id.get(i, {})
        check(e.get("status") == "error" and "jpeg: cannot decode this PNG" in e.get("error", "")
              and text in e.get("error", "") and e.get("attempt", 0) == 0,
              f"{names[i]} fails alone, saying {text!r}, not retried: {e}")
    check(r.stderr.count("exited with status") == 0, f"no stage worker died: {r.stderr[-500:]}")


def test_corrupt(d):
    good = make_images(os.path.join(d, "imgs"))[:3]
    whole = open(os.path.join(d, "imgs", good[0]), "rb").read()
    with open(os.path.join(d, "imgs", "z_truncated.jpg"), "wb") as f:
        f.write(whole[: len(whole) // 3])
    with open(os.path.join(d, "imgs", "z_not_jpeg.jpg"), "wb") as f:
        f.write(b"GIF89a, not a JPEG at all")
    # A JPEG's first marker, then no frame (its segment runs past the end).
    with open(os.path.join(d, "imgs", "z_header_only.jpg"), "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 this is no JPEG")
    # A Huffman table whose counts add up to more than it holds: an error in the
    # middle of the header (after which libjpeg-turbo 2.1's handle failed every later
    # header with the same message, until the stage made it anew).
    at = whole.index(b"\xff\xc4") + 5
    with open(os.path.join(d, "imgs", "z_bad_huffman.jpg"), "wb") as f:
        f.write(whole[:at] + b"\xff" * 16 + whole[at + 16:])
    # One stage worker: every good image after a damaged one decodes on the worker
    # that just failed.
    names = [good[0], "z_truncated.jpg", good[1], "z_not_jpeg.jpg", good[2],
             "z_header_only.jpg", good[0], "z_bad_huffman.jpg", good[1]]
    r = job(d, names, job_keys="max_retries = 2", stage="workers = 1",
            sink="[sink]\nplugin = jsonl\npath = out.jsonl\n")
    check(r.returncode == 1, f"a run with damaged images ends 1 (some tasks failed): {r.returncode}")
    lines = [json.loads(x) for x in open(os.path.join(d, "out.jsonl"))]
    by_id = {x["task_id"]: x for x in lines}
    check(sorted(by_id) == list(range(9)) and len(lines) == 9, "every task one line")
    check(by_id.get(7, {}).get("status") == "error"
          and "Bogus Huffman table" in by_id.get(7, {}).get("error", ""),
          f"a bad Huffman table fails with the decoder's message: {by_id.get(7)}")
    check(all(by_id[i]["status"] == "ok" for i in (0, 2, 4, 6, 8)),
          "the good images around the damaged ones succeed")
    t, n = by_id.get(1, {}), by_id.get(3, {})
    check(t.get("status") == "error" and "Premature end of JPEG file" in t.get("error", ""),
          f"the truncated image fails alone with the decoder's message: {t}")
    check(n.get("status") == "error" and "Not a JPEG file" in n.get("error", ""),
          f"the file that is no JPEG fails alone with the decoder's message: {n}")
    h = by_id.get(5, {})
    check(h.get("status") == "error" and "jpeg: not a JPEG it can read" in h.get("error", ""),
          f"a header with no frame fails alone, its worker alive: {h}")
    check(r.stderr.count("exited with status") == 0, f"no stage worker died: {r.stderr[-500:]}")
    check(t.get("attempt", 0) == 0 and n.get("attempt", 0) == 0,
          "a damaged image is not retried (max_retries = 2): its input will not change")
    # strict = false: the decoder's best effort for the truncated file.
    r = job(d, names[:2], stage="strict = false",
            sink="[sink]\nplugin = jsonl\npath = lax.jsonl\n")
    lines = [json.loads(x) for x in open(os.path.join(d, "lax.jsonl"))]
    check(r.returncode == 0 and all(x["status"] == "ok" for x in lines),
          f"strict = false: a truncated image's decodable part is the result ({r.returncode})")


def test_limits(d):
    names = make_images(os.path.join(d, "imgs"))[:2]
    r = job(d, names, job_keys=f"max_result_bytes = {H * W * 3 - 1}",
            sink="[sink]\nplugin = jsonl\npath = out.jsonl\n")
    lines = [json.loads(x) for x in open(os.path.join(d, "out.jsonl"))]
    check(r.returncode == 1 and all("over max_result_bytes" in x.get("error", "") for x in lines),
          f"pixels over max_result_bytes: each task says so, naming the key: {lines[:1]}")
    with open(os.path.join(d, "job.ini")) as f:
        text = f.read()
    with open(os.path.join(d, "job.ini"), "w") as f:
        f.write(text.replace(f"height = {H}\n", "").replace(f"max_result_bytes = {H * W * 3 - 1}", ""))
    r = subprocess.run([GPUD, "run", "job.ini"], cwd=d, capture_output=True, text=True,
                       env=dict(os.environ, TMPDIR=d), timeout=240)
    check(r.returncode == 3 and "jpeg: height is required" in r.stderr,
          f"no height: the stage's setup fails, saying so ({r.returncode}: {r.stderr.strip()[-300:]})")
    with open(os.path.join(d, "job.ini"), "w") as f:
        f.write(text.replace(f"height = {H}\n", f"height = {H}\nhieght = 3\n"))
    r = subprocess.run([GPUD, "check", "job.ini"], cwd=d, capture_output=True, text=True,
                       env=dict(os.environ, TMPDIR=d), timeout=240)
    check(r.returncode == 2 and "hieght" in r.stderr and "height" in r.stderr,
          f"gpud check: a misspelt key of the stage is refused ({r.stderr.strip()[-300:]})")


def sized(data, w, h):
    """A JPEG's bytes with its frame header (SOF0/1/2) claiming w x h: the scans stay
    those of the small image, so the file is a few hundred bytes."""
    for at in range(len(data) - 9):
        if data[at] == 0xFF and data[at + 1] in (0xC0, 0xC1, 0xC2):
            return (data[:at + 5] + h.to_bytes(2, "big") + w.to_bytes(2, "big")
                    + data[at + 9:])
    raise ValueError("no SOF marker")


def outcomes(path):
    """The sink's lines, none where the run wrote none."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(x) for x in f]


def one_component_scan(data):
    """A sequential JPEG's bytes with its first scan holding its first component only:
    a multi-scan file, as far as its header says (what follows is not decodable)."""
    at = data.index(b"\xff\xda")
    n = data[at + 4]
    sos = data[at:at + 5 + 2 * n + 3]
    one = b"\xff\xda\x00\x08\x01" + sos[5:7] + sos[5 + 2 * n:]
    return data[:at] + one + data[at + len(sos):]


PEAK = """import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stderr.write(r.stderr)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r.returncode)
"""


def test_memory_cap(d):
    imgs = os.path.join(d, "imgs")
    good = make_images(imgs)[:2]

    def small(name, **kw):
        path = os.path.join(imgs, name)
        smooth(64, 64).save(path, **kw)
        return open(path, "rb").read()

    prog420 = small("s_p420.jpg", progressive=True)
    prog444 = small("s_p444.jpg", progressive=True, subsampling=0)
    base = small("s_base.jpg")
    crafted = {"z_prog_16000.jpg": sized(prog420, 16000, 16000),
               "z_prog_65500.jpg": sized(prog420, 65500, 65500),
               "z_prog444_65500.jpg": sized(prog444, 65500, 65500),
               "z_base_65500.jpg": sized(base, 65500, 65500),
               "z_multiscan_65500.jpg": one_component_scan(sized(base, 65500, 65500))}
    for name, data in crafted.items():
        with open(os.path.join(imgs, name), "wb") as f:
            f.write(data)
    names = [good[0], "z_prog_16000.jpg", good[1], "z_prog_65500.jpg", good[0],
             "z_prog444_65500.jpg", good[1], "z_multiscan_65500.jpg", good[0]]
    # The run's peak RSS (the largest of gpud and its stage workers, which it waits
    # for) from a process of its own, so that no earlier job counts.
    with open(os.path.join(d, "peak.py"), "w") as f:
        f.write(PEAK)
    r = job(d, names, job_keys="max_retries = 2", stage="workers = 1",
            sink="[sink]\nplugin = jsonl\npath = out.jsonl\n", prefix=(sys.executable, "peak.py"))
    peak_mb = int(r.stdout.split()[-1]) / 1024 if r.stdout.split() else -1
    check(r.returncode == 1, f"a run with images over the memory cap ends 1 (some tasks "
          f"failed): {r.returncode} {r.stderr.strip()[-300:]}")
    lines = outcomes(os.path.join(d, "out.jsonl"))
    by_id = {x["task_id"]: x for x in lines}
    check(sorted(by_id) == list(range(len(names))) and len(lines) == len(names),
          "every task one line")
    check(all(by_id[i]["status"] == "ok" for i in (0, 2, 4, 6, 8)),
          "the good images around the refused ones succeed")
    for i, mode, side in ((1, "progressive", 16000), (3, "progressive", 65500),
                          (5, "progressive", 65500), (7, "multi-scan", 65500)):
        e = by_id.get(i, {})
        msg = e.get("error", "")
        check(e.get("status") == "error" and f"{mode} {side} x {side}" in msg
              and "max_memory_mb = 256" in msg and e.get("attempt", 0) == 0,
              f"a {mode} {side} x {side} image is refused before decoding, naming "
              f"its size and the cap, not retried: {e}")
    check(0 < peak_mb < 200, f"the run's peak RSS stays under 200 MB: {peak_mb:.0f} MB")
    check(r.stderr.count("exited with status") == 0, f"no stage worker died: {r.stderr[-500:]}")

    # Sequential, the same size needs rows of its width only: not refused; in mode =
    # fast decoded (at 1/8 into a pixel buffer of 8188 x 8188, under the pixel cap)
    # until its data ends.
    job(d, ["z_base_65500.jpg"], stage="mode = fast",
        sink="[sink]\nplugin = jsonl\npath = base.jsonl\n")
    b = next(iter(outcomes(os.path.join(d, "base.jsonl"))), {})
    check(b.get("status") == "error" and "cannot decode this 65500 x 65500 image" in
          b.get("error", "") and "max_memory_mb" not in b.get("error", ""),
          f"mode = fast: a sequential 65500 x 65500 one needs no full-size buffer: it is "
          f"decoded (and ends where its data does): {b}")
    # In mode = exact it would be decoded whole: over the pixel cap, refused before.
    job(d, ["z_base_65500.jpg"], sink="[sink]\nplugin = jsonl\npath = exact.jsonl\n")
    b = next(iter(outcomes(os.path.join(d, "exact.jsonl"))), {})
    check(b.get("status") == "error" and "an image of 65500 x 65500 (decoded at 8/8: 65500 x "
          "65500) is larger than this stage decodes (268435456 pixels)" in b.get("error", ""),
          f"mode = exact: a sequential 65500 x 65500 one is refused by the pixel cap: {b}")

    # A real progressive 1600 x 1200 (4:2:0: 5.8 MB of coefficients) over a cap of
    # 4 MiB is refused; the same image sequential, which needs a few rows, is not.
    smooth(1600, 1200).save(os.path.join(imgs, "r_prog.jpg"), progressive=True)
    smooth(1600, 1200).save(os.path.join(imgs, "r_base.jpg"))
    r = job(d, ["r_prog.jpg", "r_base.jpg"], stage="max_memory_mb = 4",
            sink="[sink]\nplugin = jsonl\npath = cap.jsonl\n")
    by_id = {x["task_id"]: x for x in outcomes(os.path.join(d, "cap.jsonl"))}
    p, s = by_id.get(0, {}), by_id.get(1, {})
    check(p.get("status") == "error" and "progressive 1600 x 1200" in p.get("error", "")
          and "max_memory_mb = 4" in p.get("error", ""),
          f"max_memory_mb = 4: a real progressive 1600 x 1200 is refused: {p}")
    check(s.get("status") == "ok", f"max_memory_mb = 4: the sequential one decodes: {s}")
    # Its bound (5.7 MiB) under a cap of 6: decoded, libjpeg's own limit (the same 6
    # MiB) letting through what the bound lets through.
    r = job(d, ["r_prog.jpg"], stage="max_memory_mb = 6",
            sink="[sink]\nplugin = jsonl\npath = cap6.jsonl\n")
    p = next(iter(outcomes(os.path.join(d, "cap6.jsonl"))), {})
    check(r.returncode == 0 and p.get("status") == "ok",
          f"max_memory_mb = 6: the progressive 1600 x 1200 decodes: {p}")
    r = job(d, ["r_prog.jpg"], stage="max_memory_mb = 0",
            sink="[sink]\nplugin = jsonl\npath = bad.jsonl\n")
    check(r.returncode == 3 and "max_memory_mb" in r.stderr,
          f"max_memory_mb = 0: the stage's setup fails, naming the key ({r.returncode}: "
          f"{r.stderr.strip()[-300:]})")


def main():
    if not GPUD:
        print("FAIL: $GPUD is not set (run through meson test)")
        return 1
    if os.environ.get("HAVE_PYTHON") == "0":
        print("SKIP: the jpeg stage's test feeds its JPEGs through the python generator "
              "plugin, which this build lacks (libpython3.11-dev)")
        return SKIP
    if os.environ.get("HAVE_JPEG") == "0":
        print("SKIP: the jpeg stage plugin was not built (libjpeg62-turbo-dev)")
        return SKIP
    for test in (test_pixels, test_exact, test_fast, test_keys, test_png_damaged, test_corrupt,
                 test_limits, test_memory_cap):
        with tempfile.TemporaryDirectory(prefix="gpud-jpeg-") as d:
            print(f"== {test.__name__}", flush=True)
            test(d)
    print(f"{'FAILED: ' + str(FAILED) if FAILED else 'all passed'}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
