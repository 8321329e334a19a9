# SPDX-License-Identifier: MIT
"""What the library's own examples import instead of gpu_dispatch in the tests: gpud's
BaseWorker and a Dispatcher that checks every result and callback of the run, and the
names the README's quick start leaves to the reader (dataset, result).

GPUD_TEST_EXPECT says what each result must be: "readme" (the README's `result`),
"design" (the design document's "Features from {item} via GPU {worker_id}")."""
import os
import sys

import gpud
from gpud import BaseWorker  # noqa: F401 (the examples import it from here)

dataset = [f"record-{i}" for i in range(int(os.environ.get("GPUD_TEST_ITEMS", "200")))]
result = {"embedding": [0.25, 0.5], "label": "cat"}


class Dispatcher(gpud.Dispatcher):
    def run(self, generator, on_success, on_error=None, on_timeout=None, on_exit=None, **kw):
        items, seen, exits, failures = [], {}, [], []

        def feed():
            for item in generator:
                items.append(item)
                yield item

        def success(task_id, res, worker_id):
            assert task_id not in seen, f"task {task_id} delivered twice"
            seen[task_id] = (res, worker_id)
            on_success(task_id, res, worker_id)

        def error(task_id, err, worker_id):
            failures.append((task_id, err))
            if on_error:
                on_error(task_id, err, worker_id)

        def exit_():
            exits.append(True)
            if on_exit:
                on_exit()

        stats = super().run(feed(), success, on_error=error, on_timeout=on_timeout,
                            on_exit=exit_, **kw)
        expect = os.environ.get("GPUD_TEST_EXPECT", "readme")
        assert not failures, f"tasks failed: {failures[:3]}"
        assert exits == [True], f"on_exit ran {len(exits)} times"
        assert sorted(seen) == list(range(len(items))), \
            f"{len(seen)} results for {len(items)} items"
        gpus = set(self.gpu_ids)
        for task_id, (res, worker_id) in seen.items():
            assert worker_id in gpus, f"task {task_id}: worker_id {worker_id} not in {gpus}"
            if expect == "readme":
                want = result
            else:
                want = f"Features from {items[task_id]} via GPU {worker_id}"
            assert res == want, f"task {task_id}: {res!r} != {want!r}"
        assert stats["completed"] == len(items) and stats["total"] == len(items), stats
        for g in gpus:
            assert stats["gpu_status"][g]["status"] == "finished", stats["gpu_status"]
        print(f"CHECKED {len(items)} results, on_exit once, python "
              f"{sys.version.split()[0]} {sys.prefix}", flush=True)
        return stats
