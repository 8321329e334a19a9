/* SPDX-License-Identifier: MIT */
/* Fixture: a worker that needs a symbol nothing provides. */
#include <gpud/plugin.h>

GPUD_PLUGIN("worker", "unresolved", "1");
extern int gpud_fixture_symbol_nobody_defines(void);
GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *i, void **s, struct gpud_error *e)
{
	(void)i, (void)s, (void)e;
	return gpud_fixture_symbol_nobody_defines();
}
GPUD_EXPORT int gpud_worker_process(void *s, struct gpud_task *t)
{
	(void)s, (void)t;
	return 0;
}
