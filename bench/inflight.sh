#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Many tasks in flight, measured side by side in one run:
#   bench/inflight.sh [BUILD_DIR] [REPEATS] [TASKS]
# One worker, the simulated engine of bench/engine.c: every task it holds runs at once;
# a task takes SHORT_US, or LONG_US for every EVERY-th task (uneven lengths).
#   out of order: max_in_flight = IN_FLIGHT, finished tasks handed back as they finish
#   in order:     the same engine handing tasks back only in the order it got them
#   one at a time: max_in_flight = 1
# Ordered output (ordered = true): every run must end with every task ok and the sink's
# lines in task order, each result its task's input (checked), or the script stops.
set -euo pipefail
B=${1:-build-release}
R=${2:-3}
N=${3:-4000}
IN_FLIGHT=${IN_FLIGHT:-32}
SHORT_US=${SHORT_US:-1000}
LONG_US=${LONG_US:-20000}
EVERY=${EVERY:-8}
gpud="$B/daemon/gpud"
[ -x "$gpud" ] || { echo "no $gpud: build first (./build.sh bench)" >&2; exit 2; }
export GPUD_PLUGIN_PATH="$B/bench"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

field() { grep -o "\"$1\": [0-9.e+-]*" "$2" | head -n 1 | awk '{print $2}'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

job() { # job NAME IN_FLIGHT IN_ORDER
  printf '[job]\ngpus = 0\nqueue_size = 256\nordered = true\nmax_in_flight = %s\n[worker]\nplugin = engine\nshort_us = %s\nlong_us = %s\nevery = %s\nin_order = %s\n[generator]\nplugin = range\nstart = 0\nstop = %s\n[sink]\nplugin = jsonl\npath = %s\n' \
    "$2" "$SHORT_US" "$LONG_US" "$EVERY" "$3" "$N" "$tmp/out.jsonl" >"$tmp/$1.ini"
}
job out-of-order "$IN_FLIGHT" false
job in-order "$IN_FLIGHT" true
job one 1 false

rate() {
  rm -f "$tmp/s.json" "$tmp/out.jsonl"
  "$gpud" run "$tmp/$1.ini" --ui off --stats-json "$tmp/s.json" 2>"$tmp/err" || true
  [ "$(field ok "$tmp/s.json" 2>/dev/null)" = "$N" ] ||
    { echo "inflight.sh: $1 did not run every task ok" >&2; tail -n 5 "$tmp/err" >&2; exit 1; }
  # line i is task i, ok, its result the task's number
  awk -v n="$N" '{ if (index($0, "\"task_id\": " NR - 1 ",") == 0 || index($0, "\"result\": \"" NR - 1 "\"") == 0) bad++ }
    END { if (bad || NR != n) { print "inflight.sh: " bad + 0 " lines out of order or wrong of " NR > "/dev/stderr"; exit 1 } }' "$tmp/out.jsonl"
  awk -v n="$N" -v e="$(field elapsed "$tmp/s.json")" 'BEGIN {printf "%.0f\n", n / e}'
}
cases=(out-of-order in-order one)
for c in "${cases[@]}"; do : >"$tmp/$c.r"; done
for ((i = 0; i < R; i++)); do
  for c in "${cases[@]}"; do rate "$c" >>"$tmp/$c.r"; done
done
echo "# $N tasks of ${SHORT_US} us, every ${EVERY}th ${LONG_US} us; 1 worker; ordered output; medians of $R alternated runs"
echo "| case | max_in_flight | tasks/s |"
echo "| --- | --- | --- |"
printf '| finishes out of order | %s | %s |\n' "$IN_FLIGHT" "$(median <"$tmp/out-of-order.r")"
printf '| finishes in order | %s | %s |\n' "$IN_FLIGHT" "$(median <"$tmp/in-order.r")"
printf '| one at a time | 1 | %s |\n' "$(median <"$tmp/one.r")"
