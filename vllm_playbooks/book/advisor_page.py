"""What the advisor page shows of a case's live searches (``advisor.trace``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from vllm_playbooks.advisor.trace import latest_trace, trace_steps, trace_summary


def live_section(case: str, data: Path | None = None) -> tuple[str, pd.DataFrame | None]:
    """What the advisor page shows of ``case``'s live searches: the most recent one's summary and steps, or one
    sentence saying none is recorded (and no table)."""
    trace = latest_trace(case, data)
    if trace is None:
        return (
            f"No live search of {case} is recorded yet: `vllm-playbooks advise --mode live --case {case} …` on "
            "a GPU records one here.",
            None,
        )
    return trace_summary(trace), trace_steps(trace)
