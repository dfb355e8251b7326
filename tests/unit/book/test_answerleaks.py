"""The site check's answer-leak rule, on text and links as a browser reports them (the browser part runs in
tests/site)."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT
from vllm_playbooks.book import answerleaks, workshop

BASE = "http://127.0.0.1:8000/"


def test_leaks_name_the_place_and_the_form() -> None:
    forms = {"31.95", "32"}
    found = answerleaks.leaks_on(4, "book/x.html", "≈32 streams at concurrency 320", ["a 31.95 b", "1,032"], forms)
    assert [(leak.where, leak.forms) for leak in found] == [("first screen", ("32",)), ("table 1", ("31.95",))]
    assert answerleaks.leaks_on(4, "book/x.html", "320 and 0.32 and 32.5", ["132"], forms) == []


def test_linked_pages_keep_the_anchor_and_leave_out_the_page_itself_sources_and_the_workshop_page() -> None:
    page = "book/executed/workshop_6_cuda_graphs.html"
    links = [
        BASE + page + "#task",
        BASE + "book/batching.html#batch-cudagraphs",
        BASE + "book/batching.html",
        BASE + "book/batching.html#batch-cudagraphs",
        BASE + "_sources/book/executed/w.ipynb",
        BASE + "book/workshop.html",
        "https://github.com/vllm-project/vllm",
        BASE + "book/executed/pp-27462.html",
    ]
    assert answerleaks.linked_pages(links, BASE, page) == [
        "book/batching.html#batch-cudagraphs",
        "book/batching.html",
        "book/executed/pp-27462.html",
    ]


@pytest.mark.recorded_data
def test_every_exercise_page_is_searched_for_its_own_answer() -> None:
    forms = answerleaks.exercise_forms(ROOT / "notebooks")
    assert len(forms) == len(workshop.EXERCISES)
    for exercise in workshop.EXERCISES.values():
        number, found = forms[f"book/executed/{exercise.notebook.removesuffix('.ipynb')}.html"]
        assert number == exercise.number
        assert found == workshop.answer_forms(workshop.default_solution(exercise, ROOT / "notebooks"))
    assert forms["book/executed/workshop_6_cuda_graphs.html"][1] == {"128"}
