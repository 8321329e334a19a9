# SPDX-License-Identifier: MIT
"""gpud.Dispatcher's items arrive as they were yielded, in any layout, and a worker's
death names each item's own task id: run by run_tests.py as `items.py MODE`, prints
"PASS MODE" when every check held (NumPy's checks say SKIP in one line without it).

snapshot: a generator that refills one buffer (a bytearray, a memoryview of it, a
NumPy array, a tuple or dict holding one, an array it holds only by a weak reference)
and yields it each time: every item reaches the worker as it was when yielded, with
automatic chunks, chunksize=1 and 4, and batch_size=4, as it reaches the C worker
`echo`.
layouts: memoryviews of another layout (Fortran order, strided, multi-dimensional)
arrive as bytes(item) (C order), as `echo` gets them; NumPy arrays of any layout
arrive equal (pickle's semantics: shape, dtype and values); an array's data lies at an
address aligned to its itemsize, and to 64 bytes when its size allows, after items of
odd sizes in the same chunk.
crash_ids: items that kill their worker, in chunks and batches of several: each item
gets exactly one outcome, and a death's on_error names that item's task id."""
import os
import re
import signal
import sys
import tempfile
import weakref
from itertools import islice

from gpud import BaseWorker
# check() and collect() (each id reported once): poison.py's, beside this script
from poison import check, collect

try:
    import numpy as np
except ImportError:
    np = None

N = 2000
OPTS = ({}, {"chunksize": 1}, {"chunksize": 4}, {"batch_size": 4},
        {"batch_size": 4, "chunksize": 1})



def _bytes_of(x):
    """An item's bytes as the worker sees them (C order), and its type's name."""
    if np is not None and isinstance(x, np.ndarray):
        return ("ndarray", x.dtype.str, x.shape, np.ascontiguousarray(x).tobytes(),
                x.ctypes.data % 64, bool(x.flags.aligned))
    if isinstance(x, memoryview):
        return ("memoryview", x.format, x.shape, x.tobytes(), 0, True)
    return (type(x).__name__, x)


class Echo(BaseWorker):
    """Each item back as what the worker saw: its type, layout and bytes."""

    def setup(self, gpu_id, seed):
        pass

    def process(self, x):
        if isinstance(x, tuple):
            return tuple(_bytes_of(v) for v in x)
        if isinstance(x, dict):
            return {k: _bytes_of(v) for k, v in x.items()}
        return _bytes_of(x)


class EchoBatch(Echo):
    def process_batch(self, items):
        return [self.process(x) for x in items]


def refilled(kind, n=N):
    """One buffer refilled with i and yielded each time (the readinto pattern); for
    "weakref" an array the generator holds only by a weak reference, refilled through
    it while the item it was still lives."""
    if kind == "weakref":
        ref = None
        for i in range(n):
            a = ref() if ref is not None else None
            if a is None:
                a = np.zeros(4)
                ref = weakref.ref(a)
            a[:] = i
            box = [a]
            del a
            yield box.pop()  # nothing but the weak reference holds it once taken
        return
    buf = bytearray(32)
    arr = np.zeros(4) if np is not None else None
    for i in range(n):
        buf[:] = bytes([i % 251]) * 32
        if arr is not None:
            arr[:] = i
        yield {"bytearray": lambda: buf, "memoryview": lambda: memoryview(buf),
               "ndarray": lambda: arr, "tuple": lambda: (buf, i),
               "dict": lambda: {"a": arr, "i": i}}[kind]()


def as_yielded(kind, i, r):
    """Whether r, what the worker saw of item i of refilled(kind), is that item as it
    was yielded."""
    data = bytes([i % 251]) * 32
    if kind in ("bytearray", "memoryview"):  # a bytes-like item: a memoryview of it
        return r[:4] == ("memoryview", "B", (32,), data)
    if kind == "tuple":  # nested: pickled in band
        return r == (("bytearray", bytearray(data)), ("int", i))
    arr = ("ndarray", np.dtype(float).str, (4,), np.full(4, i, float).tobytes())
    if kind in ("ndarray", "weakref"):
        return r[:4] == arr
    return r["a"][:4] == arr and r["i"] == ("int", i)


