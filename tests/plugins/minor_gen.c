/* SPDX-License-Identifier: MIT */
/* Fixture: a generator declared for ABI 1.FIXTURE_MINOR that exports every generator
 * entry point, the 1.2 ones and 1.9's gpud_generator_name included, and gpud_plugin_keys; with
 * FIXTURE_NO_NEXT, one without gpud_generator_next. The loader's table must hold only what its
 * minor has. */
#include <gpud/plugin.h>

GPUD_EXPORT const struct gpud_plugin_info gpud_plugin_info = {GPUD_ABI_MAJOR, FIXTURE_MINOR,
							      "generator", "minor", "1"};
GPUD_PLUGIN_DESCRIPTION("a generator of no items");
GPUD_PLUGIN_KEYS("start");

GPUD_EXPORT int gpud_generator_open(const struct gpud_args *a, void **s, struct gpud_error *e)
{
	(void)a, (void)s, (void)e;
	return 0;
}
#ifndef FIXTURE_NO_NEXT
GPUD_EXPORT int gpud_generator_next(void *s, struct gpud_buf *item, struct gpud_error *e)
{
	(void)s, (void)item, (void)e;
	return 0;
}
#endif
GPUD_EXPORT void gpud_generator_close(void *s)
{
	(void)s;
}
GPUD_EXPORT int64_t gpud_generator_total(void *s)
{
	(void)s;
	return 0;
}
GPUD_EXPORT int gpud_generator_skip(void *s, uint64_t n, struct gpud_error *e)
{
	(void)s, (void)n, (void)e;
	return 0;
}
GPUD_EXPORT int gpud_generator_check(const struct gpud_args *a, struct gpud_error *e)
{
	(void)a, (void)e;
	return 0;
}
GPUD_EXPORT const char *gpud_generator_name(void *s)
{
	(void)s;
	return "a name";
}
