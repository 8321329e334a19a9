#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs each libFuzzer target for a bounded time (default 60 s each):
#   fuzz/run.sh [SECONDS]
# Builds with clang -fsanitize=fuzzer,address,undefined into build-fuzz/. New crashing
# inputs land in build-fuzz/crash-*; fix the bug, then copy the input into
# fuzz/regressions/<target>/ so the test suite replays it forever.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
need=(clang libclang-rt-14-dev libinih-dev)
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

out=build-fuzz
mkdir -p "$out"
flags=(-g -O1 -std=gnu11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
       -DGPUD_LIBFUZZER -Iplugin_api -Idaemon/shared -Idaemon/host -Ifuzz)
clang "${flags[@]}" fuzz/fuzz_config.c daemon/host/job/config.c -linih -o "$out/fuzz_config"
clang "${flags[@]}" fuzz/fuzz_ring.c daemon/shared/ring.c -o "$out/fuzz_ring"

status=0
for t in config ring; do
  corpus="$out/corpus-$t"
  mkdir -p "$corpus"
  seeds=()
  [ -d "fuzz/seeds/$t" ] && seeds+=("fuzz/seeds/$t")
  seeds+=("fuzz/regressions/$t")
  echo "== fuzz_$t for ${secs}s"
  if ! "$out/fuzz_$t" -max_total_time="$secs" -max_len=65536 -timeout=10 \
       -artifact_prefix="$out/crash-$t-" "$corpus" "${seeds[@]}" 2>"$out/fuzz_$t.log"; then
    status=1
    echo "fuzz_$t found a problem: see $out/fuzz_$t.log and $out/crash-$t-*"
  fi
  grep -E '^(#[0-9]+ *DONE|Done)' "$out/fuzz_$t.log" | tail -n 1 || tail -n 2 "$out/fuzz_$t.log"
done
exit $status
