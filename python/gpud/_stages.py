# SPDX-License-Identifier: MIT
"""CPU stages in front of Dispatcher's worker (`stages=[...]`): gpud.Stage, and the
job keys ([stage.NAME] sections) and codecs they make.

A stage is a worker plugin run in a pool of CPU processes with no GPU; the program's
items (or a generator plugin's) go through each stage in turn, and the last stage's
result is the worker's input. What crosses between two of them depends on who makes it:

- a Python class's result is its pickle (gpud._worker.dumps), which the next Python
  class gets back as the object (input kind "result"), and a C plugin as those bytes;
- the built-in `jpeg` stage's result is height x width x 3 uint8 pixels (crop x crop
  with `crop`), or 3 x height x width float32 with `output = float32`, which a Python
  class gets as a NumPy array of that shape, its own copy (input kind
  "array:uint8:H,W,3", "array:float32:3,H,W"); with `resize` and no `crop` the size
  follows each image, and the class gets bytes;
- any other C plugin's result is bytes (input kind "bytes").
"""
from __future__ import annotations

import os
import re
from typing import Any, Optional, Union

from ._constants import CODEC_PICKLE, CODEC_PICKLE_RAW, CODEC_RAW, CODEC_RAW_PICKLE

_OWN = ("workers", "task_timeout", "max_retries")


class Stage:
    """Stage(what, name=None, workers=None, task_timeout=None, max_retries=None, **keys)

    One CPU stage for Dispatcher(..., stages=[...]).

    what: a Python class with setup(self, gpu_id, seed, **kwargs) and process(self,
    item) (or process_batch), run as a stage (gpu_id is -1: a stage has no GPU); or a
    str naming a C worker plugin (a built-in name such as "jpeg", or a path to a .so).
    name: the stage's name ([stage.NAME]: letters, digits, _ and -; default: the
    plugin's name, or the class's in lower case). workers: its processes (default:
    the cores this process may use, less a core per 4 GPU workers). task_timeout,
    max_retries: its own (default: the Dispatcher's). keys: a class's setup() keywords,
    or the plugin's keys (jpeg: height, width or resize, crop, mode, filter, output,
    mean, std, strict, max_memory_mb).

    The same as a dict: {"plugin": "jpeg", "height": 64, "width": 64} or
    {"class": Decode, "workers": 2, "size": 224}."""

    def __init__(self, what: Union[type, str, os.PathLike[str]], name: Optional[str] = None,
                 workers: Optional[int] = None, task_timeout: Optional[float] = None,
                 max_retries: Optional[int] = None, **keys: Any) -> None:
        if not (isinstance(what, (str, os.PathLike)) or isinstance(what, type)):
            raise TypeError(f"gpud.Stage({what!r}): expected a class (with setup() and "
                            "process()) or a C worker plugin's name or path")
        self.what = what
        self.keys = keys
        if not isinstance(what, type) and _plugin_name(os.fspath(what)) == "jpeg":
            missing = [k for k in ("height", "width") if k not in keys]
            if missing and not ("resize" in keys or "crop" in keys) or len(missing) == 1:
                raise TypeError(f"gpud.Stage(\"jpeg\"): {' and '.join(missing)} "
                                f"{'is' if len(missing) == 1 else 'are'} required (its "
                                "results are height x width x 3 uint8 pixels), or "
                                "resize=N (the shorter side) and/or crop=M")
        self.own = {k: v for k, v in (("workers", workers), ("task_timeout", task_timeout),
                                      ("max_retries", max_retries)) if v is not None}
        if name is None:
            name = (what.__name__.lower() if isinstance(what, type)
                    else _plugin_name(os.fspath(what)))
            name = re.sub(r"[^A-Za-z0-9_-]", "_", name) or "stage"
        elif not re.fullmatch(r"[A-Za-z0-9_-]+", str(name)):
            raise ValueError(f"gpud.Stage(name={name!r}): a stage's name is letters, digits, "
                             "_ and -")
        self.name = str(name)

    def __repr__(self):
        what = self.what.__qualname__ if isinstance(self.what, type) else os.fspath(self.what)
        return f"gpud.Stage({what!r}, name={self.name!r})"

    @property
    def python(self):
        return isinstance(self.what, type)

    def gives(self, given="bytes"):
        """What the next stage or the worker gets from this one (its input kind), given
        what it gets: a whole sample stays one through the jpeg stage, its image member
        decoded."""
        if self.python:
            return "result"
        if _plugin_name(os.fspath(self.what)) == "jpeg":
            k = self.keys
            h, w = (k["crop"], k["crop"]) if "crop" in k else (k.get("height"), k.get("width"))
            try:
                h, w = int(h), int(w)
            except (TypeError, ValueError):
                return "bytes"  # resize alone: the size follows the image (or bad keys,
                # which the stage's setup names)
            if str(k.get("output", "uint8")) == "float32":
                pixels = f"array:float32:3,{h},{w}"
            else:
                pixels = f"array:uint8:{h},{w},3"
            if given == "sample":
                return f"sample:{pixels}:{self.keys.get('image_member') or ''}"
            return pixels
        return "bytes"

    @classmethod
    def of(cls, x, where):
        """x as a Stage: a Stage, a dict with "plugin" or "class", a class or a name."""
        if isinstance(x, Stage):
            return x
        if isinstance(x, dict):
            d = dict(x)
            what = d.pop("plugin", None)
            if what is None:
                what = d.pop("class", None)
            elif "class" in d:
                raise TypeError(f"{where}: a stage has \"plugin\" or \"class\", not both")
            if what is None:
                raise TypeError(f"{where}: a stage's dict names its \"plugin\" (a C worker "
                                "plugin such as \"jpeg\") or its \"class\" (a Python class)")
            return cls(what, **d)
        if isinstance(x, (str, os.PathLike, type)):
            return cls(x)
        raise TypeError(f"{where}: {x!r} is not a stage (gpud.Stage, a dict, a class or a "
                        "plugin name)")


