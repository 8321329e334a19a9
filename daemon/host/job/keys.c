/* SPDX-License-Identifier: MIT */
#include "job/keys.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "job/suggest.h"

/* Whether `key` is one of `declared` (a name ending in '*' matches by prefix). */
static bool keys_declared(const char *key, const char *const *declared)
{
	for (; *declared; declared++) {
		size_t n = strlen(*declared);
		if (n && (*declared)[n - 1] == '*' ? strncmp(key, *declared, n - 1) == 0
						   : strcmp(key, *declared) == 0)
			return 1;
	}
	return 0;
}

int keys_check(const struct cfg_section *s, const char *section, const char *plugin,
	       const char *const *declared, char *err, size_t errlen)
{
	if (!declared)
		return 0;
	for (size_t i = 0; i < s->count; i++) {
		const char *key = s->kv[i].key;
		if (keys_declared(key, declared))
			continue;
		/* The plugin was swapped with --set: the job file's keys were written for
		 * the one it replaced. Only keys typed for this plugin are held to it. */
		if (s->plugin_line < 0 && strncmp(s->where[i], "--set", 5) != 0) {
			fprintf(stderr,
				"gpud: %s: [%s] %s is not a key of plugin %s (put in place "
				"by --set); ignored\n",
				s->where[i], section, key, plugin);
			continue;
		}
		char list[512], hint[128] = "";
		const char *near = suggest(key, declared);
		if (near)
			snprintf(hint, sizeof hint, "did you mean '%s'? ", near);
		if (*declared)
			snprintf(err, errlen,
				 "%s: unknown key '%s' in [%s] for plugin %s (%saccepted: %s)",
				 s->where[i], key, section, plugin, hint,
				 suggest_list(declared, list, sizeof list));
		else
			snprintf(err, errlen,
				 "%s: unknown key '%s' in [%s]: plugin %s takes no keys",
				 s->where[i], key, section, plugin);
		return -1;
	}
	return 0;
}
