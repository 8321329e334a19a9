# SPDX-License-Identifier: MIT
"""gpud.Dispatcher's behaviours, one per mode (argv[1]), each checked here; prints
"PASS <mode>" when every check held. Run by run_tests.py with each Python found.

The worker class is defined in this script (__main__): the workers load the script as
__mp_main__, so the block at the bottom must not run there (it would write a marker
the checks look for)."""
import os
import queue
import signal
import sys
import threading
import time

import gpud
from gpud import BaseWorker, Dispatcher


class Worker(BaseWorker):
    def setup(self, gpu_id, seed, scale, note=None, fail_setup=False):
        if fail_setup:
            raise ValueError(f"no model for GPU {gpu_id}")
        self.gpu_id, self.seed, self.scale, self.note = gpu_id, seed, scale, note

    def process(self, data):
        if isinstance(data, dict) and data.get("sleep"):
            time.sleep(data["sleep"])
            data = data["n"]
        if data == "boom":
            raise KeyError("boom")
        if isinstance(data, dict) and "flaky" in data:  # fails on its first try
            seen = self.__dict__.setdefault("flaky_seen", set())
            if data["flaky"] not in seen:
                seen.add(data["flaky"])
                raise RuntimeError(f"flaky {data['flaky']}")
            data = data["flaky"]
        if isinstance(data, memoryview):  # auto(): large items (read-only views), their length
            return len(data)
        return {"n": data, "twice": data * self.scale, "gpu": self.gpu_id, "seed": self.seed,
                "note": self.note, "pid": os.getpid(), "exe": sys.executable,
                "prefix": sys.prefix, "in_main": "__mp_main__" in sys.modules,
                "gpud_path": os.path.dirname(gpud.__file__)}


GPUS = [0, 1]


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", flush=True)
        sys.exit(1)


def closures():
    # A closure generator over program state, callbacks changing that state, a set and
    # tuples as items, and results compared with what process() returns.
    state = {"made": 0, "results": {}, "starts": 0, "exits": 0}
    names = {}
    main_thread = threading.get_ident()

    def gen():
        for i in range(300):
            state["made"] += 1
            names[i] = f"n{i}"
            yield i

    def on_success(task_id, r, worker_id):
        check(threading.get_ident() == main_thread, "on_success on the main thread")
        check(names.get(task_id) == f"n{task_id}", f"generator state seen for {task_id}")
        state["results"][task_id] = (r, worker_id)

    def on_task_start(task_id, worker_id):
        state["starts"] += 1

    def on_exit():
        state["exits"] += 1

    stats = Dispatcher(Worker, GPUS, queue_size=64).run(
        gen(), on_success, on_task_start=on_task_start, on_exit=on_exit, base_seed=7,
        scale=2, note={"tags": {1, 2}, "t": (1, "a")})
    check(state["made"] == 300 and len(state["results"]) == 300, f"300 results: {state}")
    for i, (r, wid) in state["results"].items():
        check(r["n"] == i and r["twice"] == 2 * i, f"result {i}: {r}")
        check(r["gpu"] == wid and wid in GPUS, f"worker_id {wid} is the GPU id")
        check(r["seed"] == 7 + wid, f"seed {r['seed']} = base_seed + gpu_id")
        check(r["note"] == {"tags": {1, 2}, "t": (1, "a")}, "setup kwargs pickled")
        check(r["exe"] == sys.executable and r["prefix"] == sys.prefix,
              f"worker runs this Python: {r['exe']} {r['prefix']}")
        check(r["in_main"], "the class came from the script as __mp_main__")
        check(r["gpud_path"] == os.path.dirname(gpud.__file__), "workers import this gpud")
    check(state["starts"] == 300, f"on_task_start 300 times ({state['starts']})")
    check(state["exits"] == 1, "on_exit once")
    check(stats["completed"] == 300 and stats["failed"] == 0, f"stats {stats}")
    check(set(stats["gpu_status"]) == set(GPUS), "gpu_status per GPU")
    # The time before the first result: the Python side's part added to gpud's.
    first = stats.get("first_result") or {}
    check(first.get("seconds", 0) > 0 and first.get("python", -1) >= 0
          and abs(first.get("from_call", 0) - first["python"] - first["seconds"]) < 1e-9,
          f"first_result with its python part: {first}")
    check(not os.path.exists(MARKER), "the script's __main__ block did not run in a worker")


class LiveSource:
    """A live iterator: items put by another thread, one at a time, with pauses; with
    `until` (a threading.Event), the items from `hold_at` on wait for it (up to 60 s:
    then `held_out` is set and they come anyway)."""

    def __init__(self, n, until=None, hold_at=0):
        self.q = queue.Queue()
        self.n = n
        self.until, self.hold_at, self.held_out = until, hold_at, False
        threading.Thread(target=self.fill, daemon=True).start()

    def fill(self):
        for i in range(self.n):
            if i == self.hold_at and self.until is not None:
                self.held_out = not self.until.wait(60)
            if i % 10 == 0:
                time.sleep(0.05)
            self.q.put(i)
        self.q.put(None)

    def __iter__(self):
        return self

    def __next__(self):
        item = self.q.get()
        if item is None:
            raise StopIteration
        return item


def live():
    # The source holds items 50 on back until a result has come: the first result came
    # while the source was live (its items not held back for more), in that order,
    # however slowly the workers start.
    got = {}
    first = threading.Event()

    def on_success(task_id, r, worker_id):
        first.set()
        got[task_id] = r["twice"]

    source = LiveSource(100, until=first, hold_at=50)
    Dispatcher(Worker, GPUS).run(source, on_success, scale=3)
    check(got == {i: 3 * i for i in range(100)}, "every live item's result")
    check(not source.held_out, "no result came in 60 s while the source was live (waiting "
          "for items 50 on?)")


def errors():
    # A task that raises: on_error with its traceback; the others succeed.
    errs, ok = {}, {}
    Dispatcher(Worker, GPUS).run(
        [1, "boom", 3], lambda t, r, w: ok.__setitem__(t, r["n"]),
        on_error=lambda t, e, w: errs.__setitem__(t, e), scale=1)
    check(ok == {0: 1, 2: 3}, f"ok {ok}")
    check(list(errs) == [1] and "KeyError: 'boom'" in errs[1] and "Traceback" in errs[1]
          and "features.py" in errs[1] and "\n" in errs[1], f"error text {errs}")


