"""A room graded as a host grades it: every workshop notebook answered right and wrong by a learner, run through
papermill by ``vllm-playbooks workshop grade``; what each learner's executed notebook shows, and what it never shows."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.conftest import ROOT, once_per_run
from vllm_playbooks.book import grading, workshop
from vllm_playbooks.book.exercises import NEVER, Solution
from vllm_playbooks.book.notebooks import book_parameters, default_parameters
from vllm_playbooks.model.speculative import expected_tokens_per_step

NOTEBOOKS = ROOT / "notebooks"


def _published(case_folder: str, claim_id: str) -> float:
    """A published number as the CSV holds it, unrounded."""
    with (ROOT / "vllm_playbooks" / "cases" / case_folder / "published.csv").open(newline="", encoding="utf-8") as f:
        (value,) = [float(r["value"]) for r in csv.DictReader(f) if r["claim_id"] == claim_id]
    return value


def _solution(exercise: workshop.Exercise) -> Solution:
    return workshop.default_solution(exercise, NOTEBOOKS)


def _by_hand(exercise: workshop.Exercise) -> Any:
    """A learner's right answer: from the published, unrounded numbers where the exercise reads published ones (τ as
    the sum of α^i, i = 0..k, and break-even c = (τ - 1) / k; Little's law as tokens/s × s per token), else the
    worked solution's value (the answers themselves are checked by hand in test_workshop.py)."""
    if exercise.id == "tokens-per-step":
        alpha, k = _published("discussion_13834", "acceptance-rate-author-quoted"), 5
        tau = sum(alpha**i for i in range(k + 1))
        return {"tokens_per_step": tau, "break_even_c": (tau - 1) / k}
    if exercise.id == "littles-law":
        tok_s = _published("discussion_13834", "output-tok-s-spec-off")
        return tok_s * _published("discussion_13834", "itl-ms-spec-off") / 1000
    return _solution(exercise).value


def _wrong(kinds: Any, value: Any) -> Any:
    """An answer off in every number part (a level of 'never' becomes 16), words kept."""
    if isinstance(kinds, dict):
        return {part: _wrong(kind, value[part]) for part, kind in kinds.items()}
    if kinds == "level":
        return 16 if value == NEVER else NEVER
    if kinds == "word":
        return value
    return value * 1.5 if kinds == "float" else value + 7


def _learner_copy(exercise: workshop.Exercise, target: Path, answer: Any, show_solution: bool = False) -> None:
    """The exercise's notebook with ``answer`` typed into its parameters cell, as a learner does in Jupyter."""
    nb = nbformat.read(NOTEBOOKS / exercise.notebook, as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    cell.source = cell.source.replace("answer = None", f"answer = {answer!r}", 1)
    cell.source = cell.source.replace("show_solution = False", f"show_solution = {show_solution}", 1)
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, target)


@pytest.fixture(scope="session")
def room(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[tuple[str, int], grading.Graded]]:
    """Learner ``right`` answers every exercise right, ``wrong`` every one wrong, ``blank`` none; ``curious`` sets no
    answer but asks for the solution of exercise 4, ``shy`` neither; ``broken`` has a cell that raises. Graded
    once per test run, whichever worker asks first (``once_per_run``)."""
    return once_per_run(tmp_path_factory, "workshop-room", _grade_a_room)


def _grade_a_room(shared: Path) -> tuple[Path, Path, dict[tuple[str, int], grading.Graded]]:
    folder, out = shared / "room", shared / "graded"
    folder.mkdir()
    out.mkdir()
    for exercise in workshop.EXERCISES.values():
        solution = _solution(exercise)
        _learner_copy(exercise, folder / "right" / exercise.notebook, _by_hand(exercise))
        _learner_copy(exercise, folder / "wrong" / exercise.notebook, _wrong(solution.kinds, solution.value))
        _learner_copy(exercise, folder / "blank" / exercise.notebook, None)  # what the exercise shows unanswered
    littles = workshop.EXERCISES["littles-law"]
    _learner_copy(littles, folder / "curious" / "mine.ipynb", None, show_solution=True)
    _learner_copy(littles, folder / "shy.ipynb", None)
    broken = nbformat.read(NOTEBOOKS / littles.notebook, as_version=4)
    broken.cells[2].source += "\nraise RuntimeError('a typo in my cell')"
    nbformat.write(broken, folder / "broken.ipynb")
    graded = {(g.learner, g.exercise): g for g in grading.grade_folder(folder, out, timeout_s=240)}
    return folder, out, graded


