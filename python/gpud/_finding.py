# SPDX-License-Identifier: MIT
"""Finding the worker class: what the workers need to import it (module and name, the
script for __main__, sys.path), checked here before anything starts, with errors that
say where the class must be defined instead."""
import base64
import os
import pickle
import sys

from . import JobError

WORKER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_worker.py")


def _check_methods(cls):
    """TypeError naming what a worker class lacks, before anything starts."""
    name = cls.__qualname__
    missing = []
    if not callable(getattr(cls, "setup", None)):
        missing.append("setup(self, gpu_id, seed, **kwargs)")
    if not (callable(getattr(cls, "process", None))
            or callable(getattr(cls, "process_batch", None))):
        missing.append("process(self, data) (or process_batch(self, items))")
    if missing:
        raise TypeError(f"Dispatcher: the worker class {name} has no {' and no '.join(missing)}; "
                        "a worker class defines both (gpud.BaseWorker's subclasses do)")
    import inspect

    for method in ("process", "process_batch"):
        if inspect.iscoroutinefunction(getattr(cls, method, None)):
            raise TypeError(f"Dispatcher: {name}.{method}() is an async def, which the "
                            "Dispatcher would call without awaiting it: make it a plain "
                            "def, or run the class from a job file's python worker with "
                            "[job] max_in_flight (docs/reference.md, \"Python plugins\")")
    abstract = sorted(getattr(cls, "__abstractmethods__", None) or ())
    if abstract:
        raise TypeError(f"Dispatcher: the worker class {name} does not define "
                        f"{', '.join(m + '()' for m in abstract)} (abstract in "
                        f"{'gpud.BaseWorker' if set(abstract) <= {'setup', 'process'} else 'its bases'}), "
                        "so it cannot be instantiated")
    base = getattr(getattr(cls, "process", None), "__qualname__", "") == "BaseWorker.process"
    if base and not callable(getattr(cls, "process_batch", None)):
        raise TypeError(f"Dispatcher: the worker class {name} defines neither process(data) "
                        "nor process_batch(items)")


def _is_main_guard(test):
    """Whether an `if` tests `__name__ == "__main__"` (either way round)."""
    import ast

    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return (any(isinstance(x, ast.Name) and x.id == "__name__" for x in sides)
            and any(isinstance(x, ast.Constant) and x.value == "__main__" for x in sides))


def _only_in_main_block(path, name):
    """Whether the script binds `name` only inside its `if __name__ == "__main__":`
    blocks, which the workers do not run. False when the script cannot be read or
    parsed, or when it binds the name elsewhere at its top level (or in a way this
    does not see): the workers then say what they find."""
    import ast

    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return False
    top, guarded = set(), set()

    def bound(stmts, into):
        for st in stmts:
            if isinstance(st, ast.If) and _is_main_guard(st.test):
                bound(st.body, guarded)
                bound(st.orelse, into)
                continue
            for node in ast.walk(st):
                if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    into.add(node.name)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    into.add(node.id)
                elif isinstance(node, ast.alias):
                    into.add((node.asname or node.name).split(".")[0])
                elif isinstance(node, (ast.Global, ast.Nonlocal)):
                    into.update(node.names)

    bound(tree.body, top)
    return name in guarded and name not in top


def main_file():
    main = sys.modules.get("__main__")
    f = getattr(main, "__file__", None)
    return os.path.abspath(f) if f else None


def worker_keys(cls, base_seed, setup_kwargs):
    """The python worker plugin's keys that name the class (module and name, the
    script, sys.path, setup()'s keywords, the seed, sys.argv): TypeError or JobError
    where the workers could not find it."""
    if not isinstance(cls, type):
        raise TypeError(f"Dispatcher: worker_cls must be a class or a plugin name, not {cls!r}")
    module, qualname = cls.__module__, cls.__qualname__
    _check_methods(cls)
    if "<locals>" in qualname:
        raise JobError(
            f"Dispatcher: the worker class {qualname} is defined inside a function; the "
            "workers find it by module and name: define it at a module's top level")
    main = ""
    if module == "__main__":
        main = main_file()
        if not main:
            raise JobError(
                f"Dispatcher: the worker class {qualname} is defined in an interactive "
                "session; the workers cannot find it: define it in a script or a module")
        if _only_in_main_block(main, qualname.split(".")[0]):
            raise JobError(
                f"Dispatcher: the worker class {qualname} is defined inside the "
                f"script's `if __name__ == \"__main__\":` block ({main}); the workers "
                "import the script as a module, without running that block: define "
                "the class at the top level of the script")
    path = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
    try:
        setup = base64.b64encode(pickle.dumps(setup_kwargs, 5)).decode("ascii")
    except Exception as e:
        raise JobError(f"Dispatcher.run(): the keywords for setup() cannot be pickled: {e}") from e
    return [
        ("worker.gpud_target", f"{module}:{qualname}"),
        ("worker.gpud_main", main),
        ("worker.gpud_path", os.pathsep.join(path)),
        ("worker.gpud_setup", setup),
        ("worker.gpud_seed", str(int(base_seed))),
        # The program's arguments, as multiprocessing's spawn gives its children.
        ("worker.gpud_argv", base64.b64encode(pickle.dumps(list(sys.argv))).decode("ascii")),
    ]
