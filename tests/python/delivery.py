# SPDX-License-Identifier: MIT
"""gpud.Dispatcher: every result the journal records as done has reached its callback,
on every way a run can stop, and exactly once across kill -9 and resume=True.

`delivery.py check MODE`: runs this script as the program (`delivery.py program ...`)
in child processes, stops them the way MODE says, and checks their logs; prints
"PASS MODE". Modes:

  blocked_term    SIGTERM while the iterator blocks (a live source waiting for its next
                  item), then resume=True: all 1,000 items delivered exactly once, and
                  on_exit ran in the stopped run.
  blocked_int2    the same with two Ctrl-Cs (the second stops the workers at once; sent
                  by the test once gpud said it took the first).
  blocked_raise   outcomes that came while the iterator blocked, then a callback that
                  raises as they are delivered: those after it are not journaled, the
                  resume delivers them.
  blocked_nojournal  SIGTERM while the iterator blocks, no journal: on_exit runs and
                  every result counted done reached on_success.
  blocked_noworker   the workers all die while the iterator blocks ("no worker left"):
                  on_exit runs, run() raises RunAborted, the resume finishes.
  blocked_twice   stopped (twice: item 100 never finishes) while blocked at item 1300,
                  resumed and stopped while blocked at item 300, before the end of
                  what the first run read (the interrupted call is not the input's
                  end), then resumed to the end: each item once.
  kill9           kill -9 of the program three times, with on_resume reading its own
                  log back: every item exactly once.
  kill9_bound     the same without on_resume: no item lost; the duplicates are at
                  most what one journal flush interval (0.1 s) delivered (printed).
  on_resume       what on_resume() may give (ids, (id, kind) pairs), and what it may
                  not (anything else; with chunks of several items).
"""
import collections
import os
import signal
import subprocess
import sys
import threading
import time

from gpud import BaseWorker, Dispatcher, JobError, RunAborted

N = int(os.environ.get("DELIVERY_N", 1000))  # items


class W(BaseWorker):
    # How each run's workers behave, from the program's environment (the workers
    # inherit it): setup()'s keywords would make a resume another job.
    def setup(self, gpu_id, seed):
        flag = os.environ.get("DELIVERY_DIE_FLAG")
        if flag:  # once the program's iterator blocks, this worker dies
            def watch():
                while not os.path.exists(flag):
                    time.sleep(0.01)
                os._exit(9)  # with no restarts left, no worker is left
            threading.Thread(target=watch, daemon=True).start()
        self.slow = float(os.environ.get("DELIVERY_SLOW", 0))
        self.slow_from = int(os.environ.get("DELIVERY_SLOW_FROM", 0))
        self.slow_to = int(os.environ.get("DELIVERY_SLOW_TO", N))

    def process(self, x):
        if self.slow and self.slow_from <= x < self.slow_to:
            time.sleep(self.slow)
        return x


def items(block_at, block_s, stop=None, at_block=None):
    for i in range(N):
        if i == block_at:
            print("BLOCKED", flush=True)
            if at_block:
                at_block()
            if stop:  # the stop comes while it blocks, once what it gave has run
                threading.Timer(0.5, stop).start()
            time.sleep(block_s)  # a live source waiting for its next item
        yield i


