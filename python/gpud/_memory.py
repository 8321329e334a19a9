# SPDX-License-Identifier: MIT
"""Dispatcher's shared memory sized from what travels (docs/python.md, "Memory").

gpud maps, for each worker, a task ring and a result ring (daemon/host/workers/
memory.c, shm_plan): a ring's capacity is the smallest power of two at least twice a
batch of records of the largest size (max_task_bytes for tasks, max_result_bytes for
the result slots a batch reserves), so it holds two to four batches, and on a long run
all of it becomes resident. With the keys left at 1 MiB, a batch of 64 images of
150 KB maps 256 MiB a ring. Here, when the program leaves max_task_bytes and
max_result_bytes unset, they are sized from what the rings will carry: the first
items the program yields (with room for larger ones) and the declared outputs of the
stages (the jpeg stage's height x width x 3 pixels); then raised to the most the ring
that size needs anyway can carry (a power of two has room to spare: larger items cost
nothing up to it). The ring arithmetic mirrors daemon/shared/ring.h and
daemon/host/workers/memory.c; Dispatcher.check() reports libgpud's own figures, and
the tests hold the two together."""
from __future__ import annotations

LINE = 64            # SHM_LINE
REC_HDR = 64         # SHM_REC_HDR
SLOT_GAP = 256       # SHM_SLOT_GAP
MSG_MAX = 1024       # SHM_MSG_MAX: a result slot holds at least a failure's message
MIN_RING = 64 << 10  # memory.c's MIN_RING
MAX_BYTES = 1 << 30  # the largest max_task_bytes / max_result_bytes gpud takes
SAMPLE = 16          # the most items check() reads of those it is given (run(): 1)
ITEM_ROOM = 1.5      # a later item may be this much larger than the largest first one
RESULT_FLOOR = 64 << 10  # results of the worker after sized stages: at least this room
WARN_RATIO = 4       # a plan this many times what the items need is said
RING_FLOOR = 4 << 20  # a sized ring is never smaller (batch_size 1 with 1 MiB keys)
DEFAULT = 1 << 20    # max_task_bytes and max_result_bytes when not given


