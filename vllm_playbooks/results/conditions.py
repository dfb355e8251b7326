"""What a run's point folder says about the conditions it ran under, beside its row: the paired session it belongs to
(``config.pairing``) and the state of its host and GPU while it ran (``engine.host_sampler``, ``gpu_samples.csv``).

These are read from the raw files when a page asks (``with_run_conditions``), not stored in ``runs.csv``: a run
recorded before they existed simply has none (empty cells), and nothing recorded is rewritten.
"""

from __future__ import annotations

import csv
import io
import statistics
from pathlib import Path
from typing import Any

import pandas as pd

from vllm_playbooks.results import raw
from vllm_playbooks.results.identity import read_json
from vllm_playbooks.results.replay import point_folders
from vllm_playbooks.results.textfiles import read_text, stored_path

#: The columns ``with_run_conditions`` adds, each empty where the run did not record it.
CONDITION_COLUMNS = (
    "pair_session",  # the paired session (when its run started, UTC); empty: measured on its own
    "pair_mode",  # config.pairing.CO_RESIDENT or BY_RESTART
    "pair_position",  # the run's place in its session's order
    "host_cpu_count",  # logical CPUs of the host
    "host_steal_pct",  # CPU time stolen by the hypervisor over the measured run, all cores, percent
    "host_busy_pct",  # CPU time busy over the run, all cores, percent
    "host_load_1m_max",  # highest 1-minute load average seen during the run
    "host_cpu_mhz_mean",  # mean core clock during the run
    "gpu_sm_clock_mhz_mean",  # mean SM clock of the engine's GPUs during the run (NVML)
    "gpu_util_pct_mean",  # mean NVML utilisation of the engine's GPUs during the run
)


def _gpu_means(point_dir: Path) -> tuple[float | None, float | None]:
    """(mean SM clock, mean utilisation) over ``gpu_samples.csv``'s readings; ``None`` for a reading it lacks."""
    if stored_path(point_dir / raw.GPU_SAMPLES_FILE) is None:
        return None, None
    clocks, utils = [], []
    for line in csv.DictReader(io.StringIO(read_text(point_dir / raw.GPU_SAMPLES_FILE))):
        if line.get("sm_clock_mhz"):
            clocks.append(float(line["sm_clock_mhz"]))
        if line.get("util_pct"):
            utils.append(float(line["util_pct"]))
    return (
        round(statistics.fmean(clocks), 1) if clocks else None,
        round(statistics.fmean(utils), 1) if utils else None,
    )


def run_conditions(point_dir: Path, gpu_samples: bool = True) -> dict[str, Any]:
    """``CONDITION_COLUMNS`` of the point recorded in ``point_dir``, from its ``point.json`` and (``gpu_samples``) its
    GPU samples; without them the GPU columns are ``None``."""
    record = read_json(point_dir / raw.POINT_FILE)
    pairing = record.get("pairing") or {}
    host = record.get("host_signals") or {}
    clock, util = _gpu_means(point_dir) if gpu_samples else (None, None)
    return {
        "pair_session": pairing.get("session"),
        "pair_mode": pairing.get("mode"),
        "pair_position": pairing.get("position"),
        "host_cpu_count": host.get("cpu_count"),
        "host_steal_pct": host.get("steal_pct"),
        "host_busy_pct": host.get("busy_pct"),
        "host_load_1m_max": host.get("load_1m_max"),
        "host_cpu_mhz_mean": host.get("cpu_mhz_mean"),
        "gpu_sm_clock_mhz_mean": clock,
        "gpu_util_pct_mean": util,
    }


def with_run_conditions(rows: pd.DataFrame, data: Path | None = None, gpu_samples: bool = True) -> pd.DataFrame:
    """``rows`` (recorded rows: ``case`` and ``point_id``) with ``CONDITION_COLUMNS`` read from each row's point
    folder in ``data`` (default: the book's data folder); ``gpu_samples`` False leaves the GPU samples unread (their
    columns empty), which spares a page reading every sample file. Where a row already holds one of them (the host's
    CPU count) the recorded value stays where the folder has none."""
    found = [run_conditions(folder, gpu_samples) for folder in point_folders(rows, data)]
    conditions = pd.DataFrame(found, columns=list(CONDITION_COLUMNS), index=rows.index)
    if "host_cpu_count" in rows.columns:
        recorded = pd.to_numeric(rows["host_cpu_count"], errors="coerce")  # object dtype where frames were joined
        conditions["host_cpu_count"] = pd.to_numeric(conditions["host_cpu_count"], errors="coerce").fillna(recorded)
    return rows.drop(columns=[c for c in CONDITION_COLUMNS if c in rows.columns]).join(conditions)
