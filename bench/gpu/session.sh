#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The GPU figures in one go, for a session that is lent a GPU machine for minutes:
#
#   bench/gpu/session.sh prepare        # here: a release build (nvcc) and the Python package
#                                       # into build-gpu/, with the libraries to take along
#   bench/gpu/session.sh run [OUT]      # there (the build carried: build-gpu): every step
#                                       # bounded, each log under OUT ($OUT, else build-gpu/out)
#
# `run` writes, each step in a file of its own and a line per step in OUT/summary.txt:
#   machine.txt   nvidia-smi, the CPU count, the Python and torch found
#   cuda.txt      the CUDA example against its CPU reference (gpus = all; dense-check)
#   blob.txt      4 KiB tasks from the `blob` generator to the CUDA example, batch 1 / 64 /
#                 256, one and two workers (tasks/s from the stats)
#   trial.txt     bench/python/trial.py --real (ResNet-50, bf16; <= 5 minutes on one H100)
# A step that fails or runs out of time is said in summary.txt and the next one runs.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
B="$here/build-gpu"

prepare() {
  set -e
  PATH=/usr/local/cuda/bin:$PATH
  meson setup "$B" --buildtype=release -Dtests=disabled --wipe >/dev/null 2>&1 ||
    meson setup "$B" --buildtype=release -Dtests=disabled
  ninja -C "$B"
  [ -f "$B/plugins/worker-dense.so" ] || { echo "no CUDA example built: is nvcc in /usr/local/cuda/bin?" >&2; exit 2; }
  # The package for any Python 3.9+ (stable ABI), from this build.
  GPUD_BUILD="$B" GPUD_NO_BUILD=1 "$here/build.sh" python /usr/bin/python3 --target "$B/py"
  # What the GPU machine lacks (docs: ../shared/TOOLCHAIN.md): inih, and cudart to be sure.
  mkdir -p "$B/lib"
  cp -L "$(ldconfig -p | awk '/libinih.so.1 /{print $NF; exit}')" "$B/lib/"
  for c in /usr/local/cuda/lib64/libcudart.so.13 /usr/local/cuda-13.0/lib/libcudart.so.13; do
    [ -f "$c" ] && { cp -L "$c" "$B/lib/"; break; }
  done
  du -sh "$B"
  echo "carry: build-gpu (64 MiB at most)"
}

step() { # step NAME LIMIT_S COMMAND...: the command's output to OUT/NAME.txt, a line in summary
  local name=$1 limit=$2 t0 rc
  shift 2
  t0=$(date +%s)
  if [ "$(type -t "$1")" = function ]; then # a step of this script: in a bash of its own
    timeout --kill-after=10 "$limit" bash -c "$(declare -f "$1"); $*" >"$OUT/$name.txt" 2>&1
  else
    timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.txt" 2>&1
  fi
  rc=$?
  local note=""
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && note=" (out of time)"
  echo "$name: exit $rc after $(($(date +%s) - t0)) s$note" | tee -a "$OUT/summary.txt"
}

machine() {
  nvidia-smi || true
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
  nproc
  command -v python3 && python3 -c 'import sys, torch; print(sys.version, torch.__version__, torch.cuda.is_available())'
}

cuda() {
  cd "$OUT" || exit 1
  "$B/daemon/gpud" run "$here/config/cuda-demo.ini" --ui off --force \
    --set job.gpus=all --set job.journal=off --stats-json cuda-stats.json &&
    "$B/plugins/dense-check" cuda-results 20000 1024 1024 42 7
}

blob() {
  cd "$OUT" || exit 1
  local b w
  for b in 1 64 256; do
    for w in 1 2; do
      "$B/daemon/gpud" run "$here/config/cuda-demo.ini" --ui off --force --stats-json s.json \
        --set job.gpus=all --set job.journal=off --set job.batch_size=$b \
        --set job.workers_per_gpu=$w --set generator.plugin=blob \
        --set generator.count=$((b == 1 ? 50000 : 500000)) --set generator.size=4096 \
        --set sink.plugin=null >/dev/null 2>s.err || { tail -3 s.err; continue; }
      echo "batch $b, $w worker(s): $(grep -o '"throughput": [0-9.]*' s.json)"
    done
  done
}

run() {
  OUT=${1:-${OUT:-$B/out}}
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  export B OUT here
  : >"$OUT/summary.txt"
  export LD_LIBRARY_PATH="$B/lib:$B/daemon${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PYTHONPATH="$B/py${PYTHONPATH:+:$PYTHONPATH}" GPUD_PLUGIN_PATH="$B/bench"
  step machine 30 machine
  step cuda 120 cuda
  step blob 150 blob
  step trial 330 python3 "$here/bench/python/trial.py" --real
  cat "$OUT/summary.txt"
}

case "${1:-}" in
prepare) prepare ;;
run) shift; run "$@" ;;
*) sed -n '3,16p' "$0"; exit 2 ;;
esac
