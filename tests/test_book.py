"""Book-build smoke test: papermill in replay mode, then a strict Jupyter Book build, offline where possible."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from tests.conftest import ROOT
from vllm_playbooks.book.notebooks import changed_check_outputs, data_changed_note, list_notebooks

pytestmark = pytest.mark.slow


def test_book_builds_strictly_from_replayed_notebooks(built_book: Path) -> None:
    html = built_book / "_build" / "html"
    for page in ("book/intro.html", "book/executed/llama-8b-draft-model.html", "book/executed/discussion-13834.html"):
        assert (html / page).exists(), page
    case_page = (html / "book/executed/llama-8b-draft-model.html").read_text()
    assert case_page.count("<img") >= 2
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", case_page))
    assert "beat speculation off beyond noise at" in text  # the opening, its numbers glued from the data
    assert "The rule." in text and "The evidence" in text and "Details" in text
    assert len(list((html / "_images").glob("*.png"))) >= 2
    verdicts = {
        "deepseek-mtp": "changed mean TPOT against speculation off",
        "gpt-oss-eagle3": "changed output throughput against speculation off",
    }
    for page, verdict in verdicts.items():  # the MoE pages: a verdict from the rows, the stalls named, scale stated
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", (html / f"book/executed/{page}.html").read_text()))
        assert verdict in text and "dummy (random) weights" in text
        assert "reproduces compute and memory physics, not model quality" in text
        assert "Stalls." in text and "left out of the verdict" in text and "Measured against the step model" in text


@pytest.mark.parametrize("name", [p.stem for p in list_notebooks(ROOT)])
def test_replayed_notebook_prints_what_its_check_cells_recorded(built_book: Path, name: str) -> None:
    """Each notebook ran (or was reused) for the book; its regression-check cells still print the same.

    Where the data the run read is not the data the check outputs were stored from, the outputs are not compared:
    a warning in pytest's summary says to refresh them (``vllm-playbooks notebooks refresh NAME``).
    """
    source, executed = built_book / "notebooks" / f"{name}.ipynb", built_book / "book" / "executed" / f"{name}.ipynb"
    assert changed_check_outputs(source, executed) == []
    note = data_changed_note(source, executed)
    if note:
        warnings.warn(note, stacklevel=1)


def test_the_pp_case_page_renders_with_or_without_rows(built_book: Path) -> None:
    page = (built_book / "_build" / "html" / "book/executed/pp-27462.html").read_text()
    text = re.sub(r"<[^>]+>", "", page)  # code blocks are split into highlighted spans
    assert "Our verdict:" in text and "make reproduce CASE=pp-27462" in text
    assert page.count("<img") >= 4  # prediction, throughput, utilisation, sweep (a 'not measured yet' panel until rows)
    assert any(head in page for head in ("Not measured yet", "Reproduced", "Direction only", "Not reproduced"))
    assert "config-only shapes with dummy (random) weights" in page


def test_the_crosscheck_page_shows_the_counts_and_explains_every_difference(built_book: Path) -> None:
    from vllm_playbooks.run.crosscheck import EXPLANATIONS, comparison_table, count_table, load_record

    page = (built_book / "_build" / "html" / "book/executed/config_crosscheck.html").read_text()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", page))
    record = load_record(built_book / "data")
    for outcome, cases in count_table(comparison_table(record)).itertuples(index=False):
        assert f"{outcome} {cases}" in text, (outcome, cases)  # the counts' table, a row per outcome
    for label in EXPLANATIONS:
        assert label in text, label
    assert "vllm/v1/spec_decode/draft_model.py" in text and "0.26.0" in text and "machine without a GPU" in text
    assert "vllm-playbooks crosscheck --out data/checks" in text
    assert page.count("<tr") >= len(record) + 1  # the full table
