# SPDX-License-Identifier: MIT
"""The extension gpud._gpud for `pip install --no-build-isolation ./python`: built on
the stable ABI (3.9), linked to the libgpud of gpud's build folder ($GPUD_BUILD, or
build/ beside this folder), found again at run time by its path (rpath)."""
import os

from setuptools import Extension, setup

here = os.path.dirname(os.path.abspath(__file__))
src = os.path.dirname(here)
build = os.path.abspath(os.environ.get("GPUD_BUILD", os.path.join(src, "build")))
lib = os.path.join(build, "daemon")
if not os.path.exists(os.path.join(lib, "libgpud.so")):
    raise SystemExit(f"gpud: no libgpud.so in {lib}: build gpud first (./build.sh demo, or "
                     "meson setup build && ninja -C build), or set GPUD_BUILD")

setup(
    packages=["gpud"],
    ext_modules=[Extension(
        "gpud._gpud", ["gpud/_gpud.c"],
        include_dirs=[os.path.join(src, "plugin_api")],
        library_dirs=[lib], libraries=["gpud"], runtime_library_dirs=[lib],
        define_macros=[("Py_LIMITED_API", "0x03090000")], py_limited_api=True,
        extra_compile_args=["-std=gnu11"])],
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)
