"""The workshop's exercises and their checks: an answer is graded against the worked solution."""

from __future__ import annotations

import inspect
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from vllm_playbooks.book.engine_exercises import cuda_graphs_solution, max_num_seqs_solution, microbatches_solution
from vllm_playbooks.book.exercises import (
    NEVER,
    AnswerKind,
    AnswerKinds,
    Solution,
    chunks_solution,
    littles_law_solution,
    stop_paying_solution,
    tokens_per_step_solution,
)
from vllm_playbooks.book.notebooks import default_parameters
from vllm_playbooks.book.tables import SHOWN_ROWS
from vllm_playbooks.errors import ConfigError, PlaybookError

#: A float answer counts as right within this relative error, or within ``ABS_TOLERANCE`` (whichever is larger),
#: so an answer worked out by hand from a rounded table passes.
REL_TOLERANCE = 0.01


ABS_TOLERANCE = 0.01


@dataclass(frozen=True)
class Exercise:
    """One workshop exercise: its id (what ``check`` takes), its notebook and the function that solves it."""

    id: str
    number: int
    slug: str
    title: str
    solve: Callable[..., Solution]
    #: Notebook parameters passed to ``solve`` under another name (exercise 2 asks at ``at_concurrency``; its
    #: ``concurrency`` is the levels of a live run).
    renamed: Mapping[str, str] = field(default_factory=dict)

    @property
    def notebook(self) -> str:
        """The source notebook's file name, ``workshop_<number>_<slug>.ipynb``."""
        return f"workshop_{self.number}_{self.slug}.ipynb"


EXERCISES: dict[str, Exercise] = {
    e.id: e
    for e in (
        Exercise("stop-paying", 1, "stop_paying", "Where does speculation stop paying?", stop_paying_solution),
        Exercise(
            "chunks-not-tokens",
            2,
            "chunks_not_tokens",
            "Chunks are not tokens",
            chunks_solution,
            {"at_concurrency": "concurrency"},
        ),
        Exercise(
            "tokens-per-step", 3, "tokens_per_step", "From V0 acceptance to tokens per step", tokens_per_step_solution
        ),
        Exercise("littles-law", 4, "littles_law", "Little's law on the #13834 report", littles_law_solution),
        Exercise(
            "size-max-num-seqs", 5, "max_num_seqs", "Size max_num_seqs for a 70B-AWQ server", max_num_seqs_solution
        ),
        Exercise("cuda-graph-sizes", 6, "cuda_graphs", "CUDA-graph sizes with k", cuda_graphs_solution),
        Exercise("microbatches", 7, "microbatches", "Count the microbatches", microbatches_solution),
    )
}


def default_solution(exercise: Exercise, notebooks: Path) -> Solution:
    """The worked solution of ``exercise`` for its notebook's default parameters (those ``solve`` takes, under their
    ``renamed`` names): the answer the book's page and a learner's untouched copy expect."""
    params = default_parameters(notebooks / exercise.notebook)
    takes = set(inspect.signature(exercise.solve).parameters)
    inputs = {k: v for k, v in params.items() if k in takes and k not in exercise.renamed.values()}
    inputs |= {exercise.renamed[k]: v for k, v in params.items() if k in exercise.renamed}
    return exercise.solve(**inputs)


def get_exercise(exercise_id: str) -> Exercise:
    """The exercise with this id; an unknown id is refused with the list of known ones."""
    if exercise_id not in EXERCISES:
        raise ConfigError(f"unknown exercise {exercise_id!r}; known: {', '.join(EXERCISES)}")
    return EXERCISES[exercise_id]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _matches(kind: AnswerKind, expected: Any, got: Any) -> bool:
    if kind == "float":
        return _is_number(got) and abs(got - expected) <= max(ABS_TOLERANCE, REL_TOLERANCE * abs(expected))
    if kind == "int":
        return _is_number(got) and float(got).is_integer() and int(got) == expected
    if kind == "level":
        if got is None or (isinstance(got, str) and got.strip().lower() == NEVER):
            return expected == NEVER
        return expected != NEVER and _is_number(got) and float(got) == float(expected)
    if kind == "word":
        return isinstance(got, str) and got.strip().lower() == str(expected).lower()
    raise ConfigError(f"unknown answer kind {kind!r}")


def _show(kind: AnswerKind, value: Any) -> str:
    if kind == "float" and _is_number(value):
        return f"{value:.2f}"
    if kind == "level" and value is None:
        return NEVER
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _read_text(kinds: AnswerKinds, got: Any) -> Any:
    """An answer passed as text (``papermill -p answer '{"a": 1}'`` passes a string) read as YAML, where the
    expected answer is a dict or a number; words stay as they are."""
    if not isinstance(got, str) or kinds in ("word", "level"):
        return got
    import yaml

    try:
        return yaml.safe_load(got)
    except yaml.YAMLError:
        return got


def _problem(kinds: AnswerKinds, expected: Any, got: Any) -> str | None:
    """None when ``got`` matches ``expected``; otherwise which part is wrong, or what shape was expected, never the
    expected value itself."""
    got = _read_text(kinds, got)
    if isinstance(kinds, str):
        return None if _matches(kinds, expected, got) else "the answer does not match"
    if not isinstance(got, Mapping):
        return f"expected a dict with keys {', '.join(kinds)}, got {_show('', got)}"
    missing = [k for k in kinds if k not in got]
    extra = sorted(str(k) for k in got if k not in kinds)
    if missing or extra:
        return f"expected the keys {', '.join(kinds)}, got {', '.join(str(k) for k in got) or 'none'}"
    wrong = [k for k in kinds if not _matches(kinds[k], expected[k], got[k])]
    return f"{', '.join(wrong)} {'does' if len(wrong) == 1 else 'do'} not match" if wrong else None


