/* SPDX-License-Identifier: MIT */
#include "job/suggest.h"

#include <stdio.h>
#include <string.h>

#define LONGEST 64

/* Optimal string alignment distance, cut off above `limit`. */
static size_t distance(const char *a, const char *b, size_t limit)
{
	size_t n = strlen(a), m = strlen(b);
	size_t d[LONGEST + 1][LONGEST + 1];
	if (n > LONGEST || m > LONGEST)
		return limit + 1;
	if ((n > m ? n - m : m - n) > limit)
		return limit + 1;
	for (size_t i = 0; i <= n; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= m; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= n; i++) {
		for (size_t j = 1; j <= m; j++) {
			size_t cost = a[i - 1] != b[j - 1];
			size_t v = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < v)
				v = d[i][j - 1] + 1;
			if (d[i - 1][j - 1] + cost < v)
				v = d[i - 1][j - 1] + cost;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    d[i - 2][j - 2] + 1 < v)
				v = d[i - 2][j - 2] + 1;
			d[i][j] = v;
		}
	}
	return d[n][m];
}

const char *suggest(const char *word, const char *const *cands)
{
	size_t len = strlen(word);
	size_t limit = len <= 4 ? 1 : len <= 8 ? 2 : 3;
	const char *best = NULL;
	size_t best_d = limit + 1;
	for (; *cands; cands++) {
		size_t cl = strlen(*cands);
		if (cl && (*cands)[cl - 1] == '*')
			continue;
		size_t dd = distance(word, *cands, limit);
		if (dd < best_d) {
			best_d = dd;
			best = *cands;
		}
	}
	return best;
}

const char *suggest_list(const char *const *cands, char *buf, size_t len)
{
	size_t used = 0;
	buf[0] = '\0';
	for (; *cands; cands++) {
		int n = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", *cands);
		if (n < 0 || (size_t)n >= len - used) {
			if (len > 4)
				strcpy(buf + (used + 4 < len ? used : len - 4), "...");
			break;
		}
		used += (size_t)n;
	}
	return buf;
}
