"""Load levels as the pages write them: one label per load, the comparison tables with that label beside their
numbers, and the table of runs that overlapped another (``analysis.runs.overlapping_points``) in words."""

from __future__ import annotations

import pandas as pd

from vllm_playbooks.analysis.runs import overlapping_points


def load_label(concurrency: object, request_rate_qps: object) -> str:
    """A load level in words: 'concurrency 4', '2 QPS', or '2 QPS (at most 8 in flight)'."""
    has_c, has_r = not pd.isna(concurrency), not pd.isna(request_rate_qps)  # type: ignore[call-overload]
    if has_r and has_c:
        return f"{float(request_rate_qps):g} QPS (at most {int(concurrency)} in flight)"  # type: ignore[arg-type]
    if has_r:
        return f"{float(request_rate_qps):g} QPS"  # type: ignore[arg-type]
    return f"concurrency {int(concurrency)}" if has_c else "unbounded load"  # type: ignore[call-overload]


def with_load_labels(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (one line per load: its ``concurrency`` and ``request_rate_qps``) with a ``load`` column last, each
    line's ``load_label``."""
    labels = [load_label(c, r) for c, r in zip(table["concurrency"], table["request_rate_qps"], strict=True)]
    return table.assign(load=pd.Series(labels, index=table.index, dtype="object"))


def overlap_table(df: pd.DataFrame) -> pd.DataFrame:
    """One line per row of ``df`` whose run overlapped another's in time (``analysis.runs.overlapping_points``): its
    ``point_id``, ``engine_label``, ``load`` and what it ran ``beside`` ('label at load; …')."""
    pairs = overlapping_points(df)
    records = []
    for point_id, group in pairs.groupby("point_id", sort=False):
        first = group.iloc[0]
        beside = sorted(
            f"{o.beside_engine_label} at {load_label(o.beside_concurrency, o.beside_request_rate_qps)}"
            for o in group.itertuples()
        )
        records.append(
            {
                "point_id": point_id,
                "engine_label": first["engine_label"],
                "load": load_label(first["concurrency"], first["request_rate_qps"]),
                "beside": "; ".join(beside),
            }
        )
    return pd.DataFrame(records, columns=["point_id", "engine_label", "load", "beside"])
