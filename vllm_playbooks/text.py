"""Small generic formatters for page text: lists, value, percentage and ratio ranges."""

from __future__ import annotations

from collections.abc import Iterable


def and_list(items: list[str], sep: str = ", ", last: str = " and ") -> str:
    """'a', 'a and b', 'a, b and c' (or with other separators: 'a; b; and c')."""
    return items[0] if len(items) == 1 else sep.join(items[:-1]) + last + items[-1]


#: What a page says where the rows it was given hold none of the values a range is made of (a quick check's rows,
#: say, for a range over the whole grid).
NOT_IN_ROWS = "not in these rows"


def percent_range(values: Iterable[float], when_empty: str | None = None) -> str:
    """Fractions as a percentage range with one decimal: '10.8-11.0 %'; signed where the range reaches below zero
    ('-4.8 to +36.0 %'); one value when both ends agree. No values: ``when_empty`` (e.g. ``NOT_IN_ROWS``), or
    ``ValueError`` where it is None."""
    values = list(values)
    if not values and when_empty is not None:
        return when_empty
    low, high = min(values), max(values)
    if f"{100 * low:.1f}" == f"{100 * high:.1f}":
        return f"{100 * low:.1f} %"
    if low < 0:
        return f"{100 * low:+.1f} to {100 * high:+.1f} %"
    return f"{100 * low:.1f}-{100 * high:.1f} %"


def ratio_range(values: Iterable[float], when_empty: str | None = None) -> str:
    """Speed-ups as a range with two decimals: '1.73-2.17×' ('1.50×' when they agree). No values: ``when_empty``, or
    ``ValueError`` where it is None."""
    values = list(values)
    if not values and when_empty is not None:
        return when_empty
    return value_range(values, "{:.2f}", "-", "×")


def value_range(values: Iterable[float], fmt: str, dash: str = "–", unit: str = "") -> str:
    """The lowest and highest of ``values`` in ``fmt`` (e.g. ``"{:,.0f}"``), as 'low–high' followed by ``unit``, or
    one value where both ends read the same in ``fmt``: ``value_range([3.14, 2.5], "{:.1f}", "-", " GiB")`` gives
    '2.5-3.1 GiB'. ``ValueError`` without values."""
    values = list(values)
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return (low if low == high else f"{low}{dash}{high}") + unit
