"""What published numbers imply, computed from the reference table (never typed into a page)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_playbooks.errors import SchemaError

if TYPE_CHECKING:
    import pandas as pd


def _value(published: pd.DataFrame, claim_id: str) -> float:
    match = published.loc[published["claim_id"] == claim_id, "value"]
    if len(match) != 1:
        raise SchemaError(f"reference table: expected one row {claim_id!r}, found {len(match)}")
    return float(match.iloc[0])


def implied_13834(published: pd.DataFrame) -> pd.Series:
    """Ratios implied by Discussion #13834's numbers (spec off → on).

    - input tokens per output token = (total − output) / output, with speculation off;
    - streams decoding at once (Little's law) = output tok/s × ITL in seconds;
    - the relative change of output throughput and of ITL when speculation is switched on.
    """
    import pandas as pd

    out_off, out_on = _value(published, "output-tok-s-spec-off"), _value(published, "output-tok-s-spec-on")
    tot_off = _value(published, "total-tok-s-spec-off")
    itl_off, itl_on = _value(published, "itl-ms-spec-off"), _value(published, "itl-ms-spec-on")
    return pd.Series(
        {
            "input_tokens_per_output_token": (tot_off - out_off) / out_off,
            "streams_in_flight_spec_off": out_off * itl_off / 1000.0,
            "output_throughput_change_pct": 100.0 * (out_on / out_off - 1.0),
            "itl_ratio_on_over_off": itl_on / itl_off,
        },
        name="implied",
    )


def measurement_status(measured: pd.DataFrame, case: str) -> str:
    """A sentence on what has been measured for ``case`` so far, from the rows themselves."""
    if measured.empty:
        return (
            f"No run of case {case!r} is recorded in data/runs/{case}/ yet: this page shows published numbers only, "
            "and gives no verdict until a measured run exists."
        )
    gpus = ", ".join(sorted(f"{n} ×{c}" for n, c in set(zip(measured.gpu_name, measured.gpu_count, strict=True))))
    return f"{len(measured)} measured point(s) of case {case!r} on {gpus}."
