# SPDX-License-Identifier: MIT
"""The reader generators (tar, npy, hdf5) through real jobs of the gpud binary, with the
echo worker (result = input) and the jsonl sink: every task's bytes compared with what
the test wrote into its shards, arrays and HDF5 files.

tar: WebDataset shards made with Python's tarfile (plain, gzip, zstd through the zstd
command): task ids in shard order, each sample's key in the `keys` file, a sample
without the member failing alone naming key and shard, a truncated shard failing with
libarchive's message while every sample before the damage runs, `--resume` refusing a
changed shard by name, two ranks sharing the samples exactly once; a shard that cannot
be read at all one failed task (the others run); keys with tabs and newlines escaped in
keys_out, hard links followed, symbolic links failing their sample; a shard changed
during the run (a python worker rewrites it on its first task) failing its remaining
tasks, never an ok result with the new file's bytes; whole samples (`members = jpg,
cls` and `*`): the framing read back, each jsonl line with its sample's key, a C worker
walking the members, a python worker given dicts (`input = sample`), the jpeg stage
decoding the image member in place and passing the label on. Every reader refuses a
FIFO or a device as its file at once (check and run).

Run by meson (test `readers`) with $GPUD set; needs NumPy (and h5py for hdf5): on a
Python without them it runs itself again on /usr/bin/python3; a part whose plugin or
package is missing says so in one line and is skipped (exit 77 when every part is)."""
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

SKIP = 77


def _reexec():
    try:
        import numpy  # noqa: F401

        return
    except ImportError:
        pass
    other = "/usr/bin/python3"
    if os.path.realpath(sys.executable) != os.path.realpath(other) and os.access(other, os.X_OK):
        if subprocess.run([other, "-c", "import numpy"], capture_output=True).returncode == 0:
            os.execv(other, [other] + sys.argv)
    print("SKIP: the readers' test needs NumPy (python3-numpy)")
    sys.exit(SKIP)


_reexec()

import numpy as np  # noqa: E402

GPUD = os.environ.get("GPUD")
FAILED = 0
RAN = 0


def check(cond, what):
    global FAILED
    if not cond:
        FAILED += 1
        print(f"FAIL: {what}", flush=True)
    else:
        print(f"ok: {what}", flush=True)


def run(d, *args, timeout=240):
    env = dict(os.environ, TMPDIR=d)
    return subprocess.run([GPUD, *args], cwd=d, capture_output=True, text=True, env=env,
                          timeout=timeout)


def write_job(d, generator, sink="[sink]\nplugin = jsonl\npath = out.jsonl\n", job=""):
    with open(os.path.join(d, "job.ini"), "w") as f:
        f.write(f"[job]\ngpus = 0\n{job}\n[worker]\nplugin = echo\n"
                f"[generator]\n{generator}\n{sink}")


def outcomes(path):
    """task id -> (status, bytes or error message); a task seen twice is a failure."""
    got = {}
    if not os.path.exists(path):
        return got
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            tid = r["task_id"]
            if tid in got:
                check(False, f"task {tid} has one outcome in {os.path.basename(path)}")
            if r["status"] == "ok":
                data = (r["result"].encode("utf-8") if "result" in r else
                        __import__("base64").b64decode(r["result_base64"]))
                got[tid] = ("ok", data)
            else:
                got[tid] = (r["status"], r.get("error", ""))
    return got


# ---- tar ----

def make_shard(path, samples, mode="w"):
    """samples: list of (key, {ext: bytes})."""
    with tarfile.open(path, mode, format=tarfile.USTAR_FORMAT) as t:
        for key, members in samples:
            for ext, data in members.items():
                ti = tarfile.TarInfo(f"{key}.{ext}")
                ti.size = len(data)
                ti.mtime = 1700000000
                t.addfile(ti, io.BytesIO(data))


def samples_for(shard, n, rng, skip_member=()):
    out = []
    for i in range(n):
        key = f"part{shard}/{i:05d}"
        members = {"cls": str(i % 10).encode(), "jpg": rng.bytes(int(rng.integers(1, 3000)))}
        if i in skip_member:
            del members["jpg"]
        out.append((key, members))
    return out


def test_tar_order_keys_and_missing_member(d):
    rng = np.random.default_rng(1)
    shards = [samples_for(0, 40, rng), samples_for(1, 25, rng, skip_member={7}),
              samples_for(2, 30, rng)]
    os.makedirs(os.path.join(d, "shards"))
    make_shard(os.path.join(d, "shards", "a-000.tar"), shards[0])
    make_shard(os.path.join(d, "shards", "a-001.tar.gz"), shards[1], "w:gz")
    plain = os.path.join(d, "shards", "a-002.tar")
    make_shard(plain, shards[2])
    zst = shutil.which("zstd")
    if zst:
        subprocess.run([zst, "-q", "--rm", plain, "-o", plain + ".zst"], check=True)
    else:
        print("note: no zstd command (Debian: zstd): the .tar.zst shard stays a .tar")
    write_job(d, "plugin = tar\npath = shards/a-*\nkeys_out = keys.tsv\n")
    r = run(d, "run", "job.ini", "--ui", "off")
    check(r.returncode == 1, f"a run with one sample lacking its member exits 1 (exit "
          f"{r.returncode}: {r.stderr.strip()[-400:]})")
    got = outcomes(os.path.join(d, "out.jsonl"))
    flat = [(si, k, m) for si, s in enumerate(shards) for k, m in s]
    check(len(got) == len(flat), f"{len(flat)} samples, {len(got)} outcomes")
    keys = [line.rstrip("\n").split("\t") for line in open(os.path.join(d, "keys.tsv"))]
    check(len(keys) == len(flat), "keys.tsv has a line per task")
    good = 0
    for tid, (si, key, members) in enumerate(flat):
        check_key = keys[tid][0] == str(tid) and keys[tid][1] == key if tid < len(keys) else False
        if not check_key:
            check(False, f"keys.tsv line {tid}: {keys[tid] if tid < len(keys) else None} "
                  f"names task {tid}, sample {key}")
        st = got.get(tid)
        if "jpg" in members:
            good += st == ("ok", members["jpg"])
        else:
            check(st is not None and st[0] == "error" and f"'{key}'" in st[1]
                  and "a-001.tar.gz" in st[1] and "'jpg'" in st[1],
                  f"the sample without a jpg fails alone, naming key and shard: {st}")
    check(good == len(flat) - 1, f"every other sample's jpg reached the sink byte for byte, "
          f"in shard order ({good} of {len(flat) - 1})")
    check(keys[-1][2].endswith(".tar.zst" if zst else ".tar"), "keys.tsv names each shard")

    # member = cls: the other member of each sample.
    r = run(d, "run", "job.ini", "--ui", "off", "--set", "generator.member=cls",
            "--set", "job.journal=off")
    got = outcomes(os.path.join(d, "out.jsonl"))
    check(r.returncode == 0 and all(got[t] == ("ok", m["cls"]) for t, (_, _, m) in enumerate(flat)),
          f"member = cls gives each sample's cls (exit {r.returncode})")


def test_tar_truncated(d):
    rng = np.random.default_rng(2)
    a = samples_for(0, 30, rng)
    b = samples_for(1, 10, rng)
    make_shard(os.path.join(d, "s-0.tar"), a)
    make_shard(os.path.join(d, "s-1.tar"), b)
    # Cut shard 0 in the middle of sample 20's jpg.
    with tarfile.open(os.path.join(d, "s-0.tar")) as t:
        m = t.getmember(a[20][0] + ".jpg")
        cut = m.offset_data + m.size // 2
    os.truncate(os.path.join(d, "s-0.tar"), cut)
    write_job(d, "plugin = tar\npath = s-*.tar\n")
    r = run(d, "run", "job.ini", "--ui", "off")
    got = outcomes(os.path.join(d, "out.jsonl"))
    check(r.returncode == 1, f"a truncated shard: exit 1 (exit {r.returncode}: "
          f"{r.stderr.strip()[-300:]})")
    check(all(got.get(i) == ("ok", a[i][1]["jpg"]) for i in range(20)),
          "the 20 samples before the damage ran")
    dmg = got.get(20)
    check(dmg is not None and dmg[0] == "error" and "s-0.tar" in dmg[1] and "damaged" in dmg[1]
          and a[20][0] in dmg[1], f"the damage is one failed task naming the shard: {dmg}")
    check(all(got.get(21 + i) == ("ok", b[i][1]["jpg"]) for i in range(10)) and len(got) == 31,
          f"the next shard's samples follow it, every task once ({len(got)} outcomes)")


