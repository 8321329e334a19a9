# SPDX-License-Identifier: MIT
"""Dispatcher's keywords: the options it knows, their job keys, values written as gpud
reads them, and run()'s callbacks checked."""
import inspect

# Dispatcher keyword -> gpud job key (values written as gpud reads them).
OPTION_KEYS = {
    "workers_per_gpu": "job.workers_per_gpu",
    "gpus_per_worker": "job.gpus_per_worker",
    "retries": "job.max_retries",
    "max_retries": "job.max_retries",
    "retry_on": "job.retry_on",
    "batch_size": "job.batch_size",
    "batch_wait_ms": "job.batch_wait_ms",
    "isolate_failures": "job.isolate_failures",
    "setup_timeout": "job.setup_timeout",
    "cleanup_timeout": "job.cleanup_timeout",
    "timeout_grace": "job.timeout_grace",
    "drain_timeout": "job.drain_timeout",
    "sink_timeout": "job.sink_timeout",
    "max_task_bytes": "job.max_task_bytes",
    "max_result_bytes": "job.max_result_bytes",
    "max_worker_restarts": "job.max_worker_restarts",
    "ordered": "job.ordered",
    "log_dir": "job.log_dir",
    "pin_memory": "job.pin_memory",
    "rank": "job.rank",
    "ranks": "job.ranks",
    "metrics_listen": "ui.metrics_listen",
    "metrics_file": "ui.metrics_file",
    "refresh_rate": "ui.refresh_rate",
}
# Every option Dispatcher() takes: the job keys' above and its own.
OPTIONS = frozenset(OPTION_KEYS) | {
    "journal", "resume", "retry_failed", "force", "python", "ui", "stats_json", "job",
    "keys", "generator", "sink", "prefetch", "tty", "chunksize", "stages",
}


def value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return str(v)


def check_callbacks(o, on_success, on_error, on_timeout, on_setup_fail, on_task_start,
                    on_exit, on_resume=None):
    """TypeError for a callback that is not one, or no on_success and no sink."""
    if on_success is None:
        keys = o.get("keys") or {}
        if not (o.get("sink") or o.get("job") or "sink.plugin" in keys):
            raise TypeError("Dispatcher.run(): on_success is required (a callable "
                            "taking task_id, result, worker_id); for gpud's own output "
                            "name a sink plugin: sink={\"plugin\": \"jsonl\", ...}")
    for name, fn in (("on_success", on_success), ("on_error", on_error),
                     ("on_timeout", on_timeout), ("on_setup_fail", on_setup_fail),
                     ("on_task_start", on_task_start), ("on_exit", on_exit),
                     ("on_resume", on_resume)):
        if fn is not None and not callable(fn):
            raise TypeError(f"Dispatcher.run(): {name}={fn!r} is not callable")


def with_key(fn, n_args, task_key):
    """fn itself; or, when it has a `key` parameter after its n_args positional ones
    (on_success(task_id, result, worker_id, key=None)), fn called with key= the task's
    key: its name from the generator (the tar generator's sample key), None without
    one. task_key() answers it during the callback (gpud._gpud.task_key)."""
    if fn is None:
        return None
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return fn
    at = next((i for i, p in enumerate(params) if p.name == "key"), None)
    if at is None or at < n_args or params[at].kind not in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
        return fn

    def keyed(*args):
        return fn(*args, key=task_key())

    return keyed
