"""Repeated runs of one point: how far they moved."""

from __future__ import annotations

import pandas as pd

from vllm_playbooks.analysis.compare import MATCH_COLUMNS, with_match_columns
from vllm_playbooks.analysis.noise import spread_of

#: What names a repeated load in a ``repeat_spread`` table (the shown part of its match key).
REPEAT_LOAD_COLUMNS = (
    "engine_label",
    "model_shape",
    "input_len",
    "output_len",
    "random_range_ratio",
    "concurrency",
    "request_rate_qps",
)


REPEAT_COLUMNS = (*REPEAT_LOAD_COLUMNS, "runs", "values", "lowest", "highest", "spread_pct")


def repeat_spread(df: pd.DataFrame, metric: str = "output_tok_s") -> pd.DataFrame:
    """The loads one engine config ran more than once (same label and ``MATCH_COLUMNS``): the number of runs,
    their values of ``metric`` in the order measured, the lowest and highest, and ``spread_pct``
    (``analysis.noise.spread_of``: highest − lowest over the median, in percent): how far the same engine moved from
    one run to the next on its own. Pass rows without stalls (``results.stalls.unstalled``): a stalled run is not a
    fair repeat."""
    keys = ["engine_label", *MATCH_COLUMNS]
    records = []
    df = with_match_columns(df)
    ordered = df.sort_values("measured_at") if "measured_at" in df.columns else df
    for _, group in ordered.groupby(keys, dropna=False, sort=False):
        if len(group) < 2:
            continue
        values = [float(v) for v in group[metric]]
        first = group.iloc[0]
        records.append(
            {
                **{c: first[c] for c in REPEAT_LOAD_COLUMNS},
                "runs": len(group),
                "values": values,
                "lowest": min(values),
                "highest": max(values),
                "spread_pct": spread_of(values).spread_pct,
            }
        )
    return pd.DataFrame(records, columns=list(REPEAT_COLUMNS))