def test_tar_resume_refuses_changed_shard(d):
    rng = np.random.default_rng(3)
    make_shard(os.path.join(d, "r-0.tar"), samples_for(0, 5, rng))
    make_shard(os.path.join(d, "r-1.tar"), samples_for(1, 5, rng))
    write_job(d, "plugin = tar\npath = r-*.tar\nkeys_out = keys.tsv\n")
    r = run(d, "run", "job.ini", "--ui", "off")
    check(r.returncode == 0, f"a first run (exit {r.returncode}: {r.stderr.strip()[-300:]})")
    time.sleep(0.05)  # a keys file rewritten would have another mtime
    r = run(d, "run", "job.ini", "--ui", "off", "--resume")
    check(r.returncode == 0, f"--resume of unchanged shards runs, keys_out not taken for an input "
          f"(exit {r.returncode}: {r.stderr.strip()[-300:]})")
    make_shard(os.path.join(d, "r-1.tar"), samples_for(1, 6, rng))
    r = run(d, "run", "job.ini", "--ui", "off", "--resume")
    check(r.returncode == 2 and "r-1.tar" in r.stderr and "changed" in r.stderr,
          f"--resume refuses a changed shard, naming it (exit {r.returncode}: "
          f"{r.stderr.strip()[-400:]})")


def test_tar_ranks(d):
    rng = np.random.default_rng(4)
    shards = [samples_for(k, 700, rng) for k in range(3)]
    for k, s in enumerate(shards):
        make_shard(os.path.join(d, f"k-{k}.tar"), s)
    write_job(d, "plugin = tar\npath = k-*.tar\n",
              sink="[sink]\nplugin = jsonl\npath = out-{rank}.jsonl\n")
    r = run(d, "run", "job.ini", "--ui", "off", "--rank", "0/2")
    r2 = run(d, "run", "job.ini", "--ui", "off", "--rank", "1/2")
    check(r.returncode == 0 and r2.returncode == 0,
          f"two ranks run (exit {r.returncode}, {r2.returncode}: {r.stderr[-200:]} {r2.stderr[-200:]})")
    g0 = outcomes(os.path.join(d, "out-0.jsonl"))
    g1 = outcomes(os.path.join(d, "out-1.jsonl"))
    flat = [m["jpg"] for s in shards for _, m in s]
    check(not (set(g0) & set(g1)) and set(g0) | set(g1) == set(range(len(flat))),
          f"the ranks' tasks ({len(g0)} + {len(g1)}) are every sample exactly once")
    both = {**g0, **g1}
    check(all(both[i] == ("ok", flat[i]) for i in range(len(flat))),
          "each rank's tasks carry their own samples' bytes")


def test_tar_check(d):
    write_job(d, "plugin = tar\npath = none-*.tar\n")
    r = run(d, "check", "job.ini")
    check(r.returncode != 0 and "no shard matches" in (r.stdout + r.stderr),
          f"check: a glob matching nothing is said ({(r.stdout + r.stderr).strip()[-200:]})")
    make_shard(os.path.join(d, "c.tar"), [("x", {"jpg": b"1"})])
    write_job(d, "plugin = tar\npath = c.tar\nmembr = png\n")
    r = run(d, "check", "job.ini")
    check(r.returncode != 0 and "member" in (r.stdout + r.stderr),
          f"check: a misspelt key is refused, with the nearest ({(r.stdout + r.stderr).strip()[-200:]})")
    write_job(d, "plugin = tar\npath = c.tar\n")
    r = run(d, "check", "job.ini")
    check(r.returncode == 0, f"check: a good tar job passes ({(r.stdout + r.stderr).strip()[-200:]})")


