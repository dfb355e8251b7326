"""Paired comparisons: each run of a config against the run of the reference config measured next to it.

A paired part (``config.pairing``, ``run.paired``) measures the configs it compares in turn on one GPU. Two runs of
one pair share the host's and the GPU's state of those minutes, so their ratio carries little of the drift that moves
both; the spread of the ratios over the pairs is the noise of the comparison itself. ``paired_versus`` judges a
change on that spread (``analysis.noise``: the band is the larger of it and ``MIN_BAND_PCT``) and, beside it, shows
what the same runs give unpaired: the spread of every run of one side over every run of the other
(``noise.cross_ratios``), so a page can show what pairing bought.

Runs pair when they belong to one paired session (``pair_session``, from ``results.conditions``), match on
``analysis.compare.MATCH_COLUMNS`` (same case, settings, load and GPU model) and come at the same turn: the first run
of each config at that load in the session, the second, and so on (``pair_position`` orders them; repeat indices
need not agree, since a config with older runs of its own numbers its new ones after them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_playbooks.analysis.compare import MATCH_COLUMNS, higher_is_better, load_text, with_match_columns
from vllm_playbooks.analysis.noise import band_pct, cross_ratios, effect_of_speedup, spread_of

if TYPE_CHECKING:
    import pandas as pd

#: The columns of ``paired_versus``, one line per compared config, load and GPU model.
PAIRED_COLUMNS = (
    "engine_label", "reference_label", "gpu_name", "load", "concurrency", "request_rate_qps", "input_len",
    "output_len", "random_range_ratio", "metric", "pairs", "pair_mode", "reference", "value", "ratio", "change_pct",
    "ratio_lowest", "ratio_highest", "paired_spread_pct", "band_pct", "effect", "reference_spread_pct",
    "value_spread_pct", "unpaired_spread_pct", "unpaired_band_pct",
)  # fmt: skip


def paired_ratios(rows: pd.DataFrame, reference_label: str, metric: str = "output_tok_s") -> pd.DataFrame:
    """One line per pair of runs in ``rows`` (recorded rows with ``results.conditions.CONDITION_COLUMNS``): a run of
    any other engine label beside the run of ``reference_label`` of the same paired session, match columns and turn;
    with both values of ``metric`` and ``ratio`` (other / reference). Runs not measured in a paired session,
    or without a partner, are left out. Pass rows without stalls."""
    import pandas as pd

    keys = ["pair_session", *MATCH_COLUMNS, "turn"]
    paired = with_match_columns(rows)
    paired = paired[paired["pair_session"].notna()]
    paired = paired.assign(**{k: paired[k].astype("string").fillna("—") for k in MATCH_COLUMNS})
    order = paired["pair_position"].astype(float)
    paired = paired.assign(turn=order.groupby([paired[k] for k in ["pair_session", *MATCH_COLUMNS, "engine_label"]])
                           .rank(method="first").astype(int))  # fmt: skip
    reference = paired[paired["engine_label"] == reference_label]
    other = paired[paired["engine_label"] != reference_label]
    merged = other.merge(reference[[*keys, metric]], on=keys, how="inner", suffixes=("", "_reference"))
    return pd.DataFrame({
        "engine_label": merged["engine_label"],
        "reference_label": reference_label,
        **{k: merged[k] for k in keys},
        "pair_mode": merged["pair_mode"],
        "reference": merged[f"{metric}_reference"].astype(float),
        "value": merged[metric].astype(float),
        "ratio": merged[metric].astype(float) / merged[f"{metric}_reference"].astype(float),
    })  # fmt: skip


def paired_versus(rows: pd.DataFrame, reference_label: str, metric: str = "output_tok_s") -> pd.DataFrame:
    """One line per compared engine label, load and GPU model of ``paired_ratios``: how many pairs, the median of
    each side, the median ratio (``change_pct``), the lowest and highest ratio, their spread in percent of the median
    (``paired_spread_pct``), the band (``noise.band_pct`` of that spread) and what the change is called (``effect``).
    Beside them, each side's own spread, and what the same runs give unpaired: the spread of their cross ratios
    (``unpaired_spread_pct``) and its band. Empty (with ``PAIRED_COLUMNS``) where ``rows`` hold no pair."""
    import pandas as pd

    pairs = paired_ratios(rows, reference_label, metric)
    group_keys = ["engine_label", "gpu_name", *[k for k in MATCH_COLUMNS if k != "gpu_name"]]
    lines = []
    for values, group in pairs.groupby(group_keys, sort=True):
        key = dict(zip(group_keys, values, strict=True))
        ratio, reference, value = (spread_of(group[c]) for c in ("ratio", "reference", "value"))
        speedup = ratio.median if higher_is_better(metric) else 1.0 / ratio.median
        band = band_pct(ratio.spread_pct)
        unpaired = spread_of(cross_ratios(group["reference"], group["value"]))
        concurrency = pd.to_numeric(key["concurrency"], errors="coerce")
        rate = pd.to_numeric(key["request_rate_qps"], errors="coerce")
        lines.append({
            "engine_label": key["engine_label"], "reference_label": reference_label, "gpu_name": key["gpu_name"],
            "load": load_text(concurrency, rate), "concurrency": concurrency, "request_rate_qps": rate,
            "input_len": int(key["input_len"]), "output_len": int(key["output_len"]),
            "random_range_ratio": float(key["random_range_ratio"]), "metric": metric, "pairs": ratio.runs,
            "pair_mode": " / ".join(sorted(set(group["pair_mode"].dropna()))),
            "reference": reference.median, "value": value.median, "ratio": ratio.median,
            "change_pct": 100.0 * (ratio.median - 1.0), "ratio_lowest": ratio.lowest, "ratio_highest": ratio.highest,
            "paired_spread_pct": ratio.spread_pct, "band_pct": band, "effect": str(effect_of_speedup(speedup, band)),
            "reference_spread_pct": reference.spread_pct, "value_spread_pct": value.spread_pct,
            "unpaired_spread_pct": unpaired.spread_pct, "unpaired_band_pct": band_pct(unpaired.spread_pct),
        })  # fmt: skip
    return pd.DataFrame(lines, columns=list(PAIRED_COLUMNS))
