"""Gains by length profile: rows tagged with their profile, the gain table, and the acceptance (α) band around a central
α."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from vllm_playbooks.analysis.compare import versus_baseline


def with_profile(table: pd.DataFrame, profiles: Mapping[str, tuple[int, int]]) -> pd.DataFrame:
    """``table`` with a ``profile`` column naming each row's (input_len, output_len) after ``profiles``."""
    names = {(int(i), int(o)): name for name, (i, o) in profiles.items()}
    out = table.copy()
    out["profile"] = [names.get((int(i), int(o))) for i, o in zip(out["input_len"], out["output_len"], strict=True)]
    return out


def gain_table(df: pd.DataFrame, profiles: Mapping[str, tuple[int, int]], metric: str = "output_tok_s") -> pd.DataFrame:
    """Every closed-loop speculative point against speculation off: ``gain_pct`` (for latencies, a negative change
    is the gain), by profile, k, imposed α and concurrency."""
    table = with_profile(versus_baseline(df, metric), profiles)
    table = table[table["concurrency"].notna()].copy()
    table["gain_pct"] = table["change_pct"] if not metric.endswith("_ms") else -table["change_pct"]
    return table.sort_values(["profile", "k", "imposed_alpha", "concurrency"]).reset_index(drop=True)


def select_gains(
    gains: pd.DataFrame,
    alpha: float | None = None,
    profile: str | None = None,
    k: int | None = None,
) -> pd.DataFrame:
    """Rows of a gain table at one imposed α, profile and/or k (``None``: any); an empty table stays empty."""
    if gains.empty:
        return gains
    keep = gains["engine_label"].notna()
    if alpha is not None:
        keep &= (gains["imposed_alpha"].astype(float) - alpha).abs() < 1e-9
    if profile is not None:
        keep &= gains["profile"] == profile
    if k is not None:
        keep &= gains["k"] == k
    return gains[keep]


def alpha_band(gains: pd.DataFrame, central: float, k: int = 3) -> pd.DataFrame:
    """The gains of ``k`` at each imposed α other than ``central``, beside the central α's gain at the same profile and
    concurrency: one row per profile, α and concurrency measured at that α, with ``central_alpha``,
    ``central_gain_pct`` (missing where the central α is not measured there) and ``difference_pts`` (this α's gain
    minus the central one's)."""
    columns = [
        "profile",
        "imposed_alpha",
        "concurrency",
        "gain_pct",
        "central_alpha",
        "central_gain_pct",
        "difference_pts",
    ]
    rows = select_gains(gains, k=k)
    if rows.empty:
        return pd.DataFrame(columns=columns)
    at_central = (rows["imposed_alpha"].astype(float) - central).abs() < 1e-9
    centre = rows[at_central].set_index(["profile", "concurrency"])["gain_pct"].rename("central_gain_pct")
    band = rows[~at_central].join(centre, on=["profile", "concurrency"])
    band = band.assign(
        imposed_alpha=band["imposed_alpha"].astype(float),
        central_alpha=central,
        difference_pts=band["gain_pct"] - band["central_gain_pct"],
    )
    return band[columns].sort_values(["profile", "imposed_alpha", "concurrency"]).reset_index(drop=True)