def keys_lines(path):
    """keys_out's lines as (id, key, shard), its escapes (\\t, \\n, \\r, \\\\) undone."""
    def unescape(s):
        out, i = [], 0
        while i < len(s):
            if s[i] == "\\" and i + 1 < len(s):
                out.append({"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}.get(s[i + 1], "\\" + s[i + 1]))
                i += 2
            else:
                out.append(s[i])
                i += 1
        return "".join(out)
    with open(path, newline="") as f:
        return [tuple(unescape(x) for x in line.rstrip("\n").split("\t")) for line in f]


CHANGER = '''import os
import gpud

SHARDS = {shards!r}
MODE = {mode!r}
NEW = {new!r}


def change(path, new):
    if MODE == "same":  # rewritten in place, every byte where it was: same size, same keys
        with open(path, "r+b") as f:
            f.write(new)
    elif MODE == "other":  # rewritten in place, other samples, another size
        with open(path, "wb") as f:
            f.write(new)
    elif MODE == "rename":  # replaced by a new file renamed over it
        with open(path + ".new", "wb") as f:
            f.write(new)
        os.replace(path + ".new", path)
    elif MODE == "truncate":
        os.truncate(path, os.path.getsize(path) // 2)


class W(gpud.BaseWorker):
    def setup(self, gpu_id, seed, **kwargs):
        self.first = True

    def process(self, data):
        if self.first:  # the first task: the generator is a few tasks ahead (queue_size)
            self.first = False
            for path, new in zip(SHARDS, NEW):
                change(path, new)
        return bytes(data)
'''


def test_tar_shard_changed_during_run(d):
    """A shard changed while the run reads it (rewritten in place with the same size and
    keys, rewritten with others, replaced by a rename, truncated): every task handed out
    before the change is ok with the listed sample's bytes, every later task of the shard
    fails naming the shard and the change; never a result with the new file's bytes."""
    for mode in ("same", "other", "rename", "truncate"):
        rng = np.random.default_rng(7)
        paths, old, new = [], [], []
        for k in range(2):
            s = samples_for(k, 200, rng)
            path = os.path.join(d, f"{mode}-{k}.tar")
            make_shard(path, s)
            paths.append(path)
            old += [m["jpg"] for _, m in s]
            if mode == "same":
                s2 = [(key, {e: rng.bytes(len(b)) for e, b in m.items()}) for key, m in s]
            else:
                s2 = samples_for(k + 5, 150, rng)
            make_shard(path + ".next", s2)
            with open(path + ".next", "rb") as f:
                new.append(f.read())
            os.unlink(path + ".next")
        newbytes = set()
        for data in new:
            with tarfile.open(fileobj=io.BytesIO(data)) as t:
                newbytes |= {t.extractfile(m).read() for m in t.getmembers()
                             if m.name.endswith(".jpg")}
        with open(os.path.join(d, "w.py"), "w") as f:
            f.write(CHANGER.format(shards=paths, mode=mode, new=new))
        with open(os.path.join(d, "job.ini"), "w") as f:
            f.write(f"[job]\ngpus = 0\nqueue_size = 4\njournal = off\npython = {sys.executable}\n"
                    f"[worker]\nplugin = python\nscript = w.py\nclass = W\ninput = bytes\n"
                    f"result = bytes\n[generator]\nplugin = tar\npath = {mode}-*.tar\n"
                    f"[sink]\nplugin = jsonl\npath = out.jsonl\n")
        r = run(d, "run", "job.ini", "--ui", "off")
        got = outcomes(os.path.join(d, "out.jsonl"))
        oks = [i for i, (st, _) in got.items() if st == "ok"]
        bad = [i for i in oks if got[i][1] != old[i]]
        fresh = [i for i in oks if got[i][1] in newbytes and got[i][1] != old[i]]
        failed = {i: m for i, (st, m) in got.items() if st != "ok"}
        named = all(os.path.basename(paths[i // 200]) in m and "changed" in m
                    for i, m in failed.items())
        check(r.returncode == 1 and set(got) == set(range(400)) and not bad and not fresh
              and any(i < 200 for i in failed) and all(i in failed for i in range(200, 400))
              and named and max(oks, default=-1) < 200 and
              all(i in failed for i in range(min(failed, default=0), 200)),
              f"{mode}: a shard changed during the run fails its remaining tasks, naming it "
              f"(exit {r.returncode}: {len(oks)} ok, {len(bad)} with other bytes, "
              f"{len(fresh)} with the new file's, {len(failed)} failed: "
              f"{next(iter(failed.values()), '')[:160]!r}; {r.stderr.strip()[-200:]})")


def test_tar_unreadable_shard(d):
    """A shard that cannot be read at all (0 bytes, not a tar, a .tar.gz cut in its first
    block) is one failed task naming it and why; the good shards run; exit 1."""
    rng = np.random.default_rng(8)
    good0, good4 = samples_for(0, 5, rng), samples_for(4, 6, rng)
    make_shard(os.path.join(d, "u-0.tar"), good0)
    open(os.path.join(d, "u-1.tar"), "wb").close()
    with open(os.path.join(d, "u-2.tar"), "wb") as f:
        f.write(b"this is not a tar file at all\n" * 40)
    make_shard(os.path.join(d, "gz.tar.gz"), samples_for(3, 5, rng), "w:gz")
    with open(os.path.join(d, "gz.tar.gz"), "rb") as f:
        head = f.read(15)
    with open(os.path.join(d, "u-3.tar.gz"), "wb") as f:
        f.write(head)
    os.unlink(os.path.join(d, "gz.tar.gz"))
    make_shard(os.path.join(d, "u-4.tar"), good4)
    write_job(d, "plugin = tar\npath = u-*\nkeys_out = keys.tsv\n")
    r = run(d, "run", "job.ini", "--ui", "off")
    got = outcomes(os.path.join(d, "out.jsonl"))
    data = [m["jpg"] for _, m in good0] + [None] * 3 + [m["jpg"] for _, m in good4]
    ok = r.returncode == 1 and set(got) == set(range(len(data)))
    for i, want in enumerate(data):
        if want is not None:
            ok = ok and got.get(i) == ("ok", want)
    for i, name in ((5, "u-1.tar"), (6, "u-2.tar"), (7, "u-3.tar.gz")):
        st = got.get(i, ("", ""))
        check(st[0] == "error" and name in st[1] and "cannot be read" in st[1],
              f"unreadable shard {name}: task {i} fails naming it and why: {st}")
    check(ok, f"unreadable shards: the good shards run, exit 1 (exit {r.returncode}, "
          f"{len(got)} outcomes: {r.stderr.strip()[-300:]})")
    keys = keys_lines(os.path.join(d, "keys.tsv")) if os.path.exists(os.path.join(d, "keys.tsv")) else []
    check([k[2].rsplit("/", 1)[-1] for k in keys[5:8]] == ["u-1.tar", "u-2.tar", "u-3.tar.gz"],
          f"keys_out names each unreadable shard's task ({keys[5:8]})")
    r = run(d, "check", "job.ini")
    check(r.returncode == 0, f"check: an unreadable shard is the run's to report "
          f"(exit {r.returncode}: {(r.stdout + r.stderr).strip()[-200:]})")


def make_links_shard(path, mode="w"):
    with tarfile.open(path, mode, format=tarfile.GNU_FORMAT) as t:
        def add(name, data=None, typ=tarfile.REGTYPE, link=""):
            ti = tarfile.TarInfo(name)
            ti.type, ti.linkname, ti.mtime = typ, link, 1700000000
            if data is not None:
                ti.size = len(data)
            t.addfile(ti, io.BytesIO(data) if data is not None else None)
        add("s/a.jpg", b"AAAA")
        add("s/a.cls", b"1")
        add("s/tab\tkey.jpg", b"TAB")
        add("s/new\nline.jpg", b"NL")
        add("s/back\\slash.jpg", b"BS")
        add("s/cr\rkey.jpg", b"CR")
        add("s/b.jpg", typ=tarfile.LNKTYPE, link="s/a.jpg")  # GNU tar's hard link
        add("s/b.cls", b"2")
        add("s/c.jpg", typ=tarfile.SYMTYPE, link="a.jpg")
        add("s/c.cls", b"3")
        add("s/e.jpg", typ=tarfile.LNKTYPE, link="s/none.jpg")
        add("s/f.jpg", b"FFF")
        add("s/g.jpg", typ=tarfile.LNKTYPE, link="s/f.jpg")


def test_tar_names_and_links(d):
    """Keys with a tab, newline, CR or backslash stay one keys_out line each (escaped);
    a hard link member gives the bytes of the member it names; a symbolic link member
    fails its sample saying so; a hard link to nothing the shard holds fails its sample."""
    keys = ["s/a", "s/tab\tkey", "s/new\nline", "s/back\\slash", "s/cr\rkey", "s/b", "s/c",
            "s/e", "s/f", "s/g"]
    want = [b"AAAA", b"TAB", b"NL", b"BS", b"CR", b"AAAA", None, None, b"FFF", b"FFF"]
    for mode, name in (("w", "l.tar"), ("w:gz", "l.tar.gz")):
        make_links_shard(os.path.join(d, name), mode)
        write_job(d, f"plugin = tar\npath = {name}\nkeys_out = keys.tsv\n")
        r = run(d, "run", "job.ini", "--ui", "off")
        got = outcomes(os.path.join(d, "out.jsonl"))
        kl = keys_lines(os.path.join(d, "keys.tsv"))
        check([k[1] for k in kl] == keys and [k[0] for k in kl] == [str(i) for i in range(len(keys))]
              and all(k[2].endswith(name) for k in kl),
              f"{name}: keys_out has one line per task, keys escaped ({kl})")
        check(r.returncode == 1 and all(got.get(i) == ("ok", w) for i, w in enumerate(want) if w),
              f"{name}: plain and hard-linked members give their bytes (exit {r.returncode}: {got})")
        sym, dangling = got.get(6, ("", "")), got.get(7, ("", ""))
        check(sym[0] == "error" and "symbolic link" in sym[1] and "'s/c'" in sym[1] and name in sym[1],
              f"{name}: a symbolic link member fails its sample saying so: {sym}")
        check(dangling[0] == "error" and "hard link" in dangling[1] and "s/none.jpg" in dangling[1],
              f"{name}: a hard link to nothing before it fails its sample: {dangling}")


def test_readers_refuse_fifo(d):
    """A FIFO or a device as a reader's file is refused at once, by check and run, naming
    it: never an open() that waits for a writer (or reads /dev/zero for ever)."""
    fifo = os.path.join(d, "in.fifo")
    os.mkfifo(fifo)
    cases = [("lines", f"path = {fifo}"), ("lines", "path = /dev/zero"),
             ("tar", f"path = {fifo}"), ("npy", f"path = {fifo}"),
             ("npy", "path = /dev/zero"), ("files", f"dir = {fifo}")]
    if os.environ.get("HAVE_HDF5", "1") == "1":
        cases.append(("hdf5", f"path = {fifo}\ndataset = x"))
    if os.environ.get("HAVE_ARCHIVE", "1") != "1":
        cases = [c for c in cases if c[0] != "tar"]
    for gen, keys in cases:
        write_job(d, f"plugin = {gen}\n{keys}\n", job="journal = off\n")
        target = keys.split("\n")[0].split(" = ")[1]
        for cmd in ("check", "run"):
            try:
                r = run(d, cmd, "job.ini", "--ui", "off", timeout=20)
                text = (r.stdout + r.stderr).strip()
                rc = r.returncode
            except subprocess.TimeoutExpired:
                text, rc = "still waiting after 20 s", None
            kind = "Not a directory" if gen == "files" else "not a regular file"
            check(rc == 2 and target in text and kind in text,
                  f"{gen} {cmd}: {target} refused at once (exit {rc}: {text[-200:]})")


# ---- npy ----

def npy_arrays():
    rng = np.random.default_rng(5)
    return {
        "f32": rng.standard_normal((257, 3, 4)).astype(np.float32),
        "i16be": rng.integers(-30000, 30000, (100, 7)).astype(">i2"),
        "u8": rng.integers(0, 256, (300,)).astype(np.uint8),
        "c64": (rng.standard_normal((50, 2)) + 1j * rng.standard_normal((50, 2))).astype(np.complex64),
        "b": rng.integers(0, 2, (40, 5)).astype(bool),
        "f64_big": rng.standard_normal((20, 100, 10)),
        "bytes": np.array([b"ab", b"cdef", b"x"]),
        "unicode": np.array([["ab", "c\u00e9"], ["z", ""]]),
        "datetime": np.array(["2020-01-01", "2021-02-03"], dtype="datetime64[s]"),
    }


def test_npy_rows_byte_for_byte(d):
    for name, arr in npy_arrays().items():
        np.save(os.path.join(d, f"{name}.npy"), arr)
        write_job(d, f"plugin = npy\npath = {name}.npy\n", job="journal = off\n")
        r = run(d, "run", "job.ini", "--ui", "off")
        got = outcomes(os.path.join(d, "out.jsonl"))
        same = r.returncode == 0 and len(got) == len(arr) and all(
            got.get(i) == ("ok", arr[i:i + 1].tobytes()) for i in range(len(arr)))
        check(same, f"npy {name} {arr.dtype.str}{arr.shape}: each row reaches the worker "
              f"byte for byte, task i = row i (exit {r.returncode}, {len(got)} outcomes: "
              f"{r.stderr.strip()[-200:]})")
    arr = npy_arrays()["f32"]
    write_job(d, "plugin = npy\npath = f32.npy\nrows = 10:70\n", job="journal = off\n")
    r = run(d, "run", "job.ini", "--ui", "off")
    got = outcomes(os.path.join(d, "out.jsonl"))
    check(r.returncode == 0 and len(got) == 60 and
          all(got.get(i) == ("ok", arr[10 + i].tobytes()) for i in range(60)),
          f"rows = 10:70: 60 tasks, task i = row 10 + i ({len(got)} outcomes)")
    for rows, n in (("250:", 7), (":3", 3), ("5:5", 0)):
        r = run(d, "run", "job.ini", "--ui", "off", "--set", f"generator.rows={rows}")
        got = outcomes(os.path.join(d, "out.jsonl"))
        check(r.returncode == 0 and len(got) == n, f"rows = {rows}: {n} tasks ({len(got)})")
    for rows, said in (("0:258", "has 257 rows"), ("9:3", "past the last"), ("x", "expected A:B")):
        r = run(d, "check", "job.ini", "--set", f"generator.rows={rows}")
        check(r.returncode != 0 and said in r.stdout + r.stderr,
              f"rows = {rows} refused: {(r.stdout + r.stderr).strip()[-160:]}")


def test_npy_to_npy_sink_and_ranks(d):
    arr = npy_arrays()["f32"]
    np.save(os.path.join(d, "in.npy"), arr)
    write_job(d, "plugin = npy\npath = in.npy\n",
              sink="[sink]\nplugin = npy\npath = out.npy\ndtype = float32\nshape = 3,4\n")
    r = run(d, "run", "job.ini", "--ui", "off")
    ok = r.returncode == 0 and os.path.exists(os.path.join(d, "out.npy"))
    out = np.load(os.path.join(d, "out.npy")) if ok else None
    check(ok and out.shape == arr.shape and np.array_equal(out, arr),
          f"npy -> echo -> npy sink: the same array, sized by the generator's total "
          f"(exit {r.returncode}: {r.stderr.strip()[-200:]})")
    write_job(d, "plugin = npy\npath = in.npy\nrows = 3:250\n",
              sink="[sink]\nplugin = jsonl\npath = out-{rank}.jsonl\n")
    r0 = run(d, "run", "job.ini", "--ui", "off", "--rank", "0/2")
    r1 = run(d, "run", "job.ini", "--ui", "off", "--rank", "1/2")
    g0 = outcomes(os.path.join(d, "out-0.jsonl"))
    g1 = outcomes(os.path.join(d, "out-1.jsonl"))
    both = {**g0, **g1}
    check(r0.returncode == 0 and r1.returncode == 0 and not (set(g0) & set(g1)) and
          set(both) == set(range(247)) and
          all(both[i] == ("ok", arr[3 + i].tobytes()) for i in range(247)),
          f"2 ranks over rows = 3:250 split the rows exactly once ({len(g0)} + {len(g1)})")


def test_npy_refused(d):
    np.save(os.path.join(d, "fortran.npy"), np.asfortranarray(np.arange(12.0).reshape(3, 4)))
    np.save(os.path.join(d, "obj.npy"), np.array([1, "a", None], dtype=object), allow_pickle=True)
    np.save(os.path.join(d, "rec.npy"), np.zeros(3, dtype=[("a", "<f4"), ("b", "u1")]))
    np.save(os.path.join(d, "c.npy"), np.arange(12.0).reshape(3, 4))
    with open(os.path.join(d, "short.npy"), "wb") as f:
        f.write(open(os.path.join(d, "c.npy"), "rb").read()[:-8])
    for name, said in (("fortran", "Fortran order"), ("obj", "dtype object"),
                       ("rec", "record dtype"), ("short", "shorter"),
                       ("missing", "cannot open")):
        write_job(d, f"plugin = npy\npath = {name}.npy\n")
        for cmd in ("check", "run"):
            r = run(d, cmd, "job.ini")
            text = r.stdout + r.stderr
            check(r.returncode != 0 and said in text and f"{name}.npy" in text,
                  f"{cmd}: {name}.npy refused, naming it: {text.strip()[-200:]}")


def raw_npy(path, header, data, version=1):
    """A .npy file with `header` (the dict's text) as it is, padded as NumPy pads it."""
    pre = 10 if version == 1 else 12
    text = header + " " * ((64 - (pre + len(header) + 1) % 64) % 64) + "\n"
    size = len(text).to_bytes(2 if version == 1 else 4, "little")
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY" + bytes([version, 0]) + size + text.encode("latin1") + data)


def test_npy_headers_as_numpy_reads_them(d):
    """Crafted headers: gpud reads each as NumPy does (the same rows, byte for byte) or,
    where NumPy refuses it, refuses it too, naming the file; zero-size arrays and
    float128 as NumPy gives them."""
    data = bytes(range(48))
    cases = {
        "dup_descr": ("{'descr': '<i2', 'fortran_order': False, 'shape': (3,), "
                      "'descr': '<f4', }", data[:12]),
        "dup_shape": ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), "
                      "'shape': (4,), }", data[:16]),
        "dup_fortran": ("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), "
                        "'fortran_order': False, }", data[:24]),
        "fortran_1": ("{'descr': '<f4', 'fortran_order': 1, 'shape': (3,), }", data[:12]),
        "fortran_0": ("{'descr': '<f4', 'fortran_order': 0, 'shape': (3,), }", data[:12]),
        "shape_int": ("{'descr': '<f4', 'fortran_order': False, 'shape': (3), }", data[:12]),
        "shape_list": ("{'descr': '<f4', 'fortran_order': False, 'shape': [3], }", data[:12]),
        "extra_key": ("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1, }",
                      data[:12]),
        "no_shape": ("{'descr': '<f4', 'fortran_order': False, }", data[:12]),
        "dq_keys": ('{"descr": "<u2", "fortran_order": False, "shape": (2, 3)}', data[:12]),
        "plain_u1": ("{'descr': '<u1', 'fortran_order': False, "
                         "'shape': (4,), }", data[:4]),
        "not_dict": ("['descr', '<f4']", data[:12]),
        "trailing": ("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), } x",
                     data[:12]),
        "zero_rows": ("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", b""),
        "zero_cols": ("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 0), }", b""),
    }
    for name, (header, raw) in cases.items():
        raw_npy(os.path.join(d, f"{name}.npy"), header, raw)
    np.save(os.path.join(d, "f128.npy"), np.arange(6, dtype=np.longdouble).reshape(3, 2))
    np.save(os.path.join(d, "c256.npy"), np.arange(4, dtype=np.clongdouble))
    # NumPy 1.24 takes (-3,) as 3 elements (count -3 reads them all): not a shape; gpud
    # refuses it, saying so.
    raw_npy(os.path.join(d, "shape_neg.npy"),
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }", data[:12])
    write_job(d, "plugin = npy\npath = shape_neg.npy\n", job="journal = off\n")
    r = run(d, "run", "job.ini", "--ui", "off")
    check(r.returncode == 2 and "shape_neg.npy: its .npy header's shape has a negative size"
          in r.stderr, f"shape_neg refused: {r.stderr.strip()[-200:]}")
    for name in list(cases) + ["f128", "c256"]:
        path = os.path.join(d, f"{name}.npy")
        try:
            arr = np.load(path)
            why = None
        except Exception as e:  # NumPy refuses it: gpud must too
            arr, why = None, f"{type(e).__name__}: {e}"
        write_job(d, f"plugin = npy\npath = {name}.npy\n", job="journal = off\n")
        r = run(d, "run", "job.ini", "--ui", "off")
        said = r.stdout + r.stderr
        if arr is None:
            check(r.returncode == 2 and f"{name}.npy" in said and "Traceback" not in said,
                  f"{name}: NumPy refuses it ({why}); gpud too, naming it (exit "
                  f"{r.returncode}: {said.strip()[-200:]})")
            continue
        got = outcomes(os.path.join(d, "out.jsonl")) if r.returncode == 0 else {}
        same = r.returncode == 0 and len(got) == len(arr) and all(
            got.get(i) == ("ok", arr[i:i + 1].tobytes()) for i in range(len(arr)))
        check(same, f"{name}: read as NumPy reads it, {arr.dtype.str}{arr.shape}: "
              f"{len(arr)} tasks, each row byte for byte (exit {r.returncode}, "
              f"{len(got)} outcomes: {said.strip()[-200:]})")
        r = run(d, "check", "job.ini")
        check(r.returncode == 0, f"{name}: gpud check takes it (exit {r.returncode})")


# ---- hdf5 ----

def test_hdf5_rows(d):
    import h5py

    rng = np.random.default_rng(6)
    data = {
        "/f32": rng.standard_normal((301, 3, 4)).astype(np.float32),
        "/g/sub/i16be": rng.integers(-30000, 30000, (97, 5)).astype(">i2"),
        "/s5": np.array([b"abc", b"defgh", b"", b"x"] * 10, dtype="S5"),
        "/rec": np.array([(i, i * 0.5) for i in range(33)], dtype=[("a", "<i4"), ("b", "<f8")]),
    }
    path = os.path.join(d, "in.h5")
    with h5py.File(path, "w") as f:
        for name, arr in data.items():
            f.create_dataset(name, data=arr, chunks=True if arr.ndim > 1 else None,
                             compression="gzip" if name == "/f32" else None)
        f.create_dataset("vlen", data=np.array(["a", "bcd"], dtype=h5py.string_dtype()))
        f.create_dataset("scalar", data=3.0)
    with h5py.File(path, "r") as f:  # as h5py gives them back
        data = {name: f[name][()] for name in data}
    for name, arr in data.items():
        for block in ("", "block = 7\n"):
            write_job(d, f"plugin = hdf5\npath = in.h5\ndataset = {name}\n{block}",
                      job="journal = off\n")
            r = run(d, "run", "job.ini", "--ui", "off")
            got = outcomes(os.path.join(d, "out.jsonl"))
            same = r.returncode == 0 and len(got) == len(arr) and all(
                got.get(i) == ("ok", arr[i:i + 1].tobytes()) for i in range(len(arr)))
            check(same, f"hdf5 {name} {arr.dtype}{arr.shape} {block.strip() or 'default block'}: "
                  f"each row byte for byte (exit {r.returncode}, {len(got)} outcomes: "
                  f"{r.stderr.strip()[-200:]})")
    arr = data["/f32"]
    write_job(d, "plugin = hdf5\npath = in.h5\ndataset = /f32\nrows = 20:250\nblock = 16\n",
              sink="[sink]\nplugin = jsonl\npath = out-{rank}.jsonl\n")
    r0 = run(d, "run", "job.ini", "--ui", "off", "--rank", "0/2")
    r1 = run(d, "run", "job.ini", "--ui", "off", "--rank", "1/2")
    g0 = outcomes(os.path.join(d, "out-0.jsonl"))
    g1 = outcomes(os.path.join(d, "out-1.jsonl"))
    both = {**g0, **g1}
    check(r0.returncode == 0 and r1.returncode == 0 and not (set(g0) & set(g1)) and
          set(both) == set(range(230)) and
          all(both[i] == ("ok", arr[20 + i:21 + i].tobytes()) for i in range(230)),
          f"hdf5 rows = 20:250, 2 ranks: every row exactly once, task i = row 20 + i "
          f"({len(g0)} + {len(g1)})")
    with open(os.path.join(d, "not.h5"), "wb") as f:
        f.write(b"not an hdf5 file" * 10)
    for p, ds, said in (("in.h5", "vlen", "variable-length"), ("in.h5", "scalar", "scalar"),
                        ("in.h5", "nope", "no dataset 'nope'"), ("not.h5", "x", "not.h5"),
                        ("in.h5", "/f32\nrows = 0:302", "has 301 rows")):
        write_job(d, f"plugin = hdf5\npath = {p}\ndataset = {ds}\n")
        for cmd in ("check", "run"):
            r = run(d, cmd, "job.ini")
            text = r.stdout + r.stderr
            check(r.returncode != 0 and said in text and p in text,
                  f"{cmd}: hdf5 {p} {ds.splitlines()[0]} refused: {text.strip()[-200:]}")


def test_hdf5_causes(d):
    """A read that libhdf5 refuses says why: a filter gpud's libhdf5 lacks (LZF, h5py's
    own) fails each task naming the filter; an external link to a missing file names
    the link, its target and the system's error."""
    import h5py

    arr = np.arange(300, dtype=np.float32).reshape(100, 3)
    with h5py.File(os.path.join(d, "in.h5"), "w") as f:
        f.create_dataset("lzf", data=arr, chunks=(10, 3), compression="lzf")
        f["ext"] = h5py.ExternalLink("missing.h5", "/data")
    write_job(d, "plugin = hdf5\npath = in.h5\ndataset = lzf\n", job="journal = off\n")
    r = run(d, "run", "job.ini", "--ui", "off")
    got = outcomes(os.path.join(d, "out.jsonl"))
    msgs = {m for st, m in got.values() if st == "error"}
    check(r.returncode == 1 and len(got) == 100 and len(msgs) >= 1 and
          all("required filter 'lzf' is not registered" in m and "in.h5" in m for m in msgs),
          f"lzf: every task fails naming the filter it lacks (exit {r.returncode}, "
          f"{len(got)} outcomes: {sorted(msgs)[:1]})")
    write_job(d, "plugin = hdf5\npath = in.h5\ndataset = ext\n")
    for cmd in ("check", "run"):
        r = run(d, cmd, "job.ini")
        text = r.stdout + r.stderr
        check(r.returncode == 2 and "'ext' is an external link to missing.h5:/data" in text
              and "has no dataset" not in text,
              f"{cmd}: an external link to a missing file says so: {text.strip()[-240:]}")


# ---- whole samples: tar `members`, the sample's framing, its key in every event ----

def parse_sample(b):
    """A whole sample's framing (gpud/plugin.h) read the way its doc says: (key, [(name,
    bytes)])."""
    import struct

    magic, count, key_len, _ = struct.unpack_from("<4I", b, 0)
    assert magic == 0x53445047, "GPDS magic"
    key = b[16:16 + key_len].decode()
    at, out = 16 + key_len, []
    for _ in range(count):
        at = (at + 7) & ~7
        name_len, _, size = struct.unpack_from("<IIQ", b, at)
        name = b[at + 16:at + 16 + name_len].decode()
        data = (at + 16 + name_len + 63) & ~63
        out.append((name, b[data:data + size]))
        at = data + size
    return key, out


def fnv32(b):
    h = 2166136261
    for c in b:
        h = ((h ^ c) * 16777619) & 0xFFFFFFFF
    return h


def sample_shards(d, rng):
    """Two shards of samples with jpg, cls and json members (one sample lacks its cls);
    returns [(key, {ext: bytes})] in order."""
    flat = []
    for s in range(2):
        samples = []
        for i in range(30):
            key = f"s{s}/{i:04d}"
            m = {"jpg": rng.bytes(int(rng.integers(1, 5000))), "cls": str(i % 7).encode(),
                 "json": json.dumps({"i": i, "shard": s}).encode()}
            if (s, i) == (1, 3):
                del m["cls"]
            samples.append((key, m))
        make_shard(os.path.join(d, f"smp-{s}.tar"), samples)
        flat += samples
    return flat


def jsonl_rows(path):
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path)]


