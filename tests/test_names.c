/* SPDX-License-Identifier: MIT */
/* Task names (run/names.c, ABI 1.9) on hand-built state: kept by id while given, found,
 * forgotten when the task's outcome is taken, a name too long cut at a character. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include <gpud/plugin.h>

#include "util/names.h"

Test(names, kept_found_and_forgotten)
{
	struct task_names m = {0};
	char name[64];
	cr_expect_null(names_get(&m, 0), "an empty table finds nothing");
	names_drop(&m, 7); /* nothing to forget: no harm */
	for (uint64_t id = 0; id < 20000; id += 2) {
		snprintf(name, sizeof name, "shard-%llu/%05llu", (unsigned long long)(id / 1000),
			 (unsigned long long)id);
		cr_assert_eq(names_put(&m, id, name), 0);
	}
	cr_expect_eq(m.n, 10000, "only the names given are kept");
	for (uint64_t id = 0; id < 20000; id++) {
		const char *got = names_get(&m, id);
		if (id % 2) {
			cr_expect_null(got, "task %llu was given no name", (unsigned long long)id);
			continue;
		}
		snprintf(name, sizeof name, "shard-%llu/%05llu", (unsigned long long)(id / 1000),
			 (unsigned long long)id);
		cr_expect(got && !strcmp(got, name), "task %llu: %s", (unsigned long long)id,
			  got ? got : "(none)");
	}
	cr_assert_eq(names_put(&m, 4, "again"), 0);
	cr_expect_str_eq(names_get(&m, 4), "again", "a name given again replaces the first");
	cr_expect_eq(m.n, 10000);
	for (uint64_t id = 0; id < 20000; id++)
		names_drop(&m, id);
	cr_expect_eq(m.n, 0, "every outcome taken: nothing held");
	cr_expect_null(names_get(&m, 4));
	names_free(&m);
	cr_expect(m.bucket == NULL && m.nbucket == 0);
}

Test(names, a_long_name_is_cut_at_a_character)
{
	struct task_names m = {0};
	static char big[GPUD_NAME_MAX + 100];
	/* "é" (two bytes) repeated: the limit falls inside one. */
	for (size_t i = 0; i + 1 < sizeof big - 1; i += 2)
		memcpy(big + i, "\xc3\xa9", 2);
	big[sizeof big - 1] = '\0';
	cr_assert_eq(names_put(&m, 1, big + 1), 0); /* starts inside a character */
	const char *got = names_get(&m, 1);
	cr_assert_not_null(got);
	size_t n = strlen(got);
	cr_expect(n <= GPUD_NAME_MAX, "kept %zu bytes", n);
	cr_expect_neq((unsigned char)got[n - 1], 0xc3, "not cut after a character's lead byte");
	names_free(&m);
}
