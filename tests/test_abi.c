/* SPDX-License-Identifier: MIT */
/* The plugin ABI, pinned: a change to any size or offset here breaks every plugin
 * already built, so it must fail a test, not a user. (LP64 figures.) */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <criterion/criterion.h>
#include <gpud/plugin.h>

#include "helpers.h"
#include "shm_layout.h"

#define SIZE(t, n) cr_expect_eq(sizeof(struct t), (size_t)(n), "sizeof(struct " #t ")")
#define OFF(t, f, n) cr_expect_eq(offsetof(struct t, f), (size_t)(n), #t "." #f)

Test(abi, version)
{
	cr_expect_eq(GPUD_ABI_MAJOR, 1);
	cr_expect_eq(GPUD_ABI_MINOR, 9);
}

/* (1.7) What a generator's next returns to fail the task of one item and go on: apart
 * from 1 (an item), 0 (the end) and -1 (the generator failed). */
Test(abi, generator_task_failed_value)
{
	cr_expect_eq(GPUD_GENERATOR_TASK_FAILED, 2);
}

/* (1.6) What a sink returns to fail a task whose result it refuses: apart from 0 and
 * from -1 (abort the run). */
Test(abi, sink_task_failed_value)
{
	cr_expect_eq(GPUD_SINK_TASK_FAILED, 1);
}

/* (1.5) A call interrupted past task_timeout: the mark a built plugin sets, apart from
 * every other mark. */
Test(abi, timed_out_value)
{
	cr_expect_eq(GPUD_TASK_TIMED_OUT, 5);
	struct gpud_error e = {{0}};
	struct gpud_task t = {.error = &e};
	cr_expect_eq(gpud_task_timed_out(&t, "stopped after %d s", 2), -1);
	cr_expect_eq(t.failed, GPUD_TASK_TIMED_OUT);
	cr_expect_str_eq(e.message, "stopped after 2 s");
}

/* (1.4) Out of memory: the values a built plugin returns and sets. */
Test(abi, out_of_memory_values)
{
	cr_expect_eq(GPUD_OOM, -12);
	cr_expect_eq(GPUD_TASK_OOM, 4);
	struct gpud_error e = {{0}};
	struct gpud_task t = {.error = &e};
	cr_expect_eq(gpud_task_oom(&t, "need %d MiB", 512), GPUD_OOM);
	cr_expect_eq(t.failed, GPUD_TASK_OOM);
	cr_expect_str_eq(e.message, "need 512 MiB");
}

Test(abi, struct_sizes)
{
	SIZE(gpud_kv, 16);
	SIZE(gpud_args, 16);
	SIZE(gpud_error, 1024);
	SIZE(gpud_buf, 24);
	SIZE(gpud_plugin_info, 32);
	SIZE(gpud_worker_info, 56);
	SIZE(gpud_task, 88);
	SIZE(gpud_event, 112);
	SIZE(gpud_stats, 64);
	SIZE(gpud_run_end, 48);
	SIZE(gpud_resume_info, 64);
	SIZE(gpud_job_info, 48);
}

