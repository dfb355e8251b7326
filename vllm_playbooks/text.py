"""Small generic formatters for page text: lists, percentage ranges."""

from __future__ import annotations

from collections.abc import Iterable


def and_list(items: list[str], sep: str = ", ", last: str = " and ") -> str:
    """'a', 'a and b', 'a, b and c' (or with other separators: 'a; b; and c')."""
    return items[0] if len(items) == 1 else sep.join(items[:-1]) + last + items[-1]


def percent_range(values: Iterable[float]) -> str:
    """Fractions as a percentage range with one decimal: '10.8-11.0 %'; signed where the range reaches below zero
    ('-4.8 to +36.0 %'); one value when both ends agree."""
    values = list(values)
    low, high = min(values), max(values)
    if f"{100 * low:.1f}" == f"{100 * high:.1f}":
        return f"{100 * low:.1f} %"
    if low < 0:
        return f"{100 * low:+.1f} to {100 * high:+.1f} %"
    return f"{100 * low:.1f}-{100 * high:.1f} %"


def ratio_range(values: Iterable[float]) -> str:
    """Speed-ups as a range with two decimals: '1.73-2.17×' ('1.50×' when they agree)."""
    low, high = (f"{v:.2f}" for v in (min(values), max(values)))
    return f"{low}×" if low == high else f"{low}-{high}×"
