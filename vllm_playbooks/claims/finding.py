"""What a case page concludes from its rows: a status, the sentence it prints and the table behind it, and the helpers
that find stalled or missing points (``cases.stall_words`` words them)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pandas as pd


@dataclass(frozen=True)
class Finding:
    """What a page concludes: a short status, the sentence it prints, and the table of numbers behind it."""

    status: str
    sentence: str
    table: pd.DataFrame = field(repr=False)


def published_or_none(published: pd.DataFrame | None, claim_id: str) -> float | None:
    if published is None:
        return None
    match = published.loc[published["claim_id"] == claim_id, "value"]
    return float(match.iloc[0]) if len(match) == 1 else None


def gpu_names(df: pd.DataFrame) -> str:
    return ", ".join(sorted(set(df["gpu_name"].dropna().astype(str)))) or "the GPU recorded"


def split_stalled(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(usable rows, stalled rows) by the ``stalled`` column (``results.stalls.mark_stalled``); all usable without
    it."""
    if df.empty or "stalled" not in df.columns:
        return df, df.iloc[0:0]
    flag = df["stalled"].astype(bool)
    return df[~flag], df[flag]


def stalled_loads(stalled: pd.DataFrame, column: str, wanted: Iterable[float]) -> list[float]:
    """The loads of ``wanted`` (values of ``column``) at which some stalled row was recorded."""
    if stalled.empty:
        return []
    return sorted({float(v) for v in stalled[column].dropna()} & {float(w) for w in wanted})
