"""What a case notebook calls for its rows (``run.case.case_rows``), and the line a live run prints of what it did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from vllm_playbooks.run.case import case_rows, hardware_in_words
from vllm_playbooks.run.measure import RunReport


def live_summary(report: RunReport, rows: pd.DataFrame, folder: Path) -> str:
    """One line on a live run: the points it measured and on what hardware (from their rows), those it skipped as
    already recorded, and the folder its rows are in."""
    mine = rows[rows["point_id"].isin(report.measured)]
    measured = "no point measured"
    if report.measured:
        measured = f"{len(report.measured)} point(s) measured on {hardware_in_words(mine)}"
    return f"live: {measured}, {len(report.skipped)} already recorded and skipped; rows in {folder}"


def results_for(
    case: str,
    mode: str,
    plan_overrides: dict[str, Any] | None = None,
    part: str | None = None,
    **run_kwargs: Any,
) -> pd.DataFrame:
    """What a case notebook calls: ``run.case.case_rows``'s rows (replayed, or measured live first, then replayed);
    in live mode it prints ``live_summary`` first: the points measured, on what hardware, the points skipped as
    already recorded on it, and where the rows are."""
    rows, live = case_rows(case, mode, plan_overrides, part, **run_kwargs)
    if live is not None:
        print(live_summary(live.report, live.rows, live.folder))
    return rows
