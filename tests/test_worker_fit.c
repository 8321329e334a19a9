/* SPDX-License-Identifier: MIT */
/* Batches that fit (worker/fit.c) on hand-built state: the batch size's sizing on a
 * struct fit alone, the message of a task that does not fit alone, and an
 * out-of-memory call split and run again on a hand-built worker whose plugin table is
 * a function here (no process, no job). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "canary.h"
#include "fit.h"
#include "worker.h"

Test(worker_fit, a_fresh_worker_runs_its_whole_batch)
{
	struct fit f;
	fit_init(&f, 64, true);
	cr_assert_eq(f.batch, 64);
	cr_assert_eq(f.batch_cap, 64);
	cr_assert_eq(f.shown, 64);
	cr_assert_eq(f.grow_after, FIT_GROW_AFTER);
	cr_assert_eq(f.bad, UINT32_MAX);
	cr_assert_eq(f.oom_splits, 0);
	cr_assert(f.oom_abi);
}

Test(worker_fit, down_at_once_to_what_fitted)
{
	struct fit f;
	fit_init(&f, 64, true);
	fit_shrink(&f, 24, 32); /* parts of 24 fitted, one of 32 ran out */
	cr_assert_eq(f.batch_cap, 24);
	cr_assert_eq(f.shown, 24, "the host is told the size that fitted");
	cr_assert_eq(f.fitted, 24);
	cr_assert_eq(f.bad, 32);
	cr_assert_eq(f.grow_after, 2 * FIT_GROW_AFTER, "memory ran out: slower to grow");
	cr_assert_eq(f.full_runs, 0);
}

Test(worker_fit, down_to_what_fitted_before_when_that_is_below_what_ran_out)
{
	struct fit f;
	fit_init(&f, 64, true);
	f.fitted = 40; /* a call of 40 fitted since the cap last fell */
	fit_shrink(&f, 8, 48);
	cr_assert_eq(f.batch_cap, 40);
	/* ... but not when what fitted before is what ran out now */
	fit_init(&f, 64, true);
	f.fitted = 40;
	fit_shrink(&f, 8, 40);
	cr_assert_eq(f.batch_cap, 8);
}

Test(worker_fit, nothing_fitted_leaves_one_task_a_call)
{
	struct fit f;
	fit_init(&f, 16, true);
	fit_shrink(&f, 0, 2);
	cr_assert_eq(f.batch_cap, 1);
	cr_assert_eq(f.shown, 1);
}

Test(worker_fit, grow_after_doubles_up_to_its_most)
{
	struct fit f;
	fit_init(&f, 64, true);
	for (int k = 0; k < 20; k++)
		fit_shrink(&f, 8, 16);
	cr_assert_eq(f.grow_after, FIT_GROW_MAX);
}

Test(worker_fit, up_by_an_eighth_after_grow_after_full_calls)
{
	struct fit f;
	fit_init(&f, 64, true);
	fit_shrink(&f, 32, 48); /* grow_after 32 now */
	for (uint32_t k = 1; k < f.grow_after; k++) {
		cr_assert_not(fit_grow(&f, 32), "the size the host knows is unchanged");
		cr_assert_eq(f.batch_cap, 32, "full call %u of %u: not yet", k, f.grow_after);
	}
	cr_assert_not(fit_grow(&f, 32));
	cr_assert_eq(f.batch_cap, 36, "32 + 32/8");
	cr_assert_eq(f.shown, 32, "a step up is tried before the host is told");
	cr_assert_eq(f.full_runs, 0);
	cr_assert_eq(f.grow_after, 2 * FIT_GROW_AFTER, "36 is below what ran out (48)");
	/* A smaller call fits: noted, nothing said. */
	cr_assert_not(fit_grow(&f, 20));
	cr_assert_eq(f.shown, 32);
	/* A call of the new size fits: now the host is told. */
	cr_assert(fit_grow(&f, 36));
	cr_assert_eq(f.shown, 36);
}

