/* SPDX-License-Identifier: MIT */
/* Values of job keys that both the job file's reader (config.c) and the key table's
 * parsers (keys.c) take: byte sizes and paths relative to the job's folder. */
#ifndef GPUD_VALUES_H
#define GPUD_VALUES_H

#include <stdint.h>

/* Parses a byte size: digits, then an optional K, M or G (powers of 1024; KiB, MiB,
 * GiB and lower case accepted). Returns 0, or -1 when malformed or above `max`. */
int cfg_parse_size(const char *s, uint64_t max, uint64_t *out);

/* `v` resolved against the folder `base` (a leading ./ dropped; an absolute path, "" and
 * "-" kept as they are). Returns a malloc'd string, or NULL when out of memory. */
char *cfg_resolve(const char *base, const char *v);

#endif /* GPUD_VALUES_H */