def row_bytes(row):
    """An ok line's result: as text when it was valid UTF-8, else base64."""
    if "result" in row:
        return row["result"].encode("utf-8")
    return __import__("base64").b64decode(row["result_base64"])


def test_tar_members(d):
    flat = sample_shards(d, np.random.default_rng(5))
    bad = 30 + 3
    write_job(d, "plugin = tar\npath = smp-*.tar\nmembers = jpg, cls\n")
    r = run(d, "run", "job.ini", "--ui", "off")
    rows = jsonl_rows(os.path.join(d, "out.jsonl"))
    check(r.returncode == 1 and len(rows) == len(flat),
          f"members = jpg, cls: a task per sample, the one without a cls failing (exit "
          f"{r.returncode}, {len(rows)} rows: {r.stderr.strip()[-300:]})")
    byid = {row["task_id"]: row for row in rows}
    good = 0
    for tid, (key, m) in enumerate(flat):
        row = byid.get(tid, {})
        if tid == bad:
            check(row.get("status") == "error" and f"'{key}'" in row.get("error", "")
                  and "'cls'" in row.get("error", "") and "smp-1.tar" in row.get("error", ""),
                  f"the sample without its cls fails alone, naming key, member and shard: {row}")
            check(row.get("key") == key, f"the failed task's line has its key too: {row.get('key')}")
            continue
        if row.get("status") != "ok":
            continue
        got = parse_sample(row_bytes(row))
        good += got == (key, [("jpg", m["jpg"]), ("cls", m["cls"])]) and row.get("key") == key
    check(good == len(flat) - 1, f"each sample whole, jpg then cls, its key in the framing and "
          f"in its jsonl line ({good} of {len(flat) - 1})")

    # members = *: every member, in the shard's order; a C worker walks them (plugin.h).
    env = dict(os.environ, GPUD_PLUGIN_PATH=os.environ.get("FIXTURES", ""), TMPDIR=d)
    with open(os.path.join(d, "job.ini")) as f:
        text = f.read().replace("plugin = echo", "plugin = members")
    with open(os.path.join(d, "job.ini"), "w") as f:
        f.write(text)
    r = subprocess.run([GPUD, "run", "job.ini", "--ui", "off", "--set", "generator.members=*",
                        "--set", "job.journal=off"], cwd=d, capture_output=True, text=True,
                       env=env, timeout=240)
    rows = {row["task_id"]: row for row in jsonl_rows(os.path.join(d, "out.jsonl"))}
    want = {tid: key + "".join(f";{e}:{len(b)}:{fnv32(b):08x}" for e, b in m.items())
            for tid, (key, m) in enumerate(flat)}
    same = sum(rows.get(t, {}).get("result") == w and rows[t].get("key") == flat[t][0]
               for t, w in want.items())
    check(r.returncode == 0 and same == len(flat),
          f"members = *: a C worker walking each sample (gpud_sample_next) finds every "
          f"member in order ({same} of {len(flat)}, exit {r.returncode}: "
          f"{r.stderr.strip()[-300:]})")

    # member and members together: refused, naming both.
    r = subprocess.run([GPUD, "check", "job.ini", "--set", "generator.member=jpg"], cwd=d,
                       capture_output=True, text=True, env=env)
    check(r.returncode == 2 and "member = 'jpg' and members = 'jpg, cls'" in r.stdout + r.stderr,
          f"member and members together are refused: {(r.stdout + r.stderr).strip()[-300:]}")
    r = subprocess.run([GPUD, "check", "job.ini", "--set", "generator.members=jpg,,cls"],
                       cwd=d, capture_output=True, text=True, env=env)
    check(r.returncode == 2 and "members = 'jpg,,cls'" in r.stdout + r.stderr,
          f"an empty name in members is refused: {(r.stdout + r.stderr).strip()[-300:]}")