def span(size):
    """ring_span: bytes a record of `size` payload bytes takes."""
    return REC_HDR + -(-size // LINE) * LINE


def slot(size):
    """ring_slot_span: bytes a reserved result slot of `size` takes."""
    return span(max(size, MSG_MAX)) + SLOT_GAP


def capacity_for(need, min_bytes=MIN_RING):
    """ring_capacity_for: the smallest power of two >= 2 * need and >= min_bytes."""
    cap = 2 * LINE
    while cap < 2 * need or cap < min_bytes:
        cap <<= 1
    return cap


def fill_tasks(need, batch):
    """The largest max_task_bytes whose task ring is the one `need` bytes a task take
    (at least RING_FLOOR)."""
    cap = max(capacity_for(batch * span(need)), RING_FLOOR)
    per = cap // (2 * batch) - REC_HDR
    return min(MAX_BYTES, max(need, per // LINE * LINE))


def fill_results(need, batch):
    """The largest max_result_bytes whose result ring is the one `need` bytes a result
    take (at least RING_FLOOR)."""
    cap = max(capacity_for(batch * slot(need)), RING_FLOOR)
    per = cap // (2 * batch) - REC_HDR - SLOT_GAP
    return min(MAX_BYTES, max(need, per // LINE * LINE))


def declared(kind):
    """The bytes of one result a stage's input kind ("array:uint8:224,224,3") names, or
    None when it names no size ("bytes", "result": a plugin's or a class's own)."""
    parts = str(kind).split(":")
    if len(parts) != 3 or parts[0] != "array":
        return None
    size = {"uint8": 1, "int8": 1, "uint16": 2, "int16": 2, "float16": 2, "uint32": 4,
            "int32": 4, "float32": 4, "float64": 8, "int64": 8, "uint64": 8}.get(parts[1])
    try:
        n = 1
        for d in parts[2].split(","):
            n *= int(d)
    except ValueError:
        return None
    return None if size is None else n * size


def item_bytes(item, raw, frame, frame_size):
    """The bytes `item` takes as a task: as it is (raw: a C plugin first) or framed
    (pickled, with its buffers out of band); None when that cannot be told."""
    try:
        if raw:
            if isinstance(item, str):
                return len(item.encode("utf-8"))
            return memoryview(item).nbytes
        return frame_size(frame(item))
    except Exception:
        return None


class Peeked:
    """An iterable's first items read ahead (to size the tasks), then the rest: what it
    yields is the iterable's, in order, and an exception it raised while read ahead is
    raised where it was (after the items before it)."""

    def __init__(self, iterable, k):
        self._it = iter(iterable)
        self.first = []
        self._raised = None
        try:
            self._len = len(iterable)
        except TypeError:
            self._len = None
        try:
            for _ in range(k):
                self.first.append(next(self._it))
        except StopIteration:
            self._it = iter(())
        except BaseException as e:  # raised in order, by __next__
            self._raised = e

    def __len__(self):
        if self._len is None:
            raise TypeError("no length")
        return self._len

    def __iter__(self):
        return self

    def __next__(self):
        if self.first:
            return self.first.pop(0)
        if self._raised is not None:
            e, self._raised, self._it = self._raised, None, iter(())
            raise e
        return next(self._it)


def plan_keys(stages, sizes, batch):
    """The max_task_bytes / max_result_bytes keys gpud is given where the program did
    not set them, and what each was sized from: (keys, why). sizes: the first items'
    task bytes (empty: not known, a generator plugin's or none read). A key is sized
    only where every ring it bounds carries known sizes, and only when that makes its
    rings smaller than the default's."""
    outs = [declared(st.gives()) for st in stages]
    keys, why = [], {}
    known = all(o is not None for o in outs)
    if sizes and known:
        # The program's items (with room for larger ones) and each stage's results,
        # which are the next stage's (or the GPU workers') tasks.
        need = max([int(max(sizes) * ITEM_ROOM) + 1] + outs)
        limit = fill_tasks(need, batch)
        if capacity_for(batch * span(limit)) < capacity_for(batch * span(DEFAULT)):
            keys.append(("job.max_task_bytes", str(limit)))
            why["max_task_bytes"] = (
                (f"the first item ({sizes[0]} bytes)" if len(sizes) == 1 else
                 f"the first {len(sizes)} items (the largest {max(sizes)} bytes)")
                + (", " + ", ".join(f"stage {st.name}'s results ({o} bytes)"
                                    for st, o in zip(stages, outs)) if outs else ""))
    if outs and known:
        # The stages' results are known; the GPU workers' are not before they run:
        # room for RESULT_FLOOR at least, and whatever more the ring holds anyway.
        limit = fill_results(max(outs + [RESULT_FLOOR]), batch)
        if capacity_for(batch * slot(limit)) < capacity_for(batch * slot(DEFAULT)):
            keys.append(("job.max_result_bytes", str(limit)))
            why["max_result_bytes"] = "the stages' results (" + ", ".join(
                f"stage {st.name}: {o} bytes" for st, o in zip(stages, outs)) + ")"
    return keys, why


def items_need(sizes, stages, batch):
    """What two batches of the first items take in a task ring, and in the stages'
    result rings (None where not known): the figures a plan is held against."""
    outs = [declared(st.gives()) for st in stages]
    task = max(capacity_for(batch * span(max(sizes))), RING_FLOOR) if sizes else None
    result = (max(capacity_for(batch * slot(max(outs + [RESULT_FLOOR]))), RING_FLOOR)
              if outs and all(o is not None for o in outs) else None)
    return task, result


def warning(sizes, stages, batch, task_limit, result_limit):
    """A line when the rings the limits make are more than WARN_RATIO times the rings
    the items need (None when not, or when the items' needs are not known)."""
    task_need, result_need = items_need(sizes, stages, batch)
    out = []
    if task_need and task_limit:
        ring = capacity_for(batch * span(task_limit))
        if ring > WARN_RATIO * task_need:
            out.append(f"max_task_bytes={task_limit} makes each worker's task ring "
                       f"{ring >> 10} KiB, {ring // task_need}x the {task_need >> 10} KiB "
                       f"two batches of the first items would take (the largest of "
                       f"{len(sizes)}: {max(sizes)} bytes)")
    if result_need and result_limit:
        ring = capacity_for(batch * slot(result_limit))
        if ring > WARN_RATIO * result_need:
            out.append(f"max_result_bytes={result_limit} makes each worker's result ring "
                       f"{ring >> 10} KiB, {ring // result_need}x the "
                       f"{result_need >> 10} KiB the stages' results need")
    if not out:
        return None
    return ("gpud: the run's shared memory is far above what its items need: "
            + "; ".join(out) + " (each of its workers maps them, and a long run makes "
            "them resident): lower the key, or leave it unset for gpud to size it")


def hint(error, why):
    """A task's error with, when it is a limit that was sized here, what it was sized
    from and the option that raises it."""
    for key, src in why.items():
        if f"exceeds {key}" in str(error):
            return (f"{error} ({key} was sized by the Dispatcher from {src}: give "
                    f"Dispatcher(..., {key}=...) to raise it)")
    return error