def program(how, log_path, journal):
    """One run, as a user's program: results appended to log_path, one id a line."""
    log = open(log_path, "a")
    exits = []

    def on_exit():
        exits.append(1)
        log.write("EXIT\n")
        log.flush()

    calls = [0]

    def on_success(t, r, w):
        calls[0] += 1
        if how == "raise" and calls[0] == 150:
            raise ZeroDivisionError("the 150th result")
        if r != t:
            log.write(f"WRONG {t} {r}\n")
        log.write(f"{t}\n")
        log.flush()

    def on_error(t, e, w):
        log.write(f"E{t}\n")
        log.flush()

    def held():  # what the log holds: the program's own record of its results
        ids, _ = read_log(log_path)
        return list(ids)

    opts = dict(ui="off")
    if journal:
        opts.update(journal=journal, resume=True)
    kw = {}
    stop = at_block = None
    block_at, block_s = int(os.environ.get("DELIVERY_BLOCK_AT", 300)), 1000
    if how in ("term", "nojournal"):
        stop = lambda: os.kill(os.getpid(), signal.SIGTERM)
        signal.signal(signal.SIGTERM, lambda s, f: sys.exit(143))
    elif how == "int2":
        # The first Ctrl-C; the second comes from the test (child()) once gpud said it
        # took this one.
        stop = lambda: os.kill(os.getpid(), signal.SIGINT)
        # The generator blocks once its first read-ahead (items 0 to 255) is out; the
        # last of them are slow: the second Ctrl-C comes while they drain.
        if "DELIVERY_SLOW" not in os.environ:
            os.environ.update(DELIVERY_SLOW="2.0", DELIVERY_SLOW_FROM="250")
    elif how == "raise":
        block_s = 1.5  # the outcomes wait for the iterator, then reach the callbacks
    elif how == "noworker":
        # Every worker dies once the generator blocks.
        flag = log_path + ".blocked"
        if os.path.exists(flag):
            os.unlink(flag)
        os.environ["DELIVERY_DIE_FLAG"] = flag
        at_block = lambda: open(flag, "w").close()
    else:
        block_at = -1  # the resume: no stop
    if how.endswith("noworker"):
        opts.update(max_worker_restarts=0, retries=0)
    if how.startswith("kill9"):
        block_at = -1
        os.environ["DELIVERY_SLOW"] = "0.002"
        if how == "kill9":
            kw["on_resume"] = held
    d = Dispatcher(W, gpu_ids=[0, 1], **opts)
    try:
        d.run(items(block_at, block_s, stop, at_block), on_success=on_success, on_error=on_error,
              on_exit=on_exit, **kw)
        log.write("DONE\n")
    except BaseException as e:
        log.write(f"RAISED {type(e).__name__}\n")
        log.flush()
        stats = d.stats or {}
        log.write(f"STATS {stats.get('completed', -1)} {stats.get('exit_status', -1)}\n")
        log.flush()
        raise
    finally:
        log.close()


def child(tmp, how, log, journal, wait=True):
    # The same argv in every run (the workers get it: it is part of the job, and a
    # resume must be the same job): what to do goes in the environment.
    args = [sys.executable, os.path.abspath(__file__), "program"]
    env = dict(os.environ, DELIVERY_HOW=how, DELIVERY_LOG=log, DELIVERY_JOURNAL=journal or "")
    p = subprocess.Popen(args, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=env)
    if not wait:
        return p
    if how == "int2":
        out = second_interrupt(p)
        return p.returncode, out
    try:
        out, _ = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        out += "\n(timed out)"
    return p.returncode, out


def second_interrupt(p):
    """The program's output, its second Ctrl-C sent once gpud said it took the first.
    Sent from inside the program after a fixed time, on a starved machine both could be
    pending at once (one signal), or come within 50 ms of each other as gpud took them
    (the same one sent twice: dispatcher.c, SAME_INTERRUPT_NS). 0.3 s after the word is
    only ever later than that."""
    timer = threading.Timer(120, p.kill)
    timer.start()
    out, sent = [], False
    for line in p.stdout:
        out.append(line)
        if not sent and "interrupt again to stop at once" in line:
            time.sleep(0.3)
            p.send_signal(signal.SIGINT)
            sent = True
    p.wait()
    if not timer.is_alive():
        out.append("\n(timed out)")
    timer.cancel()
    check(sent, "gpud never said it took the first interrupt (no second one sent):\n"
          + "".join(out)[-3000:])
    return "".join(out)


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", flush=True)
        sys.exit(1)


def read_log(path):
    ids, marks = collections.Counter(), []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.isdigit():
                ids[int(line)] += 1
            elif line[:1] == "E" and line[1:].isdigit():  # on_error: an outcome too
                ids[int(line[1:])] += 1
            elif line:
                marks.append(line)
    return ids, marks


