#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Python plugins' benchmark, every figure from one run of this script:
#   bench/python/run.sh [BUILD_DIR] [REPEATS]      (a release tree: ./build.sh bench)
# 1. a no-op Python worker class (noop.py) under gpud, 1M tasks on 2 workers, and the
#    same class under the library gpud grew from (library.py), side by side: tasks/s
#    and the ratio; the library also with its per-task TaskStarted messages on;
# 2. the adapter's cost a task: gpud with 1 worker, less the Python call alone (timeit);
# 3. 1 MiB inputs read as memoryview (GB/s); the Python generator and the Python sink
#    on their own and together (items/s, with the C echo worker; together also in
#    seconds for 1M against the built-in range and null).
set -euo pipefail
B=$(cd "${1:-build-release}" && pwd)
R=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
gpud="$B/daemon/gpud"
py=/usr/bin/python3   # the Python the plugins run on ([job] python in every job): Debian's
[ -f "$B/plugins/worker-python.so" ] || { echo "no python plugins in $B (libpython3.11-dev)" >&2; exit 2; }
export GPUD_PLUGIN_PATH="$B/bench"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$here"/noop.py "$here"/mib.py "$tmp/"

field() { grep -o "\"$1\": [0-9.e+-]*" "$2" | head -n 1 | awk '{print $2}'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# gpud_rate TASKS JOB-TEXT: median tasks/s of R runs
gpud_rate() {
  local n=$1 i
  printf '%s\n' "$2" >"$tmp/job.ini"
  : >"$tmp/r"
  for ((i = 0; i < R; i++)); do
    "$gpud" run "$tmp/job.ini" --ui off --stats-json "$tmp/s.json" 2>"$tmp/err" ||
      { cat "$tmp/err" >&2; exit 1; }
    awk -v n="$n" -v e="$(field elapsed "$tmp/s.json")" 'BEGIN {printf "%.0f\n", n / e}' >>"$tmp/r"
  done
  median <"$tmp/r"
}

small=$'max_task_bytes = 64\nmax_result_bytes = 64'
job() { # job GPUS WORKER GENERATOR SINK [JOB-EXTRA]
  printf '[job]\ngpus = %s\npython = %s\nqueue_size = 1024\n%s\n[worker]\n%s\n[generator]\n%s\n[sink]\n%s\n' \
    "$1" "$py" "${5:-$small}" "$2" "$3" "$4"
}
noop_worker=$'plugin = python\nscript = '"$tmp"$'/noop.py\nclass = Noop'

N=1000000
gp=$(gpud_rate $N "$(job 0,1 "$noop_worker" $'plugin = range\nstop = '$N 'plugin = null')")
LN=200000
: >"$tmp/l"; : >"$tmp/ls"
for ((i = 0; i < R; i++)); do
  "$py" "$here/library.py" "$tmp/noop.py" Noop $LN 0,1 >>"$tmp/l"
  "$py" "$here/library.py" "$tmp/noop.py" Noop $LN 0,1 starts >>"$tmp/ls"
done
lib=$(median <"$tmp/l"); libs=$(median <"$tmp/ls")
printf 'no-op class, 2 workers   gpud %10s tasks/s   library %8s tasks/s (%s with TaskStarted)   gpud/library %.1fx (%.1fx)\n' \
  "$gp" "$lib" "$libs" "$(awk -v a="$gp" -v b="$lib" 'BEGIN {print a / b}')" \
  "$(awk -v a="$gp" -v b="$libs" 'BEGIN {print a / b}')"

one=$(gpud_rate $N "$(job 0 "$noop_worker" $'plugin = range\nstop = '$N 'plugin = null')")
call=$("$py" -c "
import sys, timeit; sys.path.insert(0, '$tmp'); import noop
w = noop.Noop(); mv = memoryview(b'123456')
n = 2000000; print(min(timeit.repeat(lambda: w.process(mv), number=n, repeat=3)) / n * 1e9)")
printf 'adapter cost a task       gpud 1 worker %.0f ns/task, the Python call alone %.0f ns: adapter %.0f ns\n' \
  "$(awk -v r="$one" 'BEGIN {print 1e9 / r}')" "$call" \
  "$(awk -v r="$one" -v c="$call" 'BEGIN {print 1e9 / r - c}')"

mib=$(gpud_rate 5000 "$(job 0,1 $'plugin = python\nscript = '"$tmp"$'/mib.py\nclass = Ends' \
  $'plugin = blob\ncount = 5000\nsize = 1M' 'plugin = null' $'max_task_bytes = 1M\nmax_result_bytes = 64')")
printf '1 MiB inputs, memoryview  %s tasks/s = %.2f GB/s\n' "$mib" "$(awk -v r="$mib" 'BEGIN {print r * 1048576 / 1e9}')"

gen=$(gpud_rate $N "$(job 0,1 'plugin = echo' $'plugin = python\nscript = '"$tmp"$'/mib.py\nfunction = items\ncount = '$N 'plugin = null')")
printf 'Python generator alone    %s items/s (echo worker, null sink)\n' "$gen"
sink=$(gpud_rate $N "$(job 0,1 'plugin = echo' $'plugin = range\nstop = '$N $'plugin = python\nscript = '"$tmp"$'/mib.py')")
printf 'Python sink alone         %s events/s (range, echo worker, on_success)\n' "$sink"
both=$(gpud_rate $N "$(job 0,1 'plugin = echo' $'plugin = python\nscript = '"$tmp"$'/mib.py\nfunction = items\ncount = '$N $'plugin = python\nscript = '"$tmp"$'/mib.py')")
builtin=$(gpud_rate $N "$(job 0,1 'plugin = echo' $'plugin = range\nstop = '$N 'plugin = null')")
printf 'Python generator and sink %s items/s = %.2f s for 1M (range and null: %s = %.2f s): %.2f us a task\n' \
  "$both" "$(awk -v r="$both" 'BEGIN {print 1e6 / r}')" "$builtin" "$(awk -v r="$builtin" 'BEGIN {print 1e6 / r}')" \
  "$(awk -v a="$both" -v b="$builtin" 'BEGIN {print 1e6 / a - 1e6 / b}')"
