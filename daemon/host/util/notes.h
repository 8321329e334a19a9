/* SPDX-License-Identifier: MIT */
/*
 * Notes for the person watching: a worker's death, a failed setup, a retired GPU, a
 * task's failure. Any thread may add one (h->view.notes, under its lock); the view's
 * thread (view/ui.c) shows them: the dashboard the last few, plain mode each in order.
 */
#ifndef GPUD_NOTES_H
#define GPUD_NOTES_H

struct host;

enum ui_note {
	UI_EVENT,   /* a worker died, a setup failed, a GPU was retired: always told */
	UI_FAILURE, /* a task failed or timed out: told by the dashboard and plain mode */
};

/* A line from the host for the person watching. With the dashboard or plain mode it
 * goes through the UI (printing would tear the dashboard; plain mode rate-limits
 * failures); with --ui off an event goes to standard error and a failure nowhere. */
void ui_say(struct host *h, enum ui_note kind, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif /* GPUD_NOTES_H */