def setup_fail():
    fails, exits = [], []
    try:
        Dispatcher(Worker, GPUS).run(range(10), lambda *a: None,
                                     on_setup_fail=lambda g, e: fails.append((g, e)),
                                     on_exit=lambda: exits.append(1), scale=1, fail_setup=True)
    except RuntimeError as e:
        check(str(e).startswith("All workers failed during setup"), f"message: {e}")
    else:
        check(False, "RuntimeError when every worker fails setup")
    check(sorted(g for g, _ in fails) == GPUS, f"on_setup_fail per GPU: {fails}")
    check(all("no model for GPU" in e for _, e in fails), f"setup error text: {fails}")
    # on_setup_fail's error is the traceback text (the library's SetupFailed.error).
    for _, e in fails:
        check(e.startswith("Traceback (most recent call last):") and "features.py" in e
              and "in setup" in e and e.rstrip().endswith("ValueError: no model for GPU "
                                                        + e.rstrip()[-1]), f"error: {e!r}")
    check(exits == [1], "on_exit ran")


class Boom(Exception):
    pass


def callback_raises():
    seen, exits = [], []

    def on_success(task_id, r, worker_id):
        seen.append(task_id)
        if len(seen) == 5:
            raise Boom("from on_success")

    try:
        Dispatcher(Worker, GPUS, queue_size=8).run(
            ({"n": i, "sleep": 0.01} for i in range(10000)), on_success,
            on_exit=lambda: exits.append(1), scale=1)
    except Boom as e:
        tb = e.__traceback__
        frames = []
        while tb:
            frames.append(tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        check("on_success" in frames, f"the traceback reaches the callback: {frames}")
    else:
        check(False, "the callback's exception re-raised by run()")
    check(exits == [1], "on_exit ran")
    check(len(seen) == 5, f"no callback after the one that raised ({len(seen)} results)")

    # The generator's exception: the same, after what it yielded ran.
    def gen():
        yield 1
        yield 2
        raise Boom("from the generator")

    got, exits = {}, []
    try:
        Dispatcher(Worker, GPUS).run(gen(), lambda t, r, w: got.__setitem__(t, r["n"]),
                                     on_exit=lambda: exits.append(1), scale=1)
    except Boom as e:
        check(str(e) == "from the generator", f"the generator's exception: {e}")
    else:
        check(False, "the generator's exception re-raised by run()")
    check(exits == [1] and got == {0: 1, 1: 2}, f"on_exit ran, yielded items ran: {got}")


def c_worker():
    # A C worker plugin (echo: the input back) with this program's generator and
    # callbacks: bytes and str in, bytes out.
    got = {}
    Dispatcher("echo", GPUS).run([b"ab", "cd", bytearray(b"ef")],
                                 lambda t, r, w: got.__setitem__(t, r))
    check(got == {0: b"ab", 1: b"cd", 2: b"ef"}, f"echo results {got}")


def plugins():
    # A built-in generator plugin with this program's Python worker and callbacks; a
    # Python generator with a built-in sink; a bad key named; RichDispatcher's stats.
    got = {}
    Dispatcher(Worker, GPUS, generator={"plugin": "range", "stop": 5}).run(
        None, lambda t, r, w: got.__setitem__(t, r["twice"]), scale=2)
    check(got == {i: str(i).encode() * 2 for i in range(5)}, f"range's items as bytes: {got}")
    out = os.path.join(os.environ.get("GPUD_TEST_TMP", "/tmp"), f"sink-{os.getpid()}.jsonl")
    Dispatcher("echo", GPUS, sink={"plugin": "jsonl", "path": out}).run([b"x", b"y"], None)
    with open(out) as f:
        lines = f.read().splitlines()
    check(len(lines) == 2 and all('"status": "ok"' in l for l in lines), f"jsonl sink: {lines}")
    try:
        Dispatcher(Worker, GPUS, queue_size=0).run([1], lambda *a: None, scale=1)
    except gpud.JobError as e:
        check("queue_size" in str(e), f"the key named: {e}")
    else:
        check(False, "JobError for queue_size=0")
    from gpud.ui import RichDispatcher

    check(gpud.RichDispatcher is RichDispatcher, "gpud.RichDispatcher")
    stats = RichDispatcher(Worker, GPUS, refresh_rate=10, show_ui=False).run(range(50), scale=1)
    check(stats["completed"] == 50 and stats["total"] == 50
          and all(g["status"] == "finished" for g in stats["gpu_status"].values())
          and stats["start_time"] <= stats["end_time"], f"RichDispatcher stats {stats}")


class ArrayWorker(BaseWorker):
    """NumPy arrays back (out-of-band buffers), from a process_batch over bytearrays
    read without a copy (np.frombuffer), as the torch example does."""

    def setup(self, gpu_id, seed):
        import numpy

        self.np = numpy

    def process_batch(self, items):
        x = self.np.stack([self.np.frombuffer(b, dtype=self.np.float32) for b in items])
        return [row * 2 for row in x] if len(items) else []

    def process(self, data):
        return self.process_batch([data])[0]


def arrays():
    import numpy as np

    rows = np.arange(64 * 1000, dtype=np.float32).reshape(64, 1000)
    got = {}
    Dispatcher(ArrayWorker, GPUS, batch_size=8).run(
        (bytearray(r.tobytes()) for r in rows), lambda t, r, w: got.__setitem__(t, r))
    check(len(got) == 64, f"{len(got)} arrays")
    for i, a in got.items():
        check(isinstance(a, np.ndarray) and a.dtype == np.float32 and a.shape == (1000,),
              f"array {i}: {type(a)} {getattr(a, 'dtype', None)}")
        check(np.array_equal(a, rows[i] * 2), f"array {i} values")
        check(a.flags.writeable, "the array is writable")


class BatchOnly(BaseWorker):
    """Defines process_batch alone: its batches of one (the stream's last) come there
    too, not to BaseWorker.process."""

    def setup(self, gpu_id, seed):
        pass

    def process_batch(self, items):
        return [(len(items), int(x)) for x in items]


class Neither(BaseWorker):
    def setup(self, gpu_id, seed):
        pass


class RingWorker(BaseWorker):
    """What a batch's items are in the worker: their count, whether each is a read-only
    view lying in the run's shared memory (memfd "gpud-run"), and their values."""

    def setup(self, gpu_id, seed):
        import numpy as np

        self.np = np

    def process_batch(self, items):
        np = self.np
        spans = []
        with open("/proc/self/maps") as f:
            for line in f:
                if "gpud-run" in line:
                    lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                    spans.append((lo, hi, line.split()[1]))
        a = gpud.stack(items)
        at = a.__array_interface__["data"][0]
        in_ring = [lo <= at and at + a.nbytes <= hi and "w" not in perm
                   for lo, hi, perm in spans]
        try:
            a[0] = 0
            wrote = True
        except ValueError:
            wrote = False
        views = all(isinstance(x, (memoryview, np.ndarray)) for x in items)
        readonly = all(x.readonly if isinstance(x, memoryview) else not x.flags.writeable
                       for x in items)
        return [(len(items), any(in_ring), wrote, views and readonly, int(a[i].sum()))
                for i in range(len(items))]

    def process(self, data):
        return self.process_batch([data])[0]


class CudartWorker(RingWorker):
    """Loads the CUDA runtime in setup(), as torch does: the worker then pins its rings
    (pin_memory = auto), which fails without a GPU and is skipped."""

    def setup(self, gpu_id, seed, lib):
        import ctypes

        super().setup(gpu_id, seed)
        self.cudart = ctypes.CDLL(lib)

    def process_batch(self, items):
        # The stand-in runtime (tests/fakecuda) counts the registrations tried.
        count = getattr(self.cudart, "fake_cuda_registers", None)
        tried = count() if count is not None else -1
        return [r + (tried,) for r in super().process_batch(items)]


CUDART = "/usr/local/cuda/lib64/libcudart.so"


def batches():
    # batch_size means what it says at any item size: every call but the last gets
    # batch_size items, which arrive as read-only views of the ring, one contiguous
    # array by gpud.stack; each result equals the loop's.
    import numpy as np

    for size, n, bs, kind in ((150_528, 1000, 256, bytes), (1000, 3000, 64, bytes),
                              (40_000, 700, 32, np.ndarray), (8, 500, 16, np.ndarray)):
        base = [np.full(size, i % 7, np.uint8) for i in range(7)]
        items = ((base[i % 7].copy() if kind is np.ndarray else base[i % 7].tobytes())
                 for i in range(n))
        got = {}
        Dispatcher(RingWorker, [0], batch_size=bs).run(items,
                                                       lambda t, r, w: got.__setitem__(t, r))
        check(sorted(got) == list(range(n)), f"{size}: {len(got)} results")
        counts = [got[i][0] for i in range(n)]
        check(set(counts[: n - n % bs]) == {bs} and set(counts[n - n % bs:]) <= {n % bs},
              f"{size} bytes, batch_size={bs}: calls got {sorted(set(counts))} items")
        check(all(got[i][1] for i in got), f"{size}: the batch lies in the ring")
        check(not any(got[i][2] for i in got), f"{size}: the batch could be written")
        check(all(got[i][3] for i in got), f"{size}: items are read-only views")
        check(all(got[i][4] == size * (i % 7) for i in got), f"{size}: results")
    # A class with process_batch alone: the last call, of one item, goes there too.
    got = {}
    Dispatcher(BatchOnly, [0], batch_size=8).run(range(17), lambda t, r, w: got.__setitem__(t, r))
    check(sorted(got) == list(range(17)) and got[16] == (1, 16),
          f"process_batch alone: {len(got)} results, the last {got.get(16)}")
    try:
        Dispatcher(Neither, [0], batch_size=8).run(range(3), lambda t, r, w: None)
        check(False, "a class with neither process nor process_batch was taken")
    except TypeError as e:
        check("neither process(data) nor process_batch(items)" in str(e), str(e))
    # Here, no pickle copy of the items' data: a chunk's parts are the items' own
    # buffers (by address), and framing 64 items of 150 KB allocates less than one.
    import tracemalloc
    from gpud import _worker

    arrays = [np.full(150_528, i, np.uint8) for i in range(64)]
    blobs = [a.tobytes() for a in arrays]
    for chunk in (arrays, blobs):
        tracemalloc.start()
        parts = _worker.frame(chunk, True)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        check(peak < 150_528, f"framing allocated {peak} bytes")
        check(len(parts) == 66 and all(
            np.frombuffer(p, np.uint8).__array_interface__["data"][0]
            == np.frombuffer(x, np.uint8).__array_interface__["data"][0]
            for p, x in zip(parts[1:-1], chunk)), "the parts are the items' own buffers")
    # A worker that brought the CUDA runtime in during setup() with no GPU to pin its
    # rings for: the registration fails, is skipped, and the run goes on. Without a CUDA
    # runtime here, the stand-in one (tests/fakecuda, found as libcudart.so on
    # LD_LIBRARY_PATH: GPUD_TEST_FAKECUDA names its folder) fails every registration as
    # a machine without a GPU does, and says it was asked.
    libs = [x for x in (CUDART if os.path.exists(CUDART) else None,
                        "libcudart.so" if os.environ.get("GPUD_TEST_FAKECUDA") else None) if x]
    for lib in libs:
        got = {}
        Dispatcher(CudartWorker, [0], batch_size=16).run(
            (np.full(100, i, np.uint8) for i in range(64)),
            lambda t, r, w: got.__setitem__(t, r), lib=lib)
        check(sorted(got) == list(range(64)) and all(got[i][4] == 100 * i for i in got),
              f"with the CUDA runtime {lib} loaded: {len(got)} results")
        if lib != CUDART:
            check(all(got[i][5] == 1 for i in got),
                  f"the rings' registration tried once: {sorted(set(got[i][5] for i in got))}")
    if not libs:
        print(f"SKIP: no {CUDART} and no stand-in (GPUD_TEST_FAKECUDA): the pinning that "
              "fails without a GPU is not tried")
    # A worker's array result: its data goes out as the array's own buffer (by address),
    # no pickle copy of it; the plugin writes the parts into the result once.
    result = np.arange(1 << 18, dtype=np.float32)
    tracemalloc.start()
    parts = _worker.dumps({"out": result})
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    check(isinstance(parts, list) and peak < result.nbytes // 4
          and np.frombuffer(parts[-1], np.uint8).__array_interface__["data"][0]
          == result.__array_interface__["data"][0], f"a result's parts: {peak} bytes")
    back = _worker.loads_framed(bytearray(b"".join(bytes(x) for x in parts)))
    check(np.array_equal(back["out"], result), "the result back")
    # Items that grow past what max_task_bytes was sized for: chunks cut by their bytes,
    # said once on standard error (never silently), whole batches before.
    import contextlib
    import io
    from gpud._chunks import Chunks as _Chunks

    cbs = dict.fromkeys(("on_success", "on_error", "on_timeout", "on_task_start"))
    c = _Chunks((bytes(n) for n in [1000] * 300 + [3000] * 700), None, cbs, 0.002, 64,
                100_000, 1 << 20, _worker.loads_framed, _worker.frame, _worker.frame_size,
                reissue=False)  # no workers here to give chunks back
    c.whole = True
    sizes, err = [], io.StringIO()
    with contextlib.redirect_stderr(err):
        for _ in c:
            sizes.append(len(c.ids(len(sizes))))
            c._adapt(sizes[-1], 1e-6 * sizes[-1], 100)
    check(sum(sizes) == 1000 and sizes[:4] == [64] * 4 and max(sizes[5:]) < 64,
          f"chunks of growing items: {sizes}")
    check(err.getvalue().count("batch_size=64: items of about") == 1
          and "raise max_task_bytes" in err.getvalue(), f"said once: {err.getvalue()!r}")
    # An iterator that pauses 50 ms after its first item cuts the chunk there (a live
    # source's items are not held back), unless this thread spent that time waiting for
    # a CPU (a loaded machine), as schedstat says (played here: gpud._chunks._run_delay).
    import gpud._chunks as gd

    def paused():
        yield bytes(10)
        time.sleep(0.05)
        yield from (bytes(10) for _ in range(63))

    real = gd._run_delay
    for delay, want in ((None, 3), (1.0, 64)):  # 3: the block of items 2-3 took 50 ms
        reads = iter([0.0, delay or 0.0])  # at the chunk's start, after the pause

        def fake():
            return next(reads)
        gd._run_delay = real if delay is None else fake
        try:
            c = _Chunks(paused(), None, cbs, 0.002, 64, 1 << 20, 1 << 20, _worker.loads_framed,
                        _worker.frame, _worker.frame_size, reissue=False)
            next(c)
            first = len(c.ids(0))
        finally:
            gd._run_delay = real
        check(first == want, f"a pause with {delay} s of waiting for a CPU: {first} items")
    # Set too small for a batch: refused before anything runs, in one line naming the
    # key, the item size and what to change.
    try:
        Dispatcher(RingWorker, [0], batch_size=256, max_task_bytes="1M").run(
            (bytes(150_528) for _ in range(10)), lambda *a: None)
    except gpud.JobError as e:
        text = str(e)
        check("batch_size=256" in text and "max_task_bytes" in text and "150" in text
              and "\n" not in text, f"the refusal: {text}")
    else:
        check(False, "batch_size=256 of 150 KB items with max_task_bytes=1M was not refused")


class TensorWorker(BaseWorker):
    """What a batch's CPU tensor items are in the worker: tensors whose memory lies in
    the run's shared memory (read-only there), and their sums; a tensor result back."""

    def setup(self, gpu_id, seed):
        import torch

        self.torch = torch

    def process_batch(self, items):
        spans = []
        with open("/proc/self/maps") as f:
            for line in f:
                if "gpud-run" in line:
                    lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                    spans.append((lo, hi, line.split()[1]))
        out = []
        for x in items:
            at, n = x.data_ptr(), x.numel() * x.element_size()
            in_ring = any(lo <= at and at + n <= hi and "w" not in perm
                          for lo, hi, perm in spans)
            out.append((type(x) is self.torch.Tensor, in_ring, int(x.sum()), x * 2))
        return out

    def process(self, data):
        return self.process_batch([data])[0]


def tensors():
    # CPU torch tensors travel as their NumPy view's buffer (no pickle copy of their
    # data, by address and by bytes allocated), reach the worker as tensors over the
    # ring (read-only there), and tensor results come back as tensors, also out of band.
    try:
        import torch
    except ImportError:
        print("SKIP: no torch in this Python: CPU tensors out of band are not tried")
        return
    import tracemalloc
    from gpud import _worker

    ts = [torch.full((150_528,), i % 7, dtype=torch.uint8) for i in range(64)]
    tracemalloc.start()
    parts = _worker.frame(ts, True)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    check(peak < 150_528, f"framing 64 tensors allocated {peak} bytes")
    import numpy as np

    check(len(parts) == 66 and all(
        np.frombuffer(p, np.uint8).__array_interface__["data"][0] == t.data_ptr()
        for p, t in zip(parts[1:-1], ts)), "the parts are the tensors' own memory")
    result = torch.arange(1 << 18, dtype=torch.float32)
    parts = _worker.dumps(result)
    check(isinstance(parts, list) and np.frombuffer(parts[-1], np.uint8)
          .__array_interface__["data"][0] == result.data_ptr(), "a tensor result's parts")
    back = _worker.loads_framed(bytearray(b"".join(bytes(x) for x in parts)))
    check(type(back) is torch.Tensor and torch.equal(back, result), "the tensor back")
    # Not out of band, pickled as torch does: a tensor that needs grad, one not
    # contiguous, a dtype NumPy has not; each arrives equal.
    odd = [torch.ones(4, requires_grad=True), torch.arange(12.0).view(3, 4).t(),
           torch.ones(5, dtype=torch.bfloat16)]
    for t in odd:
        got = _worker.loads_items(memoryview(b"".join(bytes(x) for x in _worker.frame(t))))
        check(torch.equal(got.detach(), t.detach()), f"{t.dtype} {tuple(t.shape)} back")
    got = {}
    Dispatcher(TensorWorker, [0], batch_size=8).run(
        (torch.full((1000,), i, dtype=torch.int32) for i in range(40)),
        lambda t, r, w: got.__setitem__(t, r))
    check(sorted(got) == list(range(40)), f"{len(got)} results")
    check(all(got[i][0] for i in got), "items reached the worker as tensors")
    check(all(got[i][1] for i in got), "the items' memory lies in the ring, read-only")
    check(all(got[i][2] == 1000 * i for i in got), "the items' sums")
    check(all(type(got[i][3]) is torch.Tensor and torch.equal(
        got[i][3], torch.full((1000,), 2 * i, dtype=torch.int32)) for i in got),
        "tensor results")


def chunks():
    # chunksize: 64 items a task; each item still reaches the callbacks on its own, with
    # its own id, and an item that raises fails alone.
    got, errs, starts = {}, {}, []
    items = list(range(1000))
    items[500] = "boom"
    stats = Dispatcher(Worker, GPUS, chunksize=64).run(
        iter(items), lambda t, r, w: got.__setitem__(t, (r["n"], r["gpu"] == w)),
        on_error=lambda t, e, w: errs.__setitem__(t, e),
        on_task_start=lambda t, w: starts.append(t), scale=1)
    check(sorted(got) == [i for i in range(1000) if i != 500], f"{len(got)} results")
    check(all(got[i] == (i, True) for i in got), "each item's result under its id")
    check(list(errs) == [500] and "KeyError: 'boom'" in errs[500]
          and "\n" in errs[500], f"the failing item alone: {errs}")
    check(sorted(starts) == list(range(1000)), "on_task_start per item")
    check(stats["total"] == 1000 and stats["completed"] == 999 and stats["failed"] == 1
          and stats["chunk_total"] == 16, f"stats in items: {stats}")
    check(sum(g["completed"] for g in stats["gpu_status"].values()) == 999, "per GPU")


def auto():
    # The default (chunksize=None): many fast items travel in chunks, yet each reaches
    # the callbacks under its own id, once, with its own start, error and count.
    got, errs, starts = {}, {}, []
    items = list(range(20000))
    items[7000] = "boom"
    stats = Dispatcher(Worker, GPUS).run(
        iter(items), lambda t, r, w: got.__setitem__(t, (r["n"], r["gpu"] == w)),
        on_error=lambda t, e, w: errs.__setitem__(t, e),
        on_task_start=lambda t, w: starts.append(t), scale=1)
    check(sorted(got) == [i for i in range(20000) if i != 7000], f"{len(got)} results")
    check(all(got[i] == (i, True) for i in got), "each item's result under its id")
    check(list(errs) == [7000] and "KeyError: 'boom'" in errs[7000], f"one error: {errs}")
    check(sorted(starts) == list(range(20000)), "on_task_start once per item")
    check(stats["total"] == 20000 and stats["completed"] == 19999 and stats["failed"] == 1,
          f"stats in items: {stats}")
    check(stats["chunksize"] == "auto" and stats["largest_chunk"] > 16
          and stats["chunk_total"] < 20000 / 4, f"fast items went in chunks: {stats}")
    check(sum(g["completed"] for g in stats["gpu_status"].values()) == 19999, "per GPU")

    # Slow items (20 ms each, over the 2 ms a chunk): one item a task, as the library.
    stats = Dispatcher(Worker, GPUS).run(
        [{"n": i, "sleep": 0.02} for i in range(40)], lambda *a: None, scale=1)
    check(stats["completed"] == 40 and stats["largest_chunk"] == 1
          and stats["chunk_total"] == 40, f"slow items one a task: {stats}")

    # retries=1: an item that raises once runs again and succeeds; without, it fails.
    for retries, want_ok in ((1, 100), (0, 0)):
        ok, bad = [], []
        Dispatcher(Worker, GPUS, retries=retries).run(
            ({"flaky": i} for i in range(100)), lambda t, r, w: ok.append(t),
            on_error=lambda t, e, w: bad.append(t), scale=1)
        check(len(ok) == want_ok and len(ok) + len(bad) == 100,
              f"retries={retries}: {len(ok)} ok, {len(bad)} failed")

    # Items of 100 KB (fast): chunks stay within max_task_bytes, none fails.
    lens = {}
    stats = Dispatcher(Worker, GPUS).run(
        (bytearray(100_000) for _ in range(300)), lambda t, r, w: lens.__setitem__(t, r),
        scale=1)
    check(lens == {i: 100_000 for i in range(300)} and stats["failed"] == 0,
          f"large items: {len(lens)} {stats['failed']}")

    # The generator raises after 5000 items (chunks are large by then): every item it
    # gave ran, then run() raises its exception; the same for an item pickle refuses.
    def gen():
        yield from range(5000)
        raise Boom("from the generator")

    for items, exc in ((gen(), Boom), ([*range(3000), threading.Lock()], TypeError)):
        got = {}
        try:
            Dispatcher(Worker, GPUS).run(items, lambda t, r, w: got.__setitem__(t, r["n"]),
                                         scale=1)
        except exc:
            pass
        else:
            check(False, f"{exc.__name__} re-raised by run()")
        n = 5000 if exc is Boom else 3000
        check(got == {i: i for i in range(n)}, f"the {n} items before ran: {len(got)}")

    # task_timeout: an item that hangs among fast ones times its chunk out: the items
    # of that chunk get on_timeout, every other item on_success, each id once.
    seen = {}

    def note(kind):
        def f(t, x, w):
            check(t not in seen, f"item {t} reported twice")
            seen[t] = kind
        return f

    items = list(range(3000))
    items[2000] = {"n": 2000, "sleep": 30}
    stats = Dispatcher(Worker, GPUS).run(items, note("ok"), on_timeout=note("timeout"),
                                         task_timeout=1, scale=1)
    timed_out = [t for t, k in seen.items() if k == "timeout"]
    check(len(seen) == 3000 and 2000 in timed_out, f"every item once, 2000 timed out: "
          f"{len(seen)} {timed_out[:10]}")
    check(stats["timeouts"] == len(timed_out) and stats["completed"] == 3000 - len(timed_out)
          and stats["chunk_timeouts"] == 1, f"stats: {stats}")

    # A journal: one item a task (the journal's records are tasks; a resume must cut
    # the items the same way).
    journal = os.path.join(os.environ.get("GPUD_TEST_TMP", "/tmp"), f"auto-{os.getpid()}.j")
    stats = Dispatcher(Worker, GPUS, journal=journal).run(range(500), lambda *a: None,
                                                          scale=1)
    check("chunksize" not in stats and stats["total"] == 500, f"journal: {stats}")


def empty_result(n, sink=False):
    """Task n's result: None, b"" and "" (each an empty result) and one that is not. A
    sink plugin takes bytes or str alone (docs/python.md): b"" there instead of None."""
    return (b"" if sink else None, b"", "", f"x{n}".encode())[n % 4]


class EmptyWorker(BaseWorker):
    def setup(self, gpu_id, seed, sink=False):
        self.sink = sink

    def process(self, data):
        return empty_result(int(data), self.sink)


class EmptyBatchWorker(EmptyWorker):
    def process_batch(self, items):
        return [empty_result(int(x)) for x in items]


def empties():
    # Empty results beside others in one call, each an ok outcome: through the
    # program's callbacks (process() one item a call and eight, a class's own
    # process_batch()), and through generator and sink plugins (results as bytes).
    n = 60
    for cls, batch in ((EmptyWorker, 1), (EmptyWorker, 8), (EmptyBatchWorker, 8)):
        got, bad = {}, []
        Dispatcher(cls, GPUS, batch_size=batch).run(
            range(n), lambda t, r, w: got.__setitem__(t, r),
            on_error=lambda t, e, w: bad.append((t, e)),
            on_timeout=lambda t, s, w: bad.append((t, "timeout")))
        want = {i: empty_result(i) for i in range(n)}
        check(not bad and got == want,
              f"{cls.__name__} batch_size={batch}: failures {bad[:3]}, results {got}")
    out = os.path.join(os.environ.get("GPUD_TEST_TMP", "/tmp"), f"empties-{os.getpid()}.jsonl")
    Dispatcher(EmptyWorker, GPUS, batch_size=8, generator={"plugin": "range", "stop": n},
               sink={"plugin": "jsonl", "path": out}).run(None, None, sink=True)
    with open(out) as f:
        lines = sorted(f.read().splitlines(), key=lambda l: int(l.split(",")[0].split()[-1]))
    check(len(lines) == n, f"one line a task: {lines}")
    for i, l in enumerate(lines):
        want = "" if i % 4 != 3 else f"x{i}"
        check(l.startswith(f'{{"task_id": {i}, "status": "ok",') and
              l.endswith(f'"result": "{want}"}}'), f"task {i}: {l}")


def interrupt(journal, k=1):
    # Runs slowly until SIGINT (sent by run_tests.py when it reads STARTED); then:
    # drained, on_exit ran, KeyboardInterrupt raised. Then resumes and checks every
    # task was delivered exactly once over both runs.
    seen = {}
    exits = []

    def on_success(task_id, r, worker_id):
        check(task_id not in seen, f"task {task_id} twice")
        seen[task_id] = r["n"]
        if len(seen) == 3:
            print("STARTED", flush=True)

    items = [{"n": i, "sleep": 0.05} for i in range(200)]
    try:
        Dispatcher(Worker, GPUS, journal=journal, chunksize=k).run(
            items, on_success, on_exit=lambda: exits.append(1), scale=1)
    except KeyboardInterrupt:
        print(f"INTERRUPTED after {len(seen)} results", flush=True)
    else:
        check(False, "KeyboardInterrupt after SIGINT")
    check(exits == [1], "on_exit ran after the interrupt")
    check(0 < len(seen) < 200, f"the run drained part way ({len(seen)})")
    first = len(seen)
    stats = Dispatcher(Worker, GPUS, journal=journal, resume=True, chunksize=k).run(
        items, on_success, on_exit=lambda: exits.append(1), scale=1)
    check(seen == {i: i for i in range(200)}, f"every task once over both runs ({len(seen)})")
    check(exits == [1, 1], "on_exit after the resume")
    check(stats["resumed"] * k == first, f"resumed {stats['resumed']} tasks of {k} == {first}")


class Awaiting(BaseWorker):
    def setup(self, gpu_id, seed):
        pass

    async def process(self, data):
        return data


class Plain:  # neither setup() nor process()
    pass


def stderr_of(fn):
    """fn()'s outcome (its exception, or None) and what was written to fd 2 meanwhile."""
    path = os.path.join(os.environ.get("GPUD_TEST_TMP", "/tmp"), f"stderr-{os.getpid()}")
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "w") as f:
        os.dup2(f.fileno(), 2)
    try:
        fn()
        exc = None
    except BaseException as e:
        exc = e
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
    with open(path) as f:
        text = f.read()
    os.unlink(path)
    return exc, text


