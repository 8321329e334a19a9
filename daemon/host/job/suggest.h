/* SPDX-License-Identifier: MIT */
/* "Did you mean": the known name nearest to a mistyped one. */
#ifndef GPUD_SUGGEST_H
#define GPUD_SUGGEST_H

#include <stddef.h>

/* The candidate closest to `word` by edit distance (insert, delete, replace, swap two
 * neighbours), when close enough to be a typo of it (at most 1 edit for names up to 4
 * characters, 2 up to 8, then 3); NULL otherwise. `cands` ends with NULL; a candidate
 * ending in '*' is a prefix and never suggested. */
const char *suggest(const char *word, const char *const *cands);

/* Writes `cands` as "a, b, c" into buf (cut with "..." when it does not fit). */
const char *suggest_list(const char *const *cands, char *buf, size_t len);

#endif
