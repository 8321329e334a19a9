# SPDX-License-Identifier: MIT
"""The `gpud` package's public API type-checked as a user's program sees it:
typed_check.py BUILD_DIR SOURCE_DIR.

The package goes into a venv of Debian's Python by `./build.sh python` (the documented
command); mypy, run with that venv's interpreter (--python-executable), finds it there
as an installed package, which it reads only with the `py.typed` marker. Then:
typed_user.py (the API used as documented) passes `mypy --strict` and runs (its results
checked); typed_wrong.py (wrong calls) fails with an error on exactly the lines marked
`# E`. And the numbers the package's _constants.py holds (run flags, UI modes, codecs,
the frame magic) are those the extension was built with (gpud._gpud's constants, from
gpud/gpud.h and _gpud.c). Skipped (exit 77, one line) without mypy (Debian:
python3-mypy); the constants are compared even then."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

from run_tests import BASE_ENV, BUILD, SRC  # noqa: E402 (the same arguments)

HERE = os.path.join(SRC, "tests", "python")
PY = "/usr/bin/python3"


def mypy(venv_python, name):
    r = subprocess.run([PY, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir",
                        os.devnull, "--python-executable", venv_python, name],
                       cwd=HERE, env=BASE_ENV, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


AGREE = r"""
import gpud._constants as py, gpud._gpud as c
names = sorted(n for n in dir(py) if n.isupper() and n != "UI_MODES")
bad = [f"{n}: _constants {getattr(py, n)!r}, _gpud {getattr(c, n, 'missing')!r}"
       for n in names if getattr(c, n, None) != getattr(py, n)]
bad += [f"UI_MODES[{k!r}] = {v} is no UI_ constant" for k, v in py.UI_MODES.items()
        if v != getattr(c, "UI_" + k.upper(), None)]
extra = sorted(n for n in dir(c) if n.isupper() and n not in names)
bad += [f"{n}: in _gpud, not in _constants" for n in extra]
print("\n".join(bad) if bad else f"AGREE {len(names)}")
"""


def main():
    have_mypy = subprocess.run([PY, "-c", "import mypy"], env=BASE_ENV,
                               capture_output=True).returncode == 0
    tmp = tempfile.mkdtemp(prefix="gpud-typed-")
    failures = []
    venv = os.path.join(tmp, "venv")
    # System site-packages: NumPy for gpud.stack when there is one.
    subprocess.run([PY, "-m", "venv", "--without-pip", "--system-site-packages", venv],
                   check=True, env=BASE_ENV)
    vpy = os.path.join(venv, "bin", "python")
    r = subprocess.run([os.path.join(SRC, "build.sh"), "python", vpy], capture_output=True,
                       text=True, env=dict(BASE_ENV, GPUD_BUILD=BUILD, GPUD_NO_BUILD="1"))
    if r.returncode != 0:
        print(f"FAIL ./build.sh python {vpy}:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
        return 1
    site = subprocess.run([vpy, "-c", "import gpud, os; print(os.path.dirname(gpud.__file__))"],
                          capture_output=True, text=True, env=BASE_ENV).stdout.strip()
    if not os.path.exists(os.path.join(site, "py.typed")):
        failures.append(f"no py.typed in the installed package ({site})")
    r = subprocess.run([vpy, "-c", AGREE], env=BASE_ENV, capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.startswith("AGREE "):
        failures.append(f"_constants.py and gpud._gpud disagree:\n{r.stdout}{r.stderr}")
    else:
        print(f"ok   _constants.py and gpud._gpud agree ({r.stdout.split()[1]} constants)")
    if not have_mypy:
        for f in failures:
            print("FAIL", f)
        print(f"SKIP: the type checks: no mypy for {PY} (Debian: apt-get install python3-mypy)")
        shutil.rmtree(tmp, ignore_errors=True)
        return 1 if failures else 77

    rc, out = mypy(vpy, "typed_user.py")
    if rc != 0:
        failures.append(f"mypy --strict typed_user.py (exit {rc}):\n{out}")
    else:
        print(f"ok   mypy --strict typed_user.py: {out.strip()}")

    with open(os.path.join(HERE, "typed_wrong.py")) as f:
        marked = {i for i, line in enumerate(f, 1) if line.rstrip().endswith("# E")}
    rc, out = mypy(vpy, "typed_wrong.py")
    reported = {int(m) for m in re.findall(r"^typed_wrong\.py:(\d+): error:", out, re.M)}
    if rc == 0 or reported != marked:
        failures.append(f"mypy --strict typed_wrong.py (exit {rc}): errors on lines "
                        f"{sorted(reported)}, expected {sorted(marked)}:\n{out}")
    else:
        print(f"ok   mypy --strict typed_wrong.py: {len(reported)} errors, each on a "
              "marked line")

    r = subprocess.run([vpy, "typed_user.py"], cwd=HERE, env=BASE_ENV, capture_output=True,
                       text=True, timeout=240)
    if r.returncode != 0 or "TYPED OK 20" not in r.stdout:
        failures.append(f"typed_user.py run (exit {r.returncode}):\n{r.stdout[-2000:]}"
                        f"{r.stderr[-2000:]}")
    else:
        print("ok   typed_user.py runs: TYPED OK 20")
    for f in failures:
        print("FAIL", f)
    if failures:
        print(f"(the venv: {tmp})")
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