def callback_stops():
    # A callback that raises is called once; the run stops at once saying why in one
    # line (no "interrupted"); what no callback got is not journaled as done: the
    # resume delivers every task.
    journal = os.path.join(os.environ.get("GPUD_TEST_TMP", "/tmp"), f"stops-{os.getpid()}.j")
    calls, exits = [], []

    def on_success(task_id, r, worker_id):
        calls.append(task_id)
        return 1 / 0

    exc, err = stderr_of(lambda: Dispatcher(Worker, GPUS, journal=journal).run(
        range(100), on_success, on_exit=lambda: exits.append(1), scale=1))
    check(isinstance(exc, ZeroDivisionError), f"the callback's exception re-raised: {exc!r}")
    check(len(calls) == 1, f"the raising callback called once, not {len(calls)} times")
    check(exits == [1], "on_exit ran")
    check("on_success raised ZeroDivisionError" in err and "interrupt" not in err
          and err.count("Traceback") == 0, f"stderr: {err}")
    seen = {}
    Dispatcher(Worker, GPUS, journal=journal, resume=True).run(
        range(100), lambda t, r, w: seen.__setitem__(t, r["n"]), scale=1)
    check(seen == {i: i for i in range(100)}, f"the resume ran every task ({len(seen)})")
    # The same with automatic chunks: one call, not one per item of the chunks.
    calls.clear()
    exc, err = stderr_of(lambda: Dispatcher(Worker, GPUS).run(range(2000), on_success,
                                                              scale=1))
    check(isinstance(exc, ZeroDivisionError) and len(calls) == 1,
          f"chunks: {exc!r}, {len(calls)} calls")


