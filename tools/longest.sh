#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The longest functions of the C files under the folders given (default daemon/):
#   tools/longest.sh [-n COUNT] [FOLDER...]
# One line each, longest first: lines from the line of its name to its closing brace,
# then file:line and the name. Needs Universal Ctags (its `end:` field).
set -euo pipefail
n=10
if [ "${1:-}" = "-n" ]; then n=$2; shift 2; fi
[ $# -gt 0 ] || set -- daemon
ctags --version 2>/dev/null | grep -q Universal || {
  echo "tools/longest.sh: needs Universal Ctags (apt-get install universal-ctags)" >&2
  exit 2
}
find "$@" -name '*.c' -print0 | xargs -0 ctags --c-kinds=f --fields=+ne -o - |
  awk -F'\t' '{
      line = ""; end = ""
      for (i = 4; i <= NF; i++) {
        if ($i ~ /^line:/) line = substr($i, 6)
        if ($i ~ /^end:/) end = substr($i, 5)
      }
      if (line != "" && end != "") printf "%5d  %s:%s  %s\n", end - line + 1, $2, line, $1
    }' | sort -rn | sed -n "1,${n}p"
