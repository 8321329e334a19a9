# SPDX-License-Identifier: MIT
"""Chunks: the program's items cut into gpud tasks (several fast items to a task, each
still its own task id, callbacks, error and count), sized as the workers report their
times (automatic) or fixed (chunksize=K); and the byte sizes gpud's keys take."""
from array import array
from itertools import islice as _islice
from pickle import dumps as _dumps, loads as _loads
import re
import sys
from time import perf_counter as _clock, sleep as _sleep

from ._constants import FRAME_MAGIC

# Automatic chunking: a chunk is cut to take about this long in a worker (less with a
# task_timeout: a fiftieth of it), and holds at most _CHUNK_MAX items.
CHUNK_SECONDS = 0.002
_CHUNK_MAX = 1024


_BATCH_WAIT = 0.01
MAX_BYTES = 1 << 30  # gpud's largest max_task_bytes


def _run_delay():
    """Seconds the calling thread has spent runnable but waiting for a CPU (the
    kernel's schedstat), or None where that cannot be read."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def round_size(n):
    """n rounded up to whole MiB (K under 1 MiB)."""
    if n >= 1 << 20:
        return f"{-(-n // (1 << 20))}M"
    return f"{-(-n // 1024)}K"


def byte_size(v, default):
    """A byte count as gpud reads one (4096, "64K", "1M", "1G")."""
    if v is None:
        return default
    if isinstance(v, int):
        return v
    t = str(v).strip().upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        return int(float(t[:-1] if mult > 1 else t) * mult)
    except ValueError:
        return default


class Chunks:
    """Several of the program's items to a gpud task, each item still its own task for
    the callbacks and the stats.

    k: a fixed chunksize (every chunk full but the last, so that a resume's skip of c
    tasks is c*k items), or None: automatic. Then a chunk starts at one item (at
    `batch` items with batch_size) and grows (at most doubling from one result to the
    next) while the workers report that its items take little time, up to `budget`
    seconds of process() a chunk, _CHUNK_MAX items, half of max_task_bytes (by the
    largest item seen) and a quarter of max_result_bytes of results; it shrinks at once
    when items turn slow. With batch_size a chunk is a whole number of batches, and
    max_task_bytes was sized for one (Dispatcher._size_chunks, which may set `whole`:
    a chunk may then fill all of max_task_bytes), so process_batch() gets full batches.
    A chunk also ends when the program's iterator takes over a millisecond for its
    items, or with batch_size when it pauses (a live source's items are not held back).

    Chunk c (the gpud task id) holds items starts[c] to starts[c + 1] - 1. A task is
    its items framed (gpud._worker.frame: their data out of band, written into the ring
    by gpud._gpud straight from the items); its result is the pickled (results,
    {index: error text}, seconds in process()), unpickled here in one call and given
    to the callbacks item by item.

    Each item its own outcome (reissue: where no journal or rank ties a task to its
    items): a chunk of several items that fails as a whole (its worker died running
    it, retries or not, or it ended its worker) is not its items' outcome: each of them
    runs again as a chunk of its own (`again`, task `single[c]`), so that only an item
    that kills its worker alone is called a poison task, with its own retries; so does
    an item whose result fitted alone but not beside the others' (None in errors).
    Until every chunk of several items has its outcome, the end of the iterable is not
    the end of the tasks: empty chunks (`fillers`, 0.3 ms apart) keep the run asking."""

    def __init__(self, iterable, k, callbacks, budget, batch, max_task, max_result,
                 loads_framed, frame, frame_size, reissue=True, snapshot=None):
        self.it = iter(iterable)
        if snapshot is None:
            from ._worker import snapshot
        # Each item taken as it is when the iterator yields it (gpud._worker.snapshot):
        # a chunk holds its items a while before they are framed.
        self.snap = snapshot
        self.fixed = k
        # With batch_size, the first chunk is a full batch already.
        self.k = k or max(1, batch)
        self.cb = callbacks
        self.budget = budget
        self.batch = batch
        self.max_task = max_task
        self.max_result = max_result
        self.loads_framed = loads_framed
        self.frame, self.frame_size = frame, frame_size
        # How long a chunk waits for the iterator's items: a millisecond, or with
        # batch_size while they come at least one per _BATCH_WAIT (batch_wait_ms when
        # set), to fill a batch.
        self.wait = 1e-3 if batch <= 1 else _BATCH_WAIT
        self.whole = False  # max_task_bytes sized for a batch: a chunk may fill all of it
        self.per_item = 0  # the largest bytes an item took in a chunk so far
        self.warned = False  # a batch cut short by its bytes was said
        self.starts = array("q")  # chunk -> its first item
        self.items = 0  # read from the program's iterable so far
        self.carry = []  # items read but left for the next chunk (a chunk too large)
        self.ended = False
        self.raised = None  # the iterator's exception, raised at the next call
        self._partial = []
        self.largest = 1  # the largest chunk sent
        self.per_gpu = {}  # gpu -> [completed, failed, timeouts]
        self.reissue = reissue
        self.sent = {}  # chunk of several items -> its items, until its outcome
        self.again = []  # (item id, item) to run again alone
        self.single = {}  # chunk -> the item id it runs again
        self.fillers = 0
        self.waits = 0  # empty chunks in a row (each waits 0.3 ms, after 200 longer)
        self.total = None
        if k:
            try:
                self.total = (len(iterable) + k - 1) // k
            except TypeError:
                pass

    def first_item_bytes(self):
        """The first item's bytes as a chunk carries it (read now and kept for the
        first chunk); None when there is none or it cannot be read or pickled (the
        first chunk then says so)."""
        try:
            self.carry = self._read(1)
        except BaseException as e:
            self.carry, self.ended = self._partial, True
            self.raised = e
            return None
        if not self.carry:
            return None
        try:
            return self.frame_size(self.frame(self.carry, True))
        except BaseException:
            return None

    def _limit(self):
        """The most bytes a chunk of several items may take."""
        return self.max_task if self.whole else self.max_task // 2

    def __len__(self):
        if self.total is None:
            raise TypeError("no length")
        return self.total

    def __iter__(self):
        return self

    def _read(self, k):
        chunk, self.carry = self.carry[:k], self.carry[k:]
        self._partial = chunk  # what was read when the iterator raises
        if self.ended:  # an iterator is not asked again once it has ended
            return chunk
        it = self.it
        if self.fixed:
            want = k - len(chunk)
            chunk.extend(map(self.snap, _islice(it, want)))
            self.ended = len(chunk) < k
            return chunk
        # Blocks of 1, 2, 4 ... 64 items, the clock read between them.
        t0 = _clock()
        waited = _run_delay() if self.batch > 1 else None
        block = 1
        while len(chunk) < k:
            want = min(block, k - len(chunk))
            n = len(chunk)
            t1 = _clock()
            chunk.extend(map(self.snap, _islice(it, want)))
            if len(chunk) - n < want:
                self.ended = True
                break
            t2 = _clock()
            # A live source's items are not held back: a chunk ends after a
            # millisecond, or with batch_size when the source pauses (its items came
            # slower than one per `wait` seconds).
            # Time this thread spent waiting for a CPU (a loaded machine) is not the
            # source pausing: it is taken off (at most all of it since the chunk began).
            if (t2 - t1 > self.wait * want) if self.batch > 1 else (t2 - t0 > self.wait):
                now = _run_delay() if waited is not None else None
                if now is None or t2 - t1 - (now - waited) > self.wait * want:
                    break
            block = min(block * 2, 64)
        return chunk

    def _single(self):
        """The next item to run again, as a chunk of its own."""
        i, item = self.again.pop()
        self.waits = 0
        self.single[len(self.starts)] = i
        self.starts.append(self.items)  # no items of the stream
        return self.frame([item], True)

    def _end(self):
        """No more items from the iterable: an empty chunk while chunks of several
        items may still give theirs back, then the iterator's exception or the end."""
        if self.sent:
            # Their outcomes come meanwhile (the stand-in keeps them for the next call).
            # Short (below the 0.5 ms after which libgpud's stand-in takes the loop
            # over), so that this thread keeps taking the results in; longer after
            # many in a row (workers being replaced), up to 50 ms.
            _sleep(min(0.0003 * 2 ** max(0, self.waits - 200), 0.05))
            self.waits = min(self.waits + 1, 210)
            self.fillers += 1
            self.starts.append(self.items)
            return _dumps([], 5)
        if self.raised is not None:  # after the items before it went
            e, self.raised = self.raised, None
            raise e
        raise StopIteration

    def __next__(self):
        if self.again:
            return self._single()
        if self.raised is not None:
            return self._end()
        try:
            chunk = self._read(self.k)
        except BaseException as e:  # the iterator raised: what it gave before goes first
            chunk, self.ended = self._partial, True
            self.raised = e
        if not chunk:
            return self._end()
        frame = self.frame
        try:
            parts = frame(chunk, True)
        except BaseException as e:  # an item that cannot be pickled: those before it go
            good = 0
            for x in chunk:
                try:
                    _dumps(x, 5)
                except BaseException:
                    break
                good += 1
            self.ended = True
            self.raised = e
            if not good:
                return self._end()
            del chunk[good:]
            parts = frame(chunk, True)
        size = self.frame_size(parts)
        per = -(-size // len(chunk))
        if per > self.per_item:
            self.per_item = per
        # Past the limit (items larger than those before): the tail waits for the next
        # chunk, cut once by the items' sizes; one item too large fails alone, as a
        # task does. The next chunks are sized by the largest item seen, so the cut is
        # not done again (not below batch_size: the limit was sized for full batches).
        limit = self._limit()
        if size > limit and len(chunk) > 1 and not self.fixed:
            keep = max(1, min(len(chunk) - 1, int(limit * 0.9) // per))
            if keep > self.batch:  # whole batches
                keep -= keep % self.batch
            self.carry[:0] = chunk[keep:]
            del chunk[keep:]
            parts = frame(chunk, True)
            fits, b = self._fits(), self.batch
            self.k = max(b, fits - fits % b)
            if b > 1 and keep < b and not self.warned:  # said once, not silently
                self.warned = True
                print(f"gpud: batch_size={b}: items of about {per} bytes (larger than the "
                      f"first) pass max_task_bytes ({self.max_task} bytes) at {keep} items: "
                      "process_batch() gets fewer; raise max_task_bytes", file=sys.stderr,
                      flush=True)
        if self.reissue and len(chunk) > 1:
            self.sent[len(self.starts)] = chunk  # its items, to run again one by one
        self.starts.append(self.items)
        self.items += len(chunk)
        if len(chunk) > self.largest:
            self.largest = len(chunk)
        return parts

    def _fits(self):
        """The most items a chunk holds by bytes (the largest item seen so far)."""
        return max(1, int(self._limit() * 0.9) // self.per_item) if self.per_item else _CHUNK_MAX

    def ids(self, task_id):
        if self.single:
            i = self.single.get(task_id)
            if i is not None:
                return range(i, i + 1)
        s = self.starts
        return range(s[task_id], s[task_id + 1] if task_id + 1 < len(s) else self.items)

    def count(self, gpu, slot, n):
        v = self.per_gpu.get(gpu)
        if v is None:
            v = self.per_gpu[gpu] = [0, 0, 0]
        v[slot] += n

    def _run_again(self, task_id, only=None):
        """Chunk task_id's items (those in `only`, else all) run again, each alone."""
        data = self.sent.get(task_id)
        if data is None:
            return False
        ids = self.ids(task_id)
        items = data
        self.again.extend(reversed([(i, x) for j, (i, x) in enumerate(zip(ids, items))
                                    if only is None or j in only]))
        return True

    def _adapt(self, n, seconds, size):
        """The next chunks' size from a result: n items took `seconds` in process()."""
        if not n:
            return  # an empty chunk
        per = seconds / n if n else 0.0
        target = self.budget / per if per > 0 else _CHUNK_MAX
        if size > self.max_result // 4:
            target = min(target, n * (self.max_result // 4) / size)
        k = self.k
        k = int(min(target, 2 * k, _CHUNK_MAX, self._fits()) if target > k else target)
        # With batch_size, process_batch() gets full batches: a chunk holds a whole
        # number of them (max_task_bytes was sized for one: _size_chunks).
        b = self.batch
        self.k = max(1, b if k < b else k - k % b)

    def callbacks(self):
        cb = self.cb
        on_success, on_error = cb["on_success"], cb["on_error"]
        on_timeout, on_start = cb["on_timeout"], cb["on_task_start"]
        loads, loads_framed, adaptive = _loads, self.loads_framed, not self.fixed

        def success(task_id, payload, gpu):
            if payload[:4] == FRAME_MAGIC:
                results, errors, seconds = loads_framed(bytearray(payload))
            else:
                results, errors, seconds = loads(payload)
            ids = self.ids(task_id)
            if adaptive:
                self._adapt(len(ids), seconds, len(payload))
            if not errors:
                self.sent.pop(task_id, None)
                self.count(gpu, 0, len(results))
                for i, r in zip(ids, results):
                    on_success(i, r, gpu)
                return
            # Items whose results did not fit beside the others' run again alone.
            later = [j for j, e in errors.items() if e is None]
            if later and not self._run_again(task_id, set(later)):
                for j in later:
                    errors[j] = ("its result did not fit beside the others' in a chunk of "
                                 f"{len(ids)} items (max_result_bytes {self.max_result})")
                later = ()
            self.sent.pop(task_id, None)
            self.count(gpu, 1, len(errors) - len(later))
            self.count(gpu, 0, len(results) - len(errors))
            for i, r in zip(ids, results):
                j = i - ids.start
                if j in errors:
                    if on_error is not None and errors[j] is not None:
                        on_error(i, errors[j], gpu)
                else:
                    on_success(i, r, gpu)

        def error(task_id, text, gpu):
            # A chunk of several items that failed as a whole: its items run again,
            # each alone, and get their own outcomes.
            if self._run_again(task_id):
                del self.sent[task_id]
                if adaptive:
                    self.k = max(1, self.k // 2)
                return
            ids = self.ids(task_id)
            self.count(gpu, 1, len(ids))
            if on_error is not None:
                # gpud's words name its task, the chunk ("... while running task
                # 2051"): each item's name its own id.
                said = f"while running task {task_id}"
                mine = text.endswith(said) and len(ids) > 0
                for i in ids:
                    if mine:
                        whose = f"while running task {i}"
                        if len(ids) > 1:
                            whose += f" (in one chunk with items {ids[0]} to {ids[-1]})"
                        on_error(i, text[: -len(said)] + whose, gpu)
                    else:
                        on_error(i, text, gpu)

        def timeout(task_id, seconds, gpu):
            self.sent.pop(task_id, None)
            ids = self.ids(task_id)
            self.count(gpu, 2, len(ids))
            if adaptive:
                self.k = 1
            if on_timeout is not None:
                for i in ids:
                    on_timeout(i, seconds, gpu)

        def start(task_id, gpu):
            for i in self.ids(task_id):
                on_start(i, gpu)

        # on_error and on_timeout are always wanted: the stats count items.
        return dict(cb, on_success=success, on_error=error, on_timeout=timeout,
                    on_task_start=start if on_start is not None else None)

    def fix_stats(self, stats):
        """The stats in items, not chunks (gpud's own are kept as chunk_*)."""
        for key in ("total", "completed", "failed", "timeouts"):
            stats["chunk_" + key] = stats[key]
        # The empty chunks sent while others could still give items back are no work.
        stats["chunk_total"] -= self.fillers
        stats["chunk_completed"] -= self.fillers
        done = [sum(v[i] for v in self.per_gpu.values()) for i in range(3)]
        stats.update(total=self.items, completed=done[0], failed=done[1], timeouts=done[2],
                     chunksize=self.fixed or "auto", largest_chunk=self.largest)
        for gpu, st in stats["gpu_status"].items():
            v = self.per_gpu.get(gpu, [0, 0, 0])
            st.update(completed=v[0], failed=v[1], timeouts=v[2])

    def summary(self, stats, line):
        """gpud's summary line ("N tasks: ...", its tasks being chunks) said in items, the
        chunks named after them; `stats` as fix_stats left them."""
        m = re.search(r" in ([0-9.]+) s \(", line)
        seconds = float(m.group(1)) if m else 0.0
        done = stats["completed"] + stats["failed"] + stats["timeouts"]
        rest = re.search(r" not run(, .*?)? in [0-9.]+ s \(", line)
        extra = rest.group(1) or "" if rest else ""
        rate = done / seconds if seconds > 0 else 0.0
        return (f"{stats['total']} items: {stats['completed']} ok, {stats['failed']} failed, "
                f"{stats['timeouts']} timed out, {max(0, stats['total'] - done)} not run{extra} "
                f"in {seconds:.3f} s ({rate:.0f} items/s; in {stats['chunk_total']} tasks of up "
                f"to {self.largest} items)")
