#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Soak run (not part of CI): N tasks (default 1,000,000) through the faulty test worker
# on 2 GPUs x 2 workers, with faults on fixed periods: failures, segfaults, aborts,
# exit() and hangs past a 0.2 s timeout. Then every task's outcome is checked against
# what its input must have caused, and the stats against the sink's lines.
#   bench/soak.sh [BUILD_DIR] [TASKS]      (BUILD_DIR needs the test fixtures: -Dtests=enabled)
set -euo pipefail
B=${1:-build}
N=${2:-1000000}
gpud="$B/daemon/gpud"
export GPUD_PLUGIN_PATH="$B/tests/plugins"
[ -f "$GPUD_PLUGIN_PATH/worker-faulty.so" ] || { echo "no test fixtures in $B" >&2; exit 2; }
tmp=$(mktemp -d)
[ -n "${KEEP:-}" ] && echo "keeping $tmp" || trap 'rm -rf "$tmp"' EXIT
F=3001 C=4999 A=9973 E=6007 H=7919
cat >"$tmp/job.ini" <<JOB
[job]
gpus = 0,1
workers_per_gpu = 2
task_timeout = 0.2
max_worker_restarts = 100000
[worker]
plugin = faulty
fail_every = $F
crash_every = $C
abort_every = $A
exit_every = $E
hang_every = $H
[generator]
plugin = range
stop = $N
[sink]
plugin = jsonl
path = $tmp/out.jsonl
JOB
start=$(date +%s.%N)
set +e
"$gpud" run "$tmp/job.ini" --stats-json "$tmp/stats.json" 2>"$tmp/err"
rc=$?
set -e
end=$(date +%s.%N)
echo "gpud exit status: $rc (1 expected: some tasks fail), $(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", b - a}') s"
tail -n 1 "$tmp/err"
cat "$tmp/stats.json"

# Each line: the task's id and status must be exactly what its input causes.
awk -v n="$N" -v F=$F -v C=$C -v A=$A -v E=$E -v H=$H '
function want(x) {
  if (x % F == F - 1) return "error:refused"
  if (x % C == C - 1) return "error:SIGSEGV"
  if (x % A == A - 1) return "error:SIGABRT"
  if (x % E == E - 1) return "error:status 7"
  if (x % H == H - 1) return "timeout"
  return "ok"
}
{
  match($0, /"task_id": [0-9]+/); id = substr($0, RSTART + 11, RLENGTH - 11) + 0
  match($0, /"status": "[a-z]+"/); st = substr($0, RSTART + 11, RLENGTH - 12)
  if (seen[id]++) { print "task " id " reported twice"; bad++ }
  w = want(id); split(w, p, ":")
  if (st != p[1] || (p[2] != "" && index($0, p[2]) == 0)) {
    if (bad < 10) print "task " id ": got " st ", want " w; bad++
  }
  count[st]++
}
END {
  for (i = 0; i < n; i++) if (!(i in seen)) { if (miss < 10) print "task " i " missing"; miss++ }
  printf "lines: ok %d, error %d, timeout %d; wrong %d, missing %d\n", count["ok"], count["error"], count["timeout"], bad, miss
  exit (bad || miss) ? 1 : 0
}' "$tmp/out.jsonl"
ok=$(grep -o '"ok": [0-9]*' "$tmp/stats.json" | head -n 1 | awk '{print $2}')
lines_ok=$(grep -c '"status": "ok"' "$tmp/out.jsonl")
[ "$ok" = "$lines_ok" ] || { echo "stats say $ok ok, the sink has $lines_ok"; exit 1; }
echo "soak: every task exactly once, each with the outcome its input causes; stats match the sink"
