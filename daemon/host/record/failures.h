/* SPDX-License-Identifier: MIT */
/*
 * The run's list of failures (failures.c): failures.jsonl in the run's folder, one JSON
 * object per line for every failed attempt (retried or final) and every task that did
 * not run, whatever the sink and the UI mode, so that no failure is only on a screen:
 *
 *   {"task_id": 7, "status": "error", "attempt": 0, "worker_id": 1, "gpu_id": 1,
 *    "retried": false, "message": "..."}
 *   {"task_id": 9, "status": "not_run", "attempt": 0}
 *
 * status: error | timeout | not_run. worker_id and gpu_id are -1 when no worker was
 * involved (an input over max_task_bytes). The final summary names the file.
 */
#ifndef GPUD_FAILURES_H
#define GPUD_FAILURES_H

#include <stdbool.h>
#include <stdint.h>

#include "host.h"

/* The failures list's name in the run's folder (record/files.c makes the folder). */
#define FILES_FAILURES "failures.jsonl"

/* Takes the open descriptor `fd` (or -1: nothing is listed). 0, or -1. */
int failures_open(struct host *h, int fd);
/* A failed attempt: status "error" or "timeout"; retried = it runs again. */
void failures_add(struct host *h, uint64_t task_id, unsigned attempt, const struct host_worker *w,
		  bool timeout, const char *message, bool retried);
void failures_not_run(struct host *h, uint64_t task_id, unsigned attempt);
/* Lists the tasks the workers still held as not run (the run ended without them). */
void failures_not_run_held(struct host *h);
/* Writes the final summary's lines about the list, then closes it. */
void failures_close(struct host *h, FILE *summary);

#endif
