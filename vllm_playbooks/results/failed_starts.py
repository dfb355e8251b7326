"""Servers that did not start: which engine config, on which hardware, and what their logs say stopped them.

A server that fails during start-up leaves two records: its log in the case's ``logs/`` folder (without the KV-cache
lines of a server that started: ``server_logs.has_started``), and one failure per point it was to measure
(``raw/<hardware>/<config id>/<load>-r<n>.failure.json``, naming that log: ``raw.record_failure``). The failures give
the log its hardware, which the log itself does not name.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from vllm_playbooks.results import raw
from vllm_playbooks.results.server_logs import has_started, read_failed_startup, server_log_files
from vllm_playbooks.results.store import case_dir
from vllm_playbooks.results.textfiles import plain_name

#: The columns of ``failed_starts``.
FAILED_START_COLUMNS = (
    "hardware",
    "config_id",
    "engine_label",
    "log",
    "points",
    "error",
    "weights_gib",
    "cudagraph_estimate_gib",
    "available_kv_gib",
    "gpu_memory_utilization",
    "utilization_without_cudagraphs",
)


def failed_starts(case: str, data: Path | None = None) -> pd.DataFrame:
    """One row per server of ``case`` that did not start and that a kept failure ties to its hardware: the
    ``hardware`` key and ``config_id`` of its points (``engine_label``: the config id without its hash), its ``log``,
    how many ``points`` it was to measure, and what the log says (``server_logs.FailedStartup``). A log that no
    failure names (a start-up stopped by a time limit, or one measured elsewhere) has no row, and neither has a
    failure whose log is missing or shows a server that started (it died later, while measuring)."""
    folder = case_dir(case, data)
    logs = {plain_name(log): log for log in server_log_files(folder / "logs")}
    unstarted: dict[str, bool] = {}  # only the logs a failure names are read, each once
    points: dict[tuple[str, str, str], int] = {}
    for record in raw.failure_records(folder):
        name = plain_name(Path(str(record.get("server_log", ""))))  # a path on the machine that measured
        if name in logs and name not in unstarted:
            unstarted[name] = not has_started(logs[name])
        if unstarted.get(name):
            hardware, config_id = str(record["point_id"]).split("/")[:2]
            key = (hardware, config_id, name)
            points[key] = points.get(key, 0) + 1
    records = []
    for (hardware, config_id, name), count in sorted(points.items()):
        startup = read_failed_startup(logs[name])
        records.append(
            {
                "hardware": hardware,
                "config_id": config_id,
                "engine_label": config_id.rsplit("-", 1)[0],
                "log": name,
                "points": count,
                "error": startup.error,
                "weights_gib": startup.weights_gib,
                "cudagraph_estimate_gib": startup.cudagraph_estimate_gib,
                "available_kv_gib": startup.available_kv_gib,
                "gpu_memory_utilization": startup.gpu_memory_utilization,
                "utilization_without_cudagraphs": startup.utilization_without_cudagraphs,
            }
        )
    return pd.DataFrame(records, columns=list(FAILED_START_COLUMNS))


def latest_tries(failed: pd.DataFrame) -> pd.DataFrame:
    """The latest failed start-up of each engine config on each hardware among ``failed`` (``failed_starts`` rows):
    log names end in their launch time, so the last in name order."""
    return failed.sort_values("log").drop_duplicates(["hardware", "config_id"], keep="last")
