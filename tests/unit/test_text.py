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


def test_value_range() -> None:
    assert text.value_range([3.14, 2.5], "{:.1f}", "-", " GiB") == "2.5-3.1 GiB"
    assert text.value_range([7_000_000, 1_234_567.4], "{:,.0f}") == "1,234,567–7,000,000"  # an en dash by default
    assert text.value_range([1.504, 1.496], "{:.2f}", unit="×") == "1.50×"  # both ends read the same: one value
    with pytest.raises(ValueError):
        text.value_range([], "{:.1f}")
