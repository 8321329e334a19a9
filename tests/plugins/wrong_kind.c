/* SPDX-License-Identifier: MIT */
/* Fixture: a sink, given where a worker is expected. */
#include <gpud/plugin.h>

GPUD_PLUGIN("sink", "wrong_kind", "1");
GPUD_EXPORT int gpud_sink_open(const struct gpud_args *a, void **s, struct gpud_error *e)
{
	(void)a, (void)s, (void)e;
	return 0;
}
GPUD_EXPORT int gpud_sink_event(void *s, const struct gpud_event *ev, struct gpud_error *e)
{
	(void)s, (void)ev, (void)e;
	return 0;
}
