"""Where and when the rows ran: provenance, time windows, runs that overlapped on one host, runs shorter than the duration rule."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_playbooks.analysis.compare import load_text

if TYPE_CHECKING:
    import pandas as pd


def provenance_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Where the rows were measured: one line per (GPU, count, driver, vLLM, torch, load format) with the dates."""
    keys = ["gpu_name", "gpu_count", "driver_version", "vllm_version", "torch_version", "load_format"]
    grouped = df.groupby(keys, dropna=False)
    return grouped.agg(
        rows=("point_id", "count"),
        first_measured=("measured_at", "min"),
        last_measured=("measured_at", "max"),
        measured_seconds=("duration_s", "sum"),
    ).reset_index()


def measured_windows(df: pd.DataFrame) -> pd.DataFrame:
    """Each row's measured run as a time window: ``started_at`` = ``measured_at`` (its end) − ``duration_s``."""
    import pandas as pd

    out = df[["point_id", "engine_label", "concurrency", "request_rate_qps", "measured_at", "duration_s"]].copy()
    out["ended_at"] = pd.to_datetime(out["measured_at"], utc=True)
    out["started_at"] = out["ended_at"] - pd.to_timedelta(out["duration_s"].astype(float), unit="s")
    return out.drop(columns=["measured_at"])


def overlapping_points(df: pd.DataFrame) -> pd.DataFrame:
    """Rows whose measured run overlapped another row's in time (two servers, one per GPU group, on one host: they
    share its CPUs, so each may have run slower than alone); one line per such row, naming the others."""
    import pandas as pd

    windows = measured_windows(df).reset_index(drop=True)
    records = []
    for i, row in windows.iterrows():
        others = windows[(windows.index != i) & (windows["started_at"] < row["ended_at"])
                         & (windows["ended_at"] > row["started_at"])]  # fmt: skip
        if len(others):
            beside = [f"{o.engine_label} at {load_text(o.concurrency, o.request_rate_qps)}" for o in others.itertuples()]
            records.append({"point_id": row["point_id"], "engine_label": row["engine_label"],
                            "load": load_text(row["concurrency"], row["request_rate_qps"]),
                            "beside": "; ".join(sorted(beside))})  # fmt: skip
    return pd.DataFrame(records, columns=["point_id", "engine_label", "load", "beside"])


#: Above this many overlapping points, ``overlap_note`` counts them per configuration instead of listing each pair.
OVERLAPS_LISTED = 8


def overlap_note(df: pd.DataFrame) -> str:
    """One sentence for a page: which points ran at the same time as another (``overlapping_points``), or none.
    Up to ``OVERLAPS_LISTED`` such points are named with what each ran beside; more are counted per configuration,
    and the page shows the ``overlapping_points`` table for the pairs."""
    rows = overlapping_points(df)
    if rows.empty:
        return f"Each of the {len(df)} points ran alone on its host."
    opening = (f"{len(rows)} of the {len(df)} points ran at the same time as another point, one server per GPU on the "
               "same host, sharing its CPUs (so each may have run slower than alone)")  # fmt: skip
    if len(rows) > OVERLAPS_LISTED:
        per_config = rows["engine_label"].value_counts(sort=False).items()
        counts = ", ".join(f"`{label}` {count}" for label, count in per_config)
        return (f"{opening}; by configuration: {counts}. The table below names what each ran beside; the others ran "
                "alone.")  # fmt: skip
    listed = "; ".join(f"`{r.engine_label}` at {r.load} beside {r.beside}" for r in rows.itertuples())
    return f"{opening}: {listed}. The others ran alone."


def duration_rule_breaches(df: pd.DataFrame, min_duration_s: float = 30.0) -> pd.DataFrame:
    """Rows whose measured run lasted less than ``min_duration_s`` (the duration rule, book: methodology).

    The runner measures a short point a second time with more requests; rows recorded before it did so, or
    still short after the second attempt, are listed here so a page can say which numbers rest on short runs.
    """
    short = df[df["duration_s"] < min_duration_s]
    return short[["engine_label", "concurrency", "request_rate_qps", "num_prompts", "duration_s", "point_id"]]
