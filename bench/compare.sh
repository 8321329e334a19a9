#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Two builds side by side, runs alternated so both see the same machine state:
#   bench/compare.sh OLD_BUILD NEW_BUILD [REPEATS]
# Cases: no-op empty tasks (2M, echo, null sink, 2 workers) and 1 MiB payloads (10k).
# Prints each build's median tasks/s and the ratio new/old, and the vCPUs' placement
# before and after each case (bench/pingpong.c: the round trip of one cache line between
# the two CPUs; this VM's "near" placement is ~150 ns, its "far" one ~450 ns).
set -euo pipefail
old=$1 new=$2 R=${3:-7}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
job() { # job COUNT SIZE
  printf '[job]\ngpus = 0,1\nqueue_size = 1024\n[worker]\nplugin = echo\n[generator]\nplugin = blob\ncount = %s\nsize = %s\n[sink]\nplugin = null\n' "$1" "$2"
}
field() { grep -o "\"$1\": [0-9.e+-]*" "$2" | head -n 1 | awk '{print $2}'; }
pingpong=$(ls "$new/bench/pingpong" "$old/bench/pingpong" 2>/dev/null | head -n 1 || true)
placement() { [ "$pingpong" ] && "$pingpong" || echo "?"; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
cases=("noop 2000000 0" "1MiB 10000 1M")
[ "${ONLY_NOOP:-}" ] && cases=("noop 2000000 0")
for c in "${cases[@]}"; do
  set -- $c
  job "$2" "$3" >"$tmp/job.ini"
  : >"$tmp/old"; : >"$tmp/new"
  before=$(placement)
  for ((i = 0; i < R; i++)); do
    for b in old new; do
      d=${!b}
      GPUD_PLUGIN_PATH="$d/bench" "$d/daemon/gpud" run "$tmp/job.ini" --ui off \
        --stats-json "$tmp/s.json" 2>/dev/null
      awk -v n="$2" -v e="$(field elapsed "$tmp/s.json")" 'BEGIN {printf "%.0f\n", n / e}' >>"$tmp/$b"
    done
  done
  mo=$(median <"$tmp/old"); mn=$(median <"$tmp/new")
  printf '%-5s old %12s tasks/s  new %12s tasks/s  new/old %.3f  (round trip %s/%s ns)\n' \
    "$1" "$mo" "$mn" "$(awk -v a="$mn" -v b="$mo" 'BEGIN {print a / b}')" "$before" "$(placement)"
done