def no_copies():
    """What is copied to take items as they were yielded: an array or bytearray that
    nothing else holds (a fresh one each item) is not, in a chunk (by address) or one
    item a task (gpud._gpud writes an item that may change before reading on); one the
    program holds, if only by a weak reference, is, in a chunk."""
    from gpud import _worker
    from gpud._chunks import Chunks

    cbs = dict.fromkeys(("on_success", "on_error", "on_timeout", "on_task_start"))
    made = []  # their addresses: the generator keeps none of its arrays

    def made_one(i):
        a = np.full(4096, i, np.uint8)
        made.append(a.ctypes.data)
        return a

    def fresh():
        for i in range(8):
            yield made_one(i)

    def refilled_arrays():  # one array, refilled: it holds it
        a = np.zeros(4096, np.uint8)
        for i in range(8):
            a[:] = i
            yield a

    held = [np.full(4096, i, np.uint8) for i in range(8)]
    for name, items, copied in (("fresh", fresh(), False), ("held", iter(held), True),
                                ("refilled", refilled_arrays(), True)):
        c = Chunks(items, 8, cbs, 0.002, 1, 1 << 20, 1 << 20, _worker.loads_framed,
                   _worker.frame, _worker.frame_size, reissue=False)
        parts = [np.frombuffer(p, np.uint8) for p in next(c) if len(p) == 4096]
        check([int(p[0]) for p in parts] == list(range(8)), f"a chunk of {name} arrays")
        if name == "fresh":
            check([p.ctypes.data for p in parts] == made, "a chunk of fresh arrays was copied")
        elif name == "held":
            check(not {p.ctypes.data for p in parts} & {a.ctypes.data for a in held},
                  "a chunk of the program's arrays was not copied")
    # An array held by nothing but a weak reference is copied (the program could take
    # it back and refill it); one held by nothing at all is not.
    def one(ref):
        a = np.ones(9)
        made[:] = [weakref.ref(a) if ref else id(a)]
        box = [a]
        del a
        yield box.pop()
    taken = list(map(_worker.snapshot, islice(one(True), 1)))[0]
    check(made[0]() is not taken, "an array held by a weak reference was not copied")
    taken = list(map(_worker.snapshot, islice(one(False), 1)))[0]
    check(id(taken) == made[0], "an array nothing holds was copied")
    # Containers: a fresh one of immutable values as it is, any other pickled now.
    def containers():
        yield {"a": 1, "b": (2, "x")}
        kept = [1, 2]
        yield kept
        yield (1, bytearray(2))
        yield {"a": np.ones(2)}
    got = [type(x).__name__ for x in map(_worker.snapshot, islice(containers(), 4))]
    check(got == ["dict", "_Frozen", "_Frozen", "_Frozen"], f"containers taken as {got}")
    check(_worker.frame_one(np.ones(9), False)[1] is False
          and _worker.frame_one(np.ones(9), True)[1] is True
          and _worker.frame_one((np.ones(9), 1), False)[1] is True
          and _worker.frame_one(b"x" * 9, True)[1] is False,
          "frame_one: which items may change before they are written")


def snapshot():
    kinds = ["bytearray", "memoryview", "tuple"]
    if np is not None:
        kinds += ["ndarray", "dict", "weakref"]
    else:
        print("SKIP: no NumPy in this Python: refilled arrays are not tried", flush=True)
    for kind in kinds:
        for opts in OPTS:
            cls = EchoBatch if "batch_size" in opts else Echo
            got, errs, stats = collect(cls, refilled(kind), **opts)
            wrong = [i for i in range(N) if i not in got or not as_yielded(kind, i, got[i])]
            check(not errs and not wrong,
                  f"{kind} {opts}: {len(errs)} failed, {len(wrong)} of {N} not as yielded "
                  f"(item {wrong[:1]}: {got.get(wrong[0]) if wrong else None!r})")
            print(f"{kind} {opts}: {stats['completed']} as yielded "
                  f"({stats.get('chunk_total', stats['total'])} tasks)", flush=True)
    if np is not None:
        no_copies()
    # The C worker echo gets the same bytes.
    got, errs, _ = collect("echo", refilled("bytearray", 300))
    check(got == {i: bytes([i % 251]) * 32 for i in range(300)}, "echo: the items as yielded")


