"""The evidence the checks read (``claims.claim.Evidence``)."""

from __future__ import annotations

import pandas as pd

from vllm_playbooks.claims.claim import Evidence


def test_all_rows_counts_a_run_two_cases_share_once_under_the_first_case() -> None:
    """A run both cases count (a point they share) stays once, with the first case in name order; runs without a
    raw path (frames built by hand) are all kept."""
    shared = {"raw_path": "runs/b/raw/h/c/p-r0", "output_tok_s": 1.0}
    runs = {
        "b": pd.DataFrame([{**shared, "case": "b"}, {"raw_path": "runs/b/raw/h/c/q-r0", "case": "b"}]),
        "a": pd.DataFrame([{**shared, "case": "a"}, {"raw_path": "runs/a/raw/h/c/r-r0", "case": "a"}]),
    }
    rows = Evidence(published=pd.DataFrame(), runs=runs).all_rows()
    assert sorted(zip(rows["case"], rows["raw_path"], strict=True)) == [
        ("a", "runs/a/raw/h/c/r-r0"),
        ("a", "runs/b/raw/h/c/p-r0"),
        ("b", "runs/b/raw/h/c/q-r0"),
    ]
    by_hand = {"x": pd.DataFrame({"case": ["x", "x"], "output_tok_s": [1.0, 1.0]})}
    assert len(Evidence(published=pd.DataFrame(), runs=by_hand).all_rows()) == 2
