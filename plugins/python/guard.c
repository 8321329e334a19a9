/* SPDX-License-Identifier: MIT */
/*
 * Guards for Python running inside the gpud host (the python generator and sink).
 *
 * The host's signal handlers are how it stops a run in order (SIGINT, SIGTERM, SIGHUP),
 * notices dead workers (SIGCHLD) and follows job control (SIGTSTP, SIGCONT); SIGPIPE is
 * ignored so that a closed output is a write error. Python's signal.signal() would
 * replace them with its own C handler: a generator that asks for SIGTERM would leave a
 * batch system's SIGTERM to run Python code instead of the drain, and the run would
 * end only at SIGKILL. And os._exit() would end the whole process on the spot, with an
 * exit status of the plugin's choosing (0 after os._exit(0)) and the tasks in flight
 * without an outcome.
 *
 * So, once, when the interpreter starts in the host, the few Python calls that change
 * what happens to gpud's signals (signal.signal, signal.siginterrupt,
 * signal.pthread_sigmask blocking them, faulthandler.register) leave gpud's signals as
 * they are, with a RuntimeWarning the first time per signal; and os._exit() and
 * os.abort() raise gpud.ExitRefused (a BaseException, as SystemExit, so `except
 * Exception` does not swallow it), which fails the generator or the sink like any
 * exception (exit 3) with a line naming the call. A process the plugin forks is not the
 * host: there every call does what it always does (a multiprocessing child must be able
 * to _exit). The guards cost nothing per call into Python; only the guarded calls pay.
 *
 * What C code does (ctypes, an extension module calling sigaction or _exit) is not
 * guarded: docs/plugins.md and docs/reliability.md say what is and what is not.
 */
#define _GNU_SOURCE
#include "common.h"

#include <unistd.h>

#include "guard_py.h" /* guard_source[]: guard.py, embedded at build time */

int py_guard_host(struct gpud_error *err)
{
	char why[900];
	int rc = -1;
	PyObject *globals = PyDict_New(), *code = NULL, *r = NULL, *done = NULL;
	if (!globals || PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins()) < 0)
		goto out;
	/* Named, so a traceback through a guard says whose frame it is. */
	code = Py_CompileString(guard_source, "<gpud host guard: plugins/python/guard.py>",
				Py_file_input);
	r = code ? PyEval_EvalCode(code, globals, globals) : NULL;
	PyObject *install = r ? PyDict_GetItemString(globals, "install") : NULL; /* borrowed */
	done = install ? PyObject_CallFunction(install, "l", (long)getpid()) : NULL;
	if (done)
		rc = 0;
out:
	if (rc < 0) {
		Py_XDECREF(py_take_error(why, sizeof why));
		gpud_fail(err, "python: cannot set up gpud's guards in the host: %s",
			  why[0] ? why : "out of memory");
	}
	Py_XDECREF(done);
	Py_XDECREF(r);
	Py_XDECREF(code);
	Py_XDECREF(globals);
	return rc;
}