def checks():
    # A misspelt C worker plugin: JobError with libgpud's reason.
    try:
        Dispatcher("ecoh", GPUS).run([b"x"], lambda *a: None)
    except gpud.JobError as e:
        check("'ecoh'" in str(e) and "no such built-in plugin" in str(e), f"message: {e}")
    else:
        check(False, "JobError for a worker plugin that does not exist")
    # An async def process: the Dispatcher would not await it, so it is refused.
    try:
        Dispatcher(Awaiting, GPUS).run(range(3), lambda *a: None)
    except TypeError as e:
        check("Awaiting.process() is an async def" in str(e) and "max_in_flight" in str(e),
              f"message: {e}")
    else:
        check(False, "TypeError for an async def process")
    # A CPU stage as keys in front of a Python class: refused, pointing to stages=
    # (tests/python/stages.py), which says what each stage gives.
    try:
        Dispatcher(Worker, GPUS, keys={"stage.decode.plugin": "echo"}).run(
            range(3), lambda *a: None, scale=1)
    except gpud.JobError as e:
        check("stage.decode.plugin" in str(e) and "stages=[gpud.Stage(" in str(e),
              f"message: {e}")
    else:
        check(False, "JobError for a stage in front of a Python worker class")
    # In front of a C worker plugin, a stage works: bytes in, bytes out.
    got = {}
    Dispatcher("echo", GPUS, keys={"stage.decode.plugin": "sha256",
                                   "stage.decode.workers": 1}).run(
        [b"abc"], lambda t, r, w: got.__setitem__(t, r))
    check(got == {0: b"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
          f"a stage before a C worker: {got}")
    # A class without setup() and process(): TypeError naming both, before the run.
    try:
        Dispatcher(Plain, GPUS).run(range(3), lambda *a: None)
    except TypeError as e:
        check("setup(" in str(e) and "process(" in str(e) and "Plain" in str(e), f"{e}")
    else:
        check(False, "TypeError for a class without setup() and process()")
    # on_success=None without a sink plugin.
    try:
        Dispatcher(Worker, GPUS).run(range(3), None, scale=1)
    except TypeError as e:
        check("on_success is required" in str(e), f"{e}")
    else:
        check(False, "TypeError for on_success=None")
    # A class the __main__ block defines (NotW, below): refused up front, naming it.
    try:
        Dispatcher(NotW, GPUS).run(range(3), lambda *a: None)
    except gpud.JobError as e:
        check("NotW" in str(e) and "__main__" in str(e) and "top level" in str(e), f"{e}")
    else:
        check(False, "JobError for a class defined in the __main__ block")
    # Where the script cannot tell (the class set through globals()), the worker says it.
    fails = []
    globals()["Hidden"] = type("Hidden", (Worker,), {"__module__": "__main__"})
    try:
        Dispatcher(Hidden, GPUS).run(range(3), lambda *a: None,  # noqa: F821
                                     on_setup_fail=lambda g, e: fails.append(e), scale=1)
    except RuntimeError:
        pass
    check(fails and all(e.startswith("class Hidden is not defined at the top level of the "
                                    "script: the workers import the script as a module")
                        for e in fails), f"setup errors: {fails}")


def read_ahead():
    # The generator is read ahead at most queue_size items: a closure generator that
    # the callback stops after 20 results produced about 20 + 2 * queue_size.
    state = {"stop": False, "made": 0}

    def gen():
        i = 0
        while not state["stop"]:
            state["made"] += 1
            yield {"n": i, "sleep": 0.002}
            i += 1

    def on_success(t, r, w):
        if t >= 19:
            state["stop"] = True

    Dispatcher(Worker, GPUS, queue_size=8, chunksize=1).run(gen(), on_success, scale=1)
    check(state["made"] <= 20 + 2 * 8 + 2, f"{state['made']} items read")


class Sleeper(BaseWorker):
    """timeouts(): setup() writes a line per run (a model load); process(x) sleeps x
    seconds, or, for "stuck", as C code that never gives Python a turn would: every
    signal blocked, 30 s; a stuck call that comes to its end says so in the file
    setups + ".returned"."""

    def setup(self, gpu_id, seed, setups):
        self.returned = setups + ".returned"
        with open(setups, "a") as f:
            f.write(f"{os.getpid()}\n")

    def process(self, x):
        if x == "stuck":
            every = signal.valid_signals()
            signal.pthread_sigmask(signal.SIG_BLOCK, every)
            try:
                time.sleep(30)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, every)
            open(self.returned, "w").close()
            return x
        time.sleep(x)
        return x


