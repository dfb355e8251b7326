"""The EAGLE-3 page's verdict in a few short sentences: which draft length was best at which loads and by how much
against speculation off, on which GPU with how many runs a side, then the verdict on each published claim. The
numbers of each deciding point go to the page's folded table (``best_k_loads``) and to the ledger's own words."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from vllm_playbooks.analysis.kbest import BANDS, best_k_by_band
from vllm_playbooks.text import and_list


@dataclass(frozen=True)
class ClaimVerdict:
    """One published claim's verdict as the page leads with it: the claim in a few words ('on the 2-3 draft
    tokens as the best'), the verdict word, and the GPU and fewest clean runs a side it rests on (None: no compared
    runs)."""

    words: str
    verdict: str
    gpu: str
    runs_a_side: int | None


def best_k_loads(gains: pd.DataFrame, alpha: float, profile: str = "chat") -> pd.DataFrame:
    """Per concurrency band of ``profile`` that compared two or more draft lengths at the imposed ``alpha``
    (``kbest.best_k_by_band`` on one GPU's gain table), the band's best k and its mean gain against speculation off
    (``best_gain_pct``), the ks tied with it, and ``loads``: the concurrencies measured in the band ('1', '16-64')."""
    best = best_k_by_band(gains, alpha)
    best = best[(best["profile"] == profile) & best["best_k"].notna()].copy()
    at_alpha = gains[((gains["imposed_alpha"] - alpha).abs() < 1e-9) & (gains["profile"] == profile)]
    limits = {name: (low, high) for name, low, high in BANDS}
    loads = []
    for band in best["band"]:
        measured = at_alpha.loc[at_alpha["concurrency"].between(*limits[band]), "concurrency"]
        low, high = int(measured.min()), int(measured.max())
        loads.append(str(low) if low == high else f"{low}-{high}")
    best["loads"] = loads
    return best[["loads", "best_k", "best_gain_pct", "tied_ks", "ks"]].reset_index(drop=True)


def runs_words(runs: int | None) -> str:
    """'3 runs a side', '1 run a side', or 'no compared runs'."""
    return "no compared runs" if runs is None else f"{runs} run{'' if runs == 1 else 's'} a side"


def best_k_sentence(gpu: str, runs: int | None, best: pd.DataFrame) -> str:
    """Which draft length was best at which loads on ``gpu``, by how much against speculation off (``best``:
    ``best_k_loads``); consecutive bands with the same best k read as one."""
    if best.empty:
        return f"No recorded sweep on the {gpu} compares two draft lengths at one load yet."
    groups: list[tuple[int, list[str], list[str]]] = []
    for row in best.itertuples():
        if groups and groups[-1][0] == row.best_k:
            groups[-1][1].append(row.loads)
            groups[-1][2].append(f"{row.best_gain_pct:+.1f} %")
        else:
            groups.append((int(row.best_k), [row.loads], [f"{row.best_gain_pct:+.1f} %"]))
    parts = [
        f"k = {k} at {and_list(loads)}{' concurrent requests' if i == 0 else ''} ({and_list(gains)})"
        for i, (k, loads, gains) in enumerate(groups)
    ]
    return (
        f"On the {gpu} ({runs_words(runs)}), the largest output-throughput gain over speculation off came from "
        f"{and_list(parts)}."
    )


def verdict_paragraph(best_sentence: str, verdicts: list[ClaimVerdict]) -> str:
    """The page's verdict: ``best_sentence`` (``best_k_sentence``), then each claim's verdict in bold; a claim judged
    on another GPU or with other runs than the first names its own."""
    first = verdicts[0]
    parts = []
    for claim in verdicts:
        same = (claim.gpu, claim.runs_a_side) == (first.gpu, first.runs_a_side)
        basis = "" if same else f" (on the {claim.gpu}, {runs_words(claim.runs_a_side)})"
        parts.append(f"**{claim.verdict}** {claim.words}{basis}")
    return f"{best_sentence} Our verdicts: {and_list(parts, ', ', ', and ')}."
