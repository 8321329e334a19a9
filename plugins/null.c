/* SPDX-License-Identifier: MIT */
/* Sink `null`: discards everything. It asks for no events at all, so the host does
 * not even build them: the benchmark sink. */
#include <gpud/plugin.h>

GPUD_PLUGIN("sink", "null", "1.0");
GPUD_PLUGIN_DESCRIPTION("discards everything (for benchmarks)");
GPUD_PLUGIN_NO_KEYS;

static int dummy;

GPUD_EXPORT int gpud_sink_open(const struct gpud_args *args, void **state, struct gpud_error *err)
{
	(void)args;
	(void)err;
	*state = &dummy;
	return 0;
}

GPUD_EXPORT uint32_t gpud_sink_events(void *state)
{
	(void)state;
	return 0;
}

GPUD_EXPORT int gpud_sink_event(void *state, const struct gpud_event *ev, struct gpud_error *err)
{
	(void)state;
	(void)ev;
	(void)err;
	return 0;
}
