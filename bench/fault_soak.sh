#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fault-injection soak (run before each release; not part of CI): runs jobs for about
# SECONDS (default 180), each with a random mix of what has produced wrong `ok` results
# before: a slow generator (every call blocking 1-5 ms, so the loop's stand-in takes the
# loop over) or a fast one, tasks that fail or crash their worker on the first attempt
# and run again, exit() and abort() in the plugin, workers killed with kill -9 from
# outside, inputs of many sizes, 1-3 GPUs with 1-2 workers each, queues of 8 to 1,024 tasks, ordered
# output or not, a CPU stage in front (with faults of its own) or not. Every task's outcome is
# checked: each id exactly once, every `ok` result byte for byte its own task's (the
# worker echoes its input), every task ok (each fault strikes a first attempt only, and
# retries are allowed), the stats equal to the sink's lines, exit status 0.
#   bench/fault_soak.sh [BUILD_DIR] [SECONDS] [SEED]   (BUILD_DIR needs -Dtests=enabled)
# It prints each run's parameters (and the seed that reproduces the whole sequence) and
# ends with the count of wrong `ok` results, which must be zero; exit 1 otherwise.
set -euo pipefail
B=${1:-build}
SECONDS_WANTED=${2:-180}
SEED=${3:-$(date +%s)}
gpud="$B/daemon/gpud"
export GPUD_PLUGIN_PATH="$B/tests/plugins"
[ -f "$GPUD_PLUGIN_PATH/worker-faulty.so" ] || { echo "no test fixtures in $B" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 is needed to check the results" >&2; exit 2; }
tmp=$(mktemp -d)
[ -n "${KEEP:-}" ] && echo "keeping $tmp" || trap 'rm -rf "$tmp"' EXIT
RANDOM=$SEED
echo "fault soak: ${SECONDS_WANTED} s, seed $SEED (bench/fault_soak.sh $B $SECONDS_WANTED $SEED repeats it)"

pick() { local a=("$@"); echo "${a[RANDOM % ${#a[@]}]}"; }

runs=0 wrong_ok=0 missing=0 dup=0 not_ok=0 bad_runs=0 tasks=0
end=$((SECONDS + SECONDS_WANTED))
while [ $SECONDS -lt $end ]; do
  runs=$((runs + 1))
  d="$tmp/run$runs"
  mkdir -p "$d"
  gpus=$(pick 0 0,1 0,1 0,1,2)
  wpg=$(pick 1 1 2)
  retries=$(pick 1 2 3)
  pad=$(pick 0 7 37 200)
  if [ $((RANDOM % 2)) -eq 0 ]; then # slow generator
    n=$(pick 150 250 400)
    gen="block_every = $(pick 1 1 2 3)
block_ms = $(pick 1 2 3 5)"
    sleep_us=$(pick 0 100 500 1000 3000)
  else
    n=$(pick 5000 20000 50000)
    gen=""
    sleep_us=$(pick 0 0 20)
  fi
  faults="fail_every = $(pick 2 3 7)
crash_every = $(pick 0 11 29 97)
exit_every = $(pick 0 13 101)
abort_every = $(pick 0 17 103)"
  ordered=$(pick false false true)
  queue=$(pick 1024 1024 64 8)
  kills=$(pick 0 0 1 3) # kill -9 of a random worker from outside, this many times
  # a CPU stage in front, one run in three: the same echoing plugin, its own faults
  stage=""
  if [ $((RANDOM % 3)) -eq 0 ]; then
    stage="[stage.pre]
plugin = faulty
workers = $(pick 1 2)
first_attempt_only = 1
fail_every = $(pick 3 5)
crash_every = $(pick 0 13 31)
exit_every = $(pick 0 19)"
  fi
  cat >"$d/job.ini" <<JOB
[job]
gpus = $gpus
workers_per_gpu = $wpg
max_retries = $retries
max_worker_restarts = 100000
journal = off
ordered = $ordered
queue_size = $queue
$stage
[worker]
plugin = faulty
first_attempt_only = 1
sleep_us = $sleep_us
$faults
[generator]
plugin = failgen
stop = $n
pad = $pad
$gen
[sink]
plugin = jsonl
path = $d/out.jsonl
JOB
  set +e
  "$gpud" run "$d/job.ini" --ui off --stats-json "$d/stats.json" 2>"$d/err" &
  pid=$!
  for ((k = 0; k < kills; k++)); do
    sleep "0.$((RANDOM % 5 + 1))"
    victim=$(pgrep -P "$pid" -f gpud-worker | shuf -n 1 2>/dev/null)
    [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null
  done
  wait "$pid"
  rc=$?
  set -e
  summary=$(python3 - "$d/out.jsonl" "$d/stats.json" "$n" "$pad" "$kills" "$rc" <<'PY'
import json, sys
out, stats_path, n, pad, kills, rc = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
seen = {}
wrong = dup = not_ok = 0
ok_lines = 0
try:
    lines = open(out, encoding="utf-8").read().splitlines()
except OSError:
    lines = []
for l in lines:
    r = json.loads(l)
    i = r["task_id"]
    if i in seen:
        dup += 1
    seen[i] = 1
    if r["status"] != "ok":
        not_ok += 1
        continue
    ok_lines += 1
    want = str(i) + "x" * (i % pad if pad else 0)
    if r.get("result") != want:
        wrong += 1
        if wrong <= 5:
            print("  WRONG ok: task %d got %r, its input was %r" % (i, r.get("result"), want), file=sys.stderr)
missing = sum(1 for i in range(n) if i not in seen)
try:
    st = json.load(open(stats_path))
    stats_ok = st["ok"] == ok_lines
except (OSError, ValueError, KeyError):
    stats_ok = False
# With no kill from outside every fault strikes a first attempt only: all must end ok.
bad = wrong or dup or missing or not stats_ok or (kills == 0 and (not_ok or rc != 0))
print(wrong, missing, dup, not_ok, 1 if bad else 0, "stats-mismatch" if not stats_ok else "")
PY
)
  read -r w m du no bad note <<<"$summary"
  wrong_ok=$((wrong_ok + w)) missing=$((missing + m)) dup=$((dup + du)) not_ok=$((not_ok + no))
  tasks=$((tasks + n))
  flag=""
  if [ "$bad" = 1 ]; then
    bad_runs=$((bad_runs + 1))
    flag="  <-- BAD ($d kept)"
    trap - EXIT
  fi
  printf 'run %3d: gpus=%-5s x%d n=%-5d q=%-4d ordered=%-5s retries=%d pad=%-3d sleep_us=%-4d %s kills=%d | exit %d, wrong ok %d, missing %d, dup %d, not ok %d %s%s\n' \
    "$runs" "$gpus" "$wpg" "$n" "$queue" "$ordered" "$retries" "$pad" "$sleep_us" \
    "$([ -n "$gen" ] && echo slow-gen || echo fast-gen)$([ -n "$stage" ] && echo +stage)" "$kills" "$rc" "$w" "$m" "$du" "$no" "$note" "$flag"
done
echo "fault soak: $runs runs, $tasks tasks: wrong ok results $wrong_ok, missing $missing, duplicated $dup, not ok $not_ok; runs with a problem $bad_runs"
[ "$wrong_ok" -eq 0 ] && [ "$bad_runs" -eq 0 ]
