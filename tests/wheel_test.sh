#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The wheel (issue: `pip install` into a venv): builds it as docs/python.md says (pip
# wheel --no-build-isolation --no-deps ./python, its meson build in BUILD_DIR/wheel-build),
# checks that nothing in it names a folder of this machine (no RPATH/RUNPATH but $ORIGIN,
# no path of the source or build folders in any file), installs it into a fresh venv
# with --no-index, and then, with the source and build folders hidden (a private mount
# namespace with empty folders over them, where unshare -m is allowed), runs the demo job
# copied elsewhere with the venv's `gpud` (every result checked against hashlib) and a
# small Dispatcher job with the venv's Python, and with pyenv's 3.9 and 3.13 where found;
# then moves the venv and runs the same with `python -m gpud` from there. The venv is a plain one (no
# --system-site-packages): what is checked works without NumPy.
#   tests/wheel_test.sh BUILD_DIR SOURCE_DIR
# Exit 77 (meson's skip), with one line, where pip, setuptools, wheel or venv is missing.
# GPUD_TEST_NO_UNSHARE=1 runs the fallback (the folders not hidden) where unshare works.
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
py=${GPUD_WHEEL_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=$(command -v python3 || true)
if [ -z "$py" ] || ! "$py" -c 'import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ("pip", "setuptools", "wheel", "venv", "ensurepip"))))' 2>/dev/null; then
  echo "SKIP wheel: ${py:-python3} lacks pip, setuptools, wheel or venv (Debian: python3-pip python3-setuptools python3-wheel python3-venv)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Nothing of this environment may help the installed package find anything.
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV CONDA_PREFIX LD_LIBRARY_PATH LD_PRELOAD \
  GPUD GPUD_WORKER_EXE GPUD_BUILD GPUD_PLUGIN_PATH ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS

echo "== pip wheel ./python (meson build: $build/wheel-build)"
if ! GPUD_WHEEL_BUILD=$build/wheel-build "$py" -m pip wheel -q --no-build-isolation --no-deps \
    --no-index -w "$tmp/dist" "$src/python" >"$tmp/wheel.log" 2>&1; then
  tail -n 40 "$tmp/wheel.log"
  echo "FAIL: pip wheel ./python"
  exit 1
fi
whl=$(ls "$tmp"/dist/gpud-*.whl)
echo "wheel: $(basename "$whl") ($(stat -c %s "$whl") bytes)"
case $(basename "$whl") in
  gpud-*-cp39-abi3-linux_*.whl) ;;
  *) echo "FAIL: $(basename "$whl") is not a cp39-abi3-linux_<arch> wheel"; exit 1 ;;
esac

echo "== a fresh venv, pip install --no-index"
"$py" -m venv "$tmp/v"
"$tmp/v/bin/pip" install -q --no-index "$whl"
pkg=$("$tmp/v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gpud
for f in _gpud.abi3.so _native/bin/gpud _native/lib/libgpud.so.1 \
         _native/libexec/gpud/gpud-worker _native/lib/gpud/plugins/worker-sha256.so; do
  [ -f "$pkg/$f" ] || { echo "FAIL: the installed package has no $f"; exit 1; }
done
for f in _native/bin/gpud _native/libexec/gpud/gpud-worker; do
  [ -x "$pkg/$f" ] || { echo "FAIL: $f is not executable once installed"; exit 1; }
done
# Every ELF file: search paths relative to itself only.
elves=0
while IFS= read -r -d '' f; do
  head -c 4 "$f" | grep -q ELF || continue
  elves=$((elves + 1))
  paths=$(readelf -d "$f" | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p')
  IFS=: read -ra parts <<<"$paths"
  for p in "${parts[@]}"; do
    case $p in
      '$ORIGIN'*) ;;
      *) echo "FAIL: ${f#"$pkg"/} has the search path $p (only \$ORIGIN-relative ones)"; exit 1 ;;
    esac
  done
done < <(find "$pkg" -type f -print0)
[ "$elves" -ge 5 ] || { echo "FAIL: only $elves ELF files in the installed package"; exit 1; }
readelf -d "$pkg/_gpud.abi3.so" | grep -q 'R.*PATH.*\[\$ORIGIN/_native/lib\]' ||
  { echo "FAIL: _gpud.abi3.so does not find libgpud by \$ORIGIN/_native/lib"; exit 1; }
if grep -rlF -e "$src" -e "$build" "$pkg" >"$tmp/named"; then
  echo "FAIL: these installed files name the source or build folder:"
  cat "$tmp/named"
  exit 1
fi
echo "ok: $elves ELF files, every search path \$ORIGIN-relative; no file names $src or $build"

# The demo job, elsewhere, its outputs beside it.
mkdir "$tmp/job"
sed -e 's|^journal = .*|journal = demo.journal|' -e 's|^path = .*|path = results.jsonl|' \
  -e 's|^stop = .*|stop = 4000|' "$src/config/demo.ini" >"$tmp/job/job.ini"
[ "$(grep -c -e '^journal = demo.journal$' -e '^path = results.jsonl$' -e '^stop = 4000$' \
  "$tmp/job/job.ini")" -eq 3 ] || { echo "FAIL: config/demo.ini's keys moved: adapt this test"; exit 1; }