Test(worker_fit, one_task_more_at_least_and_never_past_batch_size)
{
	struct fit f;
	fit_init(&f, 10, true);
	fit_shrink(&f, 5, 6); /* grow_after 32 */
	f.grow_after = 1;
	fit_grow(&f, 5);
	cr_assert_eq(f.batch_cap, 6, "5/8 is 0: one task more");
	f.batch_cap = f.shown = 9;
	fit_grow(&f, 9);
	cr_assert_eq(f.batch_cap, 10, "9 + 1, the batch size");
	fit_grow(&f, 10);
	fit_grow(&f, 10);
	cr_assert_eq(f.batch_cap, 10, "never past it");
}

Test(worker_fit, a_size_that_ran_out_and_now_fits_grows_at_the_first_pace_again)
{
	struct fit f;
	fit_init(&f, 64, true);
	fit_shrink(&f, 30, 32);
	fit_shrink(&f, 30, 32);     /* grow_after 64 */
	f.batch_cap = f.shown = 32; /* grown back to what ran out */
	for (uint32_t k = 0; k < 64; k++)
		fit_grow(&f, 32);
	cr_assert_eq(f.grow_after, FIT_GROW_AFTER, "memory was freed");
	cr_assert_eq(f.batch_cap, 36);
}

Test(worker_fit, the_host_sees_the_size_and_the_splits)
{
	static struct shm_report rep;
	struct fit f;
	fit_init(&f, 64, true);
	fit_shrink(&f, 12, 16);
	f.oom_splits = 3;
	fit_publish(&f, &rep);
	cr_assert_eq(atomic_load(&rep.batch_now), 12);
	cr_assert_eq(atomic_load(&rep.oom_splits), 3);
}

Test(worker_fit, which_tasks_ran_out)
{
	cr_assert(fit_task_oom(GPUD_TASK_OOM, 0), "marked");
	cr_assert(fit_task_oom(0, GPUD_OOM), "the call ran out, the task not finished");
	cr_assert_not(fit_task_oom(GPUD_TASK_FATAL, GPUD_OOM), "marked otherwise");
	cr_assert_not(fit_task_oom(0, -1));
	struct gpud_task t[3] = {{0}};
	cr_assert_not(fit_any_oom(t, 3, 0));
	cr_assert(fit_any_oom(t, 3, GPUD_OOM));
	t[2].failed = GPUD_TASK_OOM;
	cr_assert(fit_any_oom(t, 3, 0));
	cr_assert_not(fit_any_oom(t, 2, 0), "only the call's tasks are looked at");
}

Test(worker_fit, alone_it_does_not_fit)
{
	struct gpud_error e = {{0}};
	fit_oom_message(&e, false);
	cr_assert_str_eq(e.message,
			 "out of memory: this task alone does not fit on the GPU (batch of 1)");
	strcpy(e.message, "cudaMalloc of 3 GiB");
	fit_oom_message(&e, true);
	cr_assert_str_eq(e.message, "out of memory: this task alone does not fit in memory "
				    "(batch of 1): cudaMalloc of 3 GiB");
	/* A full message keeps its start, cut to what fits, and ends in a NUL. */
	memset(e.message, 'x', sizeof e.message - 1);
	e.message[sizeof e.message - 1] = '\0';
	fit_oom_message(&e, false);
	size_t len = strlen(e.message);
	cr_assert_eq(len, sizeof e.message - 1);
	cr_assert(strncmp(e.message, "out of memory: ", 15) == 0);
	cr_assert_eq(e.message[len - 1], 'x');
	/* Not NUL-terminated at all (the plugin's own bytes): still bounded. */
	memset(e.message, 'y', sizeof e.message);
	fit_oom_message(&e, false);
	cr_assert_eq(strnlen(e.message, sizeof e.message), sizeof e.message - 1);
}

/* ---- an out-of-memory call split and run again (fit_refit) on a hand-built worker ---- */

