"""The book's verdict vocabulary and how a measured speed-up is judged against a claimed one."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

import pandas as pd

from vllm_playbooks.analysis.noise import MIN_BAND_PCT, MIN_CLEAN_REPEATS, SIZE_TOLERANCE, Effect, effect_of_speedup


class Verdict(StrEnum):
    """What the evidence says about a claim. The words are the case pages' (``book/intro.md``) plus two for claims
    our rows cannot settle. Meanings: ``VERDICT_MEANINGS``."""

    REPRODUCED = "reproduced"
    DIRECTION_ONLY = "direction only"
    NOT_REPRODUCED = "not reproduced"
    NOT_MEASURED = "not measured yet"
    MODEL_ONLY = "model only"


#: One sentence per verdict, the definition the ledger page shows.
VERDICT_MEANINGS: dict[Verdict, str] = {
    Verdict.REPRODUCED: "Recorded rows at the claim's conditions show the claimed effect, and where the claim gives a "
    "size, a size within the tolerance below.",
    Verdict.DIRECTION_ONLY: "Recorded rows show the effect in the claimed direction, but its size is outside the "
    "tolerance (expected where our GPU or model scale differs from the source's).",
    Verdict.NOT_REPRODUCED: "Recorded rows at the claim's conditions show no such effect, or the opposite one. For a "
    "rule of thumb, one recorded row that goes against it is enough.",
    Verdict.NOT_MEASURED: "No recorded row is at the claim's conditions yet; the model column says what theory "
    "expects. The verdict changes by itself when such rows are recorded.",
    Verdict.MODEL_ONLY: "The claim is about a quantity the book computes rather than measures (a roofline crossover, a "
    "default in vLLM's code); the model column carries the verdict.",
}


#: Verdicts that rest on recorded rows; a model's verdict is always one of these (or absent).
DATA_VERDICTS = (Verdict.REPRODUCED, Verdict.DIRECTION_ONLY, Verdict.NOT_REPRODUCED)


#: A load (concurrency) within this factor of the load a claim was made at counts as the claim's load.
LOAD_FACTOR = 2.0


def effect(speedup: float, band_pct: float = MIN_BAND_PCT) -> Effect:
    """The effect of a speed-up (a ratio where above 1 is better): ``GAIN`` above 1 + band, ``LOSS`` below 1 − band,
    ``NONE`` (within noise) between; ``band_pct`` is the comparison's band (``analysis.noise.band_pct``)."""
    return effect_of_speedup(speedup, band_pct)


def judge(
    measured: float, claimed_low: float, claimed_high: float | None = None, band_pct: float = MIN_BAND_PCT
) -> Verdict:
    """Verdict for one measured speed-up against a claimed one (or a claimed range; higher is better in both).

    The effects (``effect``; the measured one within its comparison's ``band_pct``, the claimed one within the floor
    band) must agree, else ``NOT_REPRODUCED``; then ``REPRODUCED`` when the measured value lies within
    ``SIZE_TOLERANCE`` of the claimed range, ``DIRECTION_ONLY`` when it does not. A claimed range whose ends have
    different effects counts as a match for either.
    """
    high = claimed_low if claimed_high is None else claimed_high
    low, high = min(claimed_low, high), max(claimed_low, high)
    if effect(measured, band_pct) not in {effect(low), effect(high)}:
        return Verdict.NOT_REPRODUCED
    if low * (1 - SIZE_TOLERANCE) <= measured <= high * (1 + SIZE_TOLERANCE):
        return Verdict.REPRODUCED
    return Verdict.DIRECTION_ONLY


def combine(verdicts: Iterable[Verdict]) -> Verdict:
    """One verdict for several judged points: the worst of them (``NOT_REPRODUCED`` < ``DIRECTION_ONLY`` <
    ``REPRODUCED``); ``NOT_MEASURED`` for none."""
    found = list(verdicts)
    for worst in (Verdict.NOT_REPRODUCED, Verdict.DIRECTION_ONLY, Verdict.REPRODUCED):
        if worst in found:
            return worst
    return Verdict.NOT_MEASURED


def best(verdicts: Iterable[Verdict]) -> Verdict:
    """One verdict for alternatives (any of which would settle the claim): the best of them; ``NOT_MEASURED`` for
    none."""
    found = list(verdicts)
    for best in (Verdict.REPRODUCED, Verdict.DIRECTION_ONLY, Verdict.NOT_REPRODUCED):
        if best in found:
            return best
    return Verdict.NOT_MEASURED


def verdict_legend() -> str:
    """The verdict vocabulary as a Markdown table, then the tolerances the checks use (what the page shows)."""
    lines = ["| verdict | meaning |", "|---|---|"]
    lines += [f"| {v} | {meaning} |" for v, meaning in VERDICT_MEANINGS.items()]
    lines += [
        "",
        "A speed-up is a gain or a loss only beyond its band: the larger spread of the two sides' repeated runs "
        f"(highest − lowest over the median), and at least ±{MIN_BAND_PCT:g} %; inside it, the change is within noise. "
        f"A verdict rests on points measured {MIN_CLEAN_REPEATS} times without a stall; the measured column says where "
        f"fewer runs exist. A size within ±{100 * SIZE_TOLERANCE:g} % of the claimed one (or of the ends of a claimed "
        f"range) counts as the same size; a load within a factor of {LOAD_FACTOR:g} of the claim's counts as the "
        "claim's load. The floor band and these two tolerances are stated choices, not measurements.",
    ]
    return "\n".join(lines)


def verdict_counts(ledger: pd.DataFrame) -> str:
    """How many claims got each verdict, in the vocabulary's order (a line for the page's regression check)."""
    counts = ledger["verdict"].value_counts()
    return ", ".join(f"{v}: {int(counts.get(str(v), 0))}" for v in Verdict)