Test(abi, offsets)
{
	OFF(gpud_plugin_info, abi_minor, 4);
	OFF(gpud_plugin_info, kind, 8);
	OFF(gpud_plugin_info, name, 16);
	OFF(gpud_plugin_info, version, 24);
	OFF(gpud_worker_info, gpu_id, 4);
	OFF(gpud_worker_info, seed, 8);
	OFF(gpud_run_end, abort_reason, 8);
	OFF(gpud_resume_info, failed, 16);
	OFF(gpud_worker_info, args, 16);
	OFF(gpud_worker_info, flags, 24);
	OFF(gpud_worker_info, batch_size, 32);
	OFF(gpud_worker_info, n_gpus, 36);
	OFF(gpud_worker_info, gpu_ids, 40);
	OFF(gpud_worker_info, max_in_flight, 48);
	OFF(gpud_task, input, 8);
	OFF(gpud_task, input_size, 16);
	OFF(gpud_task, result, 24);
	OFF(gpud_task, error, 48);
	OFF(gpud_task, failed, 56);
	OFF(gpud_task, attempt, 60);
	OFF(gpud_event, task_id, 8);
	OFF(gpud_event, worker_id, 16);
	OFF(gpud_event, gpu_id, 20);
	OFF(gpud_event, attempt, 24);
	OFF(gpud_event, input, 32);
	OFF(gpud_event, input_size, 40);
	OFF(gpud_event, result, 48);
	OFF(gpud_event, result_size, 56);
	OFF(gpud_event, message, 64);
	OFF(gpud_event, seconds, 72);
	OFF(gpud_event, name, 80); /* (1.9) reserved[0] before */
	OFF(gpud_stats, not_run, 32);
	OFF(gpud_stats, retried, 40);
	OFF(gpud_stats, worker_restarts, 48);
	OFF(gpud_stats, setup_failures, 52);
	OFF(gpud_stats, elapsed, 56);
}

Test(abi, event_kinds)
{
	cr_expect_eq(GPUD_TASK_START, 0);
	cr_expect_eq(GPUD_TASK_OK, 1);
	cr_expect_eq(GPUD_TASK_ERROR, 2);
	cr_expect_eq(GPUD_TASK_TIMEOUT, 3);
	cr_expect_eq(GPUD_SETUP_FAILED, 4);
	cr_expect_eq(GPUD_CLEANUP_FAILED, 5);
	cr_expect_eq(GPUD_GPU_RETIRED, 6);
	cr_expect_eq(GPUD_EVENT_BIT(GPUD_TASK_OK), 2u);
}

Test(abi, shm_layout)
{
	/* Not the plugin ABI, but host and worker must agree on it byte for byte. */
	cr_expect_eq(sizeof(struct shm_rec), 64u);
	cr_expect_eq(sizeof(struct shm_header), 192u);
	cr_expect_eq(sizeof(struct shm_feed), 4 * 64u);
	cr_expect_eq(sizeof(struct shm_report), 3 * 64u + 1024u + 4 * 64u);
	OFF(shm_rec, check, 32);
	/* What is polled and what is rewritten per task are on lines of their own. */
	OFF(shm_feed, stop, 8);
	OFF(shm_feed, result_tail, 64);
	OFF(shm_feed, bell, 128);
	OFF(shm_feed, task_base, 192);
	OFF(shm_report, run_from, 24);
	OFF(shm_report, result_head, 64);
	OFF(shm_report, state, 128);
	OFF(shm_report, sleeping, 132);
	OFF(shm_report, batch_now, 136);
	OFF(shm_report, oom_splits, 140);
	OFF(shm_report, message, 192);
	/* Where the worker's time goes: after the message, on lines of its own. */
	OFF(shm_report, times, 192 + 1024);
	OFF(shm_times, phase_ns, 16);
	OFF(shm_feed, drained, 12);
	OFF(shm_header, host_sleeping, 128);
}

/* A call's own account of its time: its bucket of call sizes, and the reserved field
 * that carries it (zeroed by gpud before every call). */
Test(abi, call_times)
{
	cr_expect_eq(GPUD_CALL_BUCKETS, 17);
	cr_expect_eq(gpud_call_bucket(1), 0u);
	cr_expect_eq(gpud_call_bucket(2), 1u);
	cr_expect_eq(gpud_call_bucket(3), 2u);
	cr_expect_eq(gpud_call_bucket(4), 2u);
	cr_expect_eq(gpud_call_bucket(5), 3u);
	cr_expect_eq(gpud_call_bucket(256), 8u);
	cr_expect_eq(gpud_call_bucket(65536), 16u);
	cr_expect_eq(gpud_call_bucket(100000), 16u);
	struct gpud_call_times ct = {0};
	struct gpud_task t = {0};
	gpud_call_times_set(&t, &ct);
	cr_expect_eq(t.reserved[0], (void *)&ct);
}

