/* SPDX-License-Identifier: MIT */
/*
 * Metrics for a cluster's monitoring, in Prometheus text format (metrics.c):
 * `[ui] metrics_file` is rewritten every metrics_interval seconds and at the end (to a
 * temporary name in the same folder, then renamed, as node_exporter's textfile
 * collector wants), and `[ui] metrics_listen` serves the same text on GET /metrics.
 *
 * The responder is a few dozen lines on its own thread, not libmicrohttpd: it answers
 * one short GET at a time over loopback, and a library (with its own threads, TLS and
 * a package to install on every node) would be the larger risk. The thread renders
 * from the host's published counters (view/publish.h); the host loop
 * pays one branch a result when metrics are off, and a histogram step when on.
 */
#ifndef GPUD_METRICS_H
#define GPUD_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "view/publish.h"

struct host;

/* gpud_task_seconds bucket bounds (seconds); one more bucket is +Inf. */
#define METRICS_SEC_BUCKETS 15
/* gpud_batch_size bucket bounds: 1, 2, 4, ... 65536. */
#define METRICS_BATCH_BUCKETS 17

struct metrics_hist {
	uint64_t sec[METRICS_SEC_BUCKETS + 1];
	double sec_sum;
	uint64_t batch[METRICS_BATCH_BUCKETS + 1];
	uint64_t batch_sum, batch_count;
};

extern const double metrics_sec_bounds[METRICS_SEC_BUCKETS];

/* Starts what the job asks for: binds metrics_listen, starts the thread. 0, or -1 with
 * one line on standard error (the run does not start: the port was asked for). */
int metrics_start(struct host *h);
/* Stops the thread and the listener, and writes the file a last time, with the final
 * figures. */
void metrics_stop(struct host *h, int exit_status);
/* Whether `host:port` can be listened on (bound, then closed at once): for gpud check. */
int metrics_can_listen(const char *host, unsigned port, char *why, size_t len);

/* One task's time in process(); `call` is the size of the batch it began, or 0. */
static inline void metrics_task(struct metrics_hist *m, double seconds, uint32_t call)
{
	unsigned i = 0;
	while (i < METRICS_SEC_BUCKETS && seconds > metrics_sec_bounds[i])
		i++;
	UI_ADD(m->sec[i], 1);
	UI_ADD(m->sec_sum, seconds);
	if (call) {
		unsigned b = 0;
		while (b < METRICS_BATCH_BUCKETS && call > (1u << b))
			b++;
		UI_ADD(m->batch[b], 1);
		UI_ADD(m->batch_sum, call);
		UI_ADD(m->batch_count, 1);
	}
}

#endif
