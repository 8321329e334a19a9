/* SPDX-License-Identifier: MIT */
/*
 * The host loop's stand-in: a thread that runs the loop while the generator is stuck,
 * and keeps the run in control while the sink is.
 *
 * The host loop calls the generator itself, between draining results, because that is
 * the fast path: one thread, no hand-over per task. But a generator call can block (an
 * idle stdin pipe, an empty queue) or take seconds. The stand-in thread looks at the
 * loop when there is a reason to: a worker ran out of tasks or result space and went to
 * sleep (it rings the host's bell as it does), a signal came, or 10 ms passed. A look
 * that finds the loop inside a generator call is followed by another 0.5 ms later; when
 * the same call is still running then, the stand-in takes the loop over: it publishes the tasks
 * already yielded, then takes in results, handles signals, timeouts and worker deaths, and places
 * tasks that run again, exactly as the loop would, but calls no generator. When the call returns,
 * the loop's thread waits for the stand-in to finish its pass and takes the loop back. If the run
 * ends first (every task done, or an interrupt), the stand-in ends it, and the process with it;
 * unless the generator has an interrupt entry (an in-process one, gpud.h): the stand-in calls
 * it, and once the call has returned gives the loop back, whose thread ends the run. Events for
 * a sink marked GPUD_SINK_CALLING_THREAD wait meanwhile (events.c: out.waiting).
 *
 * The hand-over costs the loop's thread two plain stores and a load per generator
 * call: the stand-in pays for the ordering with membarrier(2), which puts a full
 * barrier into the loop's thread only when a take-over is tried (an asymmetric Dekker
 * handshake). Where membarrier is not available, the loop's thread uses a fence.
 *
 * Sink calls go through the same gate, marked as the sink's (`sink`, with the event).
 * One made in the middle of a pass cannot have the loop run around it, so a sink call
 * found running at two looks STANDIN_SINK_NS apart is watched instead (keep_watch in
 * standin.c): signals and the workers' bounds are taken care of, and the run is ended
 * without the sink after drain_timeout, a second interrupt or sink_timeout. The stand-in
 * runs until the sink is closed, so the end of a run (the last held outcomes, the close)
 * is watched too.
 */
#ifndef GPUD_STANDIN_H
#define GPUD_STANDIN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct host;
struct host_worker;

/* What the stand-in runs of the loop, given by the loop (dispatcher.c): the two know
 * each other only through this and the gate. */
struct standin_loop {
	/* One pass of the loop without generator calls; true when the run is over. */
	bool (*pass)(struct host *h, bool gen_ok);
	/* Takes in Ctrl-C, SIGTERM, SIGHUP and job control. */
	void (*signals)(struct host *h);
	/* The rest of the run after the loop (run.c's finish_run): the stand-in runs it
	 * when the run ends while a call never returns. Returns the exit status. */
	int (*finish)(struct host *h);
};

/* The generator call gate. The loop's thread writes `in_call`, `calls` and `filling`;
 * the stand-in writes `taken`. */
/* The gate's sink_kind while the sink's close runs. */
#define GATE_SINK_CLOSE (-1)

struct gate {
	_Alignas(64) _Atomic uint32_t in_call; /* inside a generator call */
	_Atomic uint64_t calls;                /* calls finished */
	/* The worker whose task ring the current (or last) call writes into: set by the
	 * loop's thread before each call, read by the stand-in only while the loop is
	 * taken. The slot the call fills is reserved in the loop's thread alone (its
	 * task_head has not moved yet), so anything else written into that ring meanwhile
	 * would land in the same slot. */
	struct host_worker *filling;
	/* The call is the sink's (not the generator's), and the event it was given: set
	 * by the loop's thread before each sink call it makes. */
	_Atomic uint32_t sink;
	int sink_kind; /* the event's kind, or GATE_SINK_CLOSE */
	uint64_t sink_task;
	int sink_attempt;
	bool fence;                          /* no membarrier: fence on every call */
	struct standin_loop loop;            /* set once, before the thread starts */
	_Alignas(64) _Atomic uint32_t taken; /* the stand-in runs the loop */
	_Atomic uint32_t ending;             /* the loop is done: the stand-in leaves */
	_Alignas(64) char _end;
};

/* Starts the stand-in (at the start of the loop). 0, or -errno. */
int standin_start(struct host *h, const struct standin_loop *loop);
/* Ends it (the loop's thread, at the end of the loop). */
void standin_stop(struct host *h);

/* The loop's thread, after a call found the loop taken: waits for it back. */
void standin_wait(struct host *h);

/* The loop's thread, before a generator or sink call. The store is a release (a plain
 * store on x86, as a relaxed one): a stand-in that sees the call (an acquire load) sees
 * everything the loop wrote before it, which is what it takes over. */
static inline void gate_enter(struct gate *g)
{
	atomic_store_explicit(&g->in_call, 1, memory_order_release);
	atomic_signal_fence(memory_order_seq_cst);
}

/* After a generator call; true when the stand-in ran the loop meanwhile. */
static inline bool gate_leave(struct host *h, struct gate *g)
{
	atomic_signal_fence(memory_order_seq_cst);
	atomic_store_explicit(&g->in_call, 0, memory_order_relaxed);
	atomic_store_explicit(&g->calls, atomic_load_explicit(&g->calls, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	if (__builtin_expect(g->fence, 0))
		atomic_thread_fence(memory_order_seq_cst);
	else
		atomic_signal_fence(memory_order_seq_cst);
	/* An acquire (a plain load on x86): a stand-in that ran the loop and gave it back
	 * (taken 0, a release) before this look left everything it wrote visible here. */
	if (__builtin_expect(atomic_load_explicit(&g->taken, memory_order_acquire) != 0, 0)) {
		standin_wait(h);
		return true;
	}
	return false;
}

#endif /* GPUD_STANDIN_H */
