/* SPDX-License-Identifier: MIT */
/*
 * gpud-worker's state, shared by its parts. The core below is the link with the host
 * (its header, this worker's feed and report block, the rings and their positions, the
 * bells) and one call's tasks; each part owns a slice of its own, embedded:
 *
 *   fit     batches that fit (fit.c)                  tm, clk  where the time goes (times.h)
 *   fl      tasks in flight (flight.c)                cfg      the plugin's keys (config.c)
 *
 * Everything is the loop's thread's, but for the lines the watcher reads (attach.c):
 * committed, call_seq, interrupting, interrupted and the report block.
 */
#ifndef GPUD_WORKER_WORKER_H
#define GPUD_WORKER_WORKER_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "attach.h"
#include "config.h"
#include "fit.h"
#include "flight.h"
#include "loader.h"
#include "output.h"
#include "ring.h"
#include "times.h"
#include "wait.h"

/* Publish results at least this often, and every PUBLISH_BURST results, so the host
 * sees results of long tasks at once and short ones in cheap bursts. */
#define PUBLISH_BURST 32
#define PUBLISH_NS 100000u
/* A call that runs longer than this has the results before it published by the
 * watcher thread (attach.c): finished results never wait behind a long or hung call,
 * where a kill would have them run again and a drain count them as not run. */
#define HELD_NS 20000000u

struct worker {
	const struct shm_header *hdr;
	const struct shm_feed *feed; /* read-only: the host's */
	struct shm_report *rep;      /* ours: the host checks everything in it */
	struct wait_bell host_bell, my_bell;
	struct ring tasks, results;
	uint64_t task_tail;   /* private: next task record to read */
	uint64_t task_head;   /* cached from ctl->task_head */
	uint64_t result_head; /* private: next result record to write */
	uint64_t result_tail; /* cached from ctl->result_tail */
	uint64_t result_need; /* bytes reserved for one result slot, gap included */
	unsigned pending;     /* results written, not yet published */
	/* result_head as of the last call's end, for the watcher to publish while a call
	 * runs long (its own line: the watcher reads it every HELD_NS) */
	_Alignas(64) _Atomic uint64_t committed;
	/* Timeouts ended in place (ABI 1.5, gpud_worker_interrupt): call_seq is odd while a
	 * call of the plugin runs (written by the loop around each call), `interrupting`
	 * the call_seq of a call the watcher is interrupting (0: none), `interrupted` the
	 * last call it interrupted. A call ends only once no interrupt of it is under way
	 * (call_ends), so the plugin is never asked to interrupt a call that has ended. */
	_Alignas(64) _Atomic uint64_t call_seq;
	_Atomic uint64_t interrupting;
	_Atomic uint64_t interrupted;
	_Alignas(64) char committed_end;
	bool waited;           /* the clock read last is stale: we waited since */
	uint64_t gap_ns;       /* tasks' arrivals while gathering a batch: the time between
				* two, averaged (0 until seen); the automatic batch wait */
	bool interrupts;       /* the plugin ends a call past task_timeout itself */
	bool cut;              /* the call (or one of its split parts) was interrupted */
	uint64_t interrupt_ns; /* when: task_timeout plus one coarse tick (as the host) */
	uint64_t calls;        /* the loop's copy of call_seq */
	uint64_t published_ns;

	struct task_clock clk; /* task timing (times.h) */

	struct plugin plugin; /* its table: plugin.worker */
	void *state;
	struct plugin_config cfg;
	bool cpu_stage; /* --stage K: a CPU stage's worker */

	/* one call's tasks: batch_size of each (or, in flight, `held`) */
	struct gpud_task *t;
	struct shm_rec **in, **out;
	uint64_t *out_pos; /* ring position of each result slot */
	struct gpud_error *err;
	char fatal[SHM_MSG_MAX];
	bool tainted; /* the plugin wrote before a result buffer: replace this process */

	struct fit fit;    /* batches that fit */
	struct flights fl; /* tasks in flight */
	struct times tm;   /* where the time goes */
};

/* Around every call of process() or process_batch() of a plugin that interrupts
 * (w->interrupts): call_seq odd from here until call_ends. */
static inline void call_begins(struct worker *w)
{
	if (w->interrupts)
		atomic_store(&w->call_seq, ++w->calls);
}

/* The call returned: call_seq even, then waits out an interrupt of it that the watcher
 * began before it saw the change (a moment: gpud_worker_interrupt returns at once).
 * Notes in w->cut whether the call was interrupted. */
static inline void call_ends(struct worker *w)
{
	if (!w->interrupts)
		return;
	uint64_t s = w->calls++;
	atomic_store(&w->call_seq, w->calls);
	while (atomic_load(&w->interrupting) == s)
		sched_yield();
	if (atomic_load_explicit(&w->interrupted, memory_order_relaxed) == s)
		w->cut = true;
}

/* ---- the task loop (loop.c), its pieces also used by fit.c and flight.c ---- */

/* The loop of process() or process_batch(), until the host says stop and every task
 * handed over is done. */
void loop_run(struct worker *w);
/* Hands the results written so far to the host. */
void loop_publish(struct worker *w, uint64_t now);
/* The next task record, waiting for one; NULL when told to stop and none is left. */
struct shm_rec *loop_next_task(struct worker *w, uint64_t *now);
/* Room for one more result slot at *head (the private head of this call's slots),
 * waiting for the host to free some. */
struct shm_rec *loop_reserve_result(struct worker *w, uint64_t *head);
/* Task i's struct as the plugin first sees it, pointing at its input and result slot. */
void loop_task_init(struct worker *w, uint32_t i);
/* Writes task i's result record at ring position `pos` (and, in a batch slot, a filler
 * over the rest of the slot). Returns the bytes the record takes, gap included. */
uint64_t loop_finish_result(struct worker *w, uint32_t i, uint64_t pos, int rc, double seconds,
			    bool slot, uint32_t call);

#endif
