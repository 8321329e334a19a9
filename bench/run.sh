#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# gpud's benchmark: end-to-end runs of the real binary, each repeated, medians reported.
#   bench/run.sh [BUILD_DIR] [REPEATS]     (./build.sh bench builds a release tree first)
# Cases: no-op tasks (empty, and range's decimal text) through the echo worker into the
# null sink on 2 workers; 64 KiB and 1 MiB payloads (GB/s of task input); and the host's
# own CPU time while 2 workers run long tasks.
set -euo pipefail
B=${1:-build-release}
R=${2:-5}
gpud="$B/daemon/gpud"
[ -x "$gpud" ] || { echo "no $gpud: build first (./build.sh bench)" >&2; exit 2; }
export GPUD_PLUGIN_PATH="$B/bench"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

field() { grep -o "\"$1\": [0-9.e+-]*" "$2" | head -n 1 | awk '{print $2}'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# case NAME TASKS BYTES_PER_TASK JOB-TEXT [UI]
run_case() {
  local name=$1 tasks=$2 bytes=$3 text=$4 ui=${5:-off} i
  printf '%s\n' "$text" >"$tmp/job.ini"
  : >"$tmp/rates"; : >"$tmp/gbs"; : >"$tmp/cpu"
  for ((i = 0; i < R; i++)); do
    "$gpud" run "$tmp/job.ini" --ui "$ui" --stats-json "$tmp/s.json" 2>/dev/null
    local el cpu
    el=$(field elapsed "$tmp/s.json")
    cpu=$(field host_cpu_seconds "$tmp/s.json")
    awk -v n="$tasks" -v e="$el" 'BEGIN {printf "%.0f\n", n / e}' >>"$tmp/rates"
    awk -v n="$tasks" -v b="$bytes" -v e="$el" 'BEGIN {printf "%.2f\n", n * b / e / 1e9}' >>"$tmp/gbs"
    awk -v c="$cpu" -v e="$el" 'BEGIN {printf "%.1f\n", 100 * c / e}' >>"$tmp/cpu"
  done
  printf '| %s | %s | %s | %s | %s |\n' "$name" "$tasks" \
    "$(median <"$tmp/rates")" "$(median <"$tmp/gbs")" "$(median <"$tmp/cpu")"
}

job() { # job GENERATOR-LINES WORKER-LINES [JOB-LINES]
  printf '[job]\ngpus = 0,1\nqueue_size = 1024\n%s\n[worker]\n%s\n[generator]\n%s\n[sink]\nplugin = null\n' \
    "${3:-}" "$2" "$1"
}

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r)"
echo "gpud: $("$gpud" --version), $R runs per case, medians"
echo
echo "| case | tasks | tasks/s | GB/s of input | host CPU % of wall |"
echo "| --- | --- | --- | --- | --- |"
run_case "no-op, empty tasks (blob size=0)" 2000000 0 \
  "$(job $'plugin = blob\ncount = 2000000\nsize = 0' 'plugin = echo')"
run_case "no-op, empty tasks, max_*_bytes = 64" 2000000 0 \
  "$(job $'plugin = blob\ncount = 2000000\nsize = 0' 'plugin = echo' $'max_task_bytes = 64\nmax_result_bytes = 64')"
run_case "no-op, range 0..2M (decimal text)" 2000000 0 \
  "$(job $'plugin = range\nstop = 2000000' 'plugin = echo')"
run_case "the same, --ui dashboard (drawn to /dev/null)" 2000000 0 \
  "$(job $'plugin = range\nstop = 2000000' 'plugin = echo')" dashboard
run_case "64 KiB payloads, echo" 100000 65536 \
  "$(job $'plugin = blob\ncount = 100000\nsize = 64K' 'plugin = echo' $'max_task_bytes = 64K\nmax_result_bytes = 64K')"
run_case "1 MiB payloads, echo" 10000 1048576 \
  "$(job $'plugin = blob\ncount = 10000\nsize = 1M' 'plugin = echo')"
run_case "long tasks: sha256 x 200000 rounds (~50 ms each)" 40 0 \
  "$(job $'plugin = range\nstop = 40' $'plugin = sha256\nrounds = 200000')"
