"""Tables for people: the columns a page shows, named in words with units, numbers rounded, no index, blanks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from pandas.io.formats.style import Styler


def for_people(frame: pd.DataFrame, columns: Mapping[str, str], decimals: Mapping[str, int] | None = None) -> Styler:
    """``frame``'s ``columns`` (name → header in words), in that order, as a styled table without the index:
    numbers with ``decimals[name]`` places (1 by default, whole numbers for integer columns), missing cells blank."""
    import pandas as pd

    shown = frame[list(columns)].rename(columns=dict(columns))
    places = {columns[name]: count for name, count in (decimals or {}).items()}
    formats = {}
    for name in shown.columns:
        if pd.api.types.is_integer_dtype(shown[name]):
            formats[name] = "{:,.0f}"
        elif pd.api.types.is_float_dtype(shown[name]):
            formats[name] = f"{{:,.{places.get(name, 1)}f}}"
    return shown.style.hide(axis="index").format(formats, na_rep="")
