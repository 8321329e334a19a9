#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The engine's layers (docs/architecture.md, "Layers"), checked over its #includes and,
given the built engine, over its calls.

  layers.py SRCDIR [LIBGPUD_HOST_ARCHIVE]

Rules, for the files under daemon/host/:
  - a file in a lower folder (workers/, record/, view/, job/, util/) includes no header
    of run/ (nor of api/), and, when the archive is given, calls no function that run/
    (or api/) defines;
  - no header outside daemon/ and plugin_api/ is included (a plugin's own header is the
    plugin's: what both use goes to daemon/shared/);
  - no circle between modules (a module is a .c and its .h: a.c including b.h, or
    calling a function b.c defines, is a step from a to b; a header including another
    for its types is not a use, but it is held to the first rule).

Any break is printed as file:line and the check fails."""

import os
import re
import shutil
import subprocess
import sys

LOWER = ("workers", "record", "view", "job", "util")
UPPER = ("run", "api")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def sources(host):
    for folder, _, names in os.walk(host):
        for name in sorted(names):
            if name.endswith((".c", ".h")):
                path = os.path.join(folder, name)
                yield os.path.relpath(path, host)


def resolve(rel, target, host, shared):
    """The file an #include "target" in host/rel names, relative to host/ (or None for
    one outside host/: daemon/shared/, the public headers)."""
    here = os.path.normpath(os.path.join(os.path.dirname(rel), target))
    if os.path.exists(os.path.join(host, here)) and not here.startswith(".."):
        return here
    if os.path.exists(os.path.join(host, target)):
        return os.path.normpath(target)
    if os.path.exists(os.path.join(shared, target)):
        return None
    if target.endswith("_py.h"):  # made from NAME.py at build time (shared/embed_py.py)
        made_from = resolve(rel, target[:-len("_py.h")] + ".py", host, shared)
        if made_from is None or not made_from.startswith("outside:"):
            return made_from
    full = os.path.normpath(os.path.join(host, os.path.dirname(rel), target))
    return "outside:" + full


def folder(rel):
    return rel.split("/", 1)[0] if "/" in rel else ""


def module(rel):
    return os.path.splitext(rel)[0]


def includes(srcdir):
    host = os.path.join(srcdir, "daemon", "host")
    shared = os.path.join(srcdir, "daemon", "shared")
    found = []  # (rel, line, target relative to host/ or None)
    for rel in sources(host):
        with open(os.path.join(host, rel), encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if m:
                    found.append((rel, n, m.group(1), resolve(rel, m.group(1), host, shared)))
    return found


def circles(edges):
    """Strongly connected components of more than one module (Tarjan's, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    nodes = sorted(set(edges) | {b for bs in edges.values() for b in bs})
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def one_path(edges, comp):
    """One circle inside a component, as a readable chain."""
    start = comp[0]
    members = set(comp)
    prev = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for b in sorted(edges.get(v, ())):
            if b == start:
                chain = [v]
                while prev[chain[-1]] is not None:
                    chain.append(prev[chain[-1]])
                return list(reversed(chain)) + [start]
            if b in members and b not in prev:
                prev[b] = v
                queue.append(b)
    return comp


def calls(archive):
    """(caller's file, callee, callee's file) for every call between the archive's
    objects, read with nm."""
    nm = shutil.which("nm")
    if not nm:
        print("layers: no nm on PATH: calls not checked (includes are)")
        return None
    out = subprocess.run([nm, "-A", archive], capture_output=True, text=True, check=True)
    defined, used = {}, []
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        where = parts[0].rstrip(":").split(":")
        obj = where[1] if len(where) > 1 else where[0]
        name = os.path.basename(obj)
        if not name.startswith("host_"):
            continue
        # host_run_events.c.o -> run/events.c
        rel = name[len("host_"):-len(".o")].replace("_", "/", 1)
        kind, sym = parts[-2], parts[-1]
        if kind in ("T", "D", "B", "R"):
            defined[sym] = rel
        elif kind == "U":
            used.append((rel, sym))
    return [(rel, sym, defined[sym]) for rel, sym in used if sym in defined]


def main():
    srcdir = sys.argv[1]
    archive = sys.argv[2] if len(sys.argv) > 2 else None
    broken = []

    def fail(message):
        broken.append(message)

    edges = {}
    for rel, n, target, to in includes(srcdir):
        if to is not None and to.startswith("outside:"):
            fail(f"daemon/host/{rel}:{n}: includes \"{target}\", a header "
                          "outside daemon/ (what both sides use belongs in daemon/shared/)")
            continue
        if to is None:
            continue
        if folder(rel) in LOWER and folder(to) in UPPER:
            fail(f"daemon/host/{rel}:{n}: {folder(rel)}/ includes {to}: "
                          f"a lower layer names {folder(to)}/")
        a, b = module(rel), module(to)
        if a != b and rel.endswith(".c"):
            edges.setdefault(a, set()).add(b)
    checked_calls = 0
    if archive:
        found = calls(archive)
        if found is not None:
            seen = set()
            for rel, sym, to in found:
                checked_calls += 1
                a, b = module(rel), module(to)
                if a != b:
                    edges.setdefault(a, set()).add(b)
                if folder(rel) in LOWER and folder(to) in UPPER and (rel, sym) not in seen:
                    seen.add((rel, sym))
                    fail(f"daemon/host/{rel}: calls {sym} ({to}): "
                                  f"a lower layer calls {folder(to)}/")
    for comp in circles(edges):
        chain = " -> ".join(one_path(edges, comp))
        fail(f"circle between {len(comp)} modules: {chain}"
             + (f" (all: {', '.join(comp)})" if len(comp) > 2 else ""))
    for b in broken:
        print(b)
    print(f"layers: {len(edges)} modules, {checked_calls} calls between files checked: "
          f"{len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
