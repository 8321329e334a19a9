/* SPDX-License-Identifier: MIT */
/*
 * The run's abort: the first reason given is kept (h->ctl.abort_msg) and the run ends
 * with exit status 3 (h->ctl.abort); later reasons are dropped. Called by the loop, the
 * stand-in, the stages and the sink's calls; the loop acts on it.
 */
#ifndef GPUD_ABORT_H
#define GPUD_ABORT_H

#include "host.h"

void host_abort(struct host *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* GPUD_ABORT_H */