SAMPLE_WORKER = '''
import json
import gpud


class W(gpud.BaseWorker):
    def process(self, sample):
        return json.dumps({"key": sample["__key__"], "cls": sample.get("cls", b"").decode(),
                           "json": json.loads(sample["json"]), "names": sorted(sample),
                           "jpg": len(sample["jpg"])})
'''


def test_tar_members_python(d):
    flat = sample_shards(d, np.random.default_rng(6))
    with open(os.path.join(d, "w.py"), "w") as f:
        f.write(SAMPLE_WORKER)
    with open(os.path.join(d, "job.ini"), "w") as f:
        f.write(f"[job]\ngpus = 0\npython = {sys.executable}\n"
                "[worker]\nplugin = python\nscript = w.py\nclass = W\ninput = sample\n"
                "[generator]\nplugin = tar\npath = smp-*.tar\nmembers = *\n"
                "[sink]\nplugin = jsonl\npath = out.jsonl\n")
    r = run(d, "run", "job.ini", "--ui", "off")
    rows = {row["task_id"]: row for row in jsonl_rows(os.path.join(d, "out.jsonl"))}
    good = 0
    for tid, (key, m) in enumerate(flat):
        row = rows.get(tid, {})
        if row.get("status") != "ok":
            continue
        v = json.loads(row["result"])
        good += (v["key"] == key and row.get("key") == key and v["jpg"] == len(m["jpg"])
                 and v["names"] == sorted(["__key__", *m]) and v["json"] == json.loads(m["json"])
                 and v["cls"] == m.get("cls", b"").decode()) if "cls" in m else (
                     v["names"] == ["__key__", "jpg", "json"])
    check(r.returncode == 0 and good == len(flat),
          f"a python worker (input = sample) gets each sample as a dict with __key__, its "
          f"label and every member ({good} of {len(flat)}, exit {r.returncode}: "
          f"{r.stderr.strip()[-400:]})")
    # Bytes that are not a sample: each task rejected, saying why.
    with open(os.path.join(d, "job.ini")) as f:
        text = f.read().replace("members = *", "member = json")
    with open(os.path.join(d, "plain.ini"), "w") as f:
        f.write(text)
    r = run(d, "run", "plain.ini", "--ui", "off")
    rows = jsonl_rows(os.path.join(d, "out.jsonl"))
    check(r.returncode == 1 and len(rows) == len(flat) and
          all("not a whole sample" in row.get("error", "") for row in rows),
          f"input = sample given plain bytes: every task fails saying so (exit "
          f"{r.returncode}: {rows[:1]})")