def layouts():
    # The memoryviews of another layout, and what bytes(item) gives for each.
    base = bytearray(range(256)) * 4
    views = [memoryview(base)[::3],  # not contiguous
             memoryview(base)[::-1],  # negative strides
             memoryview(base).cast("i", (8, 32))]  # C-contiguous, 4-byte items
    if np is not None:
        f = np.asfortranarray(np.arange(24, dtype=np.int16).reshape(4, 6))
        views += [memoryview(f), memoryview(np.arange(40.0).reshape(5, 8)[:, 1::2])]
    want = [bytes(v) for v in views]
    for opts in OPTS:
        cls = EchoBatch if "batch_size" in opts else Echo
        got, errs, _ = collect(cls, iter(views), **opts)
        check(not errs, f"memoryviews {opts}: failed: {errs}")
        check([got[i][3] for i in range(len(views))] == want,
              f"memoryviews {opts}: not bytes(item): {[got[i][3][:8] for i in got]}")
    got, errs, _ = collect("echo", iter(views))
    check([got[i] for i in range(len(views))] == want, "echo: memoryviews as bytes(item)")
    if np is None:
        print("SKIP: no NumPy in this Python: arrays' layouts and alignment are not tried",
              flush=True)
        return
    # Arrays of any layout arrive equal, aligned, after items of odd sizes.
    arrays = [np.asfortranarray(np.arange(24.0).reshape(4, 6)),
              np.arange(100, dtype=np.int64)[::3],
              np.arange(60, dtype=np.float32).reshape(3, 4, 5).transpose(2, 0, 1),
              np.arange(16, dtype=np.complex128), np.arange(1000, dtype=np.float64),
              np.arange(7, dtype=np.int32)]
    items = []
    for i, a in enumerate(arrays * 20):
        items += [b"x" * (1 + i % 5), a, bytearray(b"y" * 3)]
    for opts in OPTS:
        cls = EchoBatch if "batch_size" in opts else Echo
        got, errs, stats = collect(cls, iter(items), **opts)
        check(not errs and len(got) == len(items), f"arrays {opts}: failed: {errs}")
        for i, x in enumerate(items):
            if not isinstance(x, np.ndarray):
                continue
            kind, dtype, shape, data, at, aligned = got[i]
            check((dtype, shape, data) == (x.dtype.str, x.shape, np.ascontiguousarray(x).tobytes()),
                  f"arrays {opts}: item {i} ({x.dtype} {x.shape}) arrived as {dtype} {shape}")
            nbytes = x.nbytes
            want_at = min(64, nbytes & -nbytes)
            check(aligned and at % want_at == 0,
                  f"arrays {opts}: item {i} ({x.dtype}, {nbytes} bytes) at {at} mod 64, "
                  f"not aligned to {want_at}")
        print(f"arrays {opts}: {len(got)} items, each aligned "
              f"({stats.get('chunk_total', stats['total'])} tasks)", flush=True)


class Crasher(BaseWorker):
    def setup(self, gpu_id, seed):
        pass

    def process(self, x):
        if x % 100 == 37:
            os.kill(os.getpid(), signal.SIGKILL)
        return x


class CrasherBatch(Crasher):
    def process_batch(self, items):
        return [self.process(x) for x in items]


def crash_ids():
    n = 400
    culprits = {x for x in range(n) if x % 100 == 37}
    journal = os.path.join(tempfile.mkdtemp(prefix="gpud-items-"), "j.journal")
    for cls, opts in ((Crasher, {}), (Crasher, {"chunksize": 4}),
                      (CrasherBatch, {"batch_size": 4}),
                      (CrasherBatch, {"batch_size": 4, "chunksize": 1}),
                      # A journal ties a chunk to its items: they fail together.
                      (Crasher, {"chunksize": 4, "journal": journal})):
        what = f"{cls.__name__} {opts}"
        got, errs, stats = collect(cls, range(n), max_worker_restarts=1000, **opts)
        check(set(got) | set(errs) == set(range(n)) and not set(got) & set(errs),
              f"{what}: each item one outcome")
        together = "journal" in opts
        want = {x - x % 4 + k for x in culprits for k in range(4)} if together else culprits
        check(set(errs) == want, f"{what}: failed {sorted(errs)}, expected {sorted(want)}")
        for i, e in errs.items():
            named = re.findall(r"while running task (\d+)", e)
            check(named == [str(i)], f"{what}: item {i}'s error names task {named}: {e!r}")
        print(f"{what}: {len(errs)} failed, each naming its own task id: "
              f"{errs[min(errs)]!r}", flush=True)
        if together:
            os.unlink(journal)


if __name__ == "__main__":
    mode = sys.argv[1]
    {"snapshot": snapshot, "layouts": layouts, "crash_ids": crash_ids}[mode]()
    print(f"PASS {mode}", flush=True)
