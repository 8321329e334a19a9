# SPDX-License-Identifier: MIT
"""gpud's final stats (its stats JSON) as Dispatcher.run()'s dict."""
import json


def library_stats(stats_json, status, called=None):
    """gpud's final stats as the library's dict (total, completed, failed, timeouts,
    gpu_status, start_time, end_time) with gpud's own keys beside them. called: when
    run() was called (time.monotonic()): first_result then also has "python", the time
    before libgpud's run began (the job's keys, the first item read), and
    "from_call", the first result's time from the call."""
    g = json.loads(stats_json) if stats_json else {}
    stats = dict(g)
    first = g.get("first_result")
    if called is not None and first and first.get("started_monotonic"):
        first = dict(first)
        first["python"] = max(0.0, first["started_monotonic"] - called)
        first["from_call"] = first["python"] + first["seconds"] if first["seconds"] else 0.0
        stats["first_result"] = first
    stats.update(
        total=g.get("generated", 0),
        completed=g.get("ok", 0),
        failed=g.get("failed", 0),
        timeouts=g.get("timed_out", 0),
        start_time=g.get("start_time"),
        end_time=g.get("end_time"),
        exit_status=status,
    )
    gpu_status = {}
    for gpu in g.get("gpus", []):
        gpu_status[gpu["gpu_id"]] = {
            "status": "retired" if gpu.get("retired") else "finished",
            "completed": gpu.get("ok", 0),
            "failed": gpu.get("failed", 0),
            "timeouts": gpu.get("timed_out", 0),
            "restarts": gpu.get("restarts", 0),
        }
    stats["gpu_status"] = gpu_status
    return stats