/* The header compiles alone as strict C11 with only libc, like an out-of-tree plugin. */
Test(abi, header_compiles_alone_strict_c11)
{
	char *cmd;
	cr_assert(asprintf(&cmd,
			   "echo '#include <gpud/plugin.h>' | %s -std=c11 -Wall -Wextra -Werror "
			   "-pedantic -fsyntax-only -I'%s' -x c - 2>&1",
			   t_env("CC"), t_env("GPUD_HEADER_DIR")) > 0);
	int st = system(cmd);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "strict C11 compile of plugin.h failed");
	free(cmd);
}

/* The helpers behave as documented. */
Test(abi, helpers)
{
	struct gpud_kv kv[] = {{"n", "42"}, {"bad", "4x"}, {"d", "2.5"}, {"n", "43"}};
	struct gpud_args a = {kv, 4};
	struct gpud_error e;
	long l;
	double d;
	cr_expect_str_eq(gpud_arg(&a, "n", "x"), "43", "the last value wins");
	cr_expect_str_eq(gpud_arg(&a, "missing", "x"), "x");
	cr_expect_eq(gpud_arg_long(&a, "n", 0), 43);
	cr_expect_eq(gpud_arg_long(&a, "bad", 7), 7);
	cr_expect_eq(gpud_arg_parse_long(&a, "bad", 0, &l, &e), -1);
	cr_expect(strstr(e.message, "bad = '4x'") != NULL, "%s", e.message);
	cr_expect_eq(gpud_arg_parse_double(&a, "d", 0, &d, &e), 0);
	cr_expect_float_eq(d, 2.5, 1e-12);
	cr_expect_eq(gpud_arg_parse_long(&a, "missing", 9, &l, &e), 0);
	cr_expect_eq(l, 9);

	struct gpud_task t = {.error = &e};
	cr_expect_eq(gpud_task_fail(&t, "no %d", 5), -1);
	cr_expect_eq(t.failed, 1);
	cr_expect_str_eq(e.message, "no 5");
}

/* (1.9) The whole-sample framing as plugin.h lays it out, built here byte by byte: the
 * walker finds key and members where the layout says, and refuses, never reading past
 * the bytes given, every cut and every length that runs past the end. */
static size_t put_member(unsigned char *b, size_t at, const char *name, const void *data, size_t n)
{
	uint32_t h[2] = {(uint32_t)strlen(name), 0};
	uint64_t len = n;
	at = (at + 7) & ~(size_t)7;
	memcpy(b + at, h, 8);
	memcpy(b + at + 8, &len, 8);
	memcpy(b + at + 16, name, strlen(name));
	at = (at + 16 + strlen(name) + 63) & ~(size_t)63;
	memcpy(b + at, data, n);
	return at + n;
}

