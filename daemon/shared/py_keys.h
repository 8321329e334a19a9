/* SPDX-License-Identifier: MIT */
/* The python plugins' own keys in their job-file sections (every other key goes to the
 * user's code as a keyword argument) and a python sink's callbacks: the plugins
 * (plugins/python/) take them from here, and `gpud check --import` (host/job/python.c)
 * gives them to its interpreter (python_import.py), so both go by the one list. */
#ifndef GPUD_PY_KEYS_H
#define GPUD_PY_KEYS_H

#include <stddef.h>

static const char *const py_worker_keys[] = {"script", "module", "class", "python_path",
					     "input",  "result", NULL};
static const char *const py_generator_keys[] = {"script", "module", "function", "python_path",
						NULL};
static const char *const py_sink_keys[] = {"script",      "module", "class",
					   "python_path", "result", NULL};

/* In the order of gpud_sink_events' kinds (sink.c's CB_*). */
#define PY_SINK_CALLBACKS                                                                          \
	"on_success", "on_error", "on_timeout", "on_setup_fail", "on_task_start", "on_exit",       \
		"on_resume"

#endif
