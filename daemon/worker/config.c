/* SPDX-License-Identifier: MIT */
/* The worker plugin's configuration read from the run memfd's blob (config.h). */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A key count written in decimal. */
static int blob_str_n(const char *s, size_t *n)
{
	char *e;
	errno = 0;
	unsigned long v = strtoul(s, &e, 10);
	if (!*s || *e || errno)
		return -1;
	*n = v;
	return 0;
}

/* The next NUL-terminated string of the blob at *p (before end), or NULL. */
static const char *blob_str(const char **p, const char *end)
{
	const char *nul = memchr(*p, '\0', (size_t)(end - *p));
	if (!nul)
		return NULL;
	const char *s = *p;
	*p = nul + 1;
	return s;
}

int config_read(struct plugin_config *c, const struct shm_header *hdr, long stage)
{
	const char *p = (const char *)hdr + hdr->config_off;
	const char *end = p + hdr->config_len;
	size_t n = hdr->n_args;
	const char *strs[2 * SHM_MAX_ARGS + 1];

	if (n > SHM_MAX_ARGS || hdr->config_off + hdr->config_len > hdr->total_size)
		return -1;
	const char *stage_plugin = NULL;
	for (long k = -1; k < stage; k++) {
		/* skip a section: the plugin, then n keys and values; then the next
		 * stage's plugin and key count */
		for (size_t i = 0; i < 2 * n + (k < 0); i++)
			if (!blob_str(&p, end))
				return -1;
		const char *count = NULL;
		if (!(stage_plugin = blob_str(&p, end)) || !(count = blob_str(&p, end)) ||
		    blob_str_n(count, &n) < 0 || n > SHM_MAX_ARGS)
			return -1;
	}
	size_t i0 = 0;
	if (stage_plugin)
		strs[i0++] = stage_plugin;
	for (size_t i = i0; i < 2 * n + 1; i++) {
		const char *nul = memchr(p, '\0', (size_t)(end - p));
		if (!nul)
			return -1;
		strs[i] = p;
		p = nul + 1;
	}
	c->path = strs[0];
	c->kv = calloc(n ? n : 1, sizeof *c->kv);
	if (!c->kv)
		return -1;
	for (size_t i = 0; i < n; i++)
		c->kv[i] = (struct gpud_kv){strs[1 + 2 * i], strs[2 + 2 * i]};
	c->args = (struct gpud_args){c->kv, n};
	return 0;
}