def _outputs(path: Path) -> str:
    """Everything a learner's executed notebook shows as text: its cells' outputs, as JSON text, images left out (a
    PNG's base64 holds digit runs such as '32' that no reader sees)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    outputs = [
        {**o, "data": {k: v for k, v in o.get("data", {}).items() if not k.startswith("image/")}}
        for c in nb["cells"]
        for o in c.get("outputs", [])
    ]
    return re.sub(r"\\u001b\[[0-9;]*m", "", json.dumps(outputs, ensure_ascii=False))  # a traceback's colours


@pytest.mark.recorded_data
@pytest.mark.long
@pytest.mark.parametrize("exercise", list(workshop.EXERCISES.values()), ids=list(workshop.EXERCISES))
def test_a_right_answer_passes_and_then_shows_the_solution(room: Any, exercise: workshop.Exercise) -> None:
    _, out, graded = room
    row = graded[("right", exercise.number)]
    assert (row.result, row.detail.split(":")[0]) == (grading.PASSED, "correct")
    shown = _outputs(out / "right" / exercise.notebook)
    assert _solution(exercise).explanation.splitlines()[0][:60] in shown


@pytest.mark.recorded_data
@pytest.mark.long
@pytest.mark.parametrize("exercise", list(workshop.EXERCISES.values()), ids=list(workshop.EXERCISES))
def test_a_wrong_answer_fails_without_the_answer_or_the_solution(room: Any, exercise: workshop.Exercise) -> None:
    _, out, graded = room
    row = graded[("wrong", exercise.number)]
    assert row.result == grading.NOT_YET and row.detail.startswith("not yet: ")
    solution = _solution(exercise)
    shown = _outputs(out / "wrong" / exercise.notebook)
    # a number the exercise gives before any answer (microbatches' max_num_seqs 64) is its premise, not a leak
    given = set(workshop.mentions(_outputs(out / "blank" / exercise.notebook), workshop.answer_forms(solution)))
    assert set(workshop.mentions(shown, workshop.answer_forms(solution))) <= given
    assert workshop.mentions(row.detail, workshop.answer_forms(solution)) == []
    assert solution.explanation.splitlines()[0][:60] not in shown
    assert solution.statement not in shown


@pytest.mark.recorded_data
@pytest.mark.long
def test_the_solution_shows_on_request_and_not_before(room: Any) -> None:
    _, out, graded = room
    solution = _solution(workshop.EXERCISES["littles-law"])
    assert graded[("curious", 4)].result == graded[("shy", 4)].result == grading.NOT_YET
    assert workshop.mentions(_outputs(out / "curious" / "mine.ipynb"), workshop.answer_forms(solution))
    assert workshop.mentions(_outputs(out / "shy.ipynb"), workshop.answer_forms(solution)) == []


@pytest.mark.recorded_data
@pytest.mark.long
def test_a_broken_notebook_did_not_run(room: Any) -> None:
    _, _, graded = room
    assert graded[("broken", 4)].result == grading.DID_NOT_RUN
    assert graded[("broken", 4)].detail == "RuntimeError: a typo in my cell"
    assert len(graded) == 3 * len(workshop.EXERCISES) + 3  # right, wrong, blank; curious, shy, broken


@pytest.mark.recorded_data
@pytest.mark.long
def test_the_published_numbers_show_unrounded(room: Any) -> None:
    """Workshop 3 and 4 show the numbers a learner computes from as published (0.72, not 0.7)."""
    _, out, _ = room
    for exercise, claims in (
        ("tokens-per-step", ["acceptance-rate-author-quoted"]),
        ("littles-law", ["output-tok-s-spec-off", "itl-ms-spec-off"]),
    ):
        shown = _outputs(out / "right" / workshop.EXERCISES[exercise].notebook)
        for claim in claims:
            assert f">{workshop.exact(_published('discussion_13834', claim))}<" in shown
    assert workshop.exact(0.72) == "0.72" and workshop.exact(1020.56) == "1020.56" and workshop.exact(5) == "5"
    assert workshop.exact(0.1 + 0.2) == "0.3" and workshop.exact(1 / 3) == "0.333333333333333"


def test_tau_by_hand_agrees_with_the_package() -> None:
    """The by-hand τ a right learner uses is the package's formula at the published acceptance."""
    alpha = _published("discussion_13834", "acceptance-rate-author-quoted")
    assert _by_hand(workshop.EXERCISES["tokens-per-step"])["tokens_per_step"] == pytest.approx(
        expected_tokens_per_step(alpha, 5)
    )


def test_the_book_shows_the_solution_and_a_learner_run_does_not() -> None:
    path = NOTEBOOKS / workshop.EXERCISES["littles-law"].notebook
    assert default_parameters(path)["show_solution"] is False
    assert book_parameters(path) == {"mode": "replay", "show_solution": True}
    assert book_parameters(NOTEBOOKS / "discussion-13834.ipynb") == {"mode": "replay"}


def test_solution_shown_only_on_request_or_after_a_right_answer() -> None:
    solution = _solution(workshop.EXERCISES["littles-law"])
    assert workshop.solution_shown("littles-law", None, solution, show_solution=True)
    assert not workshop.solution_shown("littles-law", None, solution, show_solution=False)
    assert not workshop.solution_shown("littles-law", solution.value * 2, solution, show_solution=False)
    assert workshop.solution_shown("littles-law", solution.value, solution, show_solution=False)


