"""The small generic formatters of page text."""

from __future__ import annotations

from vllm_playbooks import text


def test_and_list() -> None:
    assert text.and_list(["a"]) == "a"
    assert text.and_list(["a", "b", "c"]) == "a, b and c"


def test_percent_range() -> None:
    assert text.percent_range([0.108, 0.11]) == "10.8-11.0 %"
    assert text.percent_range([0.2]) == "20.0 %"
    assert text.percent_range([-0.048, 0.36, 0.1]) == "-4.8 to +36.0 %"


def test_ratio_range() -> None:
    assert text.ratio_range([2.166, 1.727, 1.83]) == "1.73-2.17×"
    assert text.ratio_range([1.5, 1.501]) == "1.50×"
