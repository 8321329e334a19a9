/* SPDX-License-Identifier: MIT */
/* Test helpers: temporary folders, files, running the real gpud. */
#ifndef GPUD_TEST_HELPERS_H
#define GPUD_TEST_HELPERS_H

#include <stddef.h>
#include <stdint.h>

/* A fresh temporary folder, removed when the test ends unless GPUD_TEST_KEEP is set. */
const char *t_tmpdir(void);
/* Writes `text` to dir/name; returns the path (malloc'd). */
char *t_write(const char *dir, const char *name, const char *text);
/* Formats a job file and writes it to dir/job.ini; returns its path (malloc'd). */
char *t_jobf(const char *dir, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The whole file, NUL-terminated (malloc'd), or NULL. */
char *t_read(const char *path);
/* The file dir/name, read whole (malloc'd), or NULL. */
char *t_read_in(const char *dir, const char *name);
/* Runs `gpud ARGS` through the shell with GPUD_PLUGIN_PATH at the fixtures, standard
 * output to dir/out, standard error to dir/err; returns its exit status. */
int t_gpud(const char *dir, const char *args_fmt, ...) __attribute__((format(printf, 2, 3)));
/* Runs a shell script (written to dir/script.sh) in dir with $GPUD (the binary) and
 * GPUD_PLUGIN_PATH (the fixtures) set, bounded to 120 s; returns its exit status. For
 * pipelines, signals and timing that t_gpud cannot express. */
/* Shell: waits (up to 20 s) until the command in $1 succeeds; fixed sleeps race a slow
 * start (a signal sent before gpud installs its handlers is lost). */
#define WAIT_FOR                                                                                   \
	"w() { i=0; while [ $i -lt 400 ]; do eval \"$1\" && return 0; sleep 0.05; "                \
	"i=$((i+1)); done; return 1; }; "
/* Shell: jdone FILE prints how many DONE records the journal FILE holds (a 64-byte
 * header, then 32-byte records whose first word is the kind, 1 for DONE:
 * daemon/host/record/journal.h), 0 when there is none yet. A test that kills a run
 * to resume it waits for the state it needs with it, not for a fixed time. */
#define JOURNAL_DONE                                                                               \
	"jdone() { od -An -v -tu4 -w32 -j64 \"$1\" 2>/dev/null | "                                 \
	"awk '$1 == 1 { n++ } END { print n + 0 }'; }; "
/* Shell: alive PID: whether process PID runs (a zombie, exited but not yet waited
 * for, does not). */
#define ALIVE                                                                                      \
	"alive() { st=$(awk '{print $3}' /proc/$1/stat 2>/dev/null); "                             \
	"[ -n \"$st\" ] && [ \"$st\" != Z ]; }; "
/* Runs `script` with sh in dir, with $GPUD, GPUD_PLUGIN_PATH and WAIT_FOR's w(). */
int t_sh(const char *dir, const char *script);
/* The number at the start of file dir/name (fails the test when it is missing). */
long t_read_long(const char *dir, const char *name);
/* Counts the lines of `text` that start with `prefix`. */
size_t t_count_lines(const char *text, const char *prefix);
/* The value of an environment variable the test runner sets; fails the test if unset. */
const char *t_env(const char *name);
/* A free loopback port (bound, then let go). */
unsigned t_free_port(void);
/* GET `path` from 127.0.0.1:port; the whole answer (malloc'd), or NULL when nothing
 * listens. */
char *t_http_get(unsigned port, const char *path);

#endif
