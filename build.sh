#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# gpud's set-up in one command, on Debian 12:
#   ./build.sh demo   install what is missing, build, run config/demo.ini
#   ./build.sh test   install what is missing, build, run every test, then again
#                     built with AddressSanitizer + UndefinedBehaviorSanitizer
#   ./build.sh bench  build a release tree and run bench/run.sh
#   ./build.sh install [PREFIX]
#                     build a release tree (build-install/) and install it into PREFIX
#                     (default /usr/local as root, else ~/.local), then say how to put
#                     gpud on PATH and gpud.pc on pkg-config's path if they are not
set -euo pipefail
cd "$(dirname "$0")"

# libpython3.11-dev: the python plugins (skipped cleanly when meson finds no python3-embed).
need=(meson ninja-build pkg-config gcc libinih-dev libpython3.11-dev)
case "${1:-}" in
  demo|bench|install) ;;
  test) need+=(g++ libcriterion-dev tmux python3-numpy openmpi-bin) ;;
  *) echo "usage: $0 demo|test|bench|install [PREFIX]" >&2; exit 2 ;;
esac

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
  if [ -f "$dir/build.ninja" ]; then
    meson configure "$dir" "$@" >/dev/null
  else
    meson setup "$dir" "$@" >/dev/null
  fi
  ninja -C "$dir"
}

case "$1" in
  demo)
    setup build -Dtests=disabled
    echo "== gpud run config/demo.ini (results in build/demo-results.jsonl)"
    ./build/daemon/gpud run config/demo.ini
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
    echo "== installed: $bin/gpud (and its worker, plugins, gpud/plugin.h, gpud.pc)"
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
    setup build -Dtests=enabled -Dwerror=true
    meson test -C build --print-errorlogs
    echo "== the same suite under AddressSanitizer + UndefinedBehaviorSanitizer"
    setup build-asan -Dtests=enabled -Dwerror=true -Db_sanitize=address,undefined \
      -Db_lundef=false -Dbuildtype=debug
    # A worker killed by a signal must die of it (the tests check the signal), and
    # any undefined behaviour fails the run.
    ASAN_OPTIONS=handle_segv=0:handle_abort=0 \
    LSAN_OPTIONS=suppressions="$PWD/tests/lsan.supp" \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      meson test -C build-asan --print-errorlogs --timeout-multiplier 3
    ;;
  bench)
    setup build-release -Dtests=disabled -Dbuildtype=release
    bench/run.sh build-release
    ;;
esac