def timeouts():
    # The library's own test_timeout: 5 items of 1 s under task_timeout=0.5 on one GPU,
    # default chunking: 5 on_timeout calls, no exception; the call is interrupted in
    # place, so setup() ran once and the worker was never restarted.
    tmp = os.environ.get("GPUD_TEST_TMP", "/tmp")
    setups = os.path.join(tmp, f"setups-{os.getpid()}")
    timed, ok = [], []
    stats = Dispatcher(Sleeper, gpu_ids=[0]).run(
        [1.0] * 5, lambda t, r, w: ok.append(t),
        on_timeout=lambda t, s, w: timed.append((t, s, w)), task_timeout=0.5, setups=setups)
    check(sorted(t for t, _, _ in timed) == [0, 1, 2, 3, 4] and not ok,
          f"5 on_timeout calls: {timed} ok {ok}")
    check(all(s == 0.5 for _, s, _ in timed), f"the limit: {timed}")
    check(len(open(setups).read().split()) == 1, "setup() ran once: "
          f"{open(setups).read().split()}")
    check(stats["timeouts"] == 5 and stats["worker_restarts"] == 0
          and stats["gpu_status"][0]["restarts"] == 0, f"stats: {stats}")
    # The worker goes on after them: fast items after slow ones succeed on it.
    os.unlink(setups)
    timed, ok = [], []
    Dispatcher(Sleeper, gpu_ids=[0], chunksize=1).run(
        [1.0, 0.01, 1.0, 0.01], lambda t, r, w: ok.append(t),
        on_timeout=lambda t, s, w: timed.append(t), task_timeout=0.5, setups=setups)
    check(sorted(timed) == [0, 2] and sorted(ok) == [1, 3], f"timed {timed} ok {ok}")
    check(len(open(setups).read().split()) == 1, "setup() ran once")
    # A call that does not return (signals blocked, as in C code that never gives Python
    # a turn): killed timeout_grace after task_timeout and replaced, as before; the
    # items after it run on the fresh worker. Not before the grace (the run took at
    # least task_timeout + timeout_grace), and before the call's end: the call never
    # said it came to its end (its 30 s), whatever the machine's speed.
    os.unlink(setups)
    timed, ok = [], []
    t0 = time.monotonic()
    stats = Dispatcher(Sleeper, gpu_ids=[0], chunksize=1, timeout_grace=0.5).run(
        ["stuck", 0.01, 0.01], lambda t, r, w: ok.append(t),
        on_timeout=lambda t, s, w: timed.append(t), task_timeout=0.5, setups=setups)
    took = time.monotonic() - t0
    check(timed == [0] and sorted(ok) == [1, 2], f"timed {timed} ok {ok}")
    check(len(open(setups).read().split()) == 2, "setup() ran again in the fresh worker")
    check(stats["worker_restarts"] == 1, f"stats: {stats}")
    check(took >= 0.5 + 0.5, f"killed before task_timeout and its grace: {took:.2f} s")
    check(not os.path.exists(setups + ".returned"),
          f"killed after the grace, not at the call's end ({took:.1f} s)")
    os.unlink(setups)
    # A class that catches TaskTimeout and returns something else: still a timeout
    # (on_timeout called, counted, the result dropped), and the worker goes on.
    timed, ok = [], {}
    stats = Dispatcher(Catcher, gpu_ids=[0], chunksize=1).run(
        [1.0, 0.01, 1.0], lambda t, r, w: ok.__setitem__(t, r),
        on_timeout=lambda t, s, w: timed.append(t), task_timeout=0.5)
    check(sorted(timed) == [0, 2] and ok == {1: "done"}, f"caught: timed {timed} ok {ok}")
    check(stats["timeouts"] == 2 and stats["worker_restarts"] == 0, f"stats: {stats}")


