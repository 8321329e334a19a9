/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "job/groups.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long groups_of_gpu(const struct cfg *c, int gpu_id)
{
	for (size_t g = 0; g < groups_count(c); g++)
		if (c->gpus[groups_first(c, g)] == gpu_id)
			return (long)g;
	return -1;
}

const char *groups_ids(const struct cfg *c, size_t g, char *buf, size_t len)
{
	size_t at = 0, w = groups_width(c), first = groups_first(c, g);
	buf[0] = '\0';
	for (size_t i = 0; i < w && first + i < c->n_gpus; i++) {
		char one[16];
		int n = snprintf(one, sizeof one, "%s%d", i ? "," : "", c->gpus[first + i]);
		if (at + (size_t)n + 4 > len) { /* room for "..." and the NUL */
			snprintf(buf + at, len - at, "...");
			break;
		}
		memcpy(buf + at, one, (size_t)n + 1);
		at += (size_t)n;
	}
	return buf;
}

const char *groups_label(const struct cfg *c, int gpu_id, char *buf, size_t len)
{
	long g = groups_width(c) > 1 ? groups_of_gpu(c, gpu_id) : -1;
	if (g < 0) {
		snprintf(buf, len, "%d", gpu_id);
		return buf;
	}
	return groups_ids(c, (size_t)g, buf, len);
}

char *groups_visible(const struct cfg *c, size_t g)
{
	size_t w = groups_width(c), first = groups_first(c, g), cap = 1;
	for (size_t i = 0; i < w && first + i < c->n_gpus; i++)
		cap += (c->gpu_tokens ? strlen(c->gpu_tokens[first + i]) : 11) + 1;
	char *s = malloc(cap), *p = s;
	if (!s)
		return NULL;
	*p = '\0';
	for (size_t i = 0; i < w && first + i < c->n_gpus; i++) {
		const char *sep = i ? "," : "";
		if (c->gpu_tokens)
			p += sprintf(p, "%s%s", sep, c->gpu_tokens[first + i]);
		else
			p += sprintf(p, "%s%d", sep, c->gpus[first + i]);
	}
	return s;
}

int groups_check(const struct cfg *c, char *why, size_t len)
{
	size_t w = groups_width(c);
	const char *at = c->gpus_per_worker_at ? c->gpus_per_worker_at : c->path;
	if (c->n_gpus % w) {
		char from[256];
		if (c->gpus_auto)
			snprintf(from, sizeof from,
				 "gpus = auto gave this rank (CUDA_VISIBLE_DEVICES tokens %zu to "
				 "%zu of the launcher's list)",
				 c->gpu_token_from + 1, c->gpu_token_from + c->n_gpus);
		else if (c->gpus_all)
			snprintf(from, sizeof from, "gpus = all found (the CUDA devices)");
		else
			snprintf(from, sizeof from, "[job] gpus lists");
		snprintf(why, len,
			 "%s: [job] gpus_per_worker = %zu does not divide the %zu GPU%s %s: each "
			 "worker takes %zu GPUs of its own, so give a multiple of %zu GPUs or "
			 "another gpus_per_worker",
			 at, w, c->n_gpus, c->n_gpus == 1 ? "" : "s", from, w, w);
		return -1;
	}
	if (groups_count(c) * c->workers_per_gpu > CFG_MAX_WORKERS) {
		snprintf(why, len, "%s: %zu GPU%s x %u workers_per_gpu is more than %d workers",
			 c->path, groups_count(c), w > 1 ? " groups" : "s", c->workers_per_gpu,
			 CFG_MAX_WORKERS);
		return -1;
	}
	return 0;
}
