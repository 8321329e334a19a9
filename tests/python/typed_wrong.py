# SPDX-License-Identifier: MIT
"""Calls of gpud's public API that are wrong: `mypy --strict` must report each line
marked `# E` (typed_check.py), and nothing else."""
from __future__ import annotations

import gpud
from gpud import BaseWorker, Dispatcher, Stage


class W(BaseWorker):
    def setup(self, gpu_id: int, seed: int) -> None:
        pass

    def process(self, data: bytes) -> bytes:
        return data


def two(task_id: int, result: object) -> None:
    pass


d = Dispatcher(W, gpu_ids=0.5)  # E
d.run([b"x"], on_success=two)  # E
d.run([b"x"], on_success=print, on_error="log")  # E
d.run([b"x"], on_success=print, base_seed="42")  # E
n: int = d.run([b"x"], on_success=print)  # E
Stage(W, workers="two")  # E
Dispatcher(3, gpu_ids=[0])  # E
gpud.fatal(7)  # E
w: BaseWorker = W()
w.cleanup(1)  # E
