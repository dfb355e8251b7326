"""Case: the load's shape. Fixed lengths (every request 512 in / 128 out, so a closed loop's requests prefill and
finish in waves) against lengths drawn within ±50 % (``--random-range-ratio 0.5``), for speculation off and a 1B
draft: how the shape moves each side, and the gain between them.

Every number is a median over a point's clean runs (``results.stalls``), beside its runs and spread; differences are
called against the band of ``analysis.noise``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from vllm_playbooks.analysis.cards import versus_baseline_by_card
from vllm_playbooks.analysis.compare import is_baseline, versus_baseline
from vllm_playbooks.analysis.noise import Effect, band_pct, effect_of_speedup, spread_of
from vllm_playbooks.results.raw import count_cards

if TYPE_CHECKING:
    from vllm_playbooks.run.plan import CasePlan

CASE = "load-desync"
#: The metrics the page compares: what the load shape moves (throughput, the decode pace, the wait for a first token).
METRICS = ("output_tok_s", "tpot_p50_ms", "ttft_p50_ms")


def length_mode(random_range_ratio: float) -> str:
    """'fixed' for ratio 0, else '±50 %' (the spread of the lengths around their mean)."""
    return "fixed" if not random_range_ratio else f"±{100 * float(random_range_ratio):.0f} %"


def point_spreads(rows: pd.DataFrame, metric: str = "output_tok_s") -> pd.DataFrame:
    """One line per engine config, concurrency and length mode: the median of ``metric`` over the clean runs, the
    runs, their lowest and highest value and their spread (``noise.spread_of``)."""
    records = []
    keys = ["engine_label", "concurrency", "random_range_ratio"]
    for (label, concurrency, ratio), group in rows.groupby(keys, sort=True):
        spread = spread_of(group[metric])
        records.append(
            {
                "engine_label": label,
                "concurrency": int(concurrency),
                "lengths": length_mode(ratio),
                "random_range_ratio": float(ratio),
                "runs": spread.runs,
                "median": spread.median,
                "lowest": spread.lowest,
                "highest": spread.highest,
                "spread_pct": spread.spread_pct,
            }
        )
    return pd.DataFrame(records)


def shape_effect(rows: pd.DataFrame, metric: str = "output_tok_s") -> pd.DataFrame:
    """How the load shape moves each engine config: per config and concurrency, the median of ``metric`` with fixed
    and with varied lengths (runs and spreads beside them), the change of varied against fixed in percent, the band
    (the larger spread, at least the floor) and ``moved``: 'higher' or 'lower' with varied lengths where the change
    lies beyond the band, else 'within noise'."""
    spreads = point_spreads(rows, metric)
    records = []
    for (label, concurrency), group in spreads.groupby(["engine_label", "concurrency"], sort=True):
        fixed, varied = group[group["random_range_ratio"] == 0], group[group["random_range_ratio"] > 0]
        if fixed.empty or varied.empty:
            continue
        f, v = fixed.iloc[0], varied.iloc[0]
        change = 100.0 * (v["median"] / f["median"] - 1.0)
        band = band_pct(f["spread_pct"], v["spread_pct"])
        moved = {Effect.GAIN: "higher", Effect.LOSS: "lower", Effect.NONE: "within noise"}[
            effect_of_speedup(v["median"] / f["median"], band)
        ]
        records.append(
            {
                "engine_label": label,
                "concurrency": int(concurrency),
                "fixed": f["median"],
                "fixed_runs": int(f["runs"]),
                "fixed_spread_pct": f["spread_pct"],
                "varied": v["median"],
                "varied_runs": int(v["runs"]),
                "varied_spread_pct": v["spread_pct"],
                "change_pct": change,
                "band_pct": band,
                "moved": moved,
            }
        )
    return pd.DataFrame(records)


def gain_by_shape(rows: pd.DataFrame, metric: str = "output_tok_s") -> pd.DataFrame:
    """The draft's gain over speculation off under each load shape (``versus_baseline``: medians of runs, band,
    effect), one line per concurrency and length mode."""
    gains = versus_baseline(rows, metric)
    gains["lengths"] = [length_mode(r) for r in gains["random_range_ratio"]]
    columns = [
        "engine_label",
        "concurrency",
        "lengths",
        "baseline",
        "baseline_runs",
        "baseline_spread_pct",
        "speculative",
        "speculative_runs",
        "speculative_spread_pct",
        "change_pct",
        "band_pct",
        "effect",
    ]
    return gains[columns].sort_values(["concurrency", "lengths"]).reset_index(drop=True)


def with_cards(gains: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """``gains`` (``gain_by_shape`` of ``rows``) with ``cards``: how many GPU cards the runs of both sides of each
    line ran on (``rows`` carry ``gpu_cards``, ``results.replay.with_gpu_cards``; a run recorded without one adds
    none). 1: the comparison never left one machine; more: it mixes machines, to which the draft is sensitive."""
    cards = {
        (int(concurrency), length_mode(ratio)): count_cards(group["gpu_cards"])
        for (concurrency, ratio), group in rows.groupby(["concurrency", "random_range_ratio"])
    }
    return gains.assign(
        cards=[
            cards.get((int(c), lengths), 0) for c, lengths in zip(gains["concurrency"], gains["lengths"], strict=True)
        ]
    )


def gain_by_card(rows: pd.DataFrame, metric: str = "output_tok_s") -> pd.DataFrame:
    """``gain_by_shape`` on one GPU card's runs at a time (``analysis.cards.versus_baseline_by_card``; ``rows`` carry
    ``gpu_cards``): a line per GPU model, card and load where both sides ran on that card. Runs recorded without their
    card are left out; ``analysis.cards.card_swings`` with ``CARD_SWING_KEYS`` gives how far the card moved each
    gain."""
    by_card = versus_baseline_by_card(rows, metric)
    by_card["lengths"] = [length_mode(r) for r in by_card["random_range_ratio"]]
    columns = [
        "gpu_name",
        "card",
        "concurrency",
        "lengths",
        "baseline",
        "baseline_runs",
        "speculative",
        "speculative_runs",
        "change_pct",
        "band_pct",
        "effect",
    ]
    return by_card[columns].sort_values(["gpu_name", "concurrency", "lengths", "card"], ignore_index=True)


#: The load whose gain ``analysis.cards.card_swings`` compares from card to card: a GPU model, a concurrency, a shape.
CARD_SWING_KEYS = ("gpu_name", "concurrency", "lengths")


def gain_shift(gains: pd.DataFrame) -> pd.DataFrame:
    """How far the load shape moves the gain: per concurrency, the gain with fixed and with varied lengths (percent),
    their difference in percentage points, and the band it must exceed to count: the largest spread of the four
    medians the two gains are made of, at least the floor."""
    records = []
    for concurrency, group in gains.groupby("concurrency", sort=True):
        fixed, varied = group[group["lengths"] == "fixed"], group[group["lengths"] != "fixed"]
        if fixed.empty or varied.empty:
            continue
        f, v = fixed.iloc[0], varied.iloc[0]
        band = band_pct(*(r[c] for r in (f, v) for c in ("baseline_spread_pct", "speculative_spread_pct")))
        shift = v["change_pct"] - f["change_pct"]
        records.append(
            {
                "concurrency": int(concurrency),
                "gain_fixed_pct": f["change_pct"],
                "gain_varied_pct": v["change_pct"],
                "shift_pts": shift,
                "band_pct": band,
                "beyond_noise": abs(shift) > band,
            }
        )
    return pd.DataFrame(records)


def at_top_load(rows: pd.DataFrame, metrics: tuple[str, ...] = METRICS) -> dict[str, Any] | None:
    """What the page's opening states of one GPU's ``rows`` (clean runs), at the highest concurrency where speculation
    off and the draft both ran with both length modes: ``concurrency``; per metric of ``metrics``, speculation off's
    change with varied lengths (``<metric>_change_pct``) and where it lies against its band (``<metric>_moved``, as
    ``shape_effect``); per length mode (``fixed``, ``varied``), the draft's change of output throughput against
    speculation off (``gain_<mode>_pct``) and its effect (``effect_<mode>``, as ``gain_by_shape``). None where no
    concurrency has all four."""
    if rows.empty:
        return None
    gains = gain_by_shape(rows)
    complete = gains.groupby("concurrency")["lengths"].nunique()
    if not (complete == 2).any():
        return None
    top = int(complete[complete == 2].index.max())
    off = baseline_label(rows)
    summary: dict[str, Any] = {"concurrency": top}
    for metric in metrics:
        table = shape_effect(rows, metric)
        line = table[(table["engine_label"] == off) & (table["concurrency"] == top)].iloc[0]
        summary[f"{metric}_change_pct"], summary[f"{metric}_moved"] = float(line["change_pct"]), str(line["moved"])
    at_top = gains[gains["concurrency"] == top]
    fixed = at_top["lengths"] == "fixed"
    for mode, lines in (("fixed", at_top[fixed]), ("varied", at_top[~fixed])):
        line = lines.iloc[0]
        summary[f"gain_{mode}_pct"], summary[f"effect_{mode}"] = float(line["change_pct"]), str(line["effect"])
    return summary


def runs_left(plan: CasePlan, rows: pd.DataFrame) -> pd.DataFrame:
    """The planned points with fewer clean runs than the plan's repeats: engine config, concurrency, length mode, the
    clean runs recorded and the runs planned (a point never measured has 0)."""
    spreads = point_spreads(rows)
    recorded = {(r.engine_label, r.concurrency, r.random_range_ratio): r.runs for r in spreads.itertuples()}
    records = []
    for engine in plan.engines:
        for load in plan.loads_for(engine):
            runs = recorded.get((engine.label, load.concurrency, load.random_range_ratio), 0)
            if runs < plan.repeats:
                records.append(
                    {
                        "engine_label": engine.label,
                        "concurrency": load.concurrency,
                        "lengths": length_mode(load.random_range_ratio),
                        "runs": runs,
                        "planned": plan.repeats,
                    }
                )
    return pd.DataFrame(records, columns=["engine_label", "concurrency", "lengths", "runs", "planned"])


def baseline_label(rows: pd.DataFrame) -> str:
    """The engine label of the rows' baseline (speculation off, as vLLM chose to run it)."""
    return str(rows.loc[is_baseline(rows), "engine_label"].iloc[0])