#define N 8
#define CAP 64 /* max_result_bytes */

static uint32_t fits;             /* the most tasks a call of the fake plugin fits */
static uint32_t sizes[64], ncall; /* each call's size, in order */
static uint64_t fatal_id = UINT64_MAX;
static uint64_t bad_a = UINT64_MAX, bad_b = UINT64_MAX; /* a call holding one fails whole */

/* process_batch(): out of memory over `fits` tasks; -1 for a call holding bad_a or
 * bad_b (nothing marked); finishes each task otherwise, its result its id. */
static int fake_batch(void *state, struct gpud_task *t, size_t n)
{
	(void)state;
	sizes[ncall++] = (uint32_t)n;
	if (n > fits)
		return GPUD_OOM;
	for (size_t i = 0; i < n; i++)
		if (t[i].id == bad_a || t[i].id == bad_b)
			return -1;
	for (size_t i = 0; i < n; i++) {
		memcpy(t[i].result.data, &t[i].id, sizeof t[i].id);
		t[i].result.size = sizeof t[i].id;
		if (t[i].id == fatal_id)
			t[i].failed = GPUD_TASK_FATAL;
	}
	return 0;
}

static struct worker w;
static struct shm_header hdr;
static struct shm_report rep;
static _Alignas(64) uint8_t in_mem[N][SHM_REC_HDR + 64];
static _Alignas(64) uint8_t out_mem[N][SHM_REC_HDR + CAP + SHM_LINE];
static struct shm_rec *in[N], *out[N];
static struct gpud_task t[N], part[N];
static struct gpud_error err[N];
static uint32_t idx[2 * N];

/* A worker in the middle of a call of N tasks (ids 100..107) that ran out of memory:
 * the state the loop hands fit_refit. */
static void worker_after_oom_call(uint32_t fit_most)
{
	fits = fit_most;
	ncall = 0;
	hdr.max_result_bytes = CAP;
	w.hdr = &hdr;
	w.rep = &rep;
	w.plugin.worker.process_batch = fake_batch;
	w.t = t;
	w.in = in;
	w.out = out;
	w.err = err;
	w.fit.idx = idx;
	w.fit.part = part;
	fit_init(&w.fit, N, true);
	for (uint32_t i = 0; i < N; i++) {
		in[i] = (struct shm_rec *)in_mem[i];
		*in[i] = (struct shm_rec){.task_id = 100 + i, .size = 0, .attempt = 0};
		out[i] = (struct shm_rec *)out_mem[i];
		arm(out[i], CAP);
		loop_task_init(&w, i);
	}
	cr_assert_eq(fake_batch(NULL, t, N), fit_most < N ? GPUD_OOM : -1);
	ncall = 0;
}

Test(worker_fit, a_call_that_ran_out_runs_again_in_halves)
{
	worker_after_oom_call(3);
	cr_assert_eq(fit_refit(&w, N, GPUD_OOM), 0);
	/* 8 ran out: 4 runs out, then 2, 2, 2, 2 fit. */
	uint32_t want[] = {4, 2, 2, 2, 2};
	cr_assert_eq(ncall, 5);
	for (uint32_t k = 0; k < ncall; k++)
		cr_assert_eq(sizes[k], want[k], "call %u: %u tasks, not %u", k, sizes[k], want[k]);
	for (uint32_t i = 0; i < N; i++) {
		cr_assert_eq(t[i].failed, 0, "task %u finished", i);
		uint64_t id;
		memcpy(&id, t[i].result.data, sizeof id);
		cr_assert_eq(id, 100 + i, "task %u's result in its own slot", i);
	}
	cr_assert_eq(w.fit.oom_splits, 2, "the call of 8 and the part of 4");
	cr_assert_eq(w.fit.batch_cap, 2);
	cr_assert_eq(atomic_load(&rep.batch_now), 2);
	cr_assert_eq(atomic_load(&rep.oom_splits), 2);
	cr_assert_eq(w.fit.bad, 4);
}

