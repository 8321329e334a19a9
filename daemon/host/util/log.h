/* SPDX-License-Identifier: MIT */
/*
 * The engine's messages (errors, notes, progress, the summary): to standard error, or,
 * while a libgpud caller's log callback is set (gpud_run_options.log), through it, one
 * line per call, at a level (GPUD_LOG_*). Any thread.
 */
#ifndef GPUD_LOG_H
#define GPUD_LOG_H

#include <stdio.h>

#include <gpud/gpud.h>

/* Sets the callback for what follows (NULL: standard error again). Whatever a stream
 * holds of an unfinished line is handed on first. Called by the API around a run, a
 * check or a status, when no engine thread is writing. */
void log_set(void (*fn)(void *data, int level, const char *message), void *data);

/* The stream the engine writes messages of `level` to: standard error, or while a
 * callback is set, a stream that hands every finished line to it (a leading "gpud: "
 * dropped). A line may be written in several calls from one thread; lines from several
 * threads are each handed on whole only when each is written in one call. */
FILE *log_stream(int level);

/* One finished line (no newline) at `level`: to the callback, else "gpud: LINE\n" on
 * standard error. */
void log_line(int level, const char *line);

/* Shorthands for the three streams. */
#define LOG_ERR log_stream(GPUD_LOG_ERROR)
#define LOG_WARN log_stream(GPUD_LOG_WARN)
#define LOG_INFO log_stream(GPUD_LOG_INFO)

#endif /* GPUD_LOG_H */
