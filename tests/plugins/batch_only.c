/* SPDX-License-Identifier: MIT */
/* Test worker that exports gpud_worker_process_batch and no gpud_worker_process (ABI
 * 1.2): each result is "<input> n=<n>". */
#include <stdio.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("worker", "batch_only", "1.0");
GPUD_PLUGIN_NO_KEYS;

static int dummy;

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	(void)info;
	(void)err;
	*state = &dummy;
	return 0;
}

GPUD_EXPORT int gpud_worker_process_batch(void *state, struct gpud_task *t, size_t n)
{
	(void)state;
	for (size_t i = 0; i < n; i++) {
		int m = snprintf(t[i].result.data, t[i].result.capacity, "%.*s n=%zu",
				 (int)t[i].input_size, (const char *)t[i].input, n);
		t[i].result.size = (size_t)m;
	}
	return 0;
}
