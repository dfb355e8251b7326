"""Tables for people: the columns a page shows, named in words with units, numbers rounded, no index, blanks.

``for_people`` is for the tables a page chooses (headers named one by one); ``in_words`` does the same but keeps a
DataFrame, so a long table still folds; ``people_html`` is what every other DataFrame a page displays turns into
(``use_people_tables``, called by ``book.page_kernel.set_up_page_kernel`` in a notebook kernel): no index, numbers
rounded by their size, blanks for missing values, underscores read as spaces, and at most ``SHOWN_ROWS`` rows with
the rest in a collapsed section.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from pandas.io.formats.style import Styler

#: Rows a displayed table shows before the rest folds into a collapsed section.
SHOWN_ROWS = 12
#: The vendor's word that NVML puts before every GPU model's name; a table cell shows the name without it.
GPU_VENDOR = "NVIDIA "


def short_gpu_names(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell that names a GPU as NVML does (``NVIDIA H100 80GB HBM3``) shortened to the model
    (``H100 80GB HBM3``); other cells, and columns of other types, unchanged."""
    shortened = frame.copy()
    for name in shortened.columns:
        column = shortened[name]
        if pd.api.types.is_object_dtype(column) or pd.api.types.is_string_dtype(column):
            named = column.map(lambda cell: isinstance(cell, str) and cell.startswith(GPU_VENDOR))
            if named.any():
                shortened[name] = column.where(~named, column.str.slice(len(GPU_VENDOR)))
    return shortened


def for_people(frame: pd.DataFrame, columns: Mapping[str, str], decimals: Mapping[str, int] | None = None) -> Styler:
    """``frame``'s ``columns`` (name → header in words), in that order, as a styled table without the index:
    numbers with ``decimals[name]`` places (1 by default, whole numbers for integer columns), missing cells blank, GPU
    names without the vendor's word (``short_gpu_names``)."""
    shown = short_gpu_names(frame[list(columns)].rename(columns=dict(columns)))
    places = {columns[name]: count for name, count in (decimals or {}).items()}
    formats = {}
    for name in shown.columns:
        if pd.api.types.is_integer_dtype(shown[name]):
            formats[name] = "{:,.0f}"
        elif pd.api.types.is_float_dtype(shown[name]):
            formats[name] = f"{{:,.{places.get(name, 1)}f}}"
    return shown.style.hide(axis="index").format(formats, na_rep="")


def in_words(frame: pd.DataFrame, columns: Mapping[str, str], percent: Iterable[str] = ()) -> pd.DataFrame:
    """``frame``'s ``columns`` (name → header in words), in that order, renamed, with the ``percent`` columns (shares
    as fractions) multiplied by 100; a named index is kept. Displayed in a notebook, it renders as ``people_html``."""
    shown = frame[list(columns)].copy()
    for name in percent:
        shown[name] = 100 * shown[name]
    return shown.rename(columns=dict(columns))


def places_for(values: pd.Series) -> int:
    """Decimal places that keep about three significant digits of a float column's typical (median absolute) size:
    0 from 100 up, 1 from 10, 2 from 1, 3 below."""
    typical = values.abs().median()
    if typical != typical or typical >= 100:  # NaN: an empty column
        return 0
    return 1 if typical >= 10 else 2 if typical >= 1 else 3


def people_html(frame: pd.DataFrame) -> str:
    """Any displayed DataFrame as HTML for people: a named index, or one of labels (not integers), becomes columns
    (an unnamed one under a blank header), an unnamed integer one (row numbers) is dropped; column
    names with underscores read as words; floats rounded by ``places_for``; missing cells blank; rows past
    ``SHOWN_ROWS`` in a collapsed ``<details>`` section below the first ones; GPU names without the vendor's word
    (``short_gpu_names``)."""
    labelled = any(name is not None for name in frame.index.names)
    if labelled or not pd.api.types.is_integer_dtype(frame.index):  # row labels (named, or words): shown
        flat = frame.reset_index()
        if not labelled:
            flat = flat.rename(columns={flat.columns[0]: ""})
    else:  # a row number: dropped
        flat = frame.copy()
    flat.columns = [
        " ".join(str(part) for part in name if str(part)) if isinstance(name, tuple) else str(name)
        for name in flat.columns
    ]
    flat = flat.rename(columns=lambda name: name.replace("_", " "))
    flat = short_gpu_names(flat.loc[:, ~flat.columns.duplicated()])
    formats = {}
    for name in flat.columns:
        column = flat[name]
        if pd.api.types.is_bool_dtype(column):
            continue
        if pd.api.types.is_integer_dtype(column):
            formats[name] = "{:,.0f}"
        elif pd.api.types.is_float_dtype(column):
            formats[name] = f"{{:,.{places_for(column)}f}}"

    def html(rows: pd.DataFrame) -> str:
        return rows.style.hide(axis="index").format(formats, na_rep="").to_html()

    if len(flat) <= SHOWN_ROWS:
        return html(flat)
    return html(flat.head(SHOWN_ROWS)) + f"<details><summary>All {len(flat)} rows</summary>" + html(flat) + "</details>"


def use_people_tables() -> None:
    """Make every DataFrame this IPython kernel displays render as ``people_html``; nothing outside IPython."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["text/html"].for_type(pd.DataFrame, people_html)
