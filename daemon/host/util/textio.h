/* SPDX-License-Identifier: MIT */
/* The host's files (textio.c): whole writes, JSON strings, small files read whole. */
#ifndef GPUD_TEXTIO_H
#define GPUD_TEXTIO_H

#include <stddef.h>
#include <stdio.h>

/* Writes all n bytes (again after EINTR and short writes). 0, or -1 with errno. */
int io_write_all(int fd, const void *p, size_t n);

/* `s` as a JSON string (quotes, backslashes and control bytes escaped, other bytes as
 * they are), or null when s is NULL. */
void io_json_string(FILE *f, const char *s);

/* The regular file at `path`, read whole and NUL-terminated (malloc'd), *size its
 * length; NULL with why when it cannot be opened, is not a regular file (a device, a
 * pipe) or holds more than `cap` bytes: such a file is refused, never read without
 * bound. */
char *io_read_small(const char *path, size_t cap, size_t *size, char *why, size_t len);

/* Replaces control characters and bytes that are no UTF-8 (a plugin's message may hold
 * any bytes) with '?', in place, and drops a character cut short at the end (a message
 * cut at its buffer's size), so what reaches a terminal, a log or JSON is text. */
void text_clean(char *s);

#endif
