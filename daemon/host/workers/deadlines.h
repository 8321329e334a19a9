/* SPDX-License-Identifier: MIT */
/* The host's bounds on every wait (deadlines.c). */
#ifndef GPUD_DEADLINES_H
#define GPUD_DEADLINES_H

#include <stdint.h>

struct host;

/* Enforces task_timeout, setup_timeout, the bound on unstarted tasks and the cleanup
 * bound; returns the next deadline to wake up for (0: none). */
uint64_t lifecycle_timeouts(struct host *h, uint64_t now);

#endif /* GPUD_DEADLINES_H */