Test(abi, sample_framing)
{
	static unsigned char b[512] __attribute__((aligned(64)));
	uint32_t h[4] = {GPUD_SAMPLE_MAGIC, 2, 6, 0};
	memcpy(b, h, 16);
	memcpy(b + 16, "a/0001", 6);
	size_t end = put_member(b, 22, "jpg", "\xff\xd8JPEG", 6);
	cr_expect_eq(end, 70, "the jpg's data at 64 (its header at 24, name at 40)");
	end = put_member(b, end, "cls", "7", 1);
	cr_expect_eq(end, 129, "the cls's header at 72, its data at 128");
	cr_expect_eq(memcmp(b, "GPDS", 4), 0, "the magic's bytes");

	struct gpud_sample s;
	struct gpud_sample_member m;
	cr_assert_eq(gpud_sample_open(&s, b, end), 0);
	cr_expect(s.key_len == 6 && !memcmp(s.key, "a/0001", 6) && s.count == 2);
	cr_assert_eq(gpud_sample_next(&s, &m), 1);
	cr_expect(m.name_len == 3 && !memcmp(m.name, "jpg", 3) && m.size == 6 && m.data == b + 64 &&
		  ((uintptr_t)m.data & 63) == 0);
	cr_assert_eq(gpud_sample_next(&s, &m), 1);
	cr_expect(m.name_len == 3 && !memcmp(m.name, "cls", 3) && m.size == 1 &&
		  *(const char *)m.data == '7');
	cr_expect_eq(gpud_sample_next(&s, &m), 0, "two members, then the end");
	cr_expect_eq(gpud_sample_find(b, end, "cls", &m), 1);
	cr_expect_eq(gpud_sample_find(b, end, "json", &m), 0);

	/* Every cut short of the whole: refused at open or at a member, never read past. */
	for (size_t cut = 0; cut < end; cut++) {
		unsigned char *copy = malloc(cut ? cut : 1);
		memcpy(copy, b, cut);
		int rc = gpud_sample_open(&s, copy, cut);
		int got = 0;
		while (rc == 0 && (got = gpud_sample_next(&s, &m)) == 1)
			cr_expect((const unsigned char *)m.data + m.size <= copy + cut);
		cr_expect(rc < 0 || got < 0, "a sample cut at %zu bytes is refused", cut);
		free(copy);
	}
	/* Lengths that run past the end, or wrap: refused. */
	unsigned char bad[512] __attribute__((aligned(64)));
	memcpy(bad, b, end);
	uint32_t huge = UINT32_MAX;
	memcpy(bad + 8, &huge, 4);
	cr_expect_eq(gpud_sample_open(&s, bad, end), -1, "a key past the end");
	memcpy(bad, b, end);
	uint64_t wrap = UINT64_MAX - 10;
	memcpy(bad + 24 + 8, &wrap, 8);
	cr_assert_eq(gpud_sample_open(&s, bad, end), 0);
	cr_expect_eq(gpud_sample_next(&s, &m), -1, "a data length that wraps");
	memcpy(bad, b, end);
	memcpy(bad + 24, &huge, 4);
	cr_assert_eq(gpud_sample_open(&s, bad, end), 0);
	cr_expect_eq(gpud_sample_next(&s, &m), -1, "a name past the end");
	memcpy(bad, b, end);
	uint32_t many = 1000000;
	memcpy(bad + 4, &many, 4);
	cr_assert_eq(gpud_sample_open(&s, bad, end), 0);
	int rc;
	while ((rc = gpud_sample_next(&s, &m)) == 1)
		;
	cr_expect_eq(rc, -1, "a count past the members there");
	cr_expect_eq(gpud_sample_is("\xff\xd8\xff\xe0JFIF\0\0\0\0\0\0\0\0", 16), 0,
		     "a JPEG file is no sample");
}

/* ... and as C++, where GPUD_PLUGIN must still export its descriptor. */
Test(abi, header_works_from_cplusplus)
{
	const char *dir = t_tmpdir();
	free(t_write(dir, "p.cc",
		     "#include <gpud/plugin.h>\n"
		     "GPUD_PLUGIN(\"worker\", \"cxx\", \"1\");\n"
		     "GPUD_PLUGIN_DESCRIPTION(\"from C++\");\n"));
	char *cmd;
	cr_assert(
		asprintf(
			&cmd,
			"cd '%s' && g++ -std=c++11 -Wall -Wextra -Werror -shared -fPIC -I'%s' p.cc "
			"-o p.so && nm -D p.so > syms && grep -q ' gpud_plugin_info$' syms && "
			"grep -q ' gpud_plugin_description$' syms",
			dir, t_env("GPUD_HEADER_DIR")) > 0);
	int st = system(cmd);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "a C++ plugin does not export its descriptor");
	free(cmd);
}
