"""Gains by length profile: rows tagged with their profile, the gain table, and the acceptance (α) band around a central α."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from vllm_playbooks.analysis.compare import versus_baseline
from vllm_playbooks.analysis.noise import MIN_BAND_PCT

if TYPE_CHECKING:
    import pandas as pd


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
    gains: pd.DataFrame, alpha: float | None = None, profile: str | None = None, k: int | None = None,
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
    import pandas as pd

    columns = ["profile", "imposed_alpha", "concurrency", "gain_pct", "central_alpha", "central_gain_pct",
               "difference_pts"]  # fmt: skip
    rows = select_gains(gains, k=k)
    if rows.empty:
        return pd.DataFrame(columns=columns)
    at_central = (rows["imposed_alpha"].astype(float) - central).abs() < 1e-9
    centre = rows[at_central].set_index(["profile", "concurrency"])["gain_pct"].rename("central_gain_pct")
    band = rows[~at_central].join(centre, on=["profile", "concurrency"])
    band = band.assign(imposed_alpha=band["imposed_alpha"].astype(float), central_alpha=central,
                       difference_pts=band["gain_pct"] - band["central_gain_pct"])  # fmt: skip
    return band[columns].sort_values(["profile", "imposed_alpha", "concurrency"]).reset_index(drop=True)


def describe_alpha_band(band: pd.DataFrame, k: int = 3, tolerance: float = MIN_BAND_PCT / 100) -> str:
    """One sentence per profile and α of an ``alpha_band`` table of ``k``: where it still paid (a gain beyond
    ``tolerance``) and where it did not at that α, and by how many points its gain differed from the central α's at
    the concurrencies measured with both, naming those where the difference ran against acceptance by more than
    ``tolerance`` (a lower α gaining more, a higher one less: runs that differed in more than α); empty when no other α is
    measured."""
    sentences = []
    for (profile, alpha, central), rows in band.groupby(["profile", "imposed_alpha", "central_alpha"], sort=False):
        below = alpha < central
        paid = rows[rows["gain_pct"] > 100 * tolerance]
        if len(paid) == len(rows):
            found = f"paid at every concurrency measured ({levels_text(rows)}: {gains_text(rows)})"
        else:
            unpaid = rows[rows["gain_pct"] <= 100 * tolerance]
            found = (f"paid at concurrency {levels_text(paid)} ({gains_text(paid)}) and not at {levels_text(unpaid)} "
                     f"({gains_text(unpaid)})") if not paid.empty else f"paid at no concurrency measured ({gains_text(rows)})"
        text = (f"At α = {alpha:.2f} ({abs(alpha - central):.2f} {'below' if below else 'above'} the imposed "
                f"{central:.2f}) k = {k} {found}")  # fmt: skip
        both = rows[rows["central_gain_pct"].notna()]
        if not both.empty:
            low, high = both["difference_pts"].min(), both["difference_pts"].max()
            spread = f"{low:+.1f}" if round(low, 1) == round(high, 1) else f"{low:+.1f} to {high:+.1f}"
            text += f", {spread} points against α = {central:.2f} at the same concurrencies"
            against = both["difference_pts"] > 100 * tolerance if below else both["difference_pts"] < -100 * tolerance
            contrary = both[against]
            if not contrary.empty:
                points = ", ".join(f"{int(c)} ({d:+.1f} points)"
                                   for c, d in zip(contrary["concurrency"], contrary["difference_pts"], strict=True))  # fmt: skip
                text += (f"; {'more' if below else 'less'} than α = {central:.2f} at concurrency {points}, the "
                         f"opposite of what a {'lower' if below else 'higher'} acceptance does alone: there the two "
                         "runs differed in more than α")  # fmt: skip
        sentences.append(f"{text} ({profile} profile).")
    return " ".join(sentences)


def levels_text(rows: pd.DataFrame) -> str:
    return ", ".join(str(int(c)) for c in rows["concurrency"])


def gains_text(rows: pd.DataFrame) -> str:
    return ", ".join(f"{g:+.1f} %" for g in rows["gain_pct"])