def test_tar_members_jpeg_stage(d):
    from PIL import Image

    flat = make_jpeg_shards(d, 1, 12, corrupt={(0, 5)})
    write_job(d, "plugin = tar\npath = img-*.tar\nmembers = cls, jpg\n")
    with open(os.path.join(d, "job.ini")) as f:
        text = f.read().replace("[worker]\nplugin = echo\n",
                                "[stage.decode]\nplugin = jpeg\nheight = 16\nwidth = 16\n"
                                "[worker]\nplugin = echo\n")
    with open(os.path.join(d, "job.ini"), "w") as f:
        f.write(text)
    r = run(d, "run", "job.ini", "--ui", "off")
    rows = {row["task_id"]: row for row in jsonl_rows(os.path.join(d, "out.jsonl"))}
    good, worst = 0, 0.0
    for tid, (key, data) in enumerate(flat):
        row = rows.get(tid, {})
        if tid == 5:
            check(row.get("status") == "error" and f"sample '{key}', member 'jpg'" in
                  row.get("error", "") and row.get("key") == key,
                  f"a corrupt image fails its sample alone, naming sample and member: {row}")
            continue
        if row.get("status") != "ok":
            continue
        k, members = parse_sample(row_bytes(row))
        names = [n for n, _ in members]
        if k != key or names != ["cls", "jpg"] or members[0][1] != str(tid % 10).encode():
            continue
        px = np.frombuffer(members[1][1], np.uint8)
        if px.size != 16 * 16 * 3:
            continue
        with Image.open(io.BytesIO(data)) as im:
            ref = np.asarray(im.convert("RGB").resize((16, 16), Image.BILINEAR)).astype(float)
        worst = max(worst, float(np.abs(px.reshape(16, 16, 3).mean((0, 1)) - ref.mean((0, 1))).max()))
        good += row.get("key") == key
    check(r.returncode == 1 and good == len(flat) - 1 and worst <= 2.55,
          f"tar (members) -> jpeg stage: each sample's jpg decoded in place, its cls passed "
          f"on, its key in the event ({good} of {len(flat) - 1}, worst mean {worst:.2f}, exit "
          f"{r.returncode}: {r.stderr.strip()[-300:]})")


