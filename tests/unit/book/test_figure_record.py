"""A figure's record (smallest text in the PNG's pixels, most series per panel) is measured and survives the PNG."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest
from PIL import Image

from vllm_playbooks.book.figure_record import FigureRecord, figure_png, figure_record, panel_series, read_record


def _lines(count: int, fontsize: float = 10.0, dpi: float = 100.0) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(4, 3), dpi=dpi)
    for i in range(count):
        ax.plot([1, 2, 3], [i, i + 1, i], label=f"s{i}")
    ax.axhline(0.5, color="black")  # a reference line is no series
    ax.set_xlabel("x", fontsize=fontsize + 4)
    ax.tick_params(labelsize=fontsize)
    ax.set_title("title", fontsize=fontsize + 6)
    return fig


def test_smallest_text_in_png_pixels_is_points_times_dpi_over_72() -> None:
    fig = _lines(2, fontsize=9.0, dpi=144)
    assert figure_record(fig).min_font_px == pytest.approx(9.0 * 144 / 72, abs=0.01)
    plt.close(fig)


def test_series_count_distinct_styles_of_data_lines_points_and_bars() -> None:
    fig, (a, b, c) = plt.subplots(1, 3)
    for i in range(7):
        a.plot([0, 1], [i, i])
    a.plot([0, 1], [0, 1], color="C0")  # same colour and style as the first: one series
    a.plot([0], [1], linestyle="None", marker="_")  # an error bar cap: not a line
    b.scatter([1, 2, 3], [1, 2, 3], c=["red", "red", "blue"])
    c.bar([1, 2], [3, 4], color=["green", "orange"])
    assert [panel_series(ax) for ax in (a, b, c)] == [7, 2, 2]
    assert figure_record(fig).max_series == 7
    plt.close(fig)


def test_record_survives_the_png_and_reads_none_without_one() -> None:
    fig = _lines(3, fontsize=12.0, dpi=100)
    png = figure_png(fig)
    record = read_record(png)
    assert record == FigureRecord(min_font_px=pytest.approx(12.0 * 100 / 72, abs=0.01), max_series=3)
    plain = io.BytesIO()
    Image.new("RGB", (4, 4), (255, 255, 255)).save(plain, format="PNG")
    assert read_record(plain.getvalue()) is None
    plt.close(fig)


def test_rendered_text_scales_with_the_shown_width() -> None:
    record = FigureRecord(min_font_px=18.0, max_series=1)
    assert record.rendered_font_px(rendered_width=784, natural_width=1568) == pytest.approx(9.0)
    with pytest.raises(ValueError, match="natural width"):
        record.rendered_font_px(100, 0)