def test_answer_forms_and_mentions() -> None:
    solution = _solution(workshop.EXERCISES["littles-law"])
    assert workshop.answer_forms(solution) == {"31.95", "31.9", "32"}  # 32 passes the check too
    assert workshop.mentions("about 31.95 streams", {"31.95"}) == ["31.95"]
    assert workshop.mentions("131.95 or 31.951 or 31.95.", {"31.95"}) == ["31.95"]
    assert workshop.mentions("1280, 0.128, 1,128", {"128"}) == []
    assert workshop.mentions("8b-pp1-mns64, capture_64", {"64"}) == []  # inside a name
    assert workshop.answer_forms(_solution(workshop.EXERCISES["size-max-num-seqs"])) == {"27"}


def test_who_and_what_a_notebook_is(tmp_path: Path) -> None:
    folder = tmp_path / "room"
    assert grading.learner_of(folder / "alice" / "x" / "w.ipynb", folder) == "alice"
    assert grading.learner_of(folder / "bob.ipynb", folder) == "bob"
    nb = nbformat.read(NOTEBOOKS / workshop.EXERCISES["microbatches"].notebook, as_version=4)
    assert grading.exercise_of(nb) is workshop.EXERCISES["microbatches"]
    assert grading.exercise_of({"cells": [{"source": "# Notes"}]}) is None
    assert grading.exercise_of({"cells": []}) is None


def test_results_read_from_an_executed_notebook() -> None:
    def ran(*outputs: dict[str, Any]) -> dict[str, Any]:
        return {"cells": [{"outputs": list(outputs)}]}

    def printed(text: str) -> dict[str, Any]:
        return {"output_type": "stream", "name": "stdout", "text": text}

    assert grading.result_of(ran(printed("correct: 3 streams\n"))) == (grading.PASSED, "correct: 3 streams")
    assert grading.result_of(ran(printed("no answer yet: set it\n")))[0] == grading.NOT_YET
    wrong = {"output_type": "error", "ename": "WrongAnswer", "evalue": "not yet: the answer does not match — hint"}
    assert grading.result_of(ran(wrong)) == (grading.NOT_YET, "not yet: the answer does not match — hint")
    crash = {"output_type": "error", "ename": "KeyError", "evalue": "'x'\nmore"}
    assert grading.result_of(ran(printed("correct: x\n"), crash)) == (grading.DID_NOT_RUN, "KeyError: 'x'")
    assert grading.result_of(ran())[0] == grading.DID_NOT_RUN


def test_a_notebook_over_its_time_is_stopped(tmp_path: Path) -> None:
    folder = tmp_path / "room"
    slow = nbformat.read(NOTEBOOKS / workshop.EXERCISES["cuda-graph-sizes"].notebook, as_version=4)
    slow.cells[2].source += "\nimport time\ntime.sleep(600)"
    folder.mkdir()
    nbformat.write(slow, folder / "dawdle.ipynb")
    row = grading.grade_notebook(folder / "dawdle.ipynb", folder, tmp_path / "out", timeout_s=10)
    assert (row.learner, row.exercise, row.result) == ("dawdle", 6, grading.DID_NOT_RUN)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda root: root / "missing", "error: no folder "),
        (lambda root: root, "error: no notebooks (*.ipynb) in "),
    ],
)
def test_bad_folders_get_one_line(tmp_path: Path, make: Any, message: str) -> None:
    command = [sys.executable, "-m", "vllm_playbooks", "workshop", "grade", str(make(tmp_path))]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and done.stderr.startswith(message) and len(done.stderr.splitlines()) == 1


@pytest.mark.recorded_data
@pytest.mark.long
def test_the_command_prints_a_row_per_learner_and_exercise(tmp_path: Path) -> None:
    """One right, one wrong and one broken notebook: exit 1 (one did not run), a row each."""
    littles = workshop.EXERCISES["littles-law"]
    room_dir = tmp_path / "room"
    _learner_copy(littles, room_dir / "ann" / "w4.ipynb", _by_hand(littles))
    _learner_copy(littles, room_dir / "ben" / "w4.ipynb", 30)
    broken = nbformat.read(NOTEBOOKS / littles.notebook, as_version=4)
    broken.cells[2].source += "\n1 / 0"
    nbformat.write(broken, room_dir / "cat.ipynb")
    command = [sys.executable, "-m", "vllm_playbooks", "workshop", "grade", str(room_dir)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 1, done.stderr
    rows = [line.split("  ") for line in done.stdout.splitlines()[1:]]
    results = {row[0].strip(): [cell.strip() for cell in row if cell.strip()][1:3] for row in rows}
    assert results == {"ann": ["4", "passed"], "ben": ["4", "not yet"], "cat": ["4", "did not run"]}
