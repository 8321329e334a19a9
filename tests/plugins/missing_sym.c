/* SPDX-License-Identifier: MIT */
/* Fixture: a worker without gpud_worker_process. */
#include <gpud/plugin.h>

GPUD_PLUGIN("worker", "missing_sym", "1");
GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *i, void **s, struct gpud_error *e)
{
	(void)i, (void)s, (void)e;
	return 0;
}
