/* SPDX-License-Identifier: MIT */
#include "gpus.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

unsigned worker_gpu_ids(int first, int *ids, unsigned max)
{
	const char *s = getenv("GPUD_GPU_IDS");
	unsigned n = 0;
	ids[0] = first;
	if (!s || !*s || max == 0)
		return 1;
	for (;;) {
		char *end;
		if (!isdigit((unsigned char)*s) || n >= max)
			goto one;
		errno = 0;
		long id = strtol(s, &end, 10);
		if (errno || id > 65535)
			goto one;
		ids[n++] = (int)id;
		if (*end == '\0')
			break;
		if (*end != ',')
			goto one;
		s = end + 1;
	}
	if (ids[0] == first)
		return n;
one:
	ids[0] = first;
	return 1;
}
