# SPDX-License-Identifier: MIT
"""The Python gpud embeds as C strings, checked as the Python it is:
embedded_python.py SOURCE_DIR.

Every .py under daemon/ and plugins/ (the `gpud` module of the python plugins, what the
host asks an interpreter and `gpud check --import`, the glue's helpers; and
daemon/shared/embed_py.py, which embeds them at build time) is compiled by each Python
found (Debian's /usr/bin/python3 and pyenv's 3.9 to 3.13: the glue runs on all of them;
a missing one is one SKIP line) and read by pyflakes (undefined names, unused imports;
one SKIP line without it: Debian's python3-pyflakes). Each one but embed_py.py must be
named in a meson.build, where embed_py.py makes it a C string: a .py nobody embeds is
dead code. Exit 0 when all pass, 1 otherwise."""
import glob
import os
import subprocess
import sys
import tempfile

SRC = os.path.abspath(sys.argv[1])


def pythons():
    found = []
    for py in ["/usr/bin/python3"] + [
            (sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{m}.*/bin/python{m}"))) or
             [None])[-1] for m in ("3.9", "3.10", "3.11", "3.12", "3.13")]:
        if py and os.access(py, os.X_OK):
            found.append(py)
    return found


def main():
    files = sorted(glob.glob(os.path.join(SRC, "daemon", "**", "*.py"), recursive=True) +
                   glob.glob(os.path.join(SRC, "plugins", "**", "*.py"), recursive=True))
    rel = [os.path.relpath(f, SRC) for f in files]
    failures = []
    if len(files) < 8:
        failures.append(f"only {len(files)} .py files under daemon/ and plugins/: {rel}")
    builds = ""
    for m in glob.glob(os.path.join(SRC, "**", "meson.build"), recursive=True):
        if not os.path.relpath(m, SRC).startswith("build"):  # build folders: not source
            with open(m) as f:
                builds += f.read()
    for f, r in zip(files, rel):
        base = os.path.basename(f)
        if base != "embed_py.py" and f"'{base}'" not in builds and \
                f"'{base[:-3]}:" not in builds and f"/{base}'" not in builds:
            failures.append(f"{r}: no meson.build embeds it")
    pys = pythons()
    if not pys:
        pys = [sys.executable]
    tmp = tempfile.mkdtemp(prefix="gpud-embedded-")
    for py in pys:
        r = subprocess.run([py, "-c", "import py_compile, sys\nbad = 0\nfor f in sys.argv[2:]:\n"
                            "    try:\n        py_compile.compile(f, cfile=sys.argv[1] + '/x.pyc', doraise=True)\n"
                            "    except py_compile.PyCompileError as e:\n        print(e.msg); bad += 1\n"
                            "sys.exit(bad)", tmp] + files, capture_output=True, text=True)
        ver = subprocess.run([py, "-c", "import sys; print(sys.version.split()[0])"],
                             capture_output=True, text=True).stdout.strip()
        if r.returncode != 0:
            failures.append(f"Python {ver} ({py}) cannot compile:\n{r.stdout}{r.stderr}")
        else:
            print(f"ok   {len(files)} files compile in Python {ver} ({py})")
    for m in ("3.9", "3.13"):
        if not any(f"python{m}" in p for p in pys):
            print(f"SKIP compiling in Python {m}: none under ~/.pyenv/versions")
    if subprocess.run(["/usr/bin/python3", "-c", "import pyflakes"],
                      capture_output=True).returncode == 0:
        r = subprocess.run(["/usr/bin/python3", "-m", "pyflakes"] + files, capture_output=True,
                           text=True)
        if r.returncode != 0:
            failures.append(f"pyflakes:\n{r.stdout}{r.stderr}")
        else:
            print(f"ok   pyflakes: {len(files)} files clean")
    else:
        print("SKIP pyflakes: not in /usr/bin/python3 (Debian: apt-get install python3-pyflakes)")
    for f in failures:
        print("FAIL", f)
    print(f"{len(failures)} failed" if failures else f"all {len(files)} files checked: {', '.join(rel)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
