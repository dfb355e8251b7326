"""One GPU card at a time: a speculative config against its baseline on each card's runs alone, and how far the card
moved the result.

A draft model does more of each step on the host's CPU than speculation off, so its runs depend on the machine they
ran on. Pooled over machines, a comparison mixes what the configuration does with what the machines do; made again on
one card's runs (where both sides ran on that card), it never leaves one machine. Where the same load's change
differs from card to card by more than each card's band, the machine moved it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from vllm_playbooks.analysis.compare import versus_baseline
from vllm_playbooks.results.raw import short_cards

#: What ``card_swings`` groups by unless told otherwise: one GPU model, one configuration, one load.
SWING_KEYS = ("gpu_name", "engine_label", "concurrency")


def versus_baseline_by_card(rows: pd.DataFrame, metric: str = "output_tok_s") -> pd.DataFrame:
    """``compare.versus_baseline`` on one GPU card's runs at a time: its lines for every card where both sides ran
    on that card, each with ``card``, the card's UUID shortened by ``results.raw.short_cards``.

    ``rows`` are clean runs (``analysis.runs.usable_runs``) with ``gpu_cards`` (``results.replay.with_gpu_cards``);
    runs recorded without their card are left out. A side with fewer than ``MIN_CLEAN_REPEATS`` runs on a card
    borrows the widest spread its configuration showed on that card, as ``versus_baseline`` does."""
    carded = rows[rows["gpu_cards"].fillna("") != ""]
    lines = [
        versus_baseline(group, metric).assign(card=short_cards(str(card)))
        for card, group in carded.groupby("gpu_cards", sort=True)
    ]
    if not lines:
        return versus_baseline(carded, metric).assign(card=pd.Series(dtype="object"))
    return pd.concat(lines, ignore_index=True)


def card_swings(by_card: pd.DataFrame, keys: Sequence[str] = SWING_KEYS) -> pd.DataFrame:
    """How far the machine moved the change: per ``keys`` group of ``versus_baseline_by_card``'s lines measured on
    two cards or more, ``cards`` (how many), the lowest and the highest change (percent) with the card and the effect
    of each, and ``swing_pts``, their difference in percentage points; widest first."""
    keys = list(keys)
    records = []
    for values, group in by_card.groupby(keys, sort=True):
        if len(group) < 2:
            continue
        low, high = group.loc[group["change_pct"].idxmin()], group.loc[group["change_pct"].idxmax()]
        records.append(
            {
                **dict(zip(keys, values, strict=True)),
                "cards": len(group),
                "lowest_pct": float(low["change_pct"]),
                "lowest_card": low["card"],
                "lowest_effect": low["effect"],
                "highest_pct": float(high["change_pct"]),
                "highest_card": high["card"],
                "highest_effect": high["effect"],
                "swing_pts": float(high["change_pct"] - low["change_pct"]),
            }
        )
    columns = [
        *keys,
        "cards",
        "lowest_pct",
        "lowest_card",
        "lowest_effect",
        "highest_pct",
        "highest_card",
        "highest_effect",
        "swing_pts",
    ]
    return pd.DataFrame(records, columns=columns).sort_values("swing_pts", ascending=False, ignore_index=True)
