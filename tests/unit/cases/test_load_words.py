"""Load labels: a request rate with its cap, a rate, a concurrency, or neither."""

from __future__ import annotations

import math

import pandas as pd

from vllm_playbooks.cases.load_words import load_label, with_load_labels


def test_a_load_is_labelled_by_its_rate_its_cap_or_its_concurrency() -> None:
    assert load_label(8, 2.0) == "2 QPS (at most 8 in flight)"
    assert load_label(None, 0.5) == "0.5 QPS" and load_label(math.nan, 16.0) == "16 QPS"
    assert load_label(64.0, None) == "concurrency 64" and load_label(None, None) == "unbounded load"


def test_the_label_goes_last_and_leaves_the_table_otherwise_alone() -> None:
    table = pd.DataFrame({"concurrency": [1, None], "request_rate_qps": [None, 4.0], "ratio": [1.5, 0.9]}, index=[7, 3])
    labelled = with_load_labels(table)
    assert list(labelled.columns) == ["concurrency", "request_rate_qps", "ratio", "load"]
    assert labelled.loc[7, "load"] == "concurrency 1" and labelled.loc[3, "load"] == "4 QPS"
    assert "load" not in table.columns
