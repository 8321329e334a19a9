#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Two builds side by side, runs alternated so both see the same machine state:
#   bench/compare.sh OLD_BUILD NEW_BUILD [PAIRS]
# Cases: no-op empty tasks (2M, echo, null sink, 2 workers) and 1 MiB payloads (10k).
#
# The 2-vCPU development VM moves between a "near" placement of its two vCPUs (a cache
# line's round trip between them ~150 ns) and a "far" one (~450 ns) every few minutes,
# and small-task rates change by up to 2x with it. So each pair of runs (old, then new)
# is bracketed by bench/pingpong.c, and kept only when the placement was the same before
# and after it; the medians and the ratio new/old are given per placement, from the
# pairs taken in it. PAIRS (default 7) pairs are run per case.
set -euo pipefail
old=$1 new=$2 R=${3:-7}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
job() { # job COUNT SIZE
  printf '[job]\ngpus = 0,1\nqueue_size = 1024\n[worker]\nplugin = echo\n[generator]\nplugin = blob\ncount = %s\nsize = %s\n[sink]\nplugin = null\n' "$1" "$2"
}
field() { grep -o "\"$1\": [0-9.e+-]*" "$2" | head -n 1 | awk '{print $2}'; }
pingpong=$(ls "$new/bench/pingpong" "$old/bench/pingpong" 2>/dev/null | head -n 1 || true)
placement() { # near, far, or ? (no probe)
  [ "$pingpong" ] || { echo "?"; return; }
  "$pingpong" | awk '{print ($1 < 250 ? "near" : "far")}'
}
rate() { # rate BUILD JOB COUNT; a run that did not end with every task ok stops the script
  rm -f "$tmp/s.json"
  GPUD_PLUGIN_PATH="$1/bench" "$1/daemon/gpud" run "$2" --ui off --stats-json "$tmp/s.json" \
    2>"$tmp/err" || true
  if [ "$(field ok "$tmp/s.json" 2>/dev/null)" != "$3" ]; then
    echo "compare.sh: $1 did not run all $3 tasks ok:" >&2
    tail -n 3 "$tmp/err" >&2
    exit 1
  fi
  awk -v n="$3" -v e="$(field elapsed "$tmp/s.json")" 'BEGIN {printf "%.0f\n", n / e}'
}
cases=("noop 2000000 0" "1MiB 10000 1M")
[ "${ONLY_NOOP:-}" ] && cases=("noop 2000000 0")
[ "${ONLY_1MIB:-}" ] && cases=("1MiB 10000 1M")
for c in "${cases[@]}"; do
  set -- $c
  job "$2" "$3" >"$tmp/job.ini"
  : >"$tmp/pairs"
  for ((i = 0; i < R; i++)); do
    before=$(placement)
    o=$(rate "$old" "$tmp/job.ini" "$2")
    n=$(rate "$new" "$tmp/job.ini" "$2")
    after=$(placement)
    if [ "$before" = "$after" ]; then
      echo "$before $o $n" >>"$tmp/pairs"
    else
      echo "$before>$after $o $n" >>"$tmp/pairs"
    fi
  done
  awk -v name="$1" '
    function median(v, n,   i, j, t) {
      for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) {
        t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
      return v[int((n + 1) / 2)]
    }
    $1 !~ />/ { k = $1; n[k]++; o[k, n[k]] = $2; w[k, n[k]] = $3 }
    $1 ~ />/ { moved++ }
    END {
      for (k in n) {
        delete a; delete b
        for (i = 1; i <= n[k]; i++) { a[i] = o[k, i]; b[i] = w[k, i] }
        mo = median(a, n[k]); mn = median(b, n[k])
        printf "%-5s %-4s old %10.0f tasks/s  new %10.0f tasks/s  new/old %.3f  (%d pairs)\n",
          name, k, mo, mn, mn / mo, n[k]
      }
      if (moved) printf "%-5s %d pairs dropped: the placement changed during them\n", name, moved
    }' "$tmp/pairs"
done