def _plugin_name(p):
    """"jpeg" for "jpeg", "/x/worker-jpeg.so" and "./jpeg.so"."""
    base = os.path.basename(p)
    if base.endswith(".so"):
        base = base[:-3]
    return base[len("worker-"):] if base.startswith("worker-") else base


def parse(stages):
    """The `stages` option as a list of Stage, names made unique (decode, decode2)."""
    if stages is None:
        return []
    if isinstance(stages, (str, os.PathLike, dict, Stage, type)):
        stages = [stages]
    out, seen = [], set()
    for i, x in enumerate(stages):
        st = Stage.of(x, f"Dispatcher(stages=...)[{i}]")
        if st.name in seen:
            n = 2
            while f"{st.name}{n}" in seen:
                n += 1
            st.name = f"{st.name}{n}"
        seen.add(st.name)
        out.append(st)
    return out


def keys(stages, worker_keys, worker_script, value, first_input, worker_python):
    """The [stage.NAME] keys of `stages`, in order, and the input kind the worker gets.

    worker_keys(cls, setup_kwargs): the gpud_* keys that load a Python class in a
    worker (Dispatcher._worker_keys, as "worker.KEY" pairs); value(v): a key's text;
    first_input: what the first stage gets ("pickle": the program's items, pickled;
    "bytes": a generator plugin's, or the program's given raw to a C stage; "sample":
    the tar generator's whole samples, `members`);
    worker_python: whether the worker is a Python class. A Python stage in front of a
    C stage or a C worker gives its results as bytes (gpud_output = raw)."""
    out = []
    given = first_input
    for i, st in enumerate(stages):
        nxt_python = stages[i + 1].python if i + 1 < len(stages) else worker_python
        p = f"stage.{st.name}."
        if st.python:
            cls = st.what
            out += [(p + "plugin", "python"), (p + "script", worker_script),
                    (p + "class", getattr(cls, "__name__", "Stage")),
                    (p + "result", "bytes")]
            out += [(p + k[len("worker."):], v) for k, v in worker_keys(cls, st.keys)]
            out.append((p + "gpud_input", given))
            if not nxt_python:
                out.append((p + "gpud_output", "raw"))
        else:
            out.append((p + "plugin", os.fspath(st.what)))
            for k, v in st.keys.items():
                if k in _OWN or k == "plugin":
                    raise TypeError(f"gpud.Stage({st.name!r}): {k} is the stage's own: give it "
                                    f"as gpud.Stage(..., {k}=...)")
                out.append((p + k, value(v)))
        for k, v in st.own.items():
            out.append((p + k, value(v)))
        given = st.gives(given) if not (st.python and not nxt_python) else "bytes"
    return out, given


def codec(items_pickled, results_pickled):
    """gpud._gpud's codec: how the program's items cross (pickled for a Python class
    first, raw for a C plugin first) and how results come back (unpickled from a
    Python class last, bytes from a C plugin)."""
    return {(True, True): CODEC_PICKLE, (False, False): CODEC_RAW,
            (False, True): CODEC_RAW_PICKLE, (True, False): CODEC_PICKLE_RAW}[
        (bool(items_pickled), bool(results_pickled))]
