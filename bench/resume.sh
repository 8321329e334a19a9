#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The journal's cost and resume's speed, from one run of this script:
#   bench/resume.sh [BUILD_DIR] [REPEATS]      (a release tree: ./build.sh bench)
# 1. no-op (2M empty tasks) and 1 MiB (10k) throughput with the journal on and off,
#    runs alternated, medians and the ratio;
# 2. the journal's size a finished task (20M no-op tasks);
# 3. resume after a SIGTERM half way through 20M tasks: ids skipped a second and the
#    time from start to the first new task, with range (it jumps the done prefix) and
#    with blob (done items generated and dropped).
set -euo pipefail
B=$(cd "${1:-build-release}" && pwd)
R=${2:-9}
gpud="$B/daemon/gpud"
export GPUD_PLUGIN_PATH="$B/bench"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { grep -o "\"$1\": [0-9.e+-]*" "$2" | head -n 1 | awk '{print $2}'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
job() { # job GENERATOR-TEXT SINK
  printf '[job]\ngpus = 0,1\nqueue_size = 1024\n[worker]\nplugin = echo\n[generator]\n%s\n[sink]\nplugin = null\n' "$1"
}

for c in "noop 2000000 0" "1MiB 10000 1M"; do
  set -- $c
  job $'plugin = blob\ncount = '"$2"$'\nsize = '"$3" >"$tmp/job.ini"
  : >"$tmp/on"; : >"$tmp/off"
  for ((i = 0; i < R; i++)); do
    for m in on off; do
      set_j=(); [ $m = off ] && set_j=(--set job.journal=off)
      "$gpud" run "$tmp/job.ini" --ui off --stats-json "$tmp/s.json" "${set_j[@]}" 2>/dev/null
      awk -v n="$2" -v e="$(field elapsed "$tmp/s.json")" 'BEGIN {printf "%.0f\n", n / e}' >>"$tmp/$m"
    done
  done
  on=$(median <"$tmp/on"); off=$(median <"$tmp/off")
  printf '%-5s journal on %12s tasks/s  off %12s tasks/s  on/off %.3f\n' "$1" "$on" "$off" \
    "$(awk -v a="$on" -v b="$off" 'BEGIN {print a / b}')"
done

N=20000000
job $'plugin = range\nstop = '$N >"$tmp/job.ini"
"$gpud" run "$tmp/job.ini" --ui off 2>/dev/null
printf 'journal size  %d bytes for %d tasks: %.3f bytes a task\n' "$(stat -c %s "$tmp/job.journal")" $N \
  "$(awk -v s="$(stat -c %s "$tmp/job.journal")" -v n=$N 'BEGIN {print s / n}')"

for g in range blob; do
  if [ $g = range ]; then gen=$'plugin = range\nstop = '$N; else gen=$'plugin = blob\ncount = '$N$'\nsize = 0'; fi
  job "$gen" >"$tmp/job.ini"
  "$gpud" run "$tmp/job.ini" --ui off 2>/dev/null & p=$!
  sleep 0.4; kill -TERM $p; wait $p || true
  "$gpud" run "$tmp/job.ini" --ui off --resume --stats-json "$tmp/s.json" 2>/dev/null
  r=$(field resumed "$tmp/s.json"); f=$(field first_new_task_seconds "$tmp/s.json")
  printf 'resume %-5s  %s ids already done; first new task after %s s: %.1f M ids/s skipped\n' \
    "$g" "$r" "$f" "$(awk -v r="$r" -v f="$f" 'BEGIN {print (f > 0 ? r / f / 1e6 : 0)}')"
done
