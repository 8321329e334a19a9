/* SPDX-License-Identifier: MIT */
/* Errors said (say.c): one line on standard error, the last one kept for libgpud. */
#ifndef GPUD_SAY_H
#define GPUD_SAY_H

#include <stddef.h>

/* Writes "gpud: LINE\n" to standard error, LINE formatted from fmt, and keeps LINE
 * (control bytes shown as '?', cut at 4 KiB) as the last error said: how a reason found
 * deep in a check reaches gpud_job_error as well as the terminal. Any thread. */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Copies the last line said since say_forget into buf ("" when none). */
void say_last(char *buf, size_t len);
/* Forgets the last line said (the start of a check or a run). */
void say_forget(void);

#endif
