"""Where a point's spread comes from: each point's runs beside the readings taken while they ran.

A wide spread is traced before it is only widened into a band (``analysis.noise``). The readings of a run
(``results.conditions``: the GPU's busy share and SM clock from NVML samples, the host's CPU steal and load) tell
apart a GPU that slowed (its clock fell), a host that was disturbed (steal, load) and a step that waited on the host
(the GPU idle for part of each step at a steady clock on a quiet host): then the run's throughput rises and falls
with the GPU's busy share.
"""

from __future__ import annotations

import pandas as pd

from vllm_playbooks.analysis.noise import spread_of

#: What makes one point: its runs are those rows that share these.
POINT = ["gpu_name", "engine_label", "concurrency"]
#: The columns of ``point_swings``.
SWING_COLUMNS = [
    "gpu_name",
    "engine_label",
    "concurrency",
    "runs",
    "spread_pct",
    "gpu_busy_pct_low",
    "gpu_busy_pct_high",
    "sm_clock_mhz_low",
    "sm_clock_mhz_high",
    "host_steal_pct_high",
    "host_load_1m_high",
]


def point_swings(rows: pd.DataFrame, metric: str = "output_tok_s") -> pd.DataFrame:
    """One line per GPU, engine and concurrency measured at least twice in ``rows`` (recorded rows with their run
    conditions, GPU samples read: ``results.conditions.with_run_conditions``): its runs, the spread of ``metric``,
    the lowest and highest mean GPU busy share and SM clock of its runs, and its runs' highest CPU steal and load."""
    records = []
    for (gpu, label, concurrency), point in rows.groupby(POINT, sort=True):
        if len(point) < 2:
            continue
        busy, clock = point["gpu_util_pct_mean"].astype(float), point["gpu_sm_clock_mhz_mean"].astype(float)
        records.append(
            {
                "gpu_name": gpu,
                "engine_label": label,
                "concurrency": int(concurrency),
                "runs": len(point),
                "spread_pct": spread_of(point[metric].astype(float)).spread_pct,
                "gpu_busy_pct_low": busy.min(),
                "gpu_busy_pct_high": busy.max(),
                "sm_clock_mhz_low": clock.min(),
                "sm_clock_mhz_high": clock.max(),
                "host_steal_pct_high": point["host_steal_pct"].astype(float).max(),
                "host_load_1m_high": point["host_load_1m_max"].astype(float).max(),
            }
        )
    return pd.DataFrame(records, columns=SWING_COLUMNS)


def busy_correlation(rows: pd.DataFrame, metric: str = "output_tok_s") -> float | None:
    """How closely ``metric`` follows the GPU's busy share from run to run: the Pearson correlation, over every run of
    a point measured at least twice, of the run's ``metric`` and its mean GPU busy share, each relative to its
    point's median (so that GPUs, loads and engines of different speeds pool). None with fewer than three such runs or
    where either side does not vary."""
    repeated = rows[rows.groupby(POINT)[metric].transform("size") >= 2]
    if len(repeated) < 3:
        return None
    keys = [repeated[column] for column in POINT]
    value = repeated[metric].astype(float)
    value = value / value.groupby(keys).transform("median")
    busy = repeated["gpu_util_pct_mean"].astype(float)
    busy = busy / busy.groupby(keys).transform("median")
    if value.std() == 0 or busy.std() == 0 or busy.isna().any():
        return None
    return float(value.corr(busy))
