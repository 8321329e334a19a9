#!/bin/sh
# SPDX-License-Identifier: MIT
# The `tsan` test setup's wrapper (tests/meson.build): runs one test program of the
# normal tree with gpud and gpud-worker taken from the ThreadSanitizer tree TREE
# (Criterion's programs cannot run under TSan themselves: tests/meson.build says why),
# without address randomization (gcc 12's TSan aborts on kernels with more mmap
# randomness than it knows), its reports kept in TREE/tsan-reports/test-PID. A report
# fails the test, whatever the test's own status: it is printed, and the wrapper exits 1.
#   usage: tsan_wrap.sh TREE PROGRAM [ARGS...]
set -u
tree=$1
shift
if [ ! -x "$tree/daemon/gpud" ] || [ ! -x "$tree/daemon/gpud-worker" ]; then
  echo "tsan setup: no gpud and gpud-worker built in $tree: ./build.sh test makes that" \
    "tree (meson setup $tree -Db_sanitize=thread ..., as build.sh does)" >&2
  exit 1
fi
reports=$tree/tsan-reports/test-$$
mkdir -p "$reports" || exit 1
TSAN_OPTIONS="${TSAN_OPTIONS:-}:log_path=$reports/report" \
  GPUD="$tree/daemon/gpud" GPUD_WORKER_EXE="$tree/daemon/gpud-worker" HAVE_GPU_EXAMPLE=0 \
  setarch "$(uname -m)" -R "$@"
rc=$?
if [ -n "$(ls -A "$reports")" ]; then
  cat "$reports"/* >&2
  echo "tsan setup: ThreadSanitizer reported the above ($reports)" >&2
  rc=1
else
  rmdir "$reports"
fi
exit "$rc"
