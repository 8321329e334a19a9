# SPDX-License-Identifier: MIT
"""gpud's final stats (its stats JSON) as Dispatcher.run()'s dict."""
import json


def library_stats(stats_json, status):
    """gpud's final stats as the library's dict (total, completed, failed, timeouts,
    gpu_status, start_time, end_time) with gpud's own keys beside them."""
    g = json.loads(stats_json) if stats_json else {}
    stats = dict(g)
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
