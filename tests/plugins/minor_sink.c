/* SPDX-License-Identifier: MIT */
/* Fixture: a sink declared for ABI 1.FIXTURE_MINOR that exports every sink entry point,
 * the 1.2 and 1.3 ones included; with FIXTURE_NO_EVENT, one without gpud_sink_event. The
 * loader's table must hold only what its minor has. */
#include <gpud/plugin.h>

GPUD_EXPORT const struct gpud_plugin_info gpud_plugin_info = {GPUD_ABI_MAJOR, FIXTURE_MINOR, "sink",
							      "minor", "1"};

GPUD_EXPORT int gpud_sink_open(const struct gpud_args *a, void **s, struct gpud_error *e)
{
	(void)a, (void)s, (void)e;
	return 0;
}
#ifndef FIXTURE_NO_EVENT
GPUD_EXPORT int gpud_sink_event(void *s, const struct gpud_event *ev, struct gpud_error *e)
{
	(void)s, (void)ev, (void)e;
	return 0;
}
#endif
GPUD_EXPORT int gpud_sink_close(void *s, const struct gpud_stats *st, struct gpud_error *e)
{
	(void)s, (void)st, (void)e;
	return 0;
}
GPUD_EXPORT uint32_t gpud_sink_events(void *s)
{
	(void)s;
	return GPUD_EVENTS_ALL;
}
GPUD_EXPORT int gpud_sink_resume(const struct gpud_args *a, void **s,
				 void (*done)(void *ctx, uint64_t task_id, int status), void *ctx,
				 struct gpud_error *e)
{
	(void)a, (void)s, (void)done, (void)ctx, (void)e;
	return 0;
}
GPUD_EXPORT int gpud_sink_check(const struct gpud_args *a, struct gpud_error *e)
{
	(void)a, (void)e;
	return 0;
}
GPUD_EXPORT int gpud_sink_finish(void *s, const struct gpud_stats *st,
				 const struct gpud_run_end *end, struct gpud_error *e)
{
	(void)s, (void)st, (void)end, (void)e;
	return 0;
}
GPUD_EXPORT int gpud_sink_resumed(void *s, const struct gpud_resume_info *info,
				  struct gpud_error *e)
{
	(void)s, (void)info, (void)e;
	return 0;
}
GPUD_EXPORT int gpud_sink_tasks(void *s, int64_t total, struct gpud_error *e)
{
	(void)s, (void)total, (void)e;
	return 0;
}