class WrongAnswer(PlaybookError):
    """A workshop answer that is not right yet: raised by ``check`` so that the notebook stops and papermill exits
    with a non-zero status (a host grades a room's answers with a loop). Its message starts with ``not yet:``."""


def check(exercise_id: str, answer: Any, solution: Solution, hint: str = "") -> str:
    """One line on ``answer``: ``correct: …`` (with the worked statement) for a right one; for ``None``, that no
    answer is set yet. A wrong answer raises ``WrongAnswer``: ``not yet: <which part> — <hint>``, the hint (the
    page's) pointing to the concept; no message ever shows the expected value.

    The expected answer is solved again from the data with ``solution.inputs``, so a solution cell that was edited
    or a data change is refused (``ConfigError``). Floats pass within 1 % (at least 0.01); counts and words must match
    exactly.
    """
    exercise = get_exercise(exercise_id)
    if not isinstance(solution, Solution) or solution.exercise != exercise.id:
        given = solution.exercise if isinstance(solution, Solution) else type(solution).__name__
        raise ConfigError(f"check({exercise.id!r}, …) needs the solution of exercise {exercise.id!r}, got {given!r}")
    expected = exercise.solve(**solution.inputs)
    if _problem(expected.kinds, expected.value, solution.value) is not None:
        raise ConfigError(f"{exercise.notebook}: the worked solution disagrees with the data: re-run its cells")
    if answer is None:
        return "no answer yet: set `answer` in the parameters cell (the worked solution agrees with the data)"
    problem = _problem(expected.kinds, expected.value, answer)
    if problem is not None:
        raise WrongAnswer(f"not yet: {problem}" + (f" — {hint}" if hint else ""))
    return f"correct: {expected.statement}"


def solution_shown(exercise_id: str, answer: Any, solution: Solution, show_solution: bool) -> bool:
    """Whether an exercise's notebook shows its worked solution: on request (``show_solution``, what the book's
    build passes), or once ``answer`` passes ``check``; never to a learner who has not answered, or not yet right."""
    if show_solution:
        return True
    if answer is None:
        return False
    try:
        check(exercise_id, answer, solution)
    except WrongAnswer:
        return False
    return True


def exact(value: Any) -> str:
    """A number as the data holds it, for a learner to compute from: 15 significant digits (only a float's binary
    noise is cut: 0.72 stays 0.72, 1020.56 stays 1020.56), no thousands separator; anything else as ``str``."""
    if isinstance(value, float | int) and not isinstance(value, bool):
        return format(value, ".15g")
    return str(value)


@dataclass(frozen=True)
class GivenTable:
    """The numbers an exercise gives, displayed as a table without the index whose cells hold ``exact`` values, its
    first ``SHOWN_ROWS`` rows shown and all of them in a collapsed section below (as every long table of the book)."""

    frame: pd.DataFrame

    def _styled(self, rows: pd.DataFrame) -> str:
        return rows.style.hide(axis="index").format(exact, na_rep="").to_html()

    def _repr_html_(self) -> str:
        """The table as HTML, for a notebook."""
        if len(self.frame) <= SHOWN_ROWS:
            return self._styled(self.frame)
        folded = f"<details><summary>All {len(self.frame)} rows</summary>{self._styled(self.frame)}</details>"
        return self._styled(self.frame.head(SHOWN_ROWS)) + folded

    def __repr__(self) -> str:
        """The table as text, every row."""
        return self.frame.to_string(index=False)


def given(frame: pd.DataFrame) -> GivenTable:
    """The numbers an exercise gives (``GivenTable``): a learner working from the table gets the answer the check
    computes, since its cells are ``exact`` (a display format would round 0.72 to 0.7)."""
    return GivenTable(frame)


def answer_forms(solution: Solution) -> set[str]:
    """The strings in which a reader finds ``solution``'s expected answer: each number part as a count (an int), or
    (a float) with three significant digits and rounded to 0, 1 or 2 decimals wherever that rounding would pass
    ``check`` (an answer of 31.95 is given away by "≈32" as well); a word or ``NEVER`` gives none (one of a few words
    is not given away by appearing in prose). What the site check and the tests look for."""
    kinds = solution.kinds if isinstance(solution.kinds, Mapping) else {"": solution.kinds}
    values = solution.value if isinstance(solution.kinds, Mapping) else {"": solution.value}
    forms: set[str] = set()
    for part, kind in kinds.items():
        value = values[part]
        if not _is_number(value) or kind == "word":
            continue
        if kind == "float":
            forms.add(f"{value:.3g}")
            forms |= {
                f"{value:.{places}f}" for places in (0, 1, 2) if _matches(kind, value, float(f"{value:.{places}f}"))
            }
        else:
            forms.add(str(int(value)))
    return forms


def mentions(text: str, forms: set[str]) -> list[str]:
    """The ``forms`` that ``text`` holds as whole numbers (not inside a longer number: 128 is not in 1280 or 0.128,
    31.95 not in 31.951; nor inside a name: 64 is not in the config label mns64)."""
    return sorted(f for f in forms if re.search(rf"(?<![\w.,]){re.escape(f)}(?![\d]|[.,]\d)", text))
