# SPDX-License-Identifier: MIT
"""gpud.ui.RichDispatcher: the library's live-dashboard Dispatcher, on gpud's dashboard.

    stats = RichDispatcher(Worker, gpu_ids=[0, 1], refresh_rate=4.0).run(items(), on_success=f)
    print(stats["completed"], stats["gpu_status"][0]["status"])   # ... 'finished'

show_ui=True draws gpud's dashboard on the terminal (standard error; plain progress
lines when that is not a terminal); show_ui=False draws nothing. Either way run()
returns the stats dict (the library's keys and gpud's own).
"""
from __future__ import annotations

import sys
from typing import Any, Optional

from .dispatcher import Dispatcher, GpuIds, OnSuccess, Stats, WorkerClass


class RichDispatcher(Dispatcher):
    """RichDispatcher(worker_cls, gpu_ids, queue_size=1024, refresh_rate=4.0,
    show_ui=True, **options): Dispatcher's options, and the dashboard's redraws a
    second."""

    def __init__(self, worker_cls: WorkerClass, gpu_ids: GpuIds, queue_size: int = 1024,
                 refresh_rate: float = 4.0, show_ui: bool = True, **options: Any) -> None:
        if "ui" not in options:
            if not show_ui:
                options["ui"] = "off"
            elif sys.stderr is not None and sys.stderr.isatty():
                options["ui"] = "dashboard"
            else:
                options["ui"] = "plain"
        options.setdefault("refresh_rate", refresh_rate)
        super().__init__(worker_cls, gpu_ids, queue_size, **options)
        self.refresh_rate = refresh_rate
        self.show_ui = show_ui

    def run(self, generator: Any, on_success: Optional[OnSuccess] = None,  # type: ignore[override]
            **kwargs: Any) -> Stats:
        """Dispatcher.run(); on_success may be left out. Returns the stats dict."""
        if on_success is None:
            def on_success(task_id: int, result: Any, worker_id: int) -> None:
                pass
        return super().run(generator, on_success, **kwargs)


__all__ = ["RichDispatcher"]
