"""Small generic formatters for page text: lists, percentage ranges."""

from __future__ import annotations

from collections.abc import Iterable


def and_list(items: list[str], sep: str = ", ", last: str = " and ") -> str:
    """'a', 'a and b', 'a, b and c' (or with other separators: 'a; b; and c')."""
    return items[0] if len(items) == 1 else sep.join(items[:-1]) + last + items[-1]


def percent_range(values: Iterable[float]) -> str:
    low, high = (f"{100 * v:.1f}" for v in (min(values), max(values)))
    return f"{low} %" if low == high else f"{low}-{high} %"


def ratio_range(values: Iterable[float]) -> str:
    """Speed-ups as a range with two decimals: '1.73-2.17×' ('1.50×' when they agree)."""
    low, high = (f"{v:.2f}" for v in (min(values), max(values)))
    return f"{low}×" if low == high else f"{low}-{high}×"
