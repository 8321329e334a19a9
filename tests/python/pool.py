# SPDX-License-Identifier: MIT
"""A warm pool: `with Dispatcher(...) as d:` then d.run() several times. python3 pool.py
prints PASS pool.

Each worker's setup and cleanup append a line to a file ("setup PID", "cleanup PID"),
so what ran where is counted, not guessed. Checked: setup once per worker across three
runs, each run's callbacks and stats its own and every item once per run (chunks of
several items and one item a task), a worker killed between runs started again (set up
again) and the next run exact, one killed during a run replaced by a worker that
outlives the run, a run whose callback raises leaving the next run
working, keys the workers were started with refused when a run asks for others, and
cleanup once per worker process on leaving the block; outside a with block a run
starts and ends its own workers, as before."""
import os
import signal
import sys
import tempfile
import time

from gpud import Dispatcher, JobError

FAILED = []
GPUS = [0, 1]


def check(cond, what):
    if not cond:
        FAILED.append(what)
        print(f"FAIL: {what}", flush=True)


class Model:
    def setup(self, gpu_id, seed, log, scale=3):
        self.scale, self.log = scale, log
        with open(log, "a") as f:
            f.write(f"setup {os.getpid()}\n")

    def process(self, item):
        return (item * self.scale, os.getpid())

    def cleanup(self):
        with open(self.log, "a") as f:
            f.write(f"cleanup {os.getpid()}\n")


def lines(log, what):
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [int(x.split()[1]) for x in f.read().splitlines() if x.startswith(what + " ")]


class Boom(Exception):
    pass


def set_up(log, n):
    """Items after n setups are written down: a run's workers all set up before it
    hands out its first item (the first run's, and a replacement's)."""
    deadline = time.monotonic() + 120
    while len(lines(log, "setup")) < n and time.monotonic() < deadline:
        time.sleep(0.01)  # polled: a worker's setup is another process's


def exact_run(d, n, log, label, setups=None, **kw):
    """One run of n items: every item once with its answer; returns the pids that ran
    them and the run's stats. setups: wait for that many setups before the first item."""
    got, pids, exits = {}, set(), []

    def items():
        if setups:
            set_up(log, setups)
        yield from range(n)

    def on_success(task_id, result, worker_id):
        check(task_id not in got, f"{label}: item {task_id} delivered twice")
        got[task_id] = result[0]
        pids.add(result[1])

    stats = d.run(items(), on_success, on_exit=lambda: exits.append(1), log=log, **kw)
    check(got == {i: 3 * i for i in range(n)},
          f"{label}: {len(got)} results, {sum(got.get(i) != 3 * i for i in range(n))} wrong")
    check(stats["completed"] == n and stats["total"] == n,
          f"{label}: the stats are not this run's: completed {stats['completed']}, "
          f"total {stats['total']}")
    check(d.stats is stats, f"{label}: d.stats is not this run's")
    check(exits == [1], f"{label}: on_exit ran {len(exits)} times")
    return pids, stats


def main():
    tmp = tempfile.mkdtemp(prefix="gpud-pool-")
    log = os.path.join(tmp, "calls")

    with Dispatcher(Model, GPUS, ui="off") as d:
        # Automatic chunks first, then one item a task: the same workers.
        p1, _ = exact_run(d, 500, log, "run 1", setups=2)
        p2, _ = exact_run(d, 300, log, "run 2")
        p3, _ = exact_run(d, 200, log, "run 3")
        setups = lines(log, "setup")
        check(len(setups) == 2 and len(set(setups)) == 2,
              f"setup ran {len(setups)} times over three runs (want once per worker): {setups}")
        check((p2 | p3) <= set(setups), f"runs 2 and 3 ran on other processes: {p2 | p3}")
        check(not lines(log, "cleanup"), "cleanup ran inside the block")

        # A run whose callback raises: it stops, the exception is run()'s, and the
        # next run is whole.
        def raising(task_id, result, worker_id):
            if task_id == 50:
                raise Boom("the callback's own error")

        try:
            d.run(range(400), raising, log=log)
            check(False, "a raising callback did not stop the run")
        except Boom:
            pass
        exact_run(d, 250, log, "after the raise")

        # Keys the workers were started with are the pool's: another scale is refused,
        # naming the key, and the pool still runs.
        try:
            d.run(range(10), lambda *a: None, log=log, scale=5)
            check(False, "other worker keys were not refused")
        except JobError as e:
            check("scale=5" in str(e) and "with block" in str(e), f"the refusal: {e}")
        exact_run(d, 100, log, "after the refusal")

        # A worker killed between runs is started (and set up) again at the next run.
        victim = sorted(lines(log, "setup"))[0]
        os.kill(victim, signal.SIGKILL)
        while True:  # gone: /proc says so once it is a zombie or reaped
            try:
                with open(f"/proc/{victim}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] in "ZX":
                        break
            except FileNotFoundError:
                break
            time.sleep(0.001)  # polled until the kernel says it is gone
        p4, _ = exact_run(d, 300, log, "after a kill", setups=3)
        check(victim not in p4, "the killed worker ran tasks")
        check(len(lines(log, "setup")) == 3,
              f"with a kill: setup ran {len(lines(log, 'setup'))} times (want 3)")

        # A worker killed during a run while the generator blocks: its slot is started
        # again by the thread that runs the loop meanwhile (not the caller's), and the
        # new worker outlives the run all the same (the next run uses it, set up once).
        second = sorted(set(lines(log, "setup")) - {victim})[0]

        def blocking():
            yield 0
            os.kill(second, signal.SIGKILL)
            set_up(log, 4)  # its replacement set up while this call blocks
            yield from range(1, 100)

        d.run(blocking(), lambda *a: None, log=log)
        p5, _ = exact_run(d, 300, log, "after a kill during a run")
        check(second not in p5, "the worker killed during a run ran tasks")
        check(len(lines(log, "setup")) == 4,
              f"after a kill during a run: setup ran {len(lines(log, 'setup'))} times "
              "(want 4: the replacement kept after its run)")
    cleanups, setups = lines(log, "cleanup"), lines(log, "setup")
    live = set(setups) - {victim, second}
    check(sorted(cleanups) == sorted(live),
          f"leaving the block: cleanup ran for {sorted(cleanups)}, want {sorted(live)}")
    for pid in live:
        check(not os.path.exists(f"/proc/{pid}"), f"worker {pid} outlived the block")

    # Outside a with block: a run's own workers, set up and cleaned up by it.
    os.unlink(log)
    # (A worker still in its setup when every item is done is ended without one: the
    # run does not wait for it.)
    pids, _ = exact_run(Dispatcher(Model, GPUS, ui="off"), 50, log, "no pool")
    alone = lines(log, "setup")
    check(pids <= set(alone) and sorted(lines(log, "cleanup")) == sorted(alone) and
          not set(alone) & set(setups),
          f"a run without a pool: setups {alone}, cleanups {lines(log, 'cleanup')}, "
          f"ran on {pids}")
    if FAILED:
        sys.exit(1)
    print("PASS pool", flush=True)


if __name__ == "__main__":
    main()
