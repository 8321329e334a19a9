/* SPDX-License-Identifier: MIT */
/*
 * Tasks in flight (ABI 1.4: gpud_worker_submit, gpud_worker_poll).
 *
 * Tasks are submitted in ring order, each with its result slot reserved in ring order
 * (full size, as a batch's: the plugin writes its result in place), and finish in any
 * order; results are published in submit order as the finished prefix grows. So the
 * host sees results in the order it handed tasks out, and its checks and its recovery
 * stay as they are. Up to max_in_flight run at once; finished ones wait behind an
 * older running one in up to as many entries again (`held`), so one long task does not
 * keep the engine from running others. The report names the oldest running task:
 * busy_since_ns its submit time (its task_timeout), run_from..timed_to its record (a
 * timeout blames it alone), run_from..task_tail what a crash blames (what is before
 * it finished, and runs again elsewhere).
 */
#ifndef GPUD_WORKER_FLIGHT_H
#define GPUD_WORKER_FLIGHT_H

#include <stdint.h>

#include <gpud/plugin.h>

/* One entry of the tasks in flight. */
struct flight {
	uint64_t from, to; /* its task's record in the task ring: [from, to) */
	uint64_t since;    /* when it was submitted */
	enum { FLY_FREE, FLY_RUNNING, FLY_DONE } state;
};

/* Tasks in flight (flight 0: process or process_batch). The worker's call arrays are
 * then a ring of `held` entries in submit order, the task of sequence number q in entry
 * q % held: [oldest, next) are held (not yet published), `running` of them with the
 * plugin, `first_running` the oldest of those. Owned by the loop's thread. */
struct flights {
	uint32_t flight, held, running;
	uint64_t oldest, next, first_running;
	uint64_t reserved_head; /* past the last result slot reserved */
	struct flight *fly;     /* per entry: its task's ring positions, submit time, state */
	struct gpud_task **done;
	uint32_t culprit; /* the entry whose task ended this process (fatal, tainted) */
};

struct worker;

/* The task loop of a plugin with tasks in flight, until the host says stop and every
 * task handed over is done. */
void flight_run(struct worker *w);

#endif
