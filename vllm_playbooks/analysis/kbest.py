"""The best number of draft tokens per concurrency band, measured and as a source claims it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from vllm_playbooks.analysis.noise import MIN_BAND_PCT, Effect, band_pct, effect_of_speedup

#: Concurrency bands for "best k": low, middle and high load, as the EAGLE-3 page reports them.
BANDS: tuple[tuple[str, int, int], ...] = (("1-8", 1, 8), ("16-64", 16, 64), ("128-200", 128, 200))


def best_ks(values: Mapping[int, float], spreads_pct: Mapping[int, float] | None = None) -> list[int]:
    """The best k by ``values`` (higher is better: a throughput, or 1 + a gain) and every k tied with it, best first.

    The one rule every page and check uses to name a best k: another k ties with the best where the best's value
    over its value is no gain beyond their band (``noise.effect_of_speedup`` within ``noise.band_pct`` of the two ks'
    ``spreads_pct``; the floor where none is given). Equal values keep the smaller k first; no values, no k.
    """
    spreads = spreads_pct or {}
    ranked = sorted(values, key=lambda k: (-values[k], k))
    if not ranked:
        return []
    top = ranked[0]
    return [
        k
        for k in ranked
        if k == top
        or effect_of_speedup(values[top] / values[k], band_pct(spreads.get(top, 0.0), spreads.get(k, 0.0)))
        is not Effect.GAIN
    ]


def band_means(
    gains: pd.DataFrame,
    alpha: float,
    bands: Iterable[tuple[str, int, int]],
) -> Iterable[tuple[str, str, pd.Series]]:
    """(profile, band, mean gain in % per k) for each profile and concurrency band with points at the imposed
    ``alpha``; the means are sorted best first (ties keep the smaller k first)."""
    central = gains[(gains["imposed_alpha"] - alpha).abs() < 1e-9]
    for profile, rows in central.groupby("profile"):
        for name, low, high in bands:
            band = rows[rows["concurrency"].between(low, high)]
            if not band.empty:
                yield profile, name, band.groupby("k")["gain_pct"].mean().sort_values(ascending=False, kind="stable")


def ks_text(means: pd.Series) -> str:
    """The values of k a band compared, in ascending order: '2, 3, 4'."""
    return ", ".join(str(int(k)) for k in sorted(means.index))


def best_k_by_band(gains: pd.DataFrame, alpha: float, bands: Iterable[tuple[str, int, int]] = BANDS) -> pd.DataFrame:
    """For each profile and concurrency band, the k with the highest mean gain at the imposed ``alpha`` and the ks
    tied with it (``best_ks`` on 1 + the mean gains, each k's band the widest ``band_pct`` of its points in the band).

    A band gets a best k only where at least two values of k were measured in it; ``ks`` lists those compared,
    ``tied_ks`` the others within noise of the best ('' for none: the best stands alone), ``runner_up_k`` is the next
    best and ``lead_pts`` how many points of gain the best is ahead of it. A band without any point of the profile
    (the long profile stops at concurrency 64) gets no row.
    """
    central = gains[(gains["imposed_alpha"] - alpha).abs() < 1e-9]
    records = []
    for profile, name, means in band_means(gains, alpha, bands):
        ranked = len(means) >= 2
        low, high = next((lo, hi) for n, lo, hi in bands if n == name)
        points = central[(central["profile"] == profile) & central["concurrency"].between(low, high)]
        spreads = points.groupby("k")["band_pct"].max().to_dict() if "band_pct" in points.columns else {}
        tied = best_ks({int(k): 1 + g / 100 for k, g in means.items()}, {int(k): v for k, v in spreads.items()})
        records.append(
            {
                "profile": profile,
                "band": name,
                "ks": ks_text(means),
                "best_k": int(means.index[0]) if ranked else None,
                "best_gain_pct": float(means.iloc[0]) if ranked else None,
                "tied_ks": ", ".join(str(k) for k in tied[1:]) if ranked else None,
                "runner_up_k": int(means.index[1]) if ranked else None,
                "lead_pts": float(means.iloc[0] - means.iloc[1]) if ranked else None,
            }
        )
    columns = ["profile", "band", "ks", "best_k", "best_gain_pct", "tied_ks", "runner_up_k", "lead_pts"]
    return pd.DataFrame(records, columns=columns)


def claimed_ks_by_band(
    gains: pd.DataFrame,
    alpha: float,
    low: int,
    high: int,
    tolerance: float = MIN_BAND_PCT / 100,
    bands: Iterable[tuple[str, int, int]] = BANDS,
) -> pd.DataFrame:
    """Whether a claimed best range of draft tokens (``low``-``high``, Red Hat's 2-3) held in each profile and
    concurrency band, at the imposed ``alpha``.

    Each band sets the best mean gain of a k inside the range (``inside_k``, ``inside_gain_pct``) against the best
    outside it (``outside_k``, ``outside_gain_pct``). ``outcome``: 'held' when the inside one leads by more than
    ``tolerance`` (in points of gain, ×100), 'not held' when the outside one does, 'too close' when they are within
    it, and 'not tested' when the band measured only ks on one side of the range (k = 2 and 3 alone cannot show
    that 2-3 is best).
    """
    records = []
    for profile, name, means in band_means(gains, alpha, bands):
        inside = means[(means.index >= low) & (means.index <= high)]
        outside = means.drop(inside.index)
        record = {
            "profile": profile,
            "band": name,
            "ks": ks_text(means),
            "claimed": f"{low}-{high}",
            "inside_k": None,
            "inside_gain_pct": None,
            "outside_k": None,
            "outside_gain_pct": None,
        }
        if not inside.empty:
            record.update(inside_k=int(inside.index[0]), inside_gain_pct=float(inside.iloc[0]))
        if not outside.empty:
            record.update(outside_k=int(outside.index[0]), outside_gain_pct=float(outside.iloc[0]))
        if inside.empty or outside.empty:
            record["outcome"] = "not tested"
        else:
            lead = float(inside.iloc[0] - outside.iloc[0])
            record["outcome"] = "too close" if abs(lead) <= 100 * tolerance else "held" if lead > 0 else "not held"
        records.append(record)
    columns = [
        "profile",
        "band",
        "ks",
        "claimed",
        "inside_k",
        "inside_gain_pct",
        "outside_k",
        "outside_gain_pct",
        "outcome",
    ]
    return pd.DataFrame(records, columns=columns).astype({"inside_k": "Int64", "outside_k": "Int64"})
