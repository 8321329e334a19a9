/* SPDX-License-Identifier: MIT */
/* Test worker: walks a whole sample with plugin.h's helpers (gpud_sample_open/next) and
 * answers what it found, as text: "KEY;NAME:SIZE:HASH;NAME:SIZE:HASH..." (HASH: the
 * member's bytes' 32-bit FNV-1a, 8 hex digits), in the sample's order. An input that is
 * no sample, or a damaged one, is rejected saying so. */
#include <stdio.h>
#include <string.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("worker", "members", "1.0");
GPUD_PLUGIN_NO_KEYS;

static int dummy;

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	(void)info, (void)err;
	*state = &dummy;
	return 0;
}

static uint32_t fnv(const void *p, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ ((const unsigned char *)p)[i]) * 16777619u;
	return h;
}

GPUD_EXPORT int gpud_worker_process(void *state, struct gpud_task *task)
{
	(void)state;
	struct gpud_sample s;
	struct gpud_sample_member m;
	char *out = task->result.data;
	size_t cap = task->result.capacity, n;
	int rc = 0;
	if (gpud_sample_open(&s, task->input, task->input_size) < 0)
		return gpud_task_reject(task, "members: %zu bytes are not a sample",
					task->input_size);
	n = (size_t)snprintf(out, cap, "%.*s", (int)s.key_len, s.key);
	while (n < cap && (rc = gpud_sample_next(&s, &m)) == 1)
		n += (size_t)snprintf(out + n, cap - n, ";%.*s:%zu:%08x", (int)m.name_len, m.name,
				      m.size, fnv(m.data, m.size));
	if (n >= cap)
		return gpud_task_fail(task, "members: max_result_bytes is too small");
	if (rc < 0)
		return gpud_task_reject(task, "members: a damaged sample");
	task->result.size = n;
	return 0;
}
