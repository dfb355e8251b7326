"""The small generic formatters of page text."""

from __future__ import annotations

import pytest

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
    assert text.ratio_range(v for v in [1.5, 1.501]) == "1.50×"  # any iterable, read once


def test_a_range_of_nothing_says_so_only_when_asked() -> None:
    assert text.percent_range([], when_empty=text.NOT_IN_ROWS) == "not in these rows"
    assert text.ratio_range([], when_empty=text.NOT_IN_ROWS) == "not in these rows"
    with pytest.raises(ValueError):
        text.percent_range([])
    with pytest.raises(ValueError):
        text.ratio_range([])
