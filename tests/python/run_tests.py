# SPDX-License-Identifier: MIT
"""The `gpud` Python package, end to end: run_tests.py BUILD_DIR SOURCE_DIR.

For each Python found (Debian's 3.11 and pyenv's 3.9 to 3.13 under ~/.pyenv/versions;
a missing one is said in one SKIP line), a venv made from it with --without-pip gets
the package by `./build.sh python VENV/bin/python` (the documented command), and runs
the library's README quick start and design example (changed only in their import
line) and the closures mode of features.py (which also checks that the workers run
the venv's Python). Debian's Python, with the package as meson built it
(BUILD/python/gpud) on PYTHONPATH (what `--target` installs is checked to be the same
files), runs every mode of features.py, Ctrl-C and resume included, delivery.py's stops
and kill -9 (every journaled result delivered, exactly once), and the PyTorch example when
`import torch` works there (a SKIP line when not). Exit status 0 when all passed, 77
(meson's skip) when nothing ran.
"""
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BUILD, SRC = (os.path.abspath(p) for p in sys.argv[1:3])
HERE = os.path.join(SRC, "tests", "python")
failures = []
runs = 0  # run() and interrupt() calls: none is a skip (exit 77), not a pass


def log(*a):
    print(*a, flush=True)


def sanitizer_env():
    """With a sanitized libgpud (build-asan), Python must load the runtime first."""
    env = {}
    lib = os.path.join(BUILD, "daemon", "libgpud.so")
    out = subprocess.run(["ldd", lib], capture_output=True, text=True).stdout
    preload = [line.split("=>")[1].split()[0] for line in out.splitlines()
               if ("libasan" in line or "libubsan" in line) and "=>" in line]
    if preload:
        env["LD_PRELOAD"] = " ".join(preload)
        # CPython's own allocations are not the subject here.
        env["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    return env


BASE_ENV = dict(os.environ, **sanitizer_env())
for k in ("PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONHOME"):
    BASE_ENV.pop(k, None)


def install(python, target=None):
    cmd = [os.path.join(SRC, "build.sh"), "python", python]
    if target:
        cmd += ["--target", target]
    env = dict(BASE_ENV, GPUD_BUILD=BUILD, GPUD_NO_BUILD="1")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        failures.append(f"install into {python}")
        log(f"FAIL ./build.sh python {python}: {r.stdout[-2000:]}{r.stderr[-2000:]}")
        return False
    return True


def run(name, python, args, env=None, expect="PASS", timeout=240):
    global runs
    runs += 1
    e = dict(BASE_ENV, **(env or {}))
    t0 = time.monotonic()
    try:
        r = subprocess.run([python] + args, cwd=HERE, env=e, capture_output=True, text=True, errors="replace",
                           timeout=timeout)
        out, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as t:
        out, rc = f"{t.stdout or ''}{t.stderr or ''}\ntimed out after {timeout} s", -1
    if rc != 0 or expect not in out:
        failures.append(name)
        log(f"FAIL {name} (exit {rc}):\n{out[-3000:]}")
    else:
        log(f"ok   {name} ({time.monotonic() - t0:.1f} s)")
    return out


def interrupt(name, python, journal, env, chunksize=1):
    """features.py interrupt: SIGINT once it says STARTED; it checks the rest."""
    global runs
    runs += 1
    e = dict(BASE_ENV, **env)
    p = subprocess.Popen([python, "features.py", "interrupt", journal, str(chunksize)],
                         cwd=HERE, env=e,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    deadline = time.monotonic() + 120
    for line in p.stdout:
        lines.append(line)
        if line.startswith("STARTED"):
            p.send_signal(signal.SIGINT)
            break
        if time.monotonic() > deadline:
            break
    try:
        rest, _ = p.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        p.kill()
        rest, _ = p.communicate()
    out = "".join(lines) + rest
    if p.returncode != 0 or "INTERRUPTED" not in out or "PASS interrupt" not in out:
        failures.append(name)
        log(f"FAIL {name} (exit {p.returncode}):\n{out[-3000:]}")
    else:
        log(f"ok   {name}")


def pythons():
    """(label, interpreter) for each Python to try; SKIP lines for the missing."""
    found = []
    if os.access("/usr/bin/python3", os.X_OK):
        found.append(("debian", "/usr/bin/python3"))
    else:
        log("SKIP Debian's /usr/bin/python3: not installed")
    root = os.path.expanduser("~/.pyenv/versions")
    for minor in ("3.9", "3.10", "3.11", "3.12", "3.13"):
        hits = sorted(glob.glob(os.path.join(root, minor + ".*", "bin", "python" + minor)))
        if hits:
            found.append((f"pyenv {minor}", hits[-1]))
        else:
            log(f"SKIP pyenv's Python {minor}: none under {root}")
    return found


def main():
    tmp = tempfile.mkdtemp(prefix="gpud-pytest-")
    os.environ["GPUD_TEST_TMP"] = tmp
    for label, python in pythons():
        # A venv without pip: the documented command installs into it.
        venv = os.path.join(tmp, "venv-" + label.replace(" ", "-"))
        r = subprocess.run([python, "-m", "venv", "--without-pip", venv], capture_output=True,
                           text=True, env=BASE_ENV)
        if r.returncode != 0:
            failures.append(f"venv from {label}")
            log(f"FAIL python -m venv from {python}: {r.stderr[-500:]}")
            continue
        vpy = os.path.join(venv, "bin", "python")
        if not install(vpy):
            continue
        env = {"VIRTUAL_ENV": venv, "GPUD_TEST_TMP": tmp}
        run(f"{label} venv: README quick start", vpy, ["readme_quickstart.py"], env, "CHECKED 200")
        run(f"{label} venv: design example", vpy, ["design_example.py"],
            dict(env, GPUD_TEST_EXPECT="design"), "CHECKED 1000")
        # features.py checks that the workers' sys.executable and sys.prefix are the venv's.
        run(f"{label} venv: closures, the class in __main__", vpy, ["features.py", "closures"],
            env)
    # Debian's Python without a venv, every behaviour: the package as meson built it
    # (BUILD/python/gpud, python/meson.build), on PYTHONPATH; `--target` copies it.
    site = os.path.join(tmp, "site")
    if os.access("/usr/bin/python3", os.X_OK) and install("/usr/bin/python3", site):
        built = os.path.join(BUILD, "python")
        for name in os.listdir(os.path.join(site, "gpud")):
            with open(os.path.join(site, "gpud", name), "rb") as a, \
                    open(os.path.join(built, "gpud", name), "rb") as b:
                if a.read() != b.read():
                    failures.append(f"--target: {name} is not meson's")
                    log(f"FAIL ./build.sh python --target: its {name} differs from {built}/gpud's")
        env = {"PYTHONPATH": built, "GPUD_TEST_TMP": tmp}
        modes = ["closures", "live", "errors", "setup_fail", "callback_raises", "c_worker",
                 "plugins", "chunks", "auto", "callback_stops", "checks", "read_ahead", "timeouts",
                 "times", "empties"]
        if subprocess.run(["/usr/bin/python3", "-c", "import numpy"], env=BASE_ENV,
                          capture_output=True).returncode == 0:
            modes += ["arrays", "batches", "tensors"]
        else:
            log("SKIP debian: arrays (no NumPy in /usr/bin/python3: apt-get install python3-numpy)")
        # The stand-in CUDA runtime as libcudart.so (batches: pinning without a GPU).
        fake = os.path.join(BUILD, "tests", "fakecuda", "libfakecudart.so")
        cuda = os.path.join(tmp, "fakecuda")
        if os.path.exists(fake):
            os.makedirs(cuda, exist_ok=True)
            os.symlink(fake, os.path.join(cuda, "libcudart.so"))
        for mode in modes:
            e = env
            if mode == "batches" and os.path.exists(fake):
                e = dict(env, GPUD_TEST_FAKECUDA=cuda, LD_LIBRARY_PATH=os.pathsep.join(
                    x for x in (cuda, os.environ.get("LD_LIBRARY_PATH")) if x))
            run(f"debian: {mode}", "/usr/bin/python3", ["features.py", mode], e)
        # Each item its own outcome: bad results, crashing items and items that make a
        # process_batch raise among others.
        for mode in ("results", "crashes", "raising", "buffers"):
            run(f"debian: poison.py {mode}", "/usr/bin/python3", ["poison.py", mode], env)
        # Items as they were yielded (a refilled buffer), in any layout, aligned; a
        # death's error naming each item's own task id.
        for mode in ("snapshot", "layouts", "crash_ids"):
            run(f"debian: items.py {mode}", "/usr/bin/python3", ["items.py", mode], env,
                f"PASS {mode}")
        # Stages in front of the class (gpud.Stage), generator and sink plugins by name.
        stage_modes = ["python", "plugins"]
        if subprocess.run(["/usr/bin/python3", "-c", "import numpy, PIL"], env=BASE_ENV,
                          capture_output=True).returncode == 0 and os.path.exists(
                              os.path.join(BUILD, "plugins", "worker-jpeg.so")):
            stage_modes[:0] = ["jpeg", "samples"]
        else:
            log("SKIP debian: stages.py jpeg (needs NumPy and Pillow in /usr/bin/python3: "
                "python3-numpy, python3-pil; and the jpeg plugin: libjpeg62-turbo-dev)")
        for mode in stage_modes:
            run(f"debian: stages.py {mode}", "/usr/bin/python3", ["stages.py", mode], env,
                f"PASS {mode}")
        if "jpeg" in stage_modes:
            # The shared memory sized from the items and the jpeg stage's results,
            # Dispatcher.check() against gpud check, the warning, a larger item.
            run("debian: memplan.py", "/usr/bin/python3", ["memplan.py"],
                dict(env, GPUD=os.path.join(BUILD, "daemon", "gpud")), "PASS memplan")
        run("debian: the workers' sys.argv is the program's", "/usr/bin/python3",
            ["launch.py", "argv", "--input", "x y.txt", "7"], env)
        run("debian: launcher variables refused with JobError", "/usr/bin/python3",
            ["launch.py", "launcher"], env)
        run("debian: the interpreter asked and the GPUs counted once a process",
            "/usr/bin/python3", ["startup.py"],
            dict(env, GPUD_TEST_WORKER=os.path.join(BUILD, "daemon", "gpud-worker")),
            "PASS startup")
        # A warm pool: `with Dispatcher(...) as d:`, run() several times on the same
        # workers (setup once), each run exact, a killed worker started again, cleanup
        # on leaving the block.
        run("debian: a warm pool (with Dispatcher(...) as d)", "/usr/bin/python3",
            ["pool.py"], env, "PASS pool")
        # A real model: the torch example checks every result against a single-process
        # loop itself. Debian's python3-torch is about 850 MB: build.sh does not
        # install it (apt-get install python3-torch).
        if subprocess.run(["/usr/bin/python3", "-c", "import torch, numpy"], env=BASE_ENV,
                          capture_output=True).returncode == 0:
            run("debian: docs/examples/python/torch_embed.py (PyTorch, checked)",
                "/usr/bin/python3",
                [os.path.join(SRC, "docs", "examples", "python", "torch_embed.py"), "3000"],
                env, "all equal to the single-process loop", timeout=400)
        else:
            log("SKIP debian: docs/examples/python/torch_embed.py (no PyTorch in "
                "/usr/bin/python3: apt-get install python3-torch)")
        # Stops while the iterator blocks, callbacks that raise, kill -9: every result
        # journaled as done reached its callback, on_exit ran, each once over the runs.
        for mode in ("blocked_term", "blocked_int2", "blocked_raise", "blocked_nojournal",
                     "blocked_noworker", "blocked_twice", "kill9", "kill9_bound",
                     "on_resume"):
            run(f"debian: delivery {mode}", "/usr/bin/python3",
                ["delivery.py", "check", mode], env, f"PASS {mode}")
        interrupt("debian: Ctrl-C drains, on_exit, KeyboardInterrupt, resume",
                  "/usr/bin/python3", os.path.join(tmp, "interrupt.journal"), env)
        interrupt("debian: the same with chunksize=4", "/usr/bin/python3",
                  os.path.join(tmp, "interrupt4.journal"), env, 4)
    if failures:
        log(f"{len(failures)} failed: {', '.join(failures)} (the venvs and logs: {tmp})")
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    if runs == 0:
        log("SKIP: no Python to test the package with (nothing ran)")
        return 77
    log(f"all {runs} passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
