/* SPDX-License-Identifier: MIT */
/* The host loop (dispatcher.c). */
#ifndef GPUD_DISPATCHER_H
#define GPUD_DISPATCHER_H

#include "host.h"

/* Runs the loop until every task has an outcome; 0, or 3 on abort. `finish` is the rest
 * of the run, which the stand-in runs itself if the run ends during a stuck call. */
int dispatch(struct host *h, int (*finish)(struct host *h));
/* One pass of the loop, waiting when it finds nothing to do; true when the run is
 * over. gen_ok = false (the stand-in): the generator is not called. */
bool dispatch_pass(struct host *h, bool gen_ok);
/* Takes in Ctrl-C, SIGTERM, SIGHUP (the first starts the drain, the second stops every
 * worker) and job control. */
void dispatch_signals(struct host *h);
/* Takes in worker w's published results; returns how many. */
unsigned dispatch_drain(struct host *h, struct host_worker *w);
/* The tasks worker w may hold before its first result (tasks in flight: 2 x max_in_flight). */
void dispatch_first_window(struct host *h, struct host_worker *w);

#endif
