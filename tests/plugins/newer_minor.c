/* SPDX-License-Identifier: MIT */
/* Fixture: a worker built for a newer minor of this ABI than the host knows. */
#include <gpud/plugin.h>

GPUD_EXPORT const struct gpud_plugin_info gpud_plugin_info = {GPUD_ABI_MAJOR, GPUD_ABI_MINOR + 1,
							      "worker", "newer_minor", "1"};
GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *i, void **s, struct gpud_error *e)
{
	(void)i, (void)s, (void)e;
	return 0;
}
GPUD_EXPORT int gpud_worker_process(void *s, struct gpud_task *t)
{
	(void)s, (void)t;
	return 0;
}
