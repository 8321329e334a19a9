# SPDX-License-Identifier: MIT
"""The worker side of gpud.Dispatcher, run by gpud's python worker plugin in each
worker process (loaded by its file name: `script = .../gpud/_worker.py`).

Dispatcher.run() names the user's class by module and qualified name, with the calling
program's sys.path, the keywords for setup() (pickled) and base_seed. Here the class
is found as the library's spawn start finds it: a class of the script being run
(`__main__`) comes from that file loaded as module `__mp_main__`, so its
`if __name__ == "__main__":` block does not run again. Every task's input is a pickle;
every result goes back pickled (protocol 5, out-of-band buffers framed after it).
"""
import base64
import importlib
import importlib.util
import os
import pickle
import struct
import sys
import traceback
from itertools import islice
from typing import Any, Sequence
from time import perf_counter as _clock
from time import monotonic_ns as _ns

_HERE = os.path.dirname(os.path.abspath(__file__))

# The plugin put this file's folder first on sys.path: that is the package's inside,
# not a place to import modules from.
if sys.path and os.path.abspath(sys.path[0] or ".") == _HERE:
    del sys.path[0]


_glue = None  # the plugin's built-in `gpud` module (None outside the plugin): set by
# _install_package()


def _install_package():
    """Makes `import gpud` give this package (the user's script imports Dispatcher
    from it), keeping the plugin's built-in `gpud` module as gpud._glue (and _glue):
    its WorkerFatal and TaskRejected are the classes the plugin recognises."""
    global _glue
    pkg = sys.modules.get("gpud")
    if pkg is not None and getattr(pkg, "__path__", None):
        _glue = sys.modules.get("gpud._glue")
        return  # already ours
    try:
        import gpud as glue  # the plugin's built-in module
    except ImportError:
        glue = None
    if glue is not None:
        sys.modules["gpud._glue"] = glue
    _glue = glue
    spec = importlib.util.spec_from_file_location(
        "gpud", os.path.join(_HERE, "__init__.py"), submodule_search_locations=[_HERE]
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpud"] = mod
    spec.loader.exec_module(mod)


def _load_main(path):
    """The calling program's script as module __mp_main__ (and __main__, so pickles
    naming __main__ find it), as multiprocessing's spawn start does."""
    mod = sys.modules.get("__mp_main__")
    if mod is not None:
        return mod
    spec = importlib.util.spec_from_file_location("__mp_main__", path)
    if spec is None:
        raise ImportError(f"gpud: cannot load the calling program's script {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["__mp_main__"] = mod
    sys.modules["__main__"] = mod
    # A script that calls Dispatcher.run() at its top level (the library's README does)
    # is run only up to that call here: what the workers need, its classes, is defined
    # before it (gpud.dispatcher raises StopScript in a worker).
    from gpud.dispatcher import StopScript

    try:
        spec.loader.exec_module(mod)
    except StopScript:
        pass
    return mod


class _NotAtTopLevel(LookupError):
    """The script does not define the class where the workers look for it."""


def _find_class(target, main_path):
    module, _, qualname = target.partition(":")
    if module == "__main__":
        mod = _load_main(main_path)
    else:
        mod = importlib.import_module(module)
    obj = mod
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            if module == "__main__" and obj is mod:
                raise _NotAtTopLevel(
                    f"class {part} is not defined at the top level of the script: the "
                    "workers import the script as a module, without running its "
                    "__main__ block") from None
            raise
    return obj


def _frame_magic():
    """_constants.FRAME_MAGIC: in a worker this file runs as a script before `gpud` can
    be imported, so its sibling is read by path."""
    if __package__ == "gpud":
        from ._constants import FRAME_MAGIC

        return FRAME_MAGIC
    spec = importlib.util.spec_from_file_location("gpud_constants",
                                                  os.path.join(_HERE, "_constants.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.FRAME_MAGIC


_MAGIC = _frame_magic()


# Results of these types carry no out-of-band buffer at their top: pickled the plain way
# (a NumPy array inside a dict then travels in band: correct, one copy more).
_PLAIN = frozenset([int, float, str, bytes, bool, type(None), dict, list, tuple])


def _tensor_from(a):
    """A CPU torch tensor over the NumPy array `a` (no copy): how a CPU tensor travels
    (_reduce_tensor). In a worker, `a` is a read-only view of the task ring, and so is
    the tensor's memory: torch has no read-only tensors, so writing into it in place
    kills the worker (docs/python.md)."""
    import torch
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "the NumPy array is not writable"
        return torch.from_numpy(a)


def _reduce_tensor(obj):
    """A CPU torch tensor (contiguous, no grad, a dtype NumPy has) as its NumPy view,
    whose data pickle protocol 5 sends out of band; NotImplemented for anything else
    (pickled as torch pickles it: in band)."""
    torch = sys.modules.get("torch")
    if torch is None or type(obj) is not torch.Tensor:
        return NotImplemented
    try:
        if (obj.device.type != "cpu" or obj.requires_grad or obj.layout != torch.strided
                or not obj.is_contiguous()):
            return NotImplemented
        a = obj.numpy()
    except (TypeError, RuntimeError, AttributeError):  # bfloat16, conj bits...
        return NotImplemented
    # The function as gpud._worker's (this file may run under another module name).
    from gpud._worker import _tensor_from as rebuild

    return rebuild, (a,)


class _TensorPickler(pickle.Pickler):
    def reducer_override(self, obj):
        return _reduce_tensor(obj)


def _pickle5(obj, buffer_callback):
    """pickle.dumps(obj, 5, buffer_callback=...), CPU torch tensors out of band where
    torch is imported (only then: reducer_override is called for every object)."""
    if "torch" not in sys.modules:
        return pickle.dumps(obj, 5, buffer_callback=buffer_callback)
    import io

    f = io.BytesIO()
    _TensorPickler(f, 5, buffer_callback=buffer_callback).dump(obj)
    return f.getvalue()


def dumps(obj):
    """obj as a result: a protocol-5 pickle; with out-of-band buffers (a NumPy array's
    data), b'GPD5', their count, the pickle's and each buffer's size, the pickle, then
    the buffers, as a list of those parts: the python worker plugin writes them one
    after another into the result (result = bytes), the buffers' data copied once."""
    bufs = []
    p = _pickle5(obj, bufs.append)
    if not bufs:
        return p
    try:
        raws = [b.raw() for b in bufs]
    except BufferError:  # not contiguous: in band after all
        return pickle.dumps(obj, 5)
    head = struct.pack(f"<4sI{len(raws) + 1}Q", _MAGIC, len(raws), len(p), *(r.nbytes for r in raws))
    return [head, p, *raws]


def _nbytes(data):
    """The bytes of what dumps() gave: bytes, or a list of parts."""
    return len(data) if type(data) is bytes else frame_size(data)


def loads_framed(data):
    """The inverse of dumps() for a framed result (data: a bytearray the objects may
    keep views of, so an array stays writable and uncopied)."""
    mv = memoryview(data)
    (count,) = struct.unpack_from("<I", mv, 4)
    sizes = struct.unpack_from(f"<{count + 1}Q", mv, 8)
    at = 8 + 8 * (count + 1)
    p = mv[at : at + sizes[0]]
    at += sizes[0]
    buffers = []
    for n in sizes[1:]:
        buffers.append(mv[at : at + n])
        at += n
    return pickle.loads(p, buffers=buffers)


# Items (the Dispatcher's tasks): b'GPD6', the buffer count, the pickle's size and each
# buffer's size, padding to a 64-byte line, the buffers, then the pickle. Each buffer
# starts at an offset (from the task's start, a 64-byte line in the ring) that is a
# multiple of its size's largest power-of-two divisor, at most 64 (_pad): an array's
# data is aligned to its itemsize (its nbytes is a multiple of it), to 64 bytes when
# its size allows, and items of one size still lie back to back (gpud.stack).
# The buffers are the items' data, written into the ring as they are (no pickle copy):
# bytes-like items themselves, a NumPy array's data. Unpacked in the worker over the
# task's read-only memoryview, they are views of the ring.
_ITEMS = b"GPD6"
_LINE = 64
_BYTES_LIKE = (bytes, bytearray, memoryview)
_ZEROS = bytes(_LINE)


def _pad(at, size):
    """The padding before a buffer of `size` bytes written at offset `at` (_ITEMS)."""
    return -at % min(_LINE, size & -size) if size else 0


def _fixed(obj, own=None):
    """Whether obj's memory can never change: it lies in a bytes object (an array or
    a memoryview over bytes, however many views deep), or in `own` (a bytearray or an
    array owning its data, that nothing else holds)."""
    for _ in range(64):
        t = type(obj)
        if t is bytes:
            return True
        if obj is own and (t is bytearray or getattr(obj, "base", 0) is None):
            return True
        if t is memoryview:
            obj = obj.obj
        elif t is pickle.PickleBuffer:
            obj = obj.raw().obj
        else:
            np = sys.modules.get("numpy")
            if np is None or not isinstance(obj, np.ndarray) or obj.base is None:
                return False
            obj = obj.base
    return False


def _thaw(p, *buffers):
    """An item snapshot()'s pickle made when it was yielded, unpickled (in a worker,
    over views of the ring)."""
    return pickle.loads(p, buffers=buffers)


class _Frozen:
    """An item as it was when the generator yielded it: its pickle and its buffers
    (copies of any that could change), pickled as a call of _thaw on them."""

    __slots__ = ("p", "bufs")

    def __init__(self, p, bufs):
        self.p, self.bufs = p, bufs

    def __reduce_ex__(self, protocol):
        # The function as gpud._worker's (this file may run under another module name).
        from gpud._worker import _thaw as thaw

        # The pickle in band (small beside the data), so that the buffers still lie
        # back to back in the task (gpud.stack).
        return thaw, (self.p, *map(pickle.PickleBuffer, self.bufs))


# Items that cannot change once yielded: kept as they are.
_IMMUTABLE = frozenset([int, float, complex, str, bytes, bool, type(None)])
_refs = sys.getrefcount
_SOLE = 0  # _refs(x) in snapshot() for an item nothing else holds (_calibrate)


def _plain(values, depth=2):
    """Whether every value (of a tuple, a list, a dict's items) is immutable, tuples of
    such values too (up to `depth` levels)."""
    for v in values:
        t = type(v)
        if t not in _IMMUTABLE and (t is not tuple or not depth or not _plain(v, depth - 1)):
            return False
    return True


def snapshot(x):
    """The item x as it is now, unaffected by what the program does to its object
    afterwards (a generator that refills one buffer and yields it each time): taken
    when the generator yields it, for items held before they are framed (a chunk's:
    Chunks calls it as map(snapshot, iterator) gives the items, which _calibrate
    measured). Immutable items as they are (bytes: no copy); a bytearray, or a NumPy
    array that owns its data, as it is when nothing but this call holds it (a fresh
    one each item), else a copy (bytes(x); the array's layout kept); a memoryview as
    bytes (C order; one over bytes that is C-contiguous as it is); an array over bytes
    as it is; a tuple of immutable values, or a dict or list of them that nothing else
    holds, as it is; anything else (a tuple holding a buffer, a dict of arrays, a
    tensor) pickled now (_Frozen), its buffers copied where they could change."""
    t = type(x)
    if t in _IMMUTABLE:
        return x
    if t is bytearray:
        return x if _refs(x) <= _SOLE else bytes(x)
    np = sys.modules.get("numpy")
    if np is not None and t is np.ndarray and not x.dtype.hasobject:
        if (x.base is None and _refs(x) <= _SOLE) or _fixed(x):
            return x
        return x.copy(order="K")
    if t is tuple and _plain(x):
        return x
    if (t is dict or t is list) and _refs(x) <= _SOLE and _plain(x.items() if t is dict else x):
        return x  # fresh, of immutable values only
    if t is memoryview:
        return x if x.c_contiguous and _fixed(x) else x.tobytes()
    try:
        bufs = []
        p = _pickle5(x, bufs.append)
        try:
            return _Frozen(p, _owned(bufs))
        except BufferError:  # a buffer that is not contiguous: all in band
            return _Frozen(_pickle5(x, None), [])
    except Exception:  # cannot be pickled: framing it fails alone (Chunks.__next__)
        return x


class _Count:
    """Stands for _SOLE while _calibrate runs: `n <= _SOLE` keeps n."""

    n = None

    def __ge__(self, n):
        self.n = n
        return False


def _calibrate():
    """_SOLE: what _refs(x) says in snapshot() of an item that nothing else holds,
    called as Chunks calls it (the count differs between Python versions)."""
    global _SOLE
    count = _SOLE = _Count()
    try:
        list(map(snapshot, islice((bytearray(1) for _ in range(1)), 1)))
    finally:
        _SOLE = count.n if count.n is not None else 0


_calibrate()


def _owned(bufs):
    """The out-of-band buffers of a pickle made now (snapshot), copied where they could
    change (bytes as they are): what the ring gets later is what they hold now. A
    buffer that is not contiguous raises BufferError."""
    out = []
    for b in bufs:
        raw = b.raw()
        out.append(raw if _fixed(raw.obj) else raw.tobytes())
    return out


def _out_of_band(x):
    """A bytes-like item as a buffer pickle keeps out of band (pickle keeps bytes and
    bytearray in band), its bytes as bytes(x) gives them (C order: a memoryview of
    another layout or not contiguous is copied so); anything else as it is."""
    t = type(x)
    if t in _BYTES_LIKE:
        if t is memoryview and not x.c_contiguous:
            x = x.tobytes()
        try:
            return pickle.PickleBuffer(x)
        except (BufferError, TypeError):  # not contiguous: in band
            return x
    return x


def frame(obj, many=False):
    """obj (an item, or with many=True a list of items) as the parts of a task, to be
    written one after another: [head, buffer, ..., pickle] (with padding between the
    buffers where _pad asks for it). Bytes-like items travel as buffers and arrive as
    read-only memoryviews of their bytes (C order); a NumPy array's data travels as a
    buffer and it arrives as a read-only array over the ring. The buffers are the
    items' own memory, not copies: what they hold when the parts are written is what
    travels (a chunk's items are snapshot()s; frame_one says when to write)."""
    if many:
        obj = [_out_of_band(x) for x in obj]
    else:
        obj = _out_of_band(obj)
    bufs = []
    p = _pickle5(obj, bufs.append)
    try:
        raws = [b.raw() for b in bufs]
    except BufferError:  # a buffer that is not contiguous: all in band
        obj = [bytes(x) if isinstance(x, pickle.PickleBuffer) else x
               for x in (obj if many else [obj])]
        return [pickle.dumps(obj if many else obj[0], 5)]
    if not raws:
        return [p]
    n = 8 + 8 * (len(raws) + 1)
    head = struct.pack(f"<4sI{len(raws) + 1}Q", _ITEMS, len(raws), len(p),
                       *(r.nbytes for r in raws))
    head += bytes(-n % _LINE)
    parts = [head]
    at = len(head)
    for r in raws:
        size = r.nbytes
        gap = _pad(at, size)
        if gap:
            parts.append(_ZEROS[:gap])
        parts.append(r)
        at += gap + size
    parts.append(p)
    return parts


def frame_one(obj, held=True):
    """gpud._gpud's encoder for one item a task, called as the generator yields it:
    (frame(obj), live). live: a part is memory the program may still change (a buffer
    it refills, an array of its list, one inside a tuple), so gpud._gpud writes this
    item into the ring before it asks the iterator for the next one (instead of a
    copy). held: whether anything but gpud._gpud holds obj (its reference count says);
    a bytearray or an array owning its data that nothing else holds cannot change."""
    parts = frame(obj)
    own = None if held else obj
    live = False
    for x in parts:
        if type(x) is not bytes and not _fixed(x, own):
            live = True
            break
    return parts, live


def frame_size(parts):
    return sum(len(x) if type(x) is bytes else x.nbytes for x in parts)


def loads_items(data):
    """The inverse of frame() over `data` (a read-only memoryview of the task): the
    buffers are views of it (no copy)."""
    mv = data if isinstance(data, memoryview) else memoryview(data)
    if mv.nbytes < 8 or bytes(mv[:4]) != _ITEMS:
        return pickle.loads(mv)
    (count,) = struct.unpack_from("<I", mv, 4)
    sizes = struct.unpack_from(f"<{count + 1}Q", mv, 8)
    n = 8 + 8 * (count + 1)
    at = n + (-n % _LINE)
    buffers = []
    for size in sizes[1:]:
        at += _pad(at, size)
        buffers.append(mv[at : at + size])
        at += size
    return pickle.loads(mv[at : at + sizes[0]], buffers=buffers)


def stack(items: "Sequence[Any]") -> Any:
    """The items of a batch (equal-size NumPy arrays, or bytes-like items, as they
    reach process_batch) as one NumPy array of shape (n, ...): with no copy when they
    lie back to back in the task (a Dispatcher chunk's items do), else a copy
    (numpy.stack). The array is a read-only view of the ring, valid until
    process_batch returns, as its items are."""
    import numpy as np

    arrs = [np.frombuffer(x, np.uint8) if isinstance(x, _BYTES_LIKE) else np.asarray(x)
            for x in items]
    if not arrs:
        raise ValueError("gpud.stack(): no items")
    a0 = arrs[0]
    step = a0.nbytes
    start = a0.__array_interface__["data"][0]
    same = a0.flags.c_contiguous and all(
        a.dtype == a0.dtype and a.shape == a0.shape and a.flags.c_contiguous
        and a.__array_interface__["data"][0] == start + i * step
        for i, a in enumerate(arrs))
    if not same or step == 0:
        return np.stack(arrs)
    from numpy.lib.stride_tricks import as_strided

    return as_strided(a0, shape=(len(arrs),) + a0.shape, strides=(step,) + a0.strides,
                      writeable=False)


class TaskFailed(Exception):
    """A process() call that raised: its message is the traceback (the library gives
    on_error the traceback text)."""


_MAX_MESSAGE = 850  # the plugin keeps a message of about 900 bytes


def _traceback_text(exc):
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next  # from the user's process() (or setup()) on
    if tb is None:  # raised by the call itself (a missing argument): no frame to show
        return "".join(traceback.format_exception_only(type(exc), exc))
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _note(unpack_ns=0, pack_ns=0, size=None, calls=1):
    """Tells the worker where this call's time went (the plugin's gpud._times): time
    unpacking items and packing results, and a call of the user's code of `size` items
    (`calls` of them)."""
    t = getattr(_glue, "_times", None)
    if t is None:
        return
    t[0] += unpack_ns
    t[1] += pack_ns
    if size is not None:  # size 0: this call's user calls are counted here, none made
        t[2][size] = t[2].get(size, 0) + calls


def _is_fatal(exc):
    return _glue is not None and isinstance(exc, _glue.WorkerFatal)


def _is_timeout(exc):
    """gpud's TaskTimeout: the call ran past task_timeout and was interrupted. Never an
    item's own error: the call ends, and the plugin times its tasks out."""
    return _glue is not None and isinstance(exc, getattr(_glue, "TaskTimeout", ()))


def _timed_out(exc, out, n):
    """exc (a TaskTimeout) for this task and the call's n - len(out) tasks not run."""
    out.extend([exc] * (n - len(out)))
    return out


def _rejected():
    return _glue.TaskRejected if _glue is not None else ()


def _failure(exc):
    if _glue is not None and isinstance(exc, (_glue.WorkerFatal, _glue.TaskRejected)):
        return exc  # the plugin treats these by their kind
    if _is_timeout(exc):
        return exc
    text = _traceback_text(exc)
    if len(text) > _MAX_MESSAGE:  # the end says most: the innermost frames and the error
        text = "...\n" + text[-_MAX_MESSAGE:]
    # Its lines joined by U+2424: the host turns control characters into '?' (gpud's
    # log and dashboard show the symbol; gpud._gpud gives on_error the lines back).
    return TaskFailed(text.rstrip("\n").replace("\n", "\u2424"))


def _counted(results, n):
    """process_batch()'s results, checked to be one per item."""
    if len(results) != n:
        raise ValueError(f"process_batch() returned {len(results)} results for {n} items")
    return results


def _loads_result(data):
    """A Python stage's result (dumps(): a pickle, or framed with its buffers) as the
    next stage's input: the object, on a copy of its own."""
    mv = data if isinstance(data, memoryview) else memoryview(data)
    if mv.nbytes >= 4 and bytes(mv[:4]) == _MAGIC:
        return loads_framed(bytearray(mv))
    return pickle.loads(mv)


def _raw_bytes(r):
    """A result as the bytes a sink plugin or a C stage gets: a buffer (bytes, an
    array: its data in C order), or str as UTF-8; TypeError for anything else."""
    if isinstance(r, (bytes, bytearray)):
        return r
    if isinstance(r, str):
        return r.encode()
    if isinstance(r, memoryview):
        return r.tobytes()
    if hasattr(r, "__array_interface__") or type(r).__module__ == "numpy":
        import numpy

        return numpy.ascontiguousarray(r)
    try:
        return memoryview(r).tobytes()
    except TypeError:
        raise TypeError(f"the result {type(r).__qualname__} goes to a sink plugin or a C "
                        "stage, which take bytes: return bytes, str or an array") from None


_SAMPLE_MAGIC = 0x53445047  # "GPDS": gpud/plugin.h's whole-sample framing
_IMAGE_EXTS = ("jpg", "jpeg", "png")


def unpack_sample(data):
    """A whole sample (gpud/plugin.h: the tar generator's `members`) as WebDataset gives
    one: {"__key__": key, "jpg": bytes, "cls": bytes, ...}, names and key as str (bytes
    that are not UTF-8 as surrogates). ValueError naming what is wrong for bytes that are
    no sample or a damaged one: a generator's bytes are never trusted."""
    b = memoryview(data).cast("B")
    n = len(b)
    if n < 16:
        raise ValueError(f"input = sample, but this task's {n} bytes are not a whole sample "
                         "(the tar generator gives one with members = ...)")
    magic, count, key_len, _ = struct.unpack_from("<4I", b, 0)
    if magic != _SAMPLE_MAGIC:
        raise ValueError(f"input = sample, but this task's {n} bytes are not a whole sample "
                         "(the tar generator gives one with members = ...)")
    if key_len > n - 16:
        raise ValueError(f"a damaged sample ({n} bytes): its key runs past its end")
    key = bytes(b[16:16 + key_len]).decode("utf-8", "surrogateescape")
    out, at = {"__key__": key}, 16 + key_len
    for _ in range(count):
        at = (at + 7) & ~7
        if at + 16 > n:
            raise ValueError(f"sample {key!r} is damaged ({n} bytes): a member's header "
                             "runs past its end")
        name_len, _, size = struct.unpack_from("<IIQ", b, at)
        at += 16
        if name_len > n - at:
            raise ValueError(f"sample {key!r} is damaged ({n} bytes): a member's name runs "
                             "past its end")
        name = bytes(b[at:at + name_len]).decode("utf-8", "surrogateescape")
        at = (at + name_len + 63) & ~63
        if at > n or size > n - at:
            raise ValueError(f"sample {key!r} is damaged ({n} bytes): member {name!r} runs "
                             "past its end")
        out.setdefault(name, bytes(b[at:at + size]))
        at += size
    return out


def image_member(sample, name):
    """The member the jpeg stage decoded: `name` (its image_member key), else the first
    jpg, jpeg or png by name (plugins/sample_stage.h's rule)."""
    if name:
        return name if name in sample else None
    for k in sample:
        if k != "__key__" and (k in _IMAGE_EXTS or k.rsplit(".", 1)[-1] in _IMAGE_EXTS):
            return k
    return None


def _input_loader(kind):
    """What a task's bytes become for the class (Dispatcher's stages, gpud._stages):
    "bytes"; "result" (a Python stage's result); "array:DTYPE:D0,D1,...": a NumPy
    array of that dtype and shape, copied out of the ring (a C stage's pixels);
    "sample": a whole sample as a dict (unpack_sample); "sample:array:DTYPE:SHAPE:NAME":
    one whose image member (NAME, or the first image) a C stage decoded, as an array."""
    if kind == "result":
        return _loads_result
    if kind == "sample":
        return unpack_sample
    if kind.startswith("sample:array:"):
        _, array_kind = kind.split(":", 1)
        array_kind, _, name = array_kind.rpartition(":")
        as_array = _input_loader(array_kind)

        def as_sample(data):
            s = unpack_sample(data)
            k = image_member(s, name)
            if k is not None:
                s[k] = as_array(s[k])
            return s

        return as_sample
    if kind.startswith("array:"):
        import numpy

        _, dtype, shape = kind.split(":", 2)
        dtype = numpy.dtype(dtype)
        shape = tuple(int(x) for x in shape.split(","))

        def as_array(data):
            return numpy.frombuffer(data, dtype).reshape(shape).copy()

        return as_array
    return bytes


class SetupFailed(Exception):
    """A setup() that raised: its message is the error's line, then the traceback."""


_MAX_SETUP_MESSAGE = 700  # what fits beside the plugin's "W.setup() failed: " words


class Worker:
    """The class the python worker plugin runs: it holds the user's worker."""

    def setup(self, *args, **kwargs):
        """The user's setup(); what it raises goes back as TaskFailed with its traceback
        (the library's SetupFailed.error), or, for a class the script does not define
        where the workers look, as a sentence saying so."""
        try:
            self._setup(*args, **kwargs)
        except BaseException as e:
            if _is_fatal(e):
                raise
            if isinstance(e, _NotAtTopLevel):
                raise SetupFailed(str(e)) from None
            # The error's line first (gpud's own line on standard error shows it), then
            # the traceback (gpud._gpud gives on_setup_fail the traceback alone).
            text = _traceback_text(e).rstrip("\n")
            head = text.splitlines()[-1][:200]
            if len(text) > _MAX_SETUP_MESSAGE - len(head):
                text = "...\n" + text[-(_MAX_SETUP_MESSAGE - len(head)):]
            raise SetupFailed(f"{head}\n{text}".replace("\n", "\u2424")) from None

    def _setup(self, gpu_id, seed, gpud_target, gpud_main="", gpud_path="", gpud_setup="",
              gpud_seed="42", gpud_input="pickle", gpud_chunked="", gpud_batch="1",
              gpud_retries="0", gpud_result_max="1048576", gpud_argv="", gpud_output="pickle",
              gpud_isolate="1", **unused):
        if gpud_argv:  # before the script is loaded: its top level may read sys.argv
            sys.argv = pickle.loads(base64.b64decode(gpud_argv))
        for p in reversed([p for p in gpud_path.split(os.pathsep) if p]):
            if p not in sys.path:
                sys.path.insert(0, p)
        _install_package()
        sys.modules["gpud"]._in_worker = True
        cls = _find_class(gpud_target, gpud_main)
        kwargs = pickle.loads(base64.b64decode(gpud_setup)) if gpud_setup else {}
        self.loads = loads_items if gpud_input == "pickle" else _input_loader(gpud_input)
        self.chunked = gpud_chunked == "1"
        self.raw = gpud_output == "raw"
        self.batch = max(1, int(gpud_batch))
        self.retries = int(gpud_retries)
        self.isolate = gpud_isolate != "0"
        self.result_max = int(gpud_result_max)
        self.worker = cls()
        self.worker.setup(gpu_id, int(gpud_seed) + gpu_id, **kwargs)
        batch = getattr(self.worker, "process_batch", None)
        self.user_batch = batch if callable(batch) else None

    def _again(self, call, arg, exc):
        """call(arg) run again after it raised exc, up to `retries` times (gpud's
        max_retries for an item of a chunk). (True, result) or (False, traceback)."""
        for _ in range(self.retries):
            if isinstance(exc, _rejected()):
                break
            try:
                return True, call(arg)
            except BaseException as e:
                if _is_fatal(e) or _is_timeout(e):
                    raise
                exc = e
        return False, _traceback_text(exc)

    def _batch_call(self, items):
        return _counted(list(self.user_batch(items)), len(items))

    def _isolated(self, call, items, exc):
        """call(items), the user's process_batch, raised exc (neither fatal nor a
        timeout). With isolate_failures and several items: the items again in two
        halves, a half that raises split again, so that an item fails only when it
        raises alone (process_batch is called again on sub-batches of the same items);
        an item alone, or all of them without isolate_failures, runs again up to
        `retries` times. The results as call gives them, an exception in the place of
        each item that failed."""
        if len(items) > 1 and self.isolate:
            out = []
            h = (len(items) + 1) // 2
            for part in (items[:h], items[h:]):
                _note(size=len(part))
                try:
                    out.extend(call(part))
                except BaseException as e:
                    if _is_fatal(e) or _is_timeout(e):
                        raise
                    out.extend(self._isolated(call, part, e))
            return out
        for _ in range(self.retries):
            if isinstance(exc, _rejected()):
                break
            try:
                return call(items)
            except BaseException as e:
                if _is_fatal(e) or _is_timeout(e):
                    raise
                exc = e
        return [exc] * len(items)

    def _user_batch_isolated(self, given, exc):
        """The user's process_batch(given) raised exc: its results by _isolated, each
        item that failed its own failure (_failure); without isolation, or on a fatal
        error or a timeout meanwhile, every item the failure."""
        if not self.isolate or len(given) < 2 or _is_fatal(exc) or _is_timeout(exc):
            return [_failure(exc)] * len(given)
        try:
            got = self._isolated(lambda part: _counted(self.user_batch(part), len(part)),
                                 given, exc)
        except BaseException as e:
            return [_failure(e)] * len(given)
        return [_failure(r) if isinstance(r, BaseException) else r for r in got]

    def run_chunk(self, items):
        """One task holding a list of items (Dispatcher's chunks): their results,
        {index: traceback text} for the items that raised, and the seconds process()
        took, as one result."""
        errors = {}
        t0 = _clock()
        if self.user_batch is not None:
            results = []
            for at in range(0, len(items), self.batch):  # batch_size items a call
                part = items[at : at + self.batch]
                _note(size=len(part))
                try:
                    got = self._batch_call(part)
                except BaseException as e:
                    if _is_fatal(e) or _is_timeout(e):
                        raise
                    # The items that raise alone fail, each with its own error.
                    got = self._isolated(self._batch_call, part, e)
                for j, r in enumerate(got):
                    if isinstance(r, BaseException):
                        errors[at + j] = _traceback_text(r)
                        got[j] = None
                    elif type(r) is memoryview:  # an item itself: its bytes
                        got[j] = r.tobytes()
                results.extend(got)
            return results, errors, _clock() - t0
        process = self.worker.process
        results = []
        append = results.append
        _note(size=1, calls=len(items))
        for j, item in enumerate(items):
            try:
                r = process(item)
                append(r.tobytes() if type(r) is memoryview else r)
            except BaseException as e:
                if _is_fatal(e) or _is_timeout(e):
                    raise
                ok, r = self._again(process, item, e)
                append(r if ok else None)
                if not ok:
                    errors[j] = r
        return results, errors, _clock() - t0

    def _chunk_result(self, got):
        """A chunk's (results, errors, seconds) pickled. An item whose result cannot be
        pickled, or is alone over max_result_bytes, fails alone (as it would as a task
        of its own), with the message it would get then. Items that fit alone but not
        together are left out of the result (None in errors): the Dispatcher runs them
        again. The items' results are looked at one by one only when the whole does not
        pickle or fit."""
        try:
            data = dumps(got)
            if _nbytes(data) <= self.result_max:
                return data
        except BaseException as e:
            if _is_fatal(e) or _is_timeout(e):
                raise
        results, errors, seconds = got
        sizes = {}
        for j, r in enumerate(results):
            if j in errors:
                continue
            try:
                n = _nbytes(dumps(r))
            except BaseException as e:
                if _is_fatal(e) or _is_timeout(e):
                    raise
                errors[j], results[j] = _traceback_text(e).rstrip("\n"), None
                continue
            if n > self.result_max:
                errors[j] = f"python: result of {n} bytes exceeds max_result_bytes ({self.result_max})"
                results[j] = None
            else:
                sizes[j] = n
        data = dumps(got)
        # Still too large together: the largest results go back to the Dispatcher to
        # run again (each fits alone), until the rest fits.
        for j in sorted(sizes, key=sizes.get, reverse=True):
            if _nbytes(data) <= self.result_max:
                break
            errors[j], results[j] = None, None
            if len(results) == 1:  # alone, with the chunk's own few bytes around it
                errors[j] = (f"python: result of {_nbytes(data)} bytes exceeds max_result_bytes "
                             f"({self.result_max})")
            data = dumps(got)
        return data

    def _raw_batch(self, items):
        """The results as their own bytes, not pickled (gpud_output = raw: a sink
        plugin or a C stage takes them): bytes-like as they are, str as UTF-8, an
        array's data in C order."""
        loads = self.loads
        results = None
        if self.user_batch is not None:
            given = None
            try:
                given = [loads(x) for x in items]
                results = _counted(self.user_batch(given), len(items))
            except BaseException as e:
                if _is_fatal(e):
                    raise
                if _is_timeout(e):
                    return _timed_out(e, [], len(items))
                if given is None:
                    return [_failure(e)] * len(items)
                results = self._user_batch_isolated(given, e)
        out = []
        for j, x in enumerate(items):
            try:
                r = results[j] if results is not None else self.worker.process(loads(x))
                out.append(r if isinstance(r, BaseException) else _raw_bytes(r))
            except BaseException as e:
                if _is_fatal(e):
                    raise
                if _is_timeout(e):
                    return _timed_out(e, out, len(items))
                out.append(_failure(e))
        return out

    def process_batch(self, items):
        loads = self.loads
        if self.raw:
            return self._raw_batch(items)
        if self.chunked:
            out = []
            for x in items:
                try:
                    t0 = _ns()
                    chunk = loads(x)
                    t1 = _ns()
                    done = self.run_chunk(chunk)
                    t2 = _ns()
                    out.append(self._chunk_result(done))
                    _note(t1 - t0, _ns() - t2, size=0, calls=0)  # run_chunk counted its calls
                except BaseException as e:
                    if _is_timeout(e):  # the chunk times out whole, as do those after it
                        return _timed_out(e, out, len(items))
                    out.append(_failure(e))
            return out
        if self.user_batch is not None:
            given = None
            try:
                t0 = _ns()
                given = [loads(x) for x in items]
                _note(_ns() - t0, size=len(given))
                results = _counted(self.user_batch(given), len(items))
            except BaseException as e:
                if given is None:
                    return [_failure(e)] * len(items)
                results = self._user_batch_isolated(given, e)
            t0 = _ns()
            out = []
            for r in results:  # a result that cannot be pickled fails its item alone
                try:
                    if type(r) is memoryview:  # the item itself: its bytes
                        r = r.tobytes()
                    out.append(r if isinstance(r, BaseException) else dumps(r))
                except BaseException as e:
                    if _is_fatal(e):
                        raise
                    if _is_timeout(e):
                        return _timed_out(e, out, len(results))
                    out.append(_failure(e))
            _note(pack_ns=_ns() - t0)
            return out
        process = self.worker.process
        pdumps, plain = pickle.dumps, _PLAIN
        out = []
        append = out.append
        _note(size=1, calls=len(items))
        for x in items:
            try:
                r = process(loads(x))
                if type(r) is memoryview:  # the item itself: its bytes
                    r = r.tobytes()
                append(pdumps(r, 5) if type(r) in plain else dumps(r))
            except BaseException as e:
                if _is_timeout(e):
                    return _timed_out(e, out, len(items))
                append(_failure(e))
        return out

    def cleanup(self):
        cleanup = getattr(self.worker, "cleanup", None)
        if cleanup is not None:
            cleanup()


def __getattr__(name):
    """The plugin finds the class by `[worker] class`, which Dispatcher sets to the
    user's class's name so that the plugin's messages name it ("W.setup() failed"):
    any such name is this module's Worker."""
    if name.startswith("__"):
        raise AttributeError(name)
    return Worker
