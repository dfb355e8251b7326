"""GPU samples of recorded points: load a point's ``gpu_samples.csv`` and summarise utilisation per GPU and point.

The samples live in raw files only (never in ``runs.csv``), so rows recorded before the sampler existed load and replay
unchanged; for them, and wherever NVML was unavailable, the summary says so instead of inventing numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from vllm_playbooks import paths
from vllm_playbooks.engine.gpu_sampler import SAMPLE_COLUMNS
from vllm_playbooks.errors import SchemaError
from vllm_playbooks.results import raw

#: A sample below this utilisation counts as (partly) idle in ``summarize_samples``.
BUSY_THRESHOLD_PCT = 50.0

#: Columns of ``summarize_samples`` (one row per GPU).
SUMMARY_COLUMNS = (
    "gpu",
    "nvml_index",
    "samples",
    "sampled_s",
    "util_mean_pct",
    "util_p10_pct",
    "util_p50_pct",
    "util_p90_pct",
    "below_threshold_frac",
    "threshold_pct",
    "mem_util_mean_pct",
    "mem_used_max_mib",
    "sm_clock_mean_mhz",
    "power_mean_w",
)

#: Columns of the measured row that ``gpu_summary`` repeats beside each GPU's summary.
ROW_COLUMNS = (
    "point_id",
    "engine_label",
    "model_shape",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "max_num_seqs",
    "concurrency",
    "output_tok_s",
)


#: The sampling status of a point recorded before GPU sampling existed (its ``point.json`` has no ``gpu_sampling``).
NOT_RECORDED = {"status": "not recorded"}


def sampling_status(point_dir: Path) -> dict[str, Any]:
    """``point.json``'s ``gpu_sampling`` record (its ``status`` and, where sampling did not run, the ``reason``
    recorded); ``NOT_RECORDED`` for points from before the sampler, whose status says why (no ``reason``)."""
    path = point_dir / raw.POINT_FILE
    try:
        point = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise SchemaError(f"{path}: {error}") from None
    return dict(point.get("gpu_sampling") or NOT_RECORDED)


def load_gpu_samples(point_dir: Path) -> pd.DataFrame:
    """A point's samples (columns ``SAMPLE_COLUMNS``, empty cells as NaN); an empty frame when there are none."""
    path = point_dir / raw.GPU_SAMPLES_FILE
    if not path.exists():
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in SAMPLE_COLUMNS})
    frame = pd.read_csv(path)
    if list(frame.columns) != list(SAMPLE_COLUMNS):
        raise SchemaError(f"{path}: columns {list(frame.columns)}, expected {list(SAMPLE_COLUMNS)}")
    return frame.astype("float64")


def summarize_samples(samples: pd.DataFrame, threshold_pct: float = BUSY_THRESHOLD_PCT) -> pd.DataFrame:
    """One row per GPU: sample count and span, utilisation mean and 10/50/90th percentiles, the fraction of samples
    below ``threshold_pct``, memory-controller utilisation, peak memory used, mean SM clock and power.

    Readings NVML could not take (NaN) are left out of each statistic; a GPU whose utilisation was never read has
    NaN statistics, not zeros.
    """
    rows = []
    for gpu, group in samples.groupby("gpu", sort=True):
        util = group["util_pct"].dropna()
        rows.append(
            {
                "gpu": int(gpu),
                "nvml_index": int(group["nvml_index"].iloc[0]),
                "samples": len(group),
                "sampled_s": float(group["t_s"].max() - group["t_s"].min()),
                "util_mean_pct": util.mean() if len(util) else float("nan"),
                "util_p10_pct": util.quantile(0.1) if len(util) else float("nan"),
                "util_p50_pct": util.quantile(0.5) if len(util) else float("nan"),
                "util_p90_pct": util.quantile(0.9) if len(util) else float("nan"),
                "below_threshold_frac": float((util < threshold_pct).mean()) if len(util) else float("nan"),
                "threshold_pct": threshold_pct,
                "mem_util_mean_pct": group["mem_util_pct"].mean(),
                "mem_used_max_mib": group["mem_used_mib"].max(),
                "sm_clock_mean_mhz": group["sm_clock_mhz"].mean(),
                "power_mean_w": group["power_w"].mean(),
            }
        )
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


def gpu_summary(
    runs: pd.DataFrame, data: Path | None = None, threshold_pct: float = BUSY_THRESHOLD_PCT
) -> pd.DataFrame:
    """Per measured row and GPU: the row's identity (``ROW_COLUMNS``), the sampling status and its summary.

    A row whose point has no samples (recorded before the sampler, or NVML unavailable) gets one line with its
    ``sampling_status`` and ``sampling_reason`` and NaN statistics, so a page can say which points lack them.
    """
    base = data if data is not None else paths.data_dir()
    columns = [*ROW_COLUMNS, "sampling_status", "sampling_reason", *SUMMARY_COLUMNS]
    parts = []
    for row in runs.itertuples(index=False):
        point_dir = base / row.raw_path
        status = sampling_status(point_dir)
        summary = summarize_samples(load_gpu_samples(point_dir), threshold_pct)
        if summary.empty:
            summary = pd.DataFrame([{"threshold_pct": threshold_pct}], columns=list(SUMMARY_COLUMNS))
        for name in reversed(ROW_COLUMNS):
            summary.insert(0, name, getattr(row, name))
        summary.insert(len(ROW_COLUMNS), "sampling_status", status.get("status"))
        summary.insert(len(ROW_COLUMNS) + 1, "sampling_reason", status.get("reason"))
        parts.append(summary)
    if not parts:
        return pd.DataFrame(columns=columns)
    return pd.concat(parts, ignore_index=True)[columns]
