"""The reader rules of the site check on synthetic inputs: figure records, caption numbers, page text, hidden tables."""

from __future__ import annotations

from vllm_playbooks.book.figure_record import FigureRecord
from vllm_playbooks.book.sitecheck_readers import (
    ShownFigure,
    caption_number_problems,
    figure_problems,
    hidden_table_problem,
    raw_prints,
)


def test_figure_text_is_judged_as_rendered() -> None:
    shrunk = ShownFigure("_images/a.png", natural_width=1902, rendered_width=784)
    assert figure_problems(FigureRecord(min_font_px=25.0, max_series=3), shrunk) == []  # 10.3 px as rendered
    small = figure_problems(FigureRecord(min_font_px=18.0, max_series=3), shrunk)
    assert len(small) == 1 and "7.4 px" in small[0]
    at_size = ShownFigure("_images/b.png", natural_width=700, rendered_width=700)
    assert figure_problems(FigureRecord(min_font_px=10.0, max_series=6), at_size) == []


def test_more_than_six_series_and_a_missing_record_fail() -> None:
    shown = ShownFigure("_images/a.png", natural_width=700, rendered_width=700)
    assert len(figure_problems(FigureRecord(min_font_px=12.0, max_series=7), shown)) == 1
    assert len(figure_problems(None, shown)) == 1


def test_raw_prints_are_found_and_prose_is_not() -> None:
    text = (
        "0    1.5\n1    2.0\nName: implied, dtype: float64\n"
        "configs=122 dense=73 moe=49\n"
        "cases=60 agree=54 differ=6\n"
        "engines=['8b-pp2-mns256'], concurrency=[32]\n"
        "The speed-up is 1.9× at 8 QPS; x = 3 is fine, so are PP=1, PP=2 and k=1: c=0.13, and a URL ?a=1&b=2.\n"
    )
    found = raw_prints(text)
    assert found == [
        "Name: implied, dtype: float64",
        "configs=122 dense=73 moe=49",
        "cases=60 agree=54 differ=6",
        "engines=['8b-pp2-mns256']",
        "concurrency=[32]",
    ]
    assert raw_prints("dtype: int64\n") == ["dtype: int64"]
    assert raw_prints("A sentence with --max-num-seqs=256 once.") == []


def test_hidden_table_reason_names_the_tags_and_header() -> None:
    reason = hidden_table_problem("tag_hide-cell", "config")
    assert "tag_hide-cell" in reason and "'config'" in reason


def test_caption_numbers_start_at_one_and_count_by_one_per_kind() -> None:
    assert caption_number_problems([]) == []
    assert caption_number_problems(["Fig. 1", "Table 1", "Fig. 2", "Table 2", "Fig. 3"]) == []
    book_wide = caption_number_problems(["Fig. 9", "Fig. 10"])  # the count Sphinx carries over from earlier pages
    assert len(book_wide) == 1 and "'Fig. 9'" in book_wide[0]
    assert len(caption_number_problems(["Fig. 1", "Fig. 3", "Fig. 4"])) == 1  # a gap
    assert len(caption_number_problems(["Fig. 1", "Fig. 1"])) == 1  # a repeat
    assert len(caption_number_problems(["Fig. 2.1"])) == 1  # a numbered toctree's chapter prefix
