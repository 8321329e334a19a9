# SPDX-License-Identifier: MIT
"""The jpeg stage ([stage.decode] plugin = jpeg) through real jobs of the gpud binary:
JPEGs made with Pillow (RGB, grayscale, CMYK, progressive, larger and smaller than the
target, fine detail) decoded to height x width x 3 uint8 and compared with Pillow's own
decode and bilinear resize; a damaged and a non-JPEG input fail alone with the
decoder's message while the others succeed; a target over max_result_bytes and a
missing key are said; progressive files whose decoder memory would pass the stage's cap
and multi-scan ones (crafted headers claiming 16000 and 65500 pixels a side, and
max_memory_mb set low for a real one) are refused before decoding, the run's peak RSS
staying small.

Run by meson (test `jpeg`) with $GPUD set; needs Pillow and NumPy (Debian: python3-pil,
python3-numpy): on a Python without them it runs itself again on /usr/bin/python3, and
skips (exit 77, one line) where no Python has them."""
import json
import os
import subprocess
import sys
import tempfile

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
from PIL import Image  # noqa: E402

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
        prefix=()):
    with open(os.path.join(d, "gen.py"), "w") as f:
        f.write(GEN)
    text = (f"[job]\ngpus = 0\npython = {sys.executable}\n{job_keys}\n"
            f"[stage.decode]\nplugin = jpeg\nheight = {H}\nwidth = {W}\n{stage}\n"
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
        # A DCT-scaled decode is not a full one resized: on fine detail (noise of
        # sigma 12 levels) within the noise on average, no pixel far off; smooth
        # images agree within 1. Either way each channel's mean is within 1% of 255
        # of Pillow's.
        mean_tol, max_tol = (8.0, 64) if "detail" in name else (1.0, 3)
        channels = np.abs(got.mean(axis=(0, 1)) - ref.mean(axis=(0, 1))).max()
        check(diff.mean() <= mean_tol and diff.max() <= max_tol and channels <= 2.55,
              f"{name}: pixels as Pillow's decode and resize (mean difference "
              f"{diff.mean():.2f} <= {mean_tol}, largest {diff.max()} <= {max_tol}, "
              f"channel means {channels:.2f} <= 2.55 apart)")
    exact = names.index("i_exact_48x64.jpg")
    got = np.frombuffer(open(os.path.join(d, "out", str(exact)), "rb").read(), np.uint8)
    with Image.open(os.path.join(d, "imgs", names[exact])) as im:
        plain = np.asarray(im.convert("RGB")).reshape(-1).astype(int)
    check(np.abs(got.astype(int) - plain).max() <= 1,
          "an image already height x width is its decode as it is")


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

    # Sequential, the same size needs rows of its width only: not refused, decoded
    # (at 1/8 into a pixel buffer of 8188 x 8188, under the pixel cap) until its data
    # ends.
    job(d, ["z_base_65500.jpg"], sink="[sink]\nplugin = jsonl\npath = base.jsonl\n")
    b = next(iter(outcomes(os.path.join(d, "base.jsonl"))), {})
    check(b.get("status") == "error" and "cannot decode this 65500 x 65500 image" in
          b.get("error", "") and "max_memory_mb" not in b.get("error", ""),
          f"a sequential 65500 x 65500 one needs no full-size buffer: it is decoded (and "
          f"ends where its data does): {b}")

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
    for test in (test_pixels, test_corrupt, test_limits, test_memory_cap):
        with tempfile.TemporaryDirectory(prefix="gpud-jpeg-") as d:
            print(f"== {test.__name__}", flush=True)
            test(d)
    print(f"{'FAILED: ' + str(FAILED) if FAILED else 'all passed'}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