Test(worker_fit, a_task_that_does_not_fit_alone_fails_saying_so)
{
	worker_after_oom_call(0);
	cr_assert_eq(fit_refit(&w, N, GPUD_OOM), 0);
	for (uint32_t i = 0; i < N; i++) {
		cr_assert_eq(t[i].failed, 1, "task %u", i);
		cr_assert(strstr(err[i].message, "alone does not fit on the GPU"), "task %u: %s", i,
			  err[i].message);
	}
	/* 8, 4, 2 split; then the 1s, one by one. */
	uint32_t want[] = {4, 2, 1, 1, 1, 1, 1, 1, 1, 1};
	cr_assert_eq(ncall, 10);
	for (uint32_t k = 0; k < ncall; k++)
		cr_assert_eq(sizes[k], want[k], "call %u", k);
	cr_assert_eq(w.fit.batch_cap, 1);
}

Test(worker_fit, tasks_left_when_another_ends_the_worker_are_not_run_again)
{
	fatal_id = 101; /* in the first part of 2 */
	worker_after_oom_call(2);
	cr_assert_eq(fit_refit(&w, N, GPUD_OOM), 0);
	fatal_id = UINT64_MAX;
	cr_assert_eq(ncall, 2, "4 ran out, then 2 with the fatal task; nothing after");
	cr_assert_eq(t[1].failed, GPUD_TASK_FATAL);
	cr_assert_eq(t[0].failed, 0);
	for (uint32_t i = 2; i < N; i++) {
		cr_assert_eq(t[i].failed, 1, "task %u", i);
		cr_assert(strstr(err[i].message, "another task of the call ended this worker"));
	}
}

/* A call that failed as a whole, with failures isolated: halves, a half that fails
 * halved again, so each task that fails does so alone; the batch size stays. */
Test(worker_fit, a_call_that_failed_whole_finds_its_bad_tasks_by_halves)
{
	bad_a = 102;
	bad_b = 106;
	worker_after_oom_call(N); /* fits, but holds the bad tasks: -1 */
	w.fit.isolate = true;
	cr_assert(fit_again(&w.fit, t, N, -1));
	cr_assert_eq(fit_refit(&w, N, -1), 0);
	bad_a = bad_b = UINT64_MAX;
	/* 4 fails: 2 fits, 2 fails: 1 fails, 1 fits; the same in the other half. */
	uint32_t want[] = {4, 2, 2, 1, 1, 4, 2, 2, 1, 1};
	cr_assert_eq(ncall, 10);
	for (uint32_t k = 0; k < ncall; k++)
		cr_assert_eq(sizes[k], want[k], "call %u: %u tasks, not %u", k, sizes[k], want[k]);
	for (uint32_t i = 0; i < N; i++) {
		if (i == 2 || i == 6) {
			cr_assert_eq(t[i].failed, 1, "task %u", i);
			cr_assert_str_eq(err[i].message,
					 "process_batch() returned -1 without a message");
			continue;
		}
		cr_assert_eq(t[i].failed, 0, "task %u finished", i);
		uint64_t id;
		memcpy(&id, t[i].result.data, sizeof id);
		cr_assert_eq(id, 100 + i, "task %u's result in its own slot", i);
	}
	cr_assert_eq(w.fit.oom_splits, 0);
	cr_assert_eq(w.fit.batch_cap, N, "a failure does not lower the batch size");
}

/* Without isolation a call that failed as a whole is not run again. */
Test(worker_fit, without_isolation_a_failed_call_is_not_run_again)
{
	bad_a = 103;
	worker_after_oom_call(N);
	w.fit.isolate = false;
	cr_assert_not(fit_again(&w.fit, t, N, -1));
	w.fit.isolate = true;
	cr_assert_not(fit_again(&w.fit, t, 1, -1), "a call of one task has nothing to split");
	bad_a = UINT64_MAX;
}
