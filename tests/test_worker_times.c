/* SPDX-License-Identifier: MIT */
/* Where a worker's time goes (worker/times.h) on a hand-built struct times and report
 * block: stretches charged to phases, the plugin's own unpacking and packing taken from
 * the user's time, calls counted by size, and what reaches the host. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include "times.h"

static struct shm_times out;

static struct times fresh(uint64_t mark)
{
	memset(&out, 0, sizeof out);
	return (struct times){.out = &out, .mark = mark};
}

Test(worker_times, a_stretch_goes_to_its_phase_and_to_the_host)
{
	struct times t = fresh(1000);
	times_charge(&t, PH_WAIT, 1500);
	times_charge(&t, PH_USER, 4500);
	cr_assert_eq(t.ph[PH_WAIT], 500);
	cr_assert_eq(t.ph[PH_USER], 3000);
	cr_assert_eq(t.mark, 4500);
	cr_assert_eq(atomic_load(&out.phase_ns[PH_WAIT]), 500);
	cr_assert_eq(atomic_load(&out.phase_ns[PH_USER]), 3000);
	cr_assert_eq(atomic_load(&out.end_ns), 4500, "the phases add up to end_ns");
	cr_assert_eq(t.dirty, 0, "all of it written");
}

Test(worker_times, a_reading_before_the_mark_charges_nothing)
{
	struct times t = fresh(1000);
	times_charge(&t, PH_UNPACK, 900);
	cr_assert_eq(t.ph[PH_UNPACK], 0);
	cr_assert_eq(t.mark, 1000, "the mark never goes back");
}

Test(worker_times, the_plugins_unpacking_and_packing_come_out_of_the_users_time)
{
	struct times t = fresh(0);
	t.plug_unpack = 100;
	t.plug_pack = 50;
	times_charge(&t, PH_USER, 1000);
	cr_assert_eq(t.ph[PH_UNPACK], 100);
	cr_assert_eq(t.ph[PH_HANDBACK], 50);
	cr_assert_eq(t.ph[PH_USER], 850);
	cr_assert_eq(t.plug_unpack, 0);
	cr_assert_eq(t.plug_pack, 0);
	cr_assert_eq(atomic_load(&out.phase_ns[PH_UNPACK]), 100);
	/* More than the stretch: capped at it, unpacking first; the user keeps none. */
	t.plug_unpack = 800;
	t.plug_pack = 800;
	times_charge(&t, PH_USER, 2000);
	cr_assert_eq(t.ph[PH_UNPACK], 900);
	cr_assert_eq(t.ph[PH_HANDBACK], 250);
	cr_assert_eq(t.ph[PH_USER], 850);
	/* Only the user's time gives: a wait keeps its own. */
	t.plug_unpack = 10;
	times_charge(&t, PH_WAIT, 3000);
	cr_assert_eq(t.ph[PH_WAIT], 1000);
	cr_assert_eq(t.plug_unpack, 10);
}

Test(worker_times, calls_counted_by_size)
{
	struct times t = fresh(0);
	struct gpud_task task = {0};
	times_count_call(&t, 1, &task);
	times_count_call(&t, 64, &task);
	times_count_call(&t, 64, &task);
	times_count_call(&t, 3, &task);
	cr_assert_eq(t.by_size[gpud_call_bucket(1)], 1);
	cr_assert_eq(t.by_size[gpud_call_bucket(64)], 2);
	cr_assert_eq(t.by_size[gpud_call_bucket(3)], 1);
	cr_assert_eq(t.items, 132);
	cr_assert_eq(t.call_min, 1);
	cr_assert_eq(t.call_max, 64);
	cr_assert_eq(atomic_load(&out.items), 0, "not written until published");
	times_publish_calls(&t);
	cr_assert_eq(atomic_load(&out.items), 132);
	cr_assert_eq(atomic_load(&out.calls[gpud_call_bucket(64)]), 2);
	cr_assert_eq(atomic_load(&out.call_min), 1);
	cr_assert_eq(atomic_load(&out.call_max), 64);
	cr_assert_eq(t.dirty_calls, 0);
	cr_assert_eq(t.dirty & CALLS_DIRTY, 0);
}

Test(worker_times, the_plugins_own_calls_counted_by_their_sizes)
{
	struct times t = fresh(0);
	struct gpud_call_times ct = {
		.unpack_ns = 7, .pack_ns = 9, .items = 40, .min_items = 8, .max_items = 32};
	ct.calls[gpud_call_bucket(8)] = 1;
	ct.calls[gpud_call_bucket(32)] = 1;
	struct gpud_task task = {0};
	task.reserved[0] = &ct;
	times_count_call(&t, 2, &task); /* a call of 2 tasks, 40 items in the plugin's calls */
	cr_assert_eq(t.items, 40);
	cr_assert_eq(t.by_size[gpud_call_bucket(8)], 1);
	cr_assert_eq(t.by_size[gpud_call_bucket(32)], 1);
	cr_assert_eq(t.by_size[gpud_call_bucket(2)], 0, "the call itself is not counted");
	cr_assert_eq(t.call_min, 8);
	cr_assert_eq(t.call_max, 32);
	cr_assert_eq(t.plug_unpack, 7);
	cr_assert_eq(t.plug_pack, 9);
	/* Times alone (no calls of its own): the call is counted as gpud's. */
	struct gpud_call_times only = {.unpack_ns = 1};
	task.reserved[0] = &only;
	times_count_call(&t, 2, &task);
	cr_assert_eq(t.by_size[gpud_call_bucket(2)], 1);
	cr_assert_eq(t.items, 42);
	cr_assert_eq(t.call_min, 2);
}
