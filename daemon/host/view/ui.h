/* SPDX-License-Identifier: MIT */
/*
 * What a run shows while it runs: the live dashboard, plain progress lines, or nothing.
 * The UI runs in a thread of its own and only reads: the host's published counters
 * (view/publish.h: relaxed atomic loads of fields the loop stores atomically) and each
 * worker's control block in shared memory. Rendering never blocks the host loop, and costs it
 * nothing per task.
 */
#ifndef GPUD_UI_H
#define GPUD_UI_H

#include <stdarg.h>
#include <stdbool.h>

#include "util/notes.h" /* ui_say: the notes the view shows */

enum ui_mode { UI_OFF, UI_PLAIN, UI_DASHBOARD };

struct host;
struct ui;

/* --ui auto|dashboard|plain|off to a mode: auto is the dashboard when standard error
 * is a terminal, plain otherwise. -1 for an unknown word. */
int ui_mode_parse(const char *word);

/* Starts the UI thread for `h` (nothing for UI_OFF). NULL when there is none. */
struct ui *ui_start(struct host *h);
/* Draws the final frame (it stays on screen) and ends the thread. */
void ui_stop(struct ui *u);

/* Job control: before the host stops (Ctrl-Z) the terminal gets its cursor back. */
void ui_suspend(struct host *h, bool stopping);

#endif /* GPUD_UI_H */
