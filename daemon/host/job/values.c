/* SPDX-License-Identifier: MIT */
/* Values of job keys (values.h). */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job/values.h"

int cfg_parse_size(const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	uint64_t mult = 1;
	switch (*end) {
	case 'k':
	case 'K':
		mult = 1ull << 10;
		end++;
		break;
	case 'm':
	case 'M':
		mult = 1ull << 20;
		end++;
		break;
	case 'g':
	case 'G':
		mult = 1ull << 30;
		end++;
		break;
	default:
		break;
	}
	if (mult > 1 && (strcmp(end, "iB") == 0 || strcmp(end, "ib") == 0))
		end += 2;
	else if (mult > 1 && (*end == 'B' || *end == 'b'))
		end++;
	if (*end || v > max / mult)
		return -1;
	*out = v * mult;
	return 0;
}

char *cfg_resolve(const char *base, const char *v)
{
	char *out;
	while (v[0] == '.' && v[1] == '/')
		v += 2;
	if (v[0] == '/' || v[0] == '\0' || strcmp(v, "-") == 0)
		return strdup(v);
	if (asprintf(&out, "%s/%s", base, v) < 0)
		return NULL;
	return out;
}
