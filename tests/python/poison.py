# SPDX-License-Identifier: MIT
"""gpud.Dispatcher gives each item its own outcome whatever travels with it: run by
run_tests.py as `poison.py MODE`, prints "PASS MODE" when every check held.

results: an item whose result cannot be pickled, or is over max_result_bytes, fails
alone in every chunking mode (automatic, chunksize=K, batch_size with process_batch);
results that fit alone but not together all arrive.
crashes: items that kill their worker (deterministically, 1 in about 400), among 4,000
with retries=5: each of them alone is a poison task, every other item ends ok, in
automatic chunks and in batches of 8.
raising: a process_batch that raises on either of two bad items among 3,551 (a corrupt
image a decoder refuses): exactly two failures, each with its own traceback, in
automatic chunks, fixed chunks and one item a task, batch_size 64; the stats and gpud's
summary line count items; isolate_failures=False fails the bad items' whole batches."""
import os
import signal
import sys
import tempfile
import threading

from gpud import BaseWorker, Dispatcher


def deadly(x):
    return x * 2654435761 % 2**32 % 400 == 0


class Results(BaseWorker):
    def setup(self, gpu_id, seed):
        pass

    def process(self, x):
        if x % 50 == 7:
            return threading.Lock()  # cannot be pickled
        if x % 50 == 13:
            return b"x" * 100_000  # over max_result_bytes = 64K
        if x % 50 in (21, 22, 23):
            return b"y" * 30_000  # fits alone, not beside the others
        return x * 2


class ResultsBatch(Results):
    def process_batch(self, items):
        return [self.process(x) for x in items]


class Crasher(BaseWorker):
    def setup(self, gpu_id, seed):
        pass

    def process(self, x):
        if deadly(x):
            os.kill(os.getpid(), signal.SIGKILL)
        return x + 1


class CrasherBatch(Crasher):
    def process_batch(self, items):
        return [self.process(x) for x in items]


BAD = (777, 2345)


class BadBatch(BaseWorker):
    def setup(self, gpu_id, seed):
        pass

    def process_batch(self, items):
        for x in items:
            if x in BAD:
                raise ValueError(f"corrupt image {x}")
        return [x * 3 for x in items]


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", flush=True)
        sys.exit(1)


def collect(cls, items, **opts):
    got, errs = {}, {}

    def ok(t, r, w):
        check(t not in got and t not in errs, f"item {t} reported twice")
        got[t] = r

    def bad(t, e, w):
        check(t not in got and t not in errs, f"item {t} reported twice")
        errs[t] = e

    stats = Dispatcher(cls, [0, 1], **opts).run(items, ok, on_error=bad)
    return got, errs, stats


def results():
    n = 1000
    unpicklable = {x for x in range(n) if x % 50 == 7}
    large = {x for x in range(n) if x % 50 == 13}
    for cls, opts in ((Results, {}), (Results, {"chunksize": 4}), (Results, {"chunksize": 16}),
                      (Results, {"chunksize": 1}), (ResultsBatch, {"batch_size": 8}),
                      (ResultsBatch, {"batch_size": 8, "chunksize": 1})):
        what = f"{cls.__name__} {opts}"
        got, errs, stats = collect(cls, list(range(n)), max_result_bytes="64K", **opts)
        check(set(errs) == unpicklable | large,
              f"{what}: the failed items are the bad ones alone: {len(errs)} failed, "
              f"{sorted(set(errs) - unpicklable - large)[:10]} innocent")
        check(all("pickle" in errs[x] for x in unpicklable),
              f"{what}: why: {errs[min(unpicklable)]!r}")
        check(all("exceeds max_result_bytes" in errs[x] for x in large),
              f"{what}: why: {errs[min(large)]!r}")
        want = {x: (b"y" * 30_000 if x % 50 in (21, 22, 23) else x * 2)
                for x in range(n) if x not in errs}
        check(got == want, f"{what}: {len(got)} results of {len(want)}, each its own")
        check(stats["completed"] == len(want) and stats["failed"] == len(errs),
              f"{what}: stats {stats['completed']} {stats['failed']}")
        print(what, {k: stats.get(k) for k in ("chunk_total", "largest_chunk")}, flush=True)


def crashes():
    n = 4000
    culprits = {x for x in range(n) if deadly(x)}
    check(5 <= len(culprits) <= 20, f"{len(culprits)} culprits")
    for cls, opts in ((Crasher, {}), (CrasherBatch, {"batch_size": 8, "chunksize": 1})):
        what = f"{cls.__name__} {opts}"
        got, errs, stats = collect(cls, range(n), retries=5, max_worker_restarts=1000, **opts)
        check(set(errs) == culprits,
              f"{what}: only the culprits fail: {sorted(set(errs) - culprits)[:10]} innocent "
              f"of {len(errs)} failed, {sorted(culprits - set(errs))} culprits not failed")
        check(all(errs[x].startswith("poison task: 6 workers died") for x in culprits),
              f"{what}: {errs[min(culprits)]!r}")
        check(got == {x: x + 1 for x in range(n) if x not in culprits},
              f"{what}: {len(got)} results of {n - len(culprits)}")
        check(stats["completed"] == n - len(culprits) and stats["failed"] == len(culprits),
              f"{what}: stats {stats['completed']} {stats['failed']}")


def with_stderr(fn):
    """fn()'s value and what the process wrote to standard error meanwhile (fd 2:
    gpud's lines and the Dispatcher's)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile("w+") as f:
        os.dup2(f.fileno(), 2)
        try:
            value = fn()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read()
    sys.stderr.write(text)
    return value, text


def raising():
    n = 3551
    for opts in ({"batch_size": 64}, {"batch_size": 64, "chunksize": 128},
                 {"batch_size": 64, "chunksize": 1}, {"batch_size": 64, "chunksize": 1,
                                                      "isolate_failures": True}):
        what = f"BadBatch {opts}"
        (got, errs, stats), err = with_stderr(lambda: collect(BadBatch, range(n), **opts))
        check(set(errs) == set(BAD), f"{what}: {len(errs)} failed, not the two bad ones alone: "
              f"{sorted(errs)[:10]}")
        for x in BAD:
            check(f"ValueError: corrupt image {x}" in errs[x], f"{what}: {x}: {errs[x]!r}")
        check(got == {x: x * 3 for x in range(n) if x not in BAD},
              f"{what}: {len(got)} results of {n - 2}")
        check(stats["total"] == n and stats["completed"] == n - 2 and stats["failed"] == 2,
              f"{what}: stats {stats['total']} {stats['completed']} {stats['failed']}")
        unit = "tasks" if opts.get("chunksize") == 1 else "items"
        check(f"gpud: {n} {unit}: {n - 2} ok, 2 failed" in err,
              f"{what}: the summary line counts items: {err!r}")
        print(what, {k: stats.get(k) for k in ("chunk_total", "largest_chunk")}, flush=True)
    for opts in ({"batch_size": 64}, {"batch_size": 64, "chunksize": 1}):
        got, errs, stats = collect(BadBatch, range(n), isolate_failures=False, **opts)
        check(len(errs) > 2 and set(BAD) <= set(errs),
              f"isolate_failures=False {opts}: the bad items' batches fail: {len(errs)}")


if __name__ == "__main__":
    mode = sys.argv[1]
    {"results": results, "crashes": crashes, "raising": raising}[mode]()
    print(f"PASS {mode}", flush=True)
