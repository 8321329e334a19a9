/* SPDX-License-Identifier: MIT */
/* The keys a plugin declares (gpud_plugin_keys, ABI 1.2): every other key of its
 * section is refused with its place in the job file and the nearest declared key. */
#ifndef GPUD_KEYS_H
#define GPUD_KEYS_H

#include <stddef.h>

#include "job/config.h"

/* 0 when every key of `s` is declared (or `declared` is NULL: the plugin declared
 * nothing, so anything goes); -1 with one line in err otherwise. `section` is the
 * section's name, `plugin` the plugin's as written in the job file. When --set swapped
 * the plugin, the job file's keys (written for the plugin it replaced) are only
 * warned about on standard error; keys given with --set are held to it. */
int keys_check(const struct cfg_section *s, const char *section, const char *plugin,
	       const char *const *declared, char *err, size_t errlen);

#endif
