/* SPDX-License-Identifier: MIT */
/* Fields published to the dashboard and metrics threads (docs/architecture.md, Threads). */
#ifndef GPUD_PUBLISH_H
#define GPUD_PUBLISH_H

/*
 * Published fields: the counters and states the dashboard and metrics threads read while
 * the loop (or the stand-in, in its place) writes them: h->stats' task counts,
 * in_flight, resumed and total; each worker's state, end, ok, failed, timeouts, restarts,
 * last_seconds, busy_s, ready_ns and rep; each stage's alive and queued; retired[]; the metrics
 * histogram. Every write to one of them after
 * those threads start is UI_SET or UI_ADD, every read on those threads UI_READ: relaxed
 * atomic stores and loads of aligned words (plain moves on x86-64, no locked
 * instruction). One thread writes at a time (the stand-in hand-over orders the two), so
 * an increment is a relaxed load and store, not a read-modify-write. The loop's own
 * plain reads of them race with nothing: only writes do. A reader sees each field whole,
 * not a consistent set (a frame may show ok one ahead of in_flight).
 */
#define UI_READ(x)                                                                                 \
	({                                                                                         \
		__typeof__(x) ui_read_;                                                            \
		__atomic_load(&(x), &ui_read_, __ATOMIC_RELAXED);                                  \
		ui_read_;                                                                          \
	})
#define UI_SET(x, v)                                                                               \
	do {                                                                                       \
		__typeof__(x) ui_set_ = (v);                                                       \
		__atomic_store(&(x), &ui_set_, __ATOMIC_RELAXED);                                  \
	} while (0)
#define UI_ADD(x, n) UI_SET(x, (x) + (n))

#endif /* GPUD_PUBLISH_H */
