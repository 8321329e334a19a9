/* SPDX-License-Identifier: MIT */
/*
 * Which Python the python plugins run on (python.c). One run uses one interpreter, in
 * the host (generator, sink) and in every worker: chosen once, before anything runs,
 * and handed to the plugins through the environment the workers inherit
 * (GPUD_PYTHON_LIBRARY, GPUD_PYTHON_EXECUTABLE; plugins/python/stub.c reads them).
 */
#ifndef GPUD_PYTHON_H
#define GPUD_PYTHON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "job/config.h"

/* What the chosen interpreter said about itself (every string owned by python.c). */
struct python_choice {
	const char *executable;  /* its sys.executable (a venv's bin/python stays so) */
	const char *version;     /* "3.12.1" */
	const char *prefix;      /* sys.prefix: the venv or environment */
	const char *base_prefix; /* sys.base_prefix: the installation */
	const char *library;     /* the shared libpython file the plugins load */
	const char *site;        /* its site-packages (purelib) */
	const char *env;         /* "venv /x", "conda env /x" or "no environment" */
	const char *source;      /* how it was chosen: "[job] python (job.ini:3)", ... */
};

/* Whether the job uses a python plugin (the plugin `python`, or a path to a
 * <kind>-python.so). */
bool python_needed(const struct cfg *c);

/* Each python section (worker, generator, sink, [stage.NAME]) names its code: script or
 * module, exactly one. 0, or -1 with one line in err naming the place. */
int python_check_sources(const struct cfg *c, char *err, size_t errlen);

/*
 * Chooses the interpreter: [job] python (c may be NULL: none), $VIRTUAL_ENV,
 * $CONDA_PREFIX, the python3 on PATH, the Python gpud was built with; asks it what it
 * is (it runs once with -c), refuses what the plugins cannot use (not a Python, not
 * CPython 3.9 to 3.13, no shared libpython) and exports the choice to the environment.
 * Call before any thread or worker starts. The choice, or NULL with one line in err.
 */
const struct python_choice *python_choose(const struct cfg *c, char *err, size_t errlen);

/* The choice made in this process, or NULL when none was. */
const struct python_choice *python_chosen(void);

/* `gpud check --import`: the chosen Python, in a process of its own, imports each python
 * section's script or module (running its top-level code) and checks that the class or
 * function the job names is there, that a worker class has process() or
 * process_batch() and a setup(gpu_id, seed, ...) taking the section's other keys as
 * keywords, a generator function and a sink class those keys, and that a sink has a
 * callback. Says what it found on `out`; 0, or -1 with a line per problem on standard
 * error (naming the key, the module, and what the module defines instead). */
int python_check_import(const struct cfg *c, FILE *out);

/* The choice in one line: "Python 3.12.1 (/x/bin/python, venv /x; from $VIRTUAL_ENV)". */
void python_describe(const struct python_choice *p, char *buf, size_t len);

#endif
