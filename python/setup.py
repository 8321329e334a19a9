# SPDX-License-Identifier: MIT
"""The `gpud` wheel: `pip wheel --no-build-isolation --no-deps ./python` (or
`./build.sh wheel`) from gpud's source folder.

The package it builds holds all of gpud, found relative to itself: setup.py builds gpud
with meson in its own folder (build-wheel/ beside this one, or $GPUD_WHEEL_BUILD;
release, no tests, -Dwheel=true), installs it (stripped) into gpud/_native/ inside the
package:

    gpud/_native/bin/gpud                    the command (rpath $ORIGIN/../lib)
    gpud/_native/lib/libgpud.so.1            the engine
    gpud/_native/lib/gpud/plugins/           the built-in plugins (python/ glue too)
    gpud/_native/libexec/gpud/gpud-worker    the worker executable

and takes the extension gpud/_gpud.abi3.so from that install too: meson builds it
(python/gpud/meson.build, the one place that says how it is compiled and linked) and,
with -Dwheel=true, installs it beside _native/ with rpath $ORIGIN/_native/lib; setuptools
compiles nothing. libgpud finds its worker executable and plugins relative to its own
file (daemon/shared/paths.c), so nothing names the build folder at run time. The
`gpud` console script (gpud._cli) runs _native/bin/gpud.

For development, `./build.sh python` installs the package linked to build/'s libgpud
instead (docs/python.md)."""
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

here = os.path.dirname(os.path.abspath(__file__))
src = os.path.dirname(here)
build = os.path.abspath(os.environ.get("GPUD_WHEEL_BUILD", os.path.join(src, "build-wheel")))
stage = os.path.join(build, "wheel-stage")  # meson install --destdir
prefix = "/gpud/_native"  # inside stage: stage/gpud is the package, stage/gpud/_native its _native/
EXT = "_gpud.abi3.so"  # python/gpud/meson.build's


def say(*a):
    print("gpud wheel:", *a, file=sys.stderr, flush=True)


def native():
    """meson build + install into stage; the folder that becomes gpud/_native (the
    extension, _gpud.abi3.so, beside it)."""
    if not os.path.exists(os.path.join(src, "meson.build")):
        raise SystemExit(f"gpud: {src} is not gpud's source folder (no meson.build): build "
                         "the wheel from the source folder (pip wheel ./python), with "
                         "pip's in-tree build (pip 21.3 or newer)")
    root = os.path.join(stage, prefix.lstrip("/"))
    if getattr(native, "done", False):
        return root
    for tool in ("meson", "ninja"):
        if not shutil.which(tool):
            raise SystemExit(f"gpud: building the wheel needs {tool} (Debian: meson, "
                             "ninja-build), as gpud's own build does")
    opts = ["-Dtests=disabled", "-Dbuildtype=release", "-Dwheel=true", f"--prefix={prefix}",
            "-Dbindir=bin", "-Dlibdir=lib", "-Dlibexecdir=libexec"]
    if os.path.exists(os.path.join(build, "build.ninja")):
        cmd = ["meson", "configure", build] + opts
    else:
        cmd = ["meson", "setup", build, src] + opts
    say(" ".join(cmd))
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["ninja", "-C", build], check=True)
    shutil.rmtree(stage, ignore_errors=True)
    subprocess.run(["meson", "install", "-C", build, "--no-rebuild", "--quiet", "--strip",
                    "--destdir", stage], check=True, stdout=subprocess.DEVNULL)
    if not os.path.exists(os.path.join(root, "lib", "gpud", "plugins", "worker-python.so")):
        raise SystemExit("gpud: meson built no python plugins (it found no python3-embed: "
                         "Debian's libpython3.11-dev), so gpud.Dispatcher could run no "
                         "Python worker class: install it and build the wheel again")
    if not os.path.exists(os.path.join(root, "..", EXT)):
        raise SystemExit(f"gpud: meson built no {EXT} (it found no Python headers for "
                         "its Python: Debian's libpython3.11-dev): install them and build "
                         "the wheel again")
    native.done = True
    return root


def copy_native(root, dest):
    """root's bin/, lib/ (no headers, no .pc: plugins are built against an installed
    gpud, docs/reference.md, "Installing") and libexec/ into dest, symlinks made files: a wheel holds
    no links, so lib/ keeps one copy of libgpud, under its soname (libgpud.so.1), which
    is what the command, the extension and other programs load."""
    shutil.rmtree(dest, ignore_errors=True)
    for part in ("bin", "lib", "libexec"):
        top = os.path.join(root, part)
        for dirpath, dirnames, filenames in os.walk(top):
            rel = os.path.relpath(dirpath, root)
            if rel.split(os.sep)[:2] == ["lib", "pkgconfig"]:
                continue
            out = os.path.join(dest, rel)
            os.makedirs(out, exist_ok=True)
            for name in filenames:
                path = os.path.join(dirpath, name)
                if rel == "lib" and re.fullmatch(r"lib.*\.so(\.\d+){0,3}", name):
                    # Only the soname: a link libX.so.N, kept as the file it names.
                    if not (os.path.islink(path) and re.fullmatch(r"lib.*\.so\.\d+", name)):
                        continue
                shutil.copy2(os.path.realpath(path), os.path.join(out, name))


class BuildPy(build_py):
    def run(self):
        # No file left from an earlier build (a module since removed) goes in.
        shutil.rmtree(os.path.join(self.build_lib, "gpud"), ignore_errors=True)
        super().run()
        copy_native(native(), os.path.join(self.build_lib, "gpud", "_native"))


class BuildExt(build_ext):
    """The extension meson built and installed (native()), put where setuptools wants
    it: no compiler run here."""
    def run(self):
        root = native()
        for ext in self.extensions:
            dest = self.get_ext_fullpath(ext.name)
            if os.path.basename(dest) != EXT:
                raise SystemExit(f"gpud: setuptools names the extension {dest}, not {EXT}")
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copy2(os.path.join(root, "..", EXT), dest)


setup(
    packages=["gpud"],
    package_data={"gpud": ["py.typed"]},
    exclude_package_data={"gpud": ["*.c"]},
    # Named for the wheel's tags (cp39-abi3); BuildExt copies meson's build of it.
    ext_modules=[Extension("gpud._gpud", ["gpud/_gpud.c"], py_limited_api=True)],
    cmdclass={"build_py": BuildPy, "build_ext": BuildExt},
    # setuptools' own build folder beside meson's, not in python/.
    options={"bdist_wheel": {"py_limited_api": "cp39"},
             "build": {"build_base": os.path.join(build, "setuptools")}},
)
