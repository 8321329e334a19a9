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

static const char guard_source[] =
	"# Built-in modules only (no file to find and read): start-up stays as it was.\n"
	"# signal.py (which pulls in enum) and warnings are imported when something is refused.\n"
	"import _signal, faulthandler, os, posix, sys\n"
	"import gpud\n"
	"\n"
	"class ExitRefused(BaseException):\n"
	"    '''Raised by os._exit() and os.abort() in the gpud host process: they would end\n"
	"    the whole run at once. Raise an exception to stop the run instead.'''\n"
	"ExitRefused.__module__ = 'gpud'\n"
	"gpud.ExitRefused = ExitRefused\n"
	"\n"
	"def install(host_pid):\n"
	"    ours = {int(s) for s in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP,\n"
	"                             _signal.SIGCHLD, _signal.SIGTSTP, _signal.SIGCONT,\n"
	"                             _signal.SIGPIPE)}\n"
	"    told = set()\n"
	"\n"
	"    def in_host():\n"
	"        return os.getpid() == host_pid\n"
	"\n"
	"    def guarded(signalnum):\n"
	"        return (isinstance(signalnum, int) and not isinstance(signalnum, bool)\n"
	"                and int(signalnum) in ours and in_host())\n"
	"\n"
	"    def refuse(call, signalnum, level):\n"
	"        # Told once per call and signal; `level` points the warning at the plugin's line.\n"
	"        import signal, warnings\n"
	"        text = call.format(signal.Signals(int(signalnum)).name)\n"
	"        if text in told:\n"
	"            return\n"
	"        told.add(text)\n"
	"        warnings.warn(f'gpud: {text} ignored: gpud handles this signal in its host '\n"
	"                      f'process (SIGINT, SIGTERM and SIGHUP stop the run in order); '\n"
	"                      f'see docs/plugins.md', RuntimeWarning, stacklevel=level)\n"
	"\n"
	"    real_signal = _signal.signal\n"
	"    def signal_(signalnum, handler):\n"
	"        if guarded(signalnum):\n"
	"            # Putting back what Python says is there is no news: said once at most.\n"
	"            if handler != _signal.getsignal(signalnum):\n"
	"                refuse('signal.signal({}, ...)', signalnum, 4)\n"
	"            return _signal.getsignal(signalnum)\n"
	"        return real_signal(signalnum, handler)\n"
	"    signal_.__doc__ = real_signal.__doc__\n"
	"    _signal.signal = signal_\n"
	"\n"
	"    real_siginterrupt = _signal.siginterrupt\n"
	"    def siginterrupt_(signalnum, flag):\n"
	"        if guarded(signalnum):\n"
	"            refuse('signal.siginterrupt({}, ...)', signalnum, 3)\n"
	"            return None\n"
	"        return real_siginterrupt(signalnum, flag)\n"
	"    siginterrupt_.__doc__ = real_siginterrupt.__doc__\n"
	"    _signal.siginterrupt = siginterrupt_\n"
	"    # signal.py copies it at its import; should that have happened already:\n"
	"    if 'signal' in sys.modules:\n"
	"        sys.modules['signal'].siginterrupt = siginterrupt_\n"
	"\n"
	"    real_sigmask = _signal.pthread_sigmask\n"
	"    def pthread_sigmask_(how, mask):\n"
	"        if how in (_signal.SIG_BLOCK, _signal.SIG_SETMASK) and in_host():\n"
	"            mask = set(mask)\n"
	"            for s in [s for s in mask if guarded(s)]:\n"
	"                refuse('signal.pthread_sigmask(SIG_BLOCK, {})' if how == _signal.SIG_BLOCK\n"
	"                       else 'signal.pthread_sigmask(SIG_SETMASK, {})', s, 4)\n"
	"                mask.discard(s)\n"
	"        return real_sigmask(how, mask)\n"
	"    pthread_sigmask_.__doc__ = real_sigmask.__doc__\n"
	"    _signal.pthread_sigmask = pthread_sigmask_\n"
	"\n"
	"    real_register = faulthandler.register\n"
	"    def register_(signum, *args, **kwargs):\n"
	"        if guarded(signum):\n"
	"            refuse('faulthandler.register({}, ...)', signum, 3)\n"
	"            return None\n"
	"        return real_register(signum, *args, **kwargs)\n"
	"    register_.__doc__ = real_register.__doc__\n"
	"    faulthandler.register = register_\n"
	"\n"
	"    real_exit = posix._exit\n"
	"    def _exit(status):\n"
	"        if in_host():\n"
	"            raise ExitRefused(f'os._exit({status!r}) refused in the gpud host: it would end '\n"
	"                              f'the whole run at once (exit status {status!r}, the tasks in '\n"
	"                              f'flight without an outcome); raise an exception to stop the '\n"
	"                              f'run')\n"
	"        real_exit(status)\n"
	"    _exit.__doc__ = real_exit.__doc__\n"
	"    posix._exit = os._exit = _exit\n"
	"\n"
	"    real_abort = posix.abort\n"
	"    def abort():\n"
	"        if in_host():\n"
	"            raise ExitRefused('os.abort() refused in the gpud host: it would end the whole '\n"
	"                              'run at once (killed by SIGABRT, the tasks in flight without '\n"
	"                              'an outcome); raise an exception to stop the run')\n"
	"        real_abort()\n"
	"    abort.__doc__ = real_abort.__doc__\n"
	"    posix.abort = os.abort = abort\n";

int py_guard_host(struct gpud_error *err)
{
	char why[900];
	int rc = -1;
	PyObject *globals = PyDict_New(), *code = NULL, *r = NULL, *done = NULL;
	if (!globals || PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins()) < 0)
		goto out;
	/* Named, so a traceback through a guard says whose frame it is. */
	code = Py_CompileString(guard_source, "<gpud host guard, plugins/python/guard.c>",
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
