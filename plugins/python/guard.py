# SPDX-License-Identifier: MIT
# gpud's signals and the host process's exit kept gpud's in a python generator or sink
# (guard.c: guard_source[], embedded at build time by daemon/shared/embed_py.py).
# Built-in modules only (no file to find and read): start-up stays as it was.
# signal.py (which pulls in enum) and warnings are imported when something is refused.
import _signal, faulthandler, os, posix, sys
import gpud

class ExitRefused(BaseException):
    '''Raised by os._exit() and os.abort() in the gpud host process: they would end
    the whole run at once. Raise an exception to stop the run instead.'''
ExitRefused.__module__ = 'gpud'
gpud.ExitRefused = ExitRefused

def install(host_pid):
    ours = {int(s) for s in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP,
                             _signal.SIGCHLD, _signal.SIGTSTP, _signal.SIGCONT,
                             _signal.SIGPIPE)}
    told = set()

    def in_host():
        return os.getpid() == host_pid

    def guarded(signalnum):
        return (isinstance(signalnum, int) and not isinstance(signalnum, bool)
                and int(signalnum) in ours and in_host())

    def refuse(call, signalnum, level):
        # Told once per call and signal; `level` points the warning at the plugin's line.
        import signal, warnings
        text = call.format(signal.Signals(int(signalnum)).name)
        if text in told:
            return
        told.add(text)
        warnings.warn(f'gpud: {text} ignored: gpud handles this signal in its host '
                      f'process (SIGINT, SIGTERM and SIGHUP stop the run in order); '
                      f'see docs/plugins.md', RuntimeWarning, stacklevel=level)

    real_signal = _signal.signal
    def signal_(signalnum, handler):
        if guarded(signalnum):
            # Putting back what Python says is there is no news: said once at most.
            if handler != _signal.getsignal(signalnum):
                refuse('signal.signal({}, ...)', signalnum, 4)
            return _signal.getsignal(signalnum)
        return real_signal(signalnum, handler)
    signal_.__doc__ = real_signal.__doc__
    _signal.signal = signal_

    real_siginterrupt = _signal.siginterrupt
    def siginterrupt_(signalnum, flag):
        if guarded(signalnum):
            refuse('signal.siginterrupt({}, ...)', signalnum, 3)
            return None
        return real_siginterrupt(signalnum, flag)
    siginterrupt_.__doc__ = real_siginterrupt.__doc__
    _signal.siginterrupt = siginterrupt_
    # signal.py copies it at its import; should that have happened already:
    if 'signal' in sys.modules:
        sys.modules['signal'].siginterrupt = siginterrupt_

    real_sigmask = _signal.pthread_sigmask
    def pthread_sigmask_(how, mask):
        if how in (_signal.SIG_BLOCK, _signal.SIG_SETMASK) and in_host():
            mask = set(mask)
            for s in [s for s in mask if guarded(s)]:
                refuse('signal.pthread_sigmask(SIG_BLOCK, {})' if how == _signal.SIG_BLOCK
                       else 'signal.pthread_sigmask(SIG_SETMASK, {})', s, 4)
                mask.discard(s)
        return real_sigmask(how, mask)
    pthread_sigmask_.__doc__ = real_sigmask.__doc__
    _signal.pthread_sigmask = pthread_sigmask_

    real_register = faulthandler.register
    def register_(signum, *args, **kwargs):
        if guarded(signum):
            refuse('faulthandler.register({}, ...)', signum, 3)
            return None
        return real_register(signum, *args, **kwargs)
    register_.__doc__ = real_register.__doc__
    faulthandler.register = register_

    real_exit = posix._exit
    def _exit(status):
        if in_host():
            raise ExitRefused(f'os._exit({status!r}) refused in the gpud host: it would end '
                              f'the whole run at once (exit status {status!r}, the tasks in '
                              f'flight without an outcome); raise an exception to stop the '
                              f'run')
        real_exit(status)
    _exit.__doc__ = real_exit.__doc__
    posix._exit = os._exit = _exit

    real_abort = posix.abort
    def abort():
        if in_host():
            raise ExitRefused('os.abort() refused in the gpud host: it would end the whole '
                              'run at once (killed by SIGABRT, the tasks in flight without '
                              'an outcome); raise an exception to stop the run')
        real_abort()
    abort.__doc__ = real_abort.__doc__
    posix.abort = os.abort = abort
