/* SPDX-License-Identifier: MIT */
/* The worker's configuration read from a hand-built run memfd's blob (worker/config.c):
 * the worker plugin's keys, a CPU stage's, and every way the blob can be malformed. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

/* A run memfd's header followed by its config blob, as the host lays it out
 * (memory.c: config_blob). */
struct memfd {
	struct shm_header hdr;
	char blob[65536];
};

static struct memfd m;

/* The blob from `len` bytes of `s` (embedded NULs), n_args worker keys. */
static const struct shm_header *blob(const char *s, size_t len, uint32_t n_args)
{
	memset(&m, 0, sizeof m);
	memcpy(m.blob, s, len);
	m.hdr.config_off = offsetof(struct memfd, blob);
	m.hdr.config_len = len;
	m.hdr.total_size = sizeof m;
	m.hdr.n_args = n_args;
	return &m.hdr;
}

#define BLOB(lit, n) blob(lit, sizeof lit - 1, n)

/* The worker plugin, two keys; then stage 0 (one key) and stage 1 (none). */
static const char full[] = "/p/worker.so\0model\0resnet\0batch\0 8 \0"
			   "/p/stage0.so\0001\0mode\0fast\0"
			   "/p/stage1.so\0000\0";

Test(worker_config, worker_plugin_and_its_keys)
{
	struct plugin_config c = {0};
	cr_assert_eq(config_read(&c, BLOB(full, 2), -1), 0);
	cr_assert_str_eq(c.path, "/p/worker.so");
	cr_assert_eq(c.args.count, 2);
	cr_assert_eq(c.args.items, c.kv);
	cr_assert_str_eq(c.kv[0].key, "model");
	cr_assert_str_eq(c.kv[0].value, "resnet");
	cr_assert_str_eq(c.kv[1].key, "batch");
	cr_assert_str_eq(c.kv[1].value, " 8 ", "values are kept as written");
	/* The strings are the blob's own, not copies. */
	cr_assert(c.path >= m.blob && c.path < m.blob + sizeof m.blob);
	free(c.kv);
}

Test(worker_config, each_stage_reads_its_own_section)
{
	struct plugin_config c = {0};
	cr_assert_eq(config_read(&c, BLOB(full, 2), 0), 0);
	cr_assert_str_eq(c.path, "/p/stage0.so");
	cr_assert_eq(c.args.count, 1);
	cr_assert_str_eq(c.kv[0].key, "mode");
	cr_assert_str_eq(c.kv[0].value, "fast");
	free(c.kv);

	struct plugin_config d = {0};
	cr_assert_eq(config_read(&d, BLOB(full, 2), 1), 0);
	cr_assert_str_eq(d.path, "/p/stage1.so");
	cr_assert_eq(d.args.count, 0);
	cr_assert_not_null(d.kv, "an empty key list is still an array");
	free(d.kv);
}

Test(worker_config, a_stage_that_is_not_there)
{
	struct plugin_config c = {0};
	cr_assert_eq(config_read(&c, BLOB(full, 2), 2), -1);
}

Test(worker_config, no_keys)
{
	struct plugin_config c = {0};
	cr_assert_eq(config_read(&c, BLOB("/p/w.so\0", 0), -1), 0);
	cr_assert_str_eq(c.path, "/p/w.so");
	cr_assert_eq(c.args.count, 0);
	free(c.kv);
}

Test(worker_config, a_string_without_its_end)
{
	struct plugin_config c = {0};
	/* The last value runs to the blob's end with no NUL before it. */
	cr_assert_eq(config_read(&c, BLOB("/p/w.so\0k\0v", 1), -1), -1);
	/* Fewer strings than n_args says. */
	cr_assert_eq(config_read(&c, BLOB("/p/w.so\0k\0v\0", 2), -1), -1);
	/* The same at a stage's: its plugin has no end. */
	cr_assert_eq(config_read(&c, BLOB("/p/w.so\0/p/s.so", 0), 0), -1);
	/* A stage's keys cut short. */
	cr_assert_eq(config_read(&c, BLOB("/p/w.so\0/p/s.so\0002\0k\0v\0", 0), 0), -1);
}

Test(worker_config, a_key_count_that_is_not_a_number)
{
	struct plugin_config c = {0};
	cr_assert_eq(config_read(&c, BLOB("/p/w.so\0/p/s.so\0\0", 0), 0), -1, "empty");
	cr_assert_eq(config_read(&c, BLOB("/p/w.so\0/p/s.so\0x\0", 0), 0), -1, "letters");
	cr_assert_eq(config_read(&c, BLOB("/p/w.so\0/p/s.so\0001x\0k\0v\0", 0), 0), -1,
		     "trailing letters");
	cr_assert_eq(config_read(&c, BLOB("/p/w.so\0/p/s.so\0004097\0", 0), 0), -1,
		     "over SHM_MAX_ARGS, and fewer keys than that");
	cr_assert_eq(config_read(&c, BLOB("/p/w.so\0/p/s.so\00099999999999999999999999\0", 0), 0),
		     -1, "out of range");
}

Test(worker_config, too_many_worker_keys)
{
	struct plugin_config c = {0};
	cr_assert_eq(config_read(&c, BLOB("/p/w.so\0", SHM_MAX_ARGS + 1), -1), -1);
}

Test(worker_config, a_blob_past_the_memfd)
{
	struct plugin_config c = {0};
	const struct shm_header *h = BLOB(full, 2);
	m.hdr.total_size = m.hdr.config_off + m.hdr.config_len - 1;
	cr_assert_eq(config_read(&c, h, -1), -1);
	m.hdr.total_size = m.hdr.config_off + m.hdr.config_len;
	cr_assert_eq(config_read(&c, h, -1), 0, "up to the memfd's end is in it");
	free(c.kv);
}

/* A stage that says it has more keys than a worker takes is refused before they are
 * read, even when the blob holds them all (they would not fit the reader's array). */
Test(worker_config, a_stage_with_more_keys_than_a_worker_takes)
{
	static char b[sizeof m.blob];
	size_t len = 0;
	len += (size_t)sprintf(b + len, "/p/w.so") + 1;
	len += (size_t)sprintf(b + len, "/p/s.so") + 1;
	len += (size_t)sprintf(b + len, "%u", SHM_MAX_ARGS + 1) + 1;
	for (unsigned k = 0; k < SHM_MAX_ARGS + 1; k++) {
		b[len++] = 'k', b[len++] = '\0';
		b[len++] = 'v', b[len++] = '\0';
	}
	cr_assert_leq(len, sizeof b);
	struct plugin_config c = {0};
	cr_assert_eq(config_read(&c, blob(b, len, 0), 0), -1);
	/* SHM_MAX_ARGS of them are taken. */
	len = 0;
	len += (size_t)sprintf(b + len, "/p/w.so") + 1;
	len += (size_t)sprintf(b + len, "/p/s.so") + 1;
	len += (size_t)sprintf(b + len, "%u", SHM_MAX_ARGS) + 1;
	for (unsigned k = 0; k < SHM_MAX_ARGS; k++) {
		b[len++] = 'k', b[len++] = '\0';
		b[len++] = 'v', b[len++] = '\0';
	}
	cr_assert_eq(config_read(&c, blob(b, len, 0), 0), 0);
	cr_assert_eq(c.args.count, SHM_MAX_ARGS);
	cr_assert_str_eq(c.kv[SHM_MAX_ARGS - 1].value, "v");
	free(c.kv);
}
