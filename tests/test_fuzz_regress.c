/* SPDX-License-Identifier: MIT */
/* Replays the fuzz targets' kept inputs (fuzz/seeds/, fuzz/regressions/) through the
 * same entry points, in the normal suite and in the sanitizer build: an input that
 * once crashed a target keeps being tried. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "fuzz.h"
#include "helpers.h"

static size_t replay(const char *sub, int (*one)(const uint8_t *, size_t))
{
	char dir[512];
	size_t n = 0;
	snprintf(dir, sizeof dir, "%s/fuzz/%s", t_env("SRCDIR"), sub);
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[1024];
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		FILE *f = fopen(path, "rb");
		cr_assert(f, "%s", path);
		uint8_t *buf = malloc(1 << 20);
		size_t len = fread(buf, 1, 1 << 20, f);
		fclose(f);
		cr_assert_eq(one(buf, len), 0, "%s", path);
		free(buf);
		n++;
	}
	closedir(d);
	return n;
}

Test(fuzz_regress, config_inputs)
{
	size_t n = replay("seeds/config", fuzz_config_one) +
		   replay("regressions/config", fuzz_config_one);
	cr_expect_gt(n, 0, "no inputs found under fuzz/");
}

Test(fuzz_regress, ring_inputs)
{
	size_t n = replay("seeds/ring", fuzz_ring_one) + replay("regressions/ring", fuzz_ring_one);
	cr_expect_gt(n, 0, "no inputs found under fuzz/");
}
