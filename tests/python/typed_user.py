# SPDX-License-Identifier: MIT
"""A typed user program: gpud's public API used as documented, with annotations that
`mypy --strict` accepts (typed_check.py); run, it checks its results."""
from __future__ import annotations

import importlib.util
from typing import Any, Dict, Iterator, List

import gpud
from gpud import BaseWorker, Dispatcher, JobError, RunAborted, Stage, TaskRejected


class Square(BaseWorker):
    def setup(self, gpu_id: int, seed: int, scale: int = 1) -> None:
        self.scale = scale

    def process(self, data: int) -> int:
        if data < 0:
            gpud.reject(f"negative item {data}")
        return data * data * self.scale

    def cleanup(self) -> None:
        pass


class Halve(BaseWorker):
    def setup(self, gpu_id: int, seed: int) -> None:
        pass

    def process(self, data: int) -> int:
        return data // 2


def items(n: int) -> Iterator[int]:
    yield from range(n)


def main() -> None:
    got: Dict[int, int] = {}
    errors: List[str] = []

    def on_success(task_id: int, result: Any, worker_id: int) -> None:
        got[task_id] = int(result)

    def on_error(task_id: int, error: str, worker_id: int) -> None:
        errors.append(error)

    stages: List[Stage] = [Stage(Halve, workers=1)]
    d = Dispatcher(Square, gpu_ids=[0], queue_size=64, stages=stages)
    stats: Dict[str, Any] = d.run(items(20), on_success, on_error=on_error, scale=3)
    assert got == {i: (i // 2) ** 2 * 3 for i in range(20)}, got
    assert not errors, errors
    assert d.stats is not None and d.stats is stats
    try:
        Dispatcher(Square, gpu_ids="all", ui="nonsense").run([1], on_success)
    except (JobError, RunAborted, TaskRejected) as e:
        print("refused:", e)
    else:
        raise AssertionError("ui='nonsense' was accepted")
    if importlib.util.find_spec("numpy") is not None:
        arr = gpud.stack([b"ab", b"cd"])
        assert arr.shape == (2, 2), arr.shape
    print(f"TYPED OK {len(got)}")


if __name__ == "__main__":
    main()