def blocked(mode, tmp):
    how = mode.split("_", 1)[1]
    log = os.path.join(tmp, f"{mode}.log")
    journal = None if how == "nojournal" else os.path.join(tmp, f"{mode}.journal")
    for p in (log, journal):
        if p and os.path.exists(p):
            os.unlink(p)
    rc, out = child(tmp, how, log, journal)
    ids, marks = read_log(log)
    print(f"{mode}: the stopped run: exit {rc}, {sum(ids.values())} delivered, {marks}",
          flush=True)
    check("EXIT" in marks, f"on_exit ran in the stopped run (exit {rc}): {marks}\n{out[-3000:]}")
    check(not any(m.startswith("WRONG") for m in marks), f"results: {marks}")
    check(all(n == 1 for n in ids.values()), "no result twice in one run")
    stats = [m for m in marks if m.startswith("STATS")]
    if how == "nojournal":
        # Every result the run counted done reached on_success.
        check(stats and int(stats[0].split()[1]) == len(ids),
              f"completed as delivered: {stats} vs {len(ids)}")
        check(len(ids) > 0, "something ran before the stop")
        return
    if how == "noworker":
        check("RAISED RunAborted" in marks, f"RunAborted: {marks}\n{out[-2000:]}")
    first = len(ids)
    rc, out = child(tmp, "resume_" + how, log, journal)
    ids, marks = read_log(log)
    missing = [i for i in range(N) if not ids[i]]
    twice = [i for i in range(N) if ids[i] > 1]
    print(f"{mode}: after the resume: exit {rc}, {len(ids)} delivered ({first} in the first "
          f"run), missing {len(missing)}, twice {len(twice)}", flush=True)
    check(rc == 0 and "DONE" in marks, f"the resume finished: exit {rc}\n{out[-3000:]}")
    check(not missing and not twice,
          f"every item once: missing {missing[:10]}, twice {twice[:10]}")


def blocked_twice(tmp):
    log = os.path.join(tmp, "twice.log")
    journal = os.path.join(tmp, "twice.journal")
    for p in (log, journal):
        if os.path.exists(p):
            os.unlink(p)
    open(log, "w").close()
    env = dict(os.environ)
    # Past id 1024, the first the journal samples after the first 16: the resumed run's
    # interrupted generator ends below what the journal saw of the input.
    for how, at, slow in (("int2", "1300", dict(DELIVERY_SLOW="60", DELIVERY_SLOW_FROM="100",
                                                DELIVERY_SLOW_TO="101")),
                          ("term", "300", {})):
        os.environ.clear()
        os.environ.update(env, DELIVERY_N="1500", DELIVERY_BLOCK_AT=at, **slow)
        before = len(read_log(log)[1])
        rc, out = child(tmp, how, log, journal)
        ids, marks = read_log(log)
        marks = marks[before:]  # this run's
        print(f"blocked_twice: stopped while blocked at {at}: exit {rc}, {len(ids)} "
              f"delivered, {marks}", flush=True)
        if os.environ.get("DELIVERY_VERBOSE"):
            print(out)
        stats = [m for m in marks if m.startswith("STATS")]
        # Stopped with a journal (4), not "the input is not what the journaled run
        # read" (2).
        check("EXIT" in marks and stats and stats[0].endswith(" 4"),
              f"stopped while blocked at {at}: {stats}\n{out[-3000:]}")
        if how == "int2":
            check(not ids[100], "item 100 did not finish in the first run")
    os.environ.clear()
    os.environ.update(env, DELIVERY_N="1500")
    rc, out = child(tmp, "resume_term", log, journal)
    os.environ.clear()
    os.environ.update(env)
    ids, marks = read_log(log)
    missing = [i for i in range(1500) if not ids[i]]
    twice = [i for i in range(1500) if ids[i] > 1]
    check(rc == 0 and "DONE" in marks, f"the last resume finished: exit {rc}\n{out[-3000:]}")
    check(not missing and not twice,
          f"every item once: missing {missing[:10]}, twice {twice[:10]}")


