/* SPDX-License-Identifier: MIT */
/* A worker's output in plain mode: each line of the plugin's standard output and
 * standard error passed on to gpud's standard error as "[worker K] line". */
#ifndef GPUD_WORKER_OUTPUT_H
#define GPUD_WORKER_OUTPUT_H

/* Starts prefixing when GPUD_OUTPUT_PREFIX is set (the host sets it in plain mode). */
void output_prefix_start(int worker);
/* Before exiting: lets the last lines through (waits at most a second). */
void output_prefix_finish(void);
/* Ends the worker process: stdio flushed, the last lines let through, then _exit (never
 * exit: the plugin may hold threads or memory that exit-time handlers must not walk
 * into). */
_Noreturn void worker_finish(int status);

#endif