cat >"$tmp/job/upper.py" <<'EOF'
import os
import sys

import gpud


class Upper(gpud.BaseWorker):
    def setup(self, gpu_id, seed):
        self.gpu_id = gpu_id

    def process(self, data):
        return data.upper()


if __name__ == "__main__":
    venv = sys.argv[1]
    assert gpud.__file__.startswith(venv + "/"), gpud.__file__
    assert sys.executable.startswith(venv + "/"), sys.executable
    got = {}
    stats = gpud.Dispatcher(Upper, gpu_ids=[0, 1], ui="off").run(
        generator=(f"item{i}" for i in range(300)),
        on_success=lambda task_id, result, worker_id: got.__setitem__(task_id, result))
    assert got == {i: f"ITEM{i}" for i in range(300)}, sorted(got.items())[:5]
    assert stats["completed"] == 300, stats
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "libgpud.so" in line}
    assert libs == {os.path.join(os.path.dirname(gpud.__file__), "_native", "lib", "libgpud.so.1")}, libs
    print(f"PASS dispatcher (Python {sys.version.split()[0]}): 300 of 300 results, libgpud",
          libs.pop())
EOF
cat >"$tmp/job/check.py" <<'EOF'
import hashlib
import json

seen = set()
with open("results.jsonl") as f:
    for line in f:
        r = json.loads(line)
        d = str(r["task_id"]).encode()
        for _ in range(16):
            d = hashlib.sha256(d).digest()
        assert r["status"] == "ok" and r["result"] == d.hex(), r
        seen.add(r["task_id"])
assert seen == set(range(4000)), len(seen)
print("PASS demo: 4000 of 4000 results equal hashlib's")
EOF

# The same wheel in the oldest and newest CPython gpud supports (the stable ABI), where
# pyenv has them.
others=()
for minor in 3.9 3.13; do
  other=$(ls -d "$HOME"/.pyenv/versions/"$minor".*/bin/python3 2>/dev/null | tail -n 1 || true)
  if [ -z "$other" ]; then
    echo "SKIP the wheel in Python $minor: none under ~/.pyenv/versions"
    continue
  fi
  "$other" -m venv "$tmp/v$minor"
  "$tmp/v$minor/bin/pip" install -q --no-index "$whl"
  others+=("$tmp/v$minor")
done

# What runs where the source tree is gone: cwd outside it, PATH without it.
cat >"$tmp/run.sh" <<EOF
set -eu
cd "$tmp/job"
export PATH=/usr/bin:/bin HOME="$tmp"
[ ! -e "$src/meson.build" ] || [ "\${1:-}" = visible ]
"$tmp/v/bin/gpud" check job.ini >check.out 2>&1 || { cat check.out; exit 1; }
"$tmp/v/bin/gpud" run job.ini --ui off
"$tmp/v/bin/python" check.py
"$tmp/v/bin/gpud" plugins >plugins.out
grep -q '^  worker     sha256 ' plugins.out || { cat plugins.out; exit 1; }
# Run from the venv's bin/ unactivated, the python plugins get the venv's Python.
grep -qF ", venv $tmp/v; from \\\$VIRTUAL_ENV)" plugins.out || { cat plugins.out; exit 1; }
"$tmp/v/bin/python" upper.py "$tmp/v"
for v in ${others[*]:-}; do "\$v/bin/python" upper.py "\$v"; done
# The venv moved elsewhere: its bin/gpud names the old place's Python in its first line
# (pip's), so docs/python.md says to run VENV/bin/python -m gpud, which works anywhere.
mv "$tmp/v" "$tmp/moved"
rm -f results.jsonl demo.journal
"$tmp/moved/bin/python" -m gpud run job.ini --ui off
"$tmp/moved/bin/python" check.py
"$tmp/moved/bin/python" -m gpud plugins >plugins.out
grep -qF ", venv $tmp/moved; from \\\$VIRTUAL_ENV)" plugins.out || { cat plugins.out; exit 1; }
"$tmp/moved/bin/python" upper.py "$tmp/moved"
echo "PASS the venv moved: python -m gpud run, plugins, Dispatcher"
EOF
hide=("$src")
case $build/ in "$src"/*) ;; *) hide+=("$build") ;; esac
mounts=""
for d in "${hide[@]}"; do mounts+="mount -t tmpfs gpud-hidden '$d' && "; done
if [ -z "${GPUD_TEST_NO_UNSHARE:-}" ] && unshare -m true 2>/dev/null; then
  echo "== with ${hide[*]} hidden (unshare -m): gpud check, gpud run, Dispatcher"
  unshare -m sh -c "${mounts}exec bash '$tmp/run.sh'"
else
  # Without a mount namespace the folders stay; the wheel's own build folder is moved.
  echo "== (unshare -m is not allowed here: ${hide[*]} stay reachable; $build/wheel-build moved away) gpud check, gpud run, Dispatcher"
  mv "$build/wheel-build" "$build/wheel-build.hidden"
  trap 'mv "$build/wheel-build.hidden" "$build/wheel-build"; rm -rf "$tmp"' EXIT
  bash "$tmp/run.sh" visible
fi
echo "wheel test: ok"