def kill9(mode, tmp, kills=3):
    log = os.path.join(tmp, f"{mode}.log")
    journal = os.path.join(tmp, f"{mode}.journal")
    for p in (log, journal):
        if os.path.exists(p):
            os.unlink(p)
    open(log, "w").close()
    for k in range(kills):
        before = sum(read_log(log)[0].values())
        p = child(tmp, mode, log, journal, wait=False)
        # Killed once it has delivered some more, in the middle of the run.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and p.poll() is None:
            if sum(read_log(log)[0].values()) >= before + 150:
                break
            time.sleep(0.01)
        time.sleep(0.05 * k)
        check(p.poll() is None, f"kill {k + 1}: the program was still running")
        p.send_signal(signal.SIGKILL)
        p.communicate()
    rc, out = child(tmp, mode, log, journal)
    ids, marks = read_log(log)
    missing = [i for i in range(N) if not ids[i]]
    dups = sum(n - 1 for n in ids.values())
    print(f"{mode}: {kills} kills, then the last run: exit {rc}, missing {len(missing)}, "
          f"duplicates {dups}", flush=True)
    check(rc == 0 and "DONE" in marks, f"the last run finished: exit {rc}\n{out[-3000:]}")
    check(not missing, f"nothing lost: {missing[:10]}")
    if mode == "kill9":
        check(dups == 0, f"exactly once with on_resume: {dups} duplicates")
    else:
        # At most what one flush interval of the journal delivered, per kill: the
        # workers (2, 2 ms an item) deliver about 100 items in 0.1 s.
        check(dups <= kills * 150, f"duplicates {dups} over {kills} kills")


def on_resume_checks(tmp):
    journal = os.path.join(tmp, "on_resume.journal")
    for bad, kind in ((lambda: ["x"], TypeError), (lambda: [(1, "maybe")], TypeError),
                      (lambda: 5, TypeError), (lambda: 1 / 0, ZeroDivisionError)):
        if os.path.exists(journal):
            os.unlink(journal)
        try:
            Dispatcher(W, [0], journal=journal, resume=True).run(
                range(10), lambda *a: None, on_resume=bad)
            check(False, f"{kind.__name__} from on_resume")
        except kind:
            pass
    # Ids that are no task of the job: a ValueError naming the entry (and the job's size,
    # which a list gives), at the first such id, not after reading all of them.
    for bad, says in ((lambda: [-1], "gave -1: a task id is 0 or more"),
                      (lambda: [(2, "ok"), (-3, "ok")], "gave (-3, 'ok'): a task id is 0 or more"),
                      (lambda: [10**30], f"gave {10**30}: larger than any task id"),
                      (lambda: range(10**8), "gave 10: this job has 10 tasks, ids 0 to 9")):
        if os.path.exists(journal):
            os.unlink(journal)
        try:
            Dispatcher(W, [0], journal=journal, resume=True).run(
                list(range(10)), lambda *a: None, on_resume=bad)
            check(False, f"ValueError for {says}")
        except ValueError as e:
            check(f"on_resume() {says}" in str(e), f"{says}: {e}")
    try:
        Dispatcher(W, [0], chunksize=4).run(range(10), lambda *a: None, on_resume=lambda: [])
        check(False, "on_resume with chunksize=4 refused")
    except JobError as e:
        check("chunksize=4" in str(e), str(e))
    if os.path.exists(journal):
        os.unlink(journal)
    got = []
    Dispatcher(W, [0], journal=journal, resume=True).run(
        range(10), lambda t, r, w: got.append(t), on_error=lambda *a: got.append("E"),
        on_resume=lambda: [1, 2, (3, "ok"), (4, "error"), (5, "timeout")])
    check(got == [0, 6, 7, 8, 9], f"the tasks it did not name, once: {got}")


if __name__ == "__main__":
    if sys.argv[1] == "program":
        e = os.environ
        program(e["DELIVERY_HOW"], e["DELIVERY_LOG"], e["DELIVERY_JOURNAL"] or None)
        sys.exit(0)
    mode = sys.argv[2]
    tmp = os.environ.get("GPUD_TEST_TMP", "/tmp")
    if mode == "blocked_twice":
        blocked_twice(tmp)
    elif mode.startswith("blocked_"):
        blocked(mode, tmp)
    elif mode == "on_resume":
        on_resume_checks(tmp)
    else:
        kill9(mode, tmp)
    print(f"PASS {mode}", flush=True)