class Catcher(BaseWorker):
    """Catches gpud's TaskTimeout and returns a fallback instead."""

    def setup(self, gpu_id, seed):
        pass

    def process(self, data):
        try:
            time.sleep(data)
        except Exception:
            return "fallback"
        return "done"


class Sizer(BaseWorker):
    """process_batch sleeps a little and returns each item with the size of the call it
    came in and the worker's pid."""

    def setup(self, gpu_id, seed):
        self.pid = os.getpid()
        # Both workers get work even when one starts slowly (a loaded machine): the
        # first call of each waits (up to 30 s) until every worker has set up.
        self.ready = os.environ.get("GPUD_TEST_SIZER_DIR")
        if self.ready:
            open(os.path.join(self.ready, str(self.pid)), "w").close()

    def process(self, data):
        return self.process_batch([data])[0]

    def process_batch(self, items):
        if self.ready:
            end = time.monotonic() + 30
            while len(os.listdir(self.ready)) < 2 and time.monotonic() < end:
                time.sleep(0.01)
            self.ready = None
        time.sleep(0.002)
        return [(x, len(items), self.pid) for x in items]


def times():
    # Where each worker's time goes, in the stats run() returns: the phases add up to
    # each worker's wall time, and the call sizes are those process_batch got.
    import tempfile

    got = {}
    os.environ["GPUD_TEST_SIZER_DIR"] = tempfile.mkdtemp(
        dir=os.environ.get("GPUD_TEST_TMP", "/tmp"))
    stats = Dispatcher(Sizer, [0], workers_per_gpu=2, batch_size=16, chunksize=40).run(
        iter(range(2000)), lambda t, r, w: got.__setitem__(t, r))
    check(sorted(got) == list(range(2000)), f"{len(got)} results")
    seen = {}  # pid: {call size: items}
    for x, n, pid in got.values():
        seen.setdefault(pid, {}).setdefault(n, 0)
        seen[pid][n] += 1
    workers = stats["workers"]
    check(len(workers) == 2, f"two workers: {workers}")
    phases = ["setup", "waiting", "unpacking", "user", "handing_back", "idle"]
    sizes = []
    for w in workers:
        t = {p: w["time_" + p] for p in phases + ["wall"]}
        check(all(t[p] >= 0 for p in phases), f"phases: {t}")
        # printed to the ns: the 7 roundings bound the difference
        check(abs(sum(t[p] for p in phases) - t["wall"]) <= 7 * 0.5e-9 + 1e-12 * t["wall"],
              f"the phases add up to the wall time: {t}")
        check(t["wall"] <= stats["elapsed"], f"a worker's wall within the run's: {t}")
        check(t["user"] >= 0.002 * w["calls"], f"user time holds the calls' sleeps: {w}")
        check(t["unpacking"] > 0 and t["handing_back"] > 0, f"unpickling, pickling: {t}")
        sizes.append({"min": w["call_min"], "max": w["call_max"]})
    # The workers' call sizes, as process_batch saw them: each pid's items per size,
    # divided by the size, are its calls of that size.
    want = sorted(sorted((n, c // n) for n, c in per.items()) for per in seen.values())
    def bucket(n):
        b = 0
        while n > (1 << b):
            b += 1
        return b
    def name(b):
        return [b + 1 if b < 2 else (1 << (b - 1)) + 1, 1 << b]
    for w in workers:
        check(sum(c for _, _, c in w["call_sizes"]) == w["calls"], f"calls: {w}")
    got_hist = sorted(w["call_sizes"] for w in workers)
    want_hist = []
    for per in want:
        h = {}
        for n, calls in per:
            h[bucket(n)] = h.get(bucket(n), 0) + calls
        want_hist.append([name(b) + [h[b]] for b in sorted(h)])
    check(got_hist == sorted(want_hist), f"histograms {got_hist} != seen {want_hist}")
    mins = sorted(s["min"] for s in sizes)
    check(mins == sorted(min(n for n, _ in per) for per in want), f"min: {sizes} {want}")
    check(sorted(s["max"] for s in sizes) == sorted(max(n for n, _ in per) for per in want),
          f"max: {sizes} {want}")


# Named by the host process; the workers inherit its environment.
MARKER = os.environ.setdefault(
    "GPUD_TEST_MARKER",
    os.path.join(os.environ.get("GPUD_TEST_TMP", "/tmp"), f"gpud-main-ran-{os.getpid()}"))

if __name__ == "__main__":
    # In a worker this block would run again if the script were imported as
    # __main__: the marker says so to the checks.
    if "gpud" in sys.modules and getattr(sys.modules["gpud"], "_in_worker", False):
        open(MARKER, "w").close()
    class NotW(Worker):  # not there for the workers: checks() says so
        pass

    mode = sys.argv[1]
    if mode == "interrupt":
        interrupt(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    else:
        {"closures": closures, "live": live, "errors": errors, "setup_fail": setup_fail,
         "callback_raises": callback_raises, "c_worker": c_worker, "plugins": plugins,
         "arrays": arrays, "chunks": chunks, "auto": auto, "callback_stops": callback_stops,
         "checks": checks, "read_ahead": read_ahead, "timeouts": timeouts,
         "times": times, "batches": batches, "tensors": tensors, "empties": empties}[mode]()
    print(f"PASS {mode}", flush=True)
