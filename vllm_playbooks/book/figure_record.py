"""What a saved figure records about itself, so that the site check can judge it as rendered.

A page's figure is a PNG the browser shrinks (or grows) to the column: its text renders at
``font px in the PNG × rendered width / natural width``. The PNG alone does not say how large its text was drawn, so
every figure a page shows is saved through ``figure_png``, which writes a ``FigureRecord`` (the smallest text in the
PNG's own pixels and the most series one panel draws) into the PNG's text chunk ``RECORD_KEY``.
``record_figures()`` (called by ``plots.use_book_style``) makes the notebook kernel save its figures that way; the
site check reads the record back with ``read_record``.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

# matplotlib is imported where a figure is measured or saved, not here: the site check reads records back
# (``read_record``) in a process that draws nothing, and importing pyplot there would pick a backend for no figure.
if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.text import Text

#: The PNG text chunk holding a figure's record (JSON of ``FigureRecord``).
RECORD_KEY = "vllm_playbooks.figure"


@dataclass(frozen=True)
class FigureRecord:
    """A saved figure: its smallest text in the PNG's pixels, and the most series drawn in one of its panels."""

    min_font_px: float
    max_series: int

    def rendered_font_px(self, rendered_width: float, natural_width: float) -> float:
        """The smallest text's height in CSS px once the PNG, ``natural_width`` px wide, is shown ``rendered_width``
        px wide."""
        if natural_width <= 0:
            raise ValueError(f"natural width must be positive, got {natural_width}")
        return self.min_font_px * rendered_width / natural_width


def _panel_texts(ax: Axes) -> list[Text]:
    texts: list[Text] = [ax.title, ax._left_title, ax._right_title, *ax.texts]
    for axis in (ax.xaxis, ax.yaxis):
        texts += [axis.label, *axis.get_majorticklabels(), *axis.get_minorticklabels()]
    if ax.get_legend() is not None:
        texts += [ax.get_legend().get_title(), *ax.get_legend().get_texts()]
    return texts


def _shown_texts(fig: Figure) -> list[Text]:
    """The texts the saved figure shows: titles, labels, tick labels within the view, legends, free texts."""
    texts: list[Text] = [*fig.texts]
    for legend in fig.legends:
        texts += [legend.get_title(), *legend.get_texts()]
    for ax in fig.axes:
        if ax.get_visible():
            texts += _panel_texts(ax) if ax.axison else list(ax.texts)
    return [t for t in texts if t.get_visible() and t.get_text().strip()]


def panel_series(ax: Axes) -> int:
    """The series one panel draws: distinct (colour, line style) of its data lines (two points or more, drawn in data
    coordinates: not a reference line such as ``axhline``), plus distinct colours of its scatter points and bars."""
    from matplotlib.colors import to_hex

    styles: set[tuple[str, str]] = set()
    for line in ax.lines:
        if line.get_transform() == ax.transData and len(line.get_xdata()) >= 2 and line.get_linestyle() != "None":
            styles.add((to_hex(line.get_color()), str(line.get_linestyle())))
    for collection in ax.collections:
        if len(collection.get_offsets()) and type(collection).__name__ == "PathCollection":
            styles |= {(to_hex(c), "points") for c in collection.get_facecolors()}
    for container in ax.containers:
        styles |= {(to_hex(bar.get_facecolor()), "bars") for bar in container if hasattr(bar, "get_facecolor")}
    return len(styles)


def figure_record(fig: Figure) -> FigureRecord:
    """The record of ``fig`` as it would be saved now (its dpi): smallest shown text in px, most series per panel."""
    sizes = [t.get_fontsize() for t in _shown_texts(fig)]
    min_px = min(sizes) * fig.dpi / 72.0 if sizes else float("inf")
    series = max((panel_series(ax) for ax in fig.axes if ax.get_visible() and ax.axison), default=0)
    return FigureRecord(min_font_px=round(min_px, 2), max_series=series)


def figure_png(fig: Figure) -> bytes:
    """``fig`` as the PNG a page shows (tight bounding box, as the notebook's inline backend saves it), with its
    ``FigureRecord`` in the text chunk ``RECORD_KEY``."""
    fig.canvas.draw()  # tick labels and legends settle before they are measured
    record = figure_record(fig)
    out = io.BytesIO()
    fig.savefig(out, format="png", bbox_inches="tight", metadata={RECORD_KEY: json.dumps(asdict(record))})
    return out.getvalue()


def read_record(png: Path | bytes) -> FigureRecord | None:
    """The ``FigureRecord`` stored in a PNG, or None when it holds none (a figure not saved by ``figure_png``)."""
    from PIL import Image

    with Image.open(io.BytesIO(png) if isinstance(png, bytes) else png) as img:
        text = getattr(img, "text", {}).get(RECORD_KEY)
    if text is None:
        return None
    data = json.loads(text)
    return FigureRecord(min_font_px=float(data["min_font_px"]), max_series=int(data["max_series"]))


def record_figures() -> None:
    """In a notebook kernel, show every matplotlib figure as ``figure_png`` saves it (the record included); outside
    IPython, nothing."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a requirement of the book
        return
    shell = get_ipython()
    if shell is None:
        return
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    plt.close(plt.figure())  # resolves the inline backend now: it registers its own PNG formatter, which ours replaces

    shell.display_formatter.formatters["image/png"].for_type(Figure, figure_png)