def test_tar_members_jpg_before_png(d):
    """members = *: a sample's jpg is its image wherever a png sorts beside it (a depth
    map 'depth.png' before 'jpg'): the jpg decoded, the png passed on as it came."""
    import tarfile
    from PIL import Image

    def enc(fmt, size, colour):
        buf = io.BytesIO()
        Image.new("RGB", size, colour).save(buf, fmt)
        return buf.getvalue()

    jpg, png = enc("JPEG", (20, 20), (200, 30, 30)), enc("PNG", (4, 4), (0, 0, 255))
    with tarfile.open(os.path.join(d, "s.tar"), "w") as t:
        for name, data in (("c.depth.png", png), ("c.jpg", jpg), ("c.cls", b"3")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    write_job(d, "plugin = tar\npath = s.tar\nmembers = *\n")
    with open(os.path.join(d, "job.ini")) as f:
        text = f.read().replace("[worker]\nplugin = echo\n",
                                "[stage.decode]\nplugin = jpeg\nheight = 8\nwidth = 8\n"
                                "[worker]\nplugin = echo\n")
    with open(os.path.join(d, "job.ini"), "w") as f:
        f.write(text)
    r = run(d, "run", "job.ini", "--ui", "off")
    rows = list(jsonl_rows(os.path.join(d, "out.jsonl")))
    members = dict(parse_sample(row_bytes(rows[0]))[1]) if rows and rows[0].get(
        "status") == "ok" else {}
    px = np.frombuffer(members.get("jpg", b""), np.uint8)
    check(r.returncode == 0 and members.get("depth.png") == png and px.size == 8 * 8 * 3
          and abs(int(px[0]) - 200) <= 3,
          f"members = *: the jpg decoded, the png before it passed on (exit {r.returncode}, "
          f"{rows[:1]}, {sorted(members)}: {r.stderr.strip()[-300:]})")


# ---- the image pipeline: tar -> jpeg stage -> a worker -> npy ----

def make_jpeg_shards(d, n_shards, per_shard, corrupt=()):
    """Shards of JPEG samples made with Pillow; returns [(key, jpeg bytes)] in order."""
    from PIL import Image

    rng = np.random.default_rng(7)
    flat = []
    for s in range(n_shards):
        samples = []
        for i in range(per_shard):
            w, h = int(rng.integers(40, 160)), int(rng.integers(40, 160))
            y, x = np.mgrid[0:h, 0:w]
            base = rng.integers(0, 200, 3)
            a = np.stack([base[0] + x * 50 / w, base[1] + y * 50 / h,
                          base[2] + (x + y) * 25 / (w + h)], -1)
            buf = io.BytesIO()
            Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
            data = buf.getvalue()
            if (s, i) in corrupt:
                data = data[:200] + b"\x00" * 50  # header kept, the scan destroyed
            key = f"img{s}/{i:05d}"
            samples.append((key, {"jpg": data, "cls": str(i % 10).encode()}))
            flat.append((key, data))
        make_shard(os.path.join(d, f"img-{s:03d}.tar"), samples)
    return flat


def pillow_means(data, size=64):
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        a = np.asarray(im.convert("RGB").resize((size, size), Image.BILINEAR)).astype(float)
    return a.reshape(-1, 3).mean(0)


def test_image_pipeline(d):
    flat = make_jpeg_shards(d, 2, 150, corrupt={(1, 40)})
    write_job(d, "plugin = tar\npath = img-*.tar\nkeys_out = keys.tsv\n",
              sink="[sink]\nplugin = npy\npath = means.npy\ndtype = float32\nshape = 3\n")
    with open(os.path.join(d, "job.ini")) as f:
        text = f.read().replace("[worker]\nplugin = echo\n",
                                "[stage.decode]\nplugin = jpeg\nheight = 64\nwidth = 64\n"
                                "[worker]\nplugin = means\n")
    with open(os.path.join(d, "job.ini"), "w") as f:
        f.write(text)
    env = dict(os.environ, GPUD_PLUGIN_PATH=os.environ.get("FIXTURES", ""))
    r = subprocess.run([GPUD, "run", "job.ini", "--ui", "off"], cwd=d, capture_output=True,
                       text=True, env=env, timeout=240)
    check(r.returncode == 1 and "1 failed" in r.stderr,
          f"tar -> jpeg -> means -> npy: one corrupt JPEG fails alone (exit {r.returncode}: "
          f"{r.stderr.strip()[-300:]})")
    if not os.path.exists(os.path.join(d, "means.npy")):
        check(False, "means.npy written")
        return
    out = np.load(os.path.join(d, "means.npy"))
    done = np.load(os.path.join(d, "means.npy.done"))
    check(out.shape == (300, 3) and out.dtype == np.float32, f"numpy.load: shape {out.shape}")
    bad = 150 + 40
    check(done[bad] == 2 and (done[np.arange(300) != bad] == 1).all(),
          "the done record: every row ok but the corrupt JPEG's (2)")
    worst = max(float(np.abs(out[i] - pillow_means(data)).max())
                for i, (_, data) in enumerate(flat) if i != bad)
    check(worst <= 2.55, f"every row within 1% of 255 of Pillow's means (worst {worst:.3f})")
    keys = [line.split("\t")[1] for line in open(os.path.join(d, "keys.tsv"))]
    check(keys == [k for k, _ in flat], "keys.tsv gives each row's sample key")

    # kill -9 of the host half way, then --resume: the same file, every row once.
    full = out.copy()
    os.rename(os.path.join(d, "means.npy"), os.path.join(d, "full.npy"))
    os.unlink(os.path.join(d, "means.npy.done"))
    cmd = [GPUD, "run", "job.ini", "--ui", "off", "--set", "worker.sleep_us=8000"]
    p = subprocess.Popen(cmd, cwd=d, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t0 = time.monotonic()
    half = 0
    while time.monotonic() - t0 < 120 and p.poll() is None:
        try:
            half = int((np.load(os.path.join(d, "means.npy.done"), mmap_mode="r") == 1).sum())
        except (OSError, ValueError):
            half = 0
        if half >= 120:
            break
        time.sleep(0.05)
    running = p.poll() is None
    p.kill()
    p.wait()
    check(running and 0 < half < 299, f"the host killed (-9) while it ran, {half} rows done of 300")
    r = subprocess.run(cmd + ["--resume"], cwd=d, capture_output=True,
                       text=True, env=env, timeout=240)
    out2 = np.load(os.path.join(d, "means.npy"))
    done2 = np.load(os.path.join(d, "means.npy.done"))
    resumed = [line for line in r.stderr.splitlines() if "resumed" in line]
    check(r.returncode == 1 and np.array_equal(out2, full) and (done2 == done).all(),
          f"--resume finishes the same file: every row equal to the uninterrupted run's "
          f"(exit {r.returncode}: {resumed})")


def doc_blocks(path):
    """The fenced code blocks of a markdown file, as (language, text), in order."""
    import re

    with open(path) as f:
        return re.findall(r"^```(\w*)\n(.*?)^```", f.read(), re.S | re.M)


def ini_keys(text):
    """An ini text's sections and keys, comments and spacing left out."""
    out = []
    for line in text.splitlines():
        line = line.split(";", 1)[0].strip()
        if line:
            out.append(" ".join(line.split()))
    return out


def test_images_example(d):
    """docs/images-to-array.md's example as written there: its job file and its Python
    program taken from the page's code blocks (the job file also the same keys as
    docs/examples/images/embed.ini), run in a copy of the example folder on shards made
    by its script; rows equal to Pillow's means of the decoded and resized images. The
    job with the max_result_bytes the page once had (16K) is refused by gpud check,
    naming the key."""
    import numpy as np

    src = os.environ["SRCDIR"]
    blocks = doc_blocks(os.path.join(src, "docs", "images-to-array.md"))
    ini = [b for lang, b in blocks if lang == "ini"]
    prog = [b for lang, b in blocks if lang == "python" and "gpud.Dispatcher(" in b]
    check(len(ini) == 1 and len(prog) == 1,
          f"the page has its job file and its program ({len(ini)} ini, {len(prog)} programs)")
    ex = os.path.join(d, "embed")
    shutil.copytree(os.path.join(src, "docs", "examples", "images"), ex)
    with open(os.path.join(ex, "embed.ini")) as f:
        check(ini_keys(f.read()) == ini_keys(ini[0]),
              "docs/examples/images/embed.ini holds the page's job file")
    with open(os.path.join(ex, "embed.ini"), "w") as f:
        f.write(ini[0])
    r = subprocess.run([sys.executable, "make_shards.py", "2", "40"], cwd=ex,
                       capture_output=True, text=True)
    check(r.returncode == 0, f"make_shards.py: {r.stdout}{r.stderr}")
    py = f"job.python={sys.executable}"
    r = run(ex, "check", "embed.ini", "--set", py)
    check(r.returncode == 0 and "shared memory:" in r.stdout + r.stderr,
          f"gpud check embed.ini: {r.stdout[-400:]}{r.stderr[-400:]}")
    r = run(ex, "run", "embed.ini", "--ui", "off", "--set", py)
    check(r.returncode == 0 and "gpud: 80 tasks: 80 ok, 0 failed" in r.stderr,
          f"gpud run embed.ini: {r.stderr[-600:]}")
    emb = np.load(os.path.join(ex, "embeddings-0.npy"))
    done = np.load(os.path.join(ex, "embeddings-0.npy.done"))
    check(emb.shape == (80, 3) and emb.dtype == np.float32 and (done == 1).all(),
          f"embeddings-0.npy {emb.shape} {emb.dtype}, {(done == 1).sum()} rows done")
    side = int(ini[0].split("height = ", 1)[1].split()[0])
    means = {}
    worst = 0.0
    with open(os.path.join(ex, "keys-0.tsv")) as f:
        for line in f:
            tid, key, shard = line.rstrip("\n").split("\t")
            with tarfile.open(shard) as t:
                data = t.extractfile(key + ".jpg").read()
            means[int(tid)] = pillow_means(data, side)
            worst = max(worst, float(np.abs(emb[int(tid)] - means[int(tid)]).max()))
    check(worst <= 2.55, f"every row within 1% of 255 of Pillow's means (worst {worst:.3f})")
    # The page's old max_result_bytes: every task would fail, and gpud check says so.
    old = "\n".join("max_result_bytes = 16K" if x.startswith("max_result_bytes") else x
                    for x in ini[0].splitlines())
    with open(os.path.join(ex, "small.ini"), "w") as f:
        f.write(old + "\n")
    r = run(ex, "check", "small.ini", "--set", py)
    check(r.returncode == 2 and "max_result_bytes = 16384" in r.stderr
          and "every task would fail; raise max_result_bytes to 147K or more" in r.stderr,
          f"gpud check refuses max_result_bytes = 16K for {side} x {side} pixels: "
          f"{r.returncode} {r.stderr[-500:]}")
    # The page's program, on the same shards: the workers on stand-in GPUs ("all").
    build = os.path.dirname(os.path.dirname(GPUD))
    package = os.path.join(build, "python")
    if not any(x.startswith("_gpud") for x in os.listdir(os.path.join(package, "gpud"))):
        print("SKIP: the page's Python program: the gpud package is not built")
        return
    cuda = os.path.join(d, "cuda")
    os.makedirs(cuda)
    os.symlink(os.environ["FAKECUDA"], os.path.join(cuda, "libcudart.so"))
    with open(os.path.join(ex, "program.py"), "w") as f:
        f.write(prog[0] + "    print(stats['completed'], stats['failed'])\n")
    env = dict(os.environ, TMPDIR=d, PYTHONPATH=package, FAKE_CUDA_DEVICES="2",
               LD_LIBRARY_PATH=os.pathsep.join(
                   x for x in (cuda, os.environ.get("LD_LIBRARY_PATH")) if x))
    # A sanitized libgpud (build-asan): Python loads the runtime first.
    ldd = subprocess.run(["ldd", os.path.join(build, "daemon", "libgpud.so")],
                         capture_output=True, text=True).stdout
    if "libtsan" in ldd:
        # A Python cannot load a ThreadSanitizer library after its start (static TLS);
        # the tsan pass checks gpud and its workers, the package is checked by the others.
        print("SKIP: the page's Python program: libgpud is built with ThreadSanitizer")
        return
    preload = [x.split("=>")[1].split()[0] for x in ldd.splitlines()
               if ("libasan" in x or "libubsan" in x) and "=>" in x]
    if preload:
        env.update(LD_PRELOAD=" ".join(preload),
                   ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")
    r = subprocess.run([sys.executable, "program.py"], cwd=ex, capture_output=True,
                       text=True, env=env, timeout=240)
    check(r.returncode == 0 and r.stdout.split() == ["80", "0"],
          f"the page's program: {r.returncode} {r.stdout[-300:]} {r.stderr[-600:]}")
    if r.returncode:
        return
    got = np.load(os.path.join(ex, "means.npy"))
    check(got.shape == (80, 3) and max(float(np.abs(got[i] - m).max())
                                       for i, m in means.items()) <= 2.55,
          f"means.npy {got.shape}: every row Pillow's means")


def main():
    global RAN
    parts = []
    if os.environ.get("HAVE_ARCHIVE", "1") == "1":
        parts += [test_tar_order_keys_and_missing_member, test_tar_truncated,
                  test_tar_resume_refuses_changed_shard, test_tar_ranks, test_tar_check,
                  test_tar_unreadable_shard, test_tar_names_and_links, test_tar_members]
        if os.environ.get("HAVE_PYTHON", "1") == "1":
            parts += [test_tar_shard_changed_during_run, test_tar_members_python]
        else:
            print("SKIP: tar: a shard changed during the run: gpud was built without the "
                  "python plugins")
    else:
        print("SKIP: tar: gpud was built without libarchive (Debian: libarchive-dev)")
    parts += [test_npy_rows_byte_for_byte, test_npy_to_npy_sink_and_ranks, test_npy_refused,
              test_npy_headers_as_numpy_reads_them, test_readers_refuse_fifo]
    if os.environ.get("HAVE_HDF5", "1") != "1":
        print("SKIP: hdf5: gpud was built without libhdf5 (Debian: libhdf5-dev)")
    elif subprocess.run([sys.executable, "-c", "import h5py"], capture_output=True).returncode:
        print("SKIP: hdf5: this Python has no h5py (Debian: python3-h5py)")
    else:
        parts += [test_hdf5_rows, test_hdf5_causes]
    if os.environ.get("HAVE_ARCHIVE", "1") != "1" or os.environ.get("HAVE_JPEG", "1") != "1":
        print("SKIP: the image pipeline: gpud was built without libarchive or libjpeg")
    elif subprocess.run([sys.executable, "-c", "import PIL"], capture_output=True).returncode:
        print("SKIP: the image pipeline: this Python has no Pillow (Debian: python3-pil)")
    else:
        parts += [test_image_pipeline, test_tar_members_jpeg_stage, test_tar_members_jpg_before_png]
        if os.environ.get("HAVE_PYTHON", "1") == "1":
            parts.append(test_images_example)
        else:
            print("SKIP: docs/images-to-array.md's example: gpud was built without the python plugins")
    # Names given: only the parts whose names hold one of them (a run by hand).
    if len(sys.argv) > 1:
        parts = [p for p in parts if any(a in p.__name__ for a in sys.argv[1:])]
    for part in parts:
        d = tempfile.mkdtemp(prefix="gpud-readers-")
        try:
            print(f"-- {part.__name__}", flush=True)
            part(d)
            RAN += 1
        finally:
            if FAILED == 0:
                shutil.rmtree(d, ignore_errors=True)
            else:
                print(f"(kept {d})")
    if RAN == 0:
        sys.exit(SKIP)
    print(f"{RAN} parts, {FAILED} failures")
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
