/* SPDX-License-Identifier: MIT */
/* Writing the host's files (textio.c): whole writes, JSON strings. */
#ifndef GPUD_TEXTIO_H
#define GPUD_TEXTIO_H

#include <stddef.h>
#include <stdio.h>

/* Writes all n bytes (again after EINTR and short writes). 0, or -1 with errno. */
int io_write_all(int fd, const void *p, size_t n);

/* `s` as a JSON string (quotes, backslashes and control bytes escaped, other bytes as
 * they are), or null when s is NULL. */
void io_json_string(FILE *f, const char *s);

#endif
