"""Words the case pages share about points left out because their runs stalled (``results.stalls``)."""

from __future__ import annotations


def stalled_words(loads: list[float], unit: str, outcome: str = "left out until measured again") -> str:
    """The sentence naming loads measured but left out as stalled ('' for none); ``unit`` 'QPS' or 'concurrency';
    ``outcome`` what the verdict does without them."""
    values = ", ".join(f"{v:g}" for v in loads)
    where = f"concurrency {values}" if unit == "concurrency" else f"{values} {unit}"
    return (
        (
            f" Measured at {where} too, but runs there stalled (output-token gaps of seconds, see the stall "
            f"table): {outcome}."
        )
        if loads
        else ""
    )
