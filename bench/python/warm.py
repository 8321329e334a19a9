# SPDX-License-Identifier: MIT
"""A warm pool's runs against the plain loop: the model set up once, run() many times.

    /usr/bin/python3 bench/python/warm.py [--items N] [--repeats R]

trial.py's proxy (its ProxyModel, its images, batch_size=256, one worker on GPU 0) in
rounds, alternated so that both sides see the machine's load alike; each round:

  loop        the plain loop: its model set up, then its batches (trial.run_loop)
  pool run 1  `with gpud.Dispatcher(...) as d:` d.run(items): the worker started and
              set up by this run
  pool run 2  d.run(items) again in the same block: the same worker, set up before

For each: images/s over the wall time with and without the model's setup (the loop's
timed apart, the worker's from its setup calls), the time from run() (or the loop's
start) to the first batch in the model's hands, and the setup calls the run made
(counted by the worker in a file; a warm run must make none). Every item once, with the
loop's answer, is checked. Medians of the rounds; the load average is printed with them.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import trial  # noqa: E402  (its proxy model and images)


class WarmWorker(trial.ImageWorker):
    """trial's worker, each setup call and each batch's arrival written down (the
    monotonic clock is the machine's: comparable with the program's)."""

    def setup(self, gpu_id, seed, log, real=False, copy=False):
        t0 = time.monotonic()
        super().setup(gpu_id, seed, real=real, copy=copy)
        self.log = log
        with open(log, "a") as f:
            f.write(f"setup {t0:.6f} {time.monotonic() - t0:.6f}\n")

    def process_batch(self, items):
        with open(self.log, "a") as f:
            f.write(f"batch {time.monotonic():.6f}\n")
        return super().process_batch(items)


def read_log(log, since):
    """(setup calls, their seconds, the first batch's arrival) after `since`."""
    setups, setup_s, first = 0, 0.0, None
    with open(log) as f:
        for line in f:
            kind, t, *rest = line.split()
            if float(t) < since:
                continue
            if kind == "setup":
                setups += 1
                setup_s += float(rest[0])
            elif first is None or float(t) < first:
                first = float(t)
    return setups, setup_s, first


def loop_round(n):
    """The plain loop: (rate with setup, without, first batch after start, answers)."""
    t0 = time.monotonic()
    model = trial.make_model(False)
    setup = time.monotonic() - t0
    answers, part, first = {}, [], None
    for item in trial.images(n):
        part.append(item)
        if len(part) == trial.BATCH:
            if first is None:
                first = time.monotonic() - t0
            for a in model(part):
                answers[len(answers)] = a
            part = []
    if part:
        if first is None:
            first = time.monotonic() - t0
        for a in model(part):
            answers[len(answers)] = a
    wall = time.monotonic() - t0
    return dict(rate=n / wall, rate_ns=n / (wall - setup), first=first, setups=1), answers


def pool_run(d, n, log):
    answers = {}

    def on_success(i, r, worker_id):
        if i in answers:
            raise AssertionError(f"item {i} delivered twice")
        answers[i] = r

    t0 = time.monotonic()
    d.run(trial.images(n), on_success, log=log)
    wall = time.monotonic() - t0
    setups, setup_s, first = read_log(log, t0)
    return dict(rate=n / wall, rate_ns=n / max(wall - setup_s, 1e-9),
                first=(first - t0) if first else float("nan"), setups=setups), answers


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    from gpud import Dispatcher

    log = os.path.join(tempfile.mkdtemp(prefix="gpud-warm-"), "calls")
    rows = {"loop": [], "pool run 1": [], "pool run 2": []}
    bad = []
    for _ in range(a.repeats):
        got, want = loop_round(a.items)
        rows["loop"].append(got)
        with Dispatcher(WarmWorker, [0], ui="off", batch_size=trial.BATCH) as d:
            for name in ("pool run 1", "pool run 2"):
                got, answers = pool_run(d, a.items, log)
                rows[name].append(got)
                if answers != want:
                    bad.append(name)
    load = os.getloadavg()
    print(f"{a.items} items of {trial.SIZE} bytes, batch_size {trial.BATCH}, proxy model; "
          f"medians of {a.repeats} alternated rounds; load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("| run | images/s, wall | without setup | first batch after start | setup calls |")
    print("|---|---|---|---|---|")
    base = statistics.median(r["rate"] for r in rows["loop"])
    for name, rs in rows.items():
        rate = statistics.median(r["rate"] for r in rs)
        print(f"| {name} | {rate:,.0f} ({rate / base:.2f}x) | "
              f"{statistics.median(r['rate_ns'] for r in rs):,.0f} | "
              f"{statistics.median(r['first'] for r in rs) * 1e3:.1f} ms | "
              f"{'/'.join(str(r['setups']) for r in rs)} |")
    if bad:
        print(f"FAIL: answers differ from the loop's in {', '.join(sorted(set(bad)))}")
        return 1
    print("every item once, with the loop's answer, in every run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
