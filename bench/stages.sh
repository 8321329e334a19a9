#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A CPU stage in front of the GPU workers, measured side by side in one run:
#   bench/stages.sh [BUILD_DIR] [REPEATS] [TASKS]
# Inputs need CPU work (cpu_us of hashing) before a GPU step (sleep_us asleep: a kernel
# leaves the CPU free). One GPU worker.
#   inline: the CPU work inside the GPU worker (what a plain worker plugin does)
#   stage:  the CPU work in a [stage.prep] of STAGE_WORKERS processes, the GPU worker
#           only sleeps
# The GPU's busy fraction is the worker's own: time asleep over the span from its first
# task's start to its last task's end (bench/work.c's busy_file). Every run must end with
# every task ok and every result carrying its hash (checked), or the script stops.
# Then the stage's cost per task on no-op tasks: echo behind an echo stage against echo
# alone (NOOP_TASKS tasks, 2 GPU workers, 1 stage worker).
set -euo pipefail
B=${1:-build-release}
R=${2:-3}
N=${3:-2000}
CPU_US=${CPU_US:-1000}
SLEEP_US=${SLEEP_US:-2000}
STAGE_WORKERS=${STAGE_WORKERS:-1}
NOOP_TASKS=${NOOP_TASKS:-200000}
gpud="$B/daemon/gpud"
[ -x "$gpud" ] || { echo "no $gpud: build first (./build.sh bench)" >&2; exit 2; }
export GPUD_PLUGIN_PATH="$B/bench"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

field() { { grep -o "\"$1\": [0-9.e+-]*" "$2" || true; } | head -n 1 | awk '{print $2}'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

job() { # job STAGE-TEXT WORKER-LINES GPUS COUNT [SINK-LINES]
  printf '[job]\ngpus = %s\nqueue_size = 256\n%s\n[worker]\n%s\n[generator]\nplugin = range\nstart = 0\nstop = %s\n[sink]\n%s\n' \
    "$3" "$1" "$2" "$4" "${5:-plugin = null}"
}
stage_text="[stage.prep]
plugin = work
cpu_us = $CPU_US
workers = $STAGE_WORKERS"
job "" "plugin = work
cpu_us = $CPU_US
sleep_us = $SLEEP_US
busy_file = $tmp/busy" 0 "$N" "plugin = jsonl
path = $tmp/out.jsonl" >"$tmp/inline.ini"
job "$stage_text" "plugin = work
sleep_us = $SLEEP_US
busy_file = $tmp/busy" 0 "$N" "plugin = jsonl
path = $tmp/out.jsonl" >"$tmp/stage.ini"

run() { # run NAME: prints "busy_percent tasks_per_s"
  rm -f "$tmp/busy" "$tmp/out.jsonl" "$tmp/s.json"
  "$gpud" run "$tmp/$1.ini" --ui off --stats-json "$tmp/s.json" 2>"$tmp/err" || true
  if [ "$(field ok "$tmp/s.json" 2>/dev/null)" != "$N" ]; then
    echo "stages.sh: $1 did not run all $N tasks ok:" >&2
    tail -n 5 "$tmp/err" >&2
    exit 1
  fi
  # every result is its input (the task's number) followed by 16 hex digits of hash
  local good
  good=$(grep -c '"result": "[0-9]*[0-9a-f]\{16\}"' "$tmp/out.jsonl" || true)
  if [ "$good" != "$N" ]; then
    echo "stages.sh: $1: $good of $N results carry the CPU step's hash" >&2
    exit 1
  fi
  local gb sb
  gb=$(field gpu_busy "$tmp/s.json")
  sb=$(field busy "$tmp/s.json")
  awk -v n="$N" -v e="$(field elapsed "$tmp/s.json")" -v gb="${gb:-0}" -v sb="${sb:--1}" \
    '{slept += $2; span += $3} END {printf "%.1f %.0f %.1f %.1f\n", 100 * slept / span, n / e, 100 * gb, 100 * sb}' "$tmp/busy"
}

: >"$tmp/inline.r"
: >"$tmp/stage.r"
for ((i = 0; i < R; i++)); do
  run inline >>"$tmp/inline.r"
  run stage >>"$tmp/stage.r"
done
echo "# $N tasks, cpu_us = $CPU_US, sleep_us = $SLEEP_US, 1 GPU worker, $STAGE_WORKERS stage worker(s), medians of $R alternated runs"
echo "| case | GPU busy % (the worker's own clock) | tasks/s | gpud's gpu_busy % | gpud's stage busy % |"
echo "| --- | --- | --- | --- | --- |"
for c in inline stage; do
  printf '| %s | %s | %s | %s | %s |\n' "$c" "$(awk '{print $1}' "$tmp/$c.r" | median)" \
    "$(awk '{print $2}' "$tmp/$c.r" | median)" "$(awk '{print $3}' "$tmp/$c.r" | median)" \
    "$([ "$c" = stage ] && awk '{print $4}' "$tmp/$c.r" | median || echo -)"
done
echo "(gpud's gpu_busy is time in process() over the time the workers were up: with the CPU work inline it counts"
echo "that work as busy too; the worker's own clock counts only the simulated GPU step)"

# The stage's own cost: no-op tasks through an echo stage.
job "" "plugin = echo" "0,1" "$NOOP_TASKS" >"$tmp/noop.ini"
job "[stage.pass]
plugin = echo
workers = 1" "plugin = echo" "0,1" "$NOOP_TASKS" >"$tmp/noop-stage.ini"
rate() {
  rm -f "$tmp/s.json"
  "$gpud" run "$tmp/$1.ini" --ui off --stats-json "$tmp/s.json" 2>"$tmp/err" || true
  [ "$(field ok "$tmp/s.json" 2>/dev/null)" = "$NOOP_TASKS" ] ||
    { echo "stages.sh: $1 did not run every task ok" >&2; tail -n 5 "$tmp/err" >&2; exit 1; }
  awk -v n="$NOOP_TASKS" -v e="$(field elapsed "$tmp/s.json")" 'BEGIN {printf "%.0f\n", n / e}'
}
: >"$tmp/noop.r"
: >"$tmp/noop-stage.r"
for ((i = 0; i < R; i++)); do
  rate noop >>"$tmp/noop.r"
  rate noop-stage >>"$tmp/noop-stage.r"
done
a=$(median <"$tmp/noop.r")
b=$(median <"$tmp/noop-stage.r")
echo
echo "| no-op, $NOOP_TASKS tasks | tasks/s |"
echo "| --- | --- |"
echo "| echo | $a |"
echo "| echo stage, then echo | $b |"
awk -v a="$a" -v b="$b" 'BEGIN {printf "\nthe stage costs %.0f ns per task (1/%s - 1/%s)\n", 1e9 / b - 1e9 / a, b, a}'
