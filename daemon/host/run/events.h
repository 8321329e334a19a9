/* SPDX-License-Identifier: MIT */
/* Outcomes and events: what the sink hears and the stats count (events.c). */
#ifndef GPUD_EVENTS_H
#define GPUD_EVENTS_H

#include "host.h"

void events_deliver(struct host *h, const struct gpud_event *ev);
/* A task's outcome: delivered now, or held until earlier ones are (ordered = true). */
void events_deliver_outcome(struct host *h, const struct gpud_event *ev);
/* Task `id` is not run: an earlier run finished it (--resume). */
void events_skip(struct host *h, uint64_t id);
/* End of run: delivers every held outcome in task order, past the gaps of tasks that
 * did not run. */
void events_flush_held(struct host *h);
void events_worker(struct host *h, enum gpud_event_kind kind, const struct host_worker *w,
		   const char *message);
/* The final outcome of task t, or a retry when attempts are left and retry_on allows.
 * `input` is its bytes. */
void events_outcome(struct host *h, const struct host_worker *w, const struct task_ent *t,
		    const void *input, enum cause cause, const void *result, size_t result_size,
		    const char *message, double seconds);

/* The run ends while a sink call has not returned: the outcome in that call and those
 * held for ordered delivery were never taken. Each counts as not run (the stats, the
 * failures list, sink_lost) and has no journal record, so --resume runs it again. */
void events_undelivered(struct host *h);

/* A sink called on the calling thread only (GPUD_SINK_CALLING_THREAD): the events that
 * waited while the stand-in ran the loop, delivered in order; nothing on the stand-in. */
void events_deliver_waiting(struct host *h);
/* The run ends on the stand-in: the events still waiting never reached the sink. Each
 * outcome among them counts as not run and has no journal record (--resume runs it). */
void events_drop_waiting(struct host *h);

/* Closes the sink with the final stats (and, to a sink with gpud_sink_finish, how the
 * run ends), watched by the stand-in as its other calls are. 0, or -1 with err. */
int events_close_sink(struct host *h, const struct gpud_run_end *end, struct gpud_error *err);

#endif
