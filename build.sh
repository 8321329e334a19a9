#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# gpud's set-up in one command, on Debian 12:
#   ./build.sh demo   install what is missing, build, run config/demo.ini
#   ./build.sh test   install what is missing, check the C files' formatting, build,
#                     run every test, then again built with AddressSanitizer +
#                     UndefinedBehaviorSanitizer, then with gpud and its workers built
#                     with ThreadSanitizer
#   ./build.sh bench  build a release tree and run bench/run.sh
#   ./build.sh install [PREFIX]
#                     build a release tree (build-install/) and install it into PREFIX
#                     (default /usr/local as root, else ~/.local), then say how to put
#                     gpud on PATH and gpud.pc on pkg-config's path if they are not
#   ./build.sh python [PYTHON] [--target DIR]
#                     build (build/, or $GPUD_BUILD), then install the `gpud` Python
#                     package meson built there (BUILD/python/gpud: python/gpud, its
#                     extension linked to that build's libgpud)
#                     into PYTHON's site-packages (default python3; a venv's python
#                     installs into the venv), or into DIR. Offline; needs no pip.
#                     GPUD_BUILD=DIR: another build folder (build-release...).
#                     For development: the package links that build's libgpud by its path.
#   ./build.sh wheel [PYTHON] [-w DIR]
#                     build the `gpud` wheel into dist/ (or DIR), offline, with PYTHON's
#                     pip (default Debian's /usr/bin/python3): gpud built in build-wheel/
#                     (release) and put inside the package with its command, worker and
#                     plugins, all found relative to it (docs/python.md, "The wheel"), for
#                     `pip install --no-index dist/gpud-*.whl` into any venv
set -euo pipefail
cd "$(dirname "$0")"

# libpython3.11-dev: the python plugins (skipped cleanly when meson finds no python3-embed).
# libjpeg62-turbo-dev: the jpeg stage (skipped cleanly when meson finds no libjpeg);
# libpng-dev: its PNG input (without it a PNG fails its task, saying so).
need=(meson ninja-build pkg-config gcc libinih-dev libpython3.11-dev libjpeg62-turbo-dev libpng-dev)
case "${1:-}" in
  demo|bench|install|python) ;;
  wheel) need+=(python3-pip python3-setuptools python3-wheel python3-venv) ;;
  test) need+=(g++ libcriterion-dev tmux python3-numpy python3-pil python3-mypy python3-pyflakes openmpi-bin clang-format
               python3-pip python3-setuptools python3-wheel python3-venv) ;;
  *) echo "usage: $0 demo|test|bench|install [PREFIX]|python [PYTHON] [--target DIR]|wheel [PYTHON] [-w DIR]" >&2; exit 2 ;;
esac

# libhdf5-dev: the hdf5 sink, libarchive-dev: the tar generator (each skipped cleanly
# when meson does not find it); h5py reads the hdf5 output back in the tests.
need+=(libhdf5-dev libarchive-dev)
[ "${1:-}" = test ] && need+=(python3-h5py)

missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# The test Slurm: without recommends (slurm-wlm would pull 43 packages).
lean=()
[ "${1:-}" = test ] && lean=(munge slurmctld slurmd slurm-client)
missing_lean=()
for p in "${lean[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing_lean+=("$p")
done
if ((${#missing[@]} + ${#missing_lean[@]})); then
  echo "== installing ${missing[*]} ${missing_lean[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  if ((${#missing[@]})); then
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  if ((${#missing_lean[@]})); then
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      "${missing_lean[@]}" >/dev/null
  fi
fi

setup() { # setup DIR [meson options...]
  local dir=$1; shift
  # Set on every tree, also one made before meson.build's default said so: the .pc
  # files name their prefix relative to themselves, so an install can move.
  set -- -Dpkgconfig.relocatable=true "$@"
  if [ -f "$dir/build.ninja" ]; then
    meson configure "$dir" "$@" >/dev/null
  else
    meson setup "$dir" "$@" >/dev/null
  fi
  ninja -C "$dir"
}

# Every C file as .clang-format (clang-format 14, Debian 12's) formats it.
format_check() {
  echo "== formatting: clang-format --dry-run -Werror over every C file"
  if ! clang-format --version | grep -q 'version 14\.'; then
    echo "gpud: the format check needs clang-format 14 (Debian 12's); found: $(clang-format --version)" >&2
    exit 1
  fi
  local files=()
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    mapfile -t files < <(git ls-files '*.c' '*.h')
  else
    mapfile -t files < <(find daemon plugin_api plugins tests fuzz bench docs -name '*.[ch]')
  fi
  if ! clang-format --dry-run -Werror "${files[@]}"; then
    echo "gpud: the files above are not formatted: run clang-format -i on them" >&2
    exit 1
  fi
}

# The `gpud` package into a Python: python_install PYTHON [DIR]. The package is the one
# meson builds in BUILD/python/gpud (python/meson.build: the extension, on CPython's
# stable ABI of 3.9, so one build serves every Python 3.9 to 3.13, and the package's
# files beside it); its extension links the build's libgpud by its path (rpath), so the
# build folder must stay where it is.
python_install() {
  local py=$1 target=$2 build=${GPUD_BUILD:-build}
  if ! "$py" -c 'import sys; sys.exit(not (3, 9) <= sys.version_info[:2] <= (3, 13))' 2>/dev/null; then
    echo "build.sh python: $py is not a Python 3.9 to 3.13 ($("$py" --version 2>&1 | head -n 1 || true))" >&2
    exit 2
  fi
  # GPUD_NO_BUILD=1: the build is known to be current (the test suite's own).
  if [ -n "${GPUD_NO_BUILD:-}" ]; then :
  elif [ -f "$build/build.ninja" ]; then ninja -C "$build"; else setup "$build"; fi
  build=$(cd "$build" && pwd)
  local pkg=$build/python/gpud
  if [ ! -f "$pkg/_gpud.abi3.so" ]; then
    echo "build.sh python: meson built no gpud._gpud in $pkg (it found no Python headers: Debian's libpython3.11-dev; see its message in meson setup's output)" >&2
    exit 2
  fi
  local f missing=()
  for f in python/gpud/*.py; do
    [ -f "$pkg/${f##*/}" ] || missing+=("${f##*/}")
  done
  if ((${#missing[@]})); then
    echo "build.sh python: ${missing[*]}: not in $pkg: name it in python/gpud/meson.build's py_package_files" >&2
    exit 2
  fi
  if [ -z "$target" ]; then
    target=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  fi
  mkdir -p "$target"
  rm -rf "$target/gpud"
  mkdir "$target/gpud"
  cp "$pkg"/*.py "$pkg/py.typed" "$pkg/_gpud.abi3.so" "$target/gpud/"
  echo "== installed the gpud package into $target (for $("$py" -c 'import sys; print(sys.executable, sys.version.split()[0])'))"
  "$py" -c "import sys; sys.path.insert(0, '$target'); import gpud, gpud._gpud as g; print('== import gpud:', gpud.__file__, 'libgpud', g.versions()[0])"
}

case "$1" in
  demo)
    setup build -Dtests=disabled
    # --force: the demo starts over each time, although an earlier run's journal and
    # results are there (a job of one's own is refused then, saying so).
    echo "== gpud run config/demo.ini --force (results in build/demo-results.jsonl)"
    ./build/daemon/gpud run config/demo.ini --force
    echo "== the first results:"
    head -n 3 build/demo-results.jsonl
    ;;
  install)
    prefix=${2:-}
    if [ -z "$prefix" ]; then
      if [ "$(id -u)" -eq 0 ]; then prefix=/usr/local; else prefix=$HOME/.local; fi
    fi
    case $prefix in /*) ;; *) prefix=$PWD/$prefix ;; esac
    # Its own build folder: the demo's and the tests' keep their settings.
    setup build-install -Dtests=disabled -Dbuildtype=release --prefix="$prefix"
    sudo=""
    if ! mkdir -p "$prefix" 2>/dev/null || [ ! -w "$prefix" ]; then sudo="sudo"; fi
    $sudo meson install -C build-install --no-rebuild --quiet
    bin="$prefix/bin"
    pc=$(dirname "$(find "$prefix" -path '*/pkgconfig/gpud.pc' -print -quit)")
    echo "== installed: $bin/gpud (and libgpud, its worker, plugins, gpud/plugin.h, gpud/gpud.h, gpud.pc, libgpud.pc)"
    "$bin/gpud" --version
    hints=0
    if [ "$(command -v gpud || true)" != "$bin/gpud" ]; then
      echo "== gpud is not on your PATH; add it (e.g. in ~/.profile):"
      echo "    export PATH=\"$bin:\$PATH\""
      hints=1
    fi
    if ! pkg-config --variable=prefix gpud 2>/dev/null | grep -qx "$prefix"; then
      echo "== for plugins built with \$(pkg-config --cflags gpud):"
      echo "    export PKG_CONFIG_PATH=\"$pc:\$PKG_CONFIG_PATH\""
      hints=1
    fi
    [ "$hints" -eq 1 ] || echo "== gpud is on your PATH and pkg-config finds gpud.pc"
    ;;
  test)
    format_check
    setup build -Dtests=enabled -Dwerror=true
    meson test -C build --print-errorlogs
    echo "== the same suite under AddressSanitizer + UndefinedBehaviorSanitizer"
    setup build-asan -Dtests=enabled -Dwerror=true -Db_sanitize=address,undefined \
      -Db_lundef=false -Dbuildtype=debug
    # The setup (tests/meson.build) carries the sanitizers' options and the timeouts.
    meson test -C build-asan --setup asan --print-errorlogs
    echo "== the same suite with gpud and gpud-worker under ThreadSanitizer"
    # build/'s test programs run this tree's gpud, gpud-worker and plugins: the tsan
    # setup (tests/meson.build says why and how) finds it beside build/, as build-tsan.
    # DT_RPATH (--disable-new-dtags): this tree's gpud finds its own libgpud before the
    # LD_LIBRARY_PATH meson test sets.
    setup build-tsan -Dtests=disabled -Dwerror=true -Db_sanitize=thread -Db_lundef=false \
      -Dbuildtype=debug -Dgpu_examples=disabled -Dc_link_args=-Wl,--disable-new-dtags
    tsan=$PWD/build-tsan
    rm -rf "$tsan/tsan-reports"
    mkdir -p "$tsan/tsan-reports"
    meson test -C build --setup tsan --no-rebuild --print-errorlogs || rc=$?
    # Each test's reports fail that test and are printed with its log (tests/tsan_wrap.sh);
    # any report at all fails the pass.
    if [ -n "$(find "$tsan/tsan-reports" -type f -name 'report*' -print -quit)" ]; then
      find "$tsan/tsan-reports" -type f -name 'report*'
      echo "gpud: ThreadSanitizer reported in the files above (build-tsan/tsan-reports)" >&2
      rc=1
    fi
    exit "${rc:-0}"
    ;;
  python)
    shift
    py=python3 target=""
    while (($#)); do
      case $1 in
        --target) target=${2:?--target needs a folder}; shift 2 ;;
        *) py=$1; shift ;;
      esac
    done
    python_install "$py" "$target"
    ;;
  wheel)
    shift
    py=/usr/bin/python3 dist=dist
    [ -x "$py" ] || py=python3
    while (($#)); do
      case $1 in
        -w) dist=${2:?-w needs a folder}; shift 2 ;;
        *) py=$1; shift ;;
      esac
    done
    if ! "$py" -c 'import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ("pip", "setuptools", "wheel"))))'; then
      echo "build.sh wheel: $py has no pip, setuptools or wheel (Debian: python3-pip python3-setuptools python3-wheel; or name another Python)" >&2
      exit 2
    fi
    # Offline: the build uses the setuptools and wheel already there (no isolation) and
    # gpud needs no Python package.
    "$py" -m pip wheel --no-build-isolation --no-deps --no-index -w "$dist" ./python
    whl=$(ls -t "$dist"/gpud-*.whl | head -n 1)
    echo "== $whl: install it with  pip install --no-index $whl  (into a venv: python3 -m venv v && v/bin/pip install --no-index $whl)"
    ;;
  bench)
    setup build-release -Dtests=disabled -Dbuildtype=release
    bench/run.sh build-release
    ;;
esac
