/* SPDX-License-Identifier: MIT */
/*
 * The stages' figures as the view shows them (the dashboard, plain progress, metrics):
 * plain numbers the loop fills (run/stages.c, stages_publish: every 100 ms, and once at
 * the end) and the view's threads read field by field (UI_READ, publish.h), so that the
 * renderers need nothing of run/. One per CPU stage, then one for the GPU workers
 * (host_stage.fig, host.h).
 */
#ifndef GPUD_FIGURES_H
#define GPUD_FIGURES_H

#include <stdint.h>

struct stage_figures {
	unsigned workers;              /* its workers */
	unsigned alive;                /* of them, set up or setting up */
	uint64_t queued;               /* tasks waiting in front of it (given and not
					* started, or finished upstream and waiting for room) */
	uint64_t ok, failed, timeouts; /* task runs that ended in it, by how */
	double busy;                   /* its workers' time in process() over their time up,
					* 0 to 1, by the last fill */
	double busy_cpu;               /* of busy, the part that was CPU time of the calls'
					* threads (0 to busy) */
};

#endif /* GPUD_FIGURES_H */
