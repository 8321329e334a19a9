#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the build into a scratch prefix (meson install --destdir), builds the
# example plugins of docs/plugins.md out of tree against the installed header with
# pkg-config, and runs a job with them from the installed gpud; then docs/examples/embed,
# a program linking libgpud through pkg-config, from the moved prefix.
#   tests/install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/root" >/dev/null
pc=$(find "$tmp/root" -name gpud.pc | head -n 1)
[ -n "$pc" ] || { echo "gpud.pc was not installed"; exit 1; }
[ -f "$(dirname "$pc")/libgpud.pc" ] || { echo "libgpud.pc was not installed"; exit 1; }
# The .pc files are relocatable (prefix=${pcfiledir}/...): no sysroot nor
# --define-variable needed, in the staging folder or after the move below.
grep -q '^prefix=${pcfiledir}/' "$pc" || { echo "gpud.pc is not relocatable: $(grep ^prefix= "$pc")"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
gpud=$(find "$tmp/root" -path '*/bin/gpud' | head -n 1)
cp "$src"/docs/examples/{upper.c,words.c,csv.c,job.ini,poem.txt} "$tmp/"
cd "$tmp"
for p in upper words csv; do
  cc -std=c11 -Wall -Wextra -Werror -shared -fPIC $(pkg-config --cflags gpud) "$p.c" -o "lib$p.so"
done
# Moved prefix: gpud finds its worker executable and plugins relative to itself.
mv "$tmp/root" "$tmp/moved"
gpud=${gpud/$tmp\/root/$tmp\/moved}
export PKG_CONFIG_PATH=${PKG_CONFIG_PATH/$tmp\/root/$tmp\/moved}
# Plain pkg-config now points into the moved prefix, not where it was installed.
for p in gpud libgpud; do
  case "$(pkg-config --cflags $p)" in
    *"$tmp/moved/"*) ;;
    *) echo "pkg-config --cflags $p: $(pkg-config --cflags $p) is not in $tmp/moved"; exit 1 ;;
  esac
done
"$gpud" check job.ini
"$gpud" run job.ini --ui off 2>run.err
cat results.csv
grep -q '^0,ok,">THE"$' results.csv
grep -q '^6,ok,">""THE"""$' results.csv
[ "$(grep -c ',ok,' results.csv)" -eq 9 ]
grep -q '^# 9 tasks: 9 ok' results.csv
"$gpud" plugins | grep -q 'generator  lines'
# A program in another folder that links libgpud through pkg-config (libgpud.pc) finds
# the worker executable from the library: docs/examples/embed.
pkg-config --libs libgpud | grep -q -- '-lgpud'
libdir=$(pkg-config --variable=libdir libgpud)
[ -f "$libdir/libgpud.so" ] || { echo "pkg-config --variable=libdir libgpud: $libdir has no libgpud.so"; exit 1; }
mkdir embed
# A sanitized build's libgpud needs its program built with the same runtime first.
san=""
readelf -d "$libdir/libgpud.so" | grep -q libasan && san="-fsanitize=address,undefined"
cp "$src"/docs/examples/embed/embed.c embed/
cc -std=c11 -Wall -Wextra -Werror $san embed/embed.c $(pkg-config --cflags --libs libgpud) \
  -Wl,-rpath,"$libdir" -o embed/embed
(cd embed && ./embed "$tmp/libupper.so") | tee embed.out
grep -q '^embed: 6 of 6 results checked ok, 0 wrong; 6 ok in the stats$' embed.out
# The public header compiles as C++ too.
if command -v g++ >/dev/null; then
  echo '#include <gpud/gpud.h>
int main() { gpud_job *j = gpud_job_new(); gpud_job_free(j); return 0; }' > cxx.cc
  g++ -Wall -Wextra -pedantic -Werror $san $(pkg-config --cflags libgpud) cxx.cc \
    $(pkg-config --libs libgpud) -Wl,-rpath,"$libdir" -o cxx && ./cxx
fi
echo "install test: ok"
