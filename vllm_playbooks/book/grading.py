"""Grading a room: every learner's workshop notebook in a folder run through papermill, one result per learner and
exercise (``vllm-playbooks workshop grade DIR``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_playbooks import paths
from vllm_playbooks.book.workshop import EXERCISES, Exercise
from vllm_playbooks.errors import ConfigError

PASSED, NOT_YET, DID_NOT_RUN = "passed", "not yet", "did not run"

#: Seconds one learner's notebook may run before it counts as not run (a replayed exercise takes seconds).
DEFAULT_TIMEOUT_S = 300

#: The exception a workshop check raises for a wrong answer (``workshop.WrongAnswer``), as an output names it.
WRONG_ANSWER = "WrongAnswer"


@dataclass(frozen=True)
class Graded:
    """One learner's notebook: who (``learner``), which exercise (its number, 0 where the notebook is none of the
    workshop's), ``result`` (``PASSED``, ``NOT_YET`` or ``DID_NOT_RUN``) and ``detail``: the check's line, or why it
    did not run (never the expected answer: the check's lines do not hold it)."""

    learner: str
    exercise: int
    notebook: str
    result: str
    detail: str


def learner_notebooks(folder: Path) -> list[Path]:
    """The notebooks under ``folder`` (sorted; checkpoints left out); a missing folder or one without notebooks is
    refused with one line."""
    if not folder.is_dir():
        raise ConfigError(f"no folder {folder}: give the folder that holds the learners' notebooks")
    found = sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    if not found:
        raise ConfigError(f"no notebooks (*.ipynb) in {folder}")
    return found


def learner_of(path: Path, folder: Path) -> str:
    """Whose notebook ``path`` is: the first folder under ``folder`` that holds it (``room/alice/…``), else the file
    name without ``.ipynb`` (``room/alice.ipynb``)."""
    parts = path.relative_to(folder).parts
    return parts[0] if len(parts) > 1 else path.stem


def exercise_of(notebook: Any) -> Exercise | None:
    """The exercise a notebook is, read from its first cell's heading ``# Workshop N: …`` (the learner's copy may
    have any file name); None where it is none of the workshop's."""
    cells = notebook.get("cells", []) if isinstance(notebook, dict) else []
    first = "".join(cells[0].get("source", "")) if cells and isinstance(cells[0], dict) else ""
    heading = first.lstrip().split("\n", 1)[0]
    by_number = {f"# Workshop {e.number}:": e for e in EXERCISES.values()}
    return next((e for prefix, e in by_number.items() if heading.startswith(prefix)), None)


def _outputs_text(cell: Any) -> str:
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def result_of(executed: Any) -> tuple[str, str]:
    """``(result, detail)`` of a notebook papermill executed (as a dict): the check raised ``WrongAnswer``: not yet,
    with its line; another error: did not run, with the error's name and first line; no error: passed where the
    check printed ``correct:``, not yet where no answer is set."""
    for cell in executed.get("cells", []):
        for output in cell.get("outputs", []):
            if output.get("output_type") != "error":
                continue
            line = str(output.get("evalue", "")).strip().split("\n", 1)[0]
            if output.get("ename") == WRONG_ANSWER:
                return NOT_YET, line
            return DID_NOT_RUN, f"{output.get('ename', 'error')}: {line}"
    printed = [line for cell in executed.get("cells", []) for line in _outputs_text(cell).splitlines()]
    checks = [line for line in printed if line.startswith(("correct:", "no answer yet:"))]
    if not checks:
        return DID_NOT_RUN, "the notebook ran but its check printed nothing"
    return (PASSED if checks[-1].startswith("correct:") else NOT_YET), checks[-1]


def _papermill(source: Path, target: Path, timeout_s: float) -> tuple[bool, str]:
    """Run papermill on ``source`` in replay mode in its own process group, killed after ``timeout_s``; whether it
    finished in time, and the last line of its standard error."""
    command = [
        sys.executable,
        "-m",
        "papermill",
        str(source),
        str(target),
        "-p",
        "mode",
        "replay",
        "--cwd",
        str(paths.find_repo_root() / "notebooks"),
        "-k",
        "python3",
        "--no-progress-bar",
        "--execution-timeout",
        str(int(timeout_s)),
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return False, f"stopped after {timeout_s:g} s"
    lines = [line for line in stderr.splitlines() if line.strip()]
    return True, lines[-1] if lines else ""


def grade_notebook(path: Path, folder: Path, out: Path, timeout_s: float = DEFAULT_TIMEOUT_S) -> Graded:
    """Run one learner's notebook (``path`` under ``folder``) with papermill in replay mode into ``out`` (same
    relative path) and grade it; a notebook that cannot be read, is none of the workshop's, fails otherwise than by
    its check or outlasts ``timeout_s`` did not run."""
    import nbformat

    learner, name = learner_of(path, folder), str(path.relative_to(folder))
    try:
        source = nbformat.read(path, as_version=4)
    except Exception as error:  # noqa: BLE001 - any unreadable file is a row, not a crash of the whole room
        return Graded(learner, 0, name, DID_NOT_RUN, f"not a readable notebook: {type(error).__name__}")
    exercise = exercise_of(source)
    if exercise is None:
        return Graded(learner, 0, name, DID_NOT_RUN, "not a workshop notebook (no '# Workshop N:' heading)")
    target = out / path.relative_to(folder)
    target.parent.mkdir(parents=True, exist_ok=True)
    finished, last = _papermill(path, target, timeout_s)
    if not finished or not target.is_file():
        return Graded(learner, exercise.number, name, DID_NOT_RUN, last or "papermill wrote no notebook")
    result, detail = result_of(nbformat.read(target, as_version=4))
    return Graded(learner, exercise.number, name, result, detail)


def grade_folder(folder: Path, out: Path, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Graded]:
    """Every learner notebook under ``folder`` graded (``grade_notebook``), sorted by learner and exercise."""
    graded = [grade_notebook(path, folder, out, timeout_s) for path in learner_notebooks(folder)]
    return sorted(graded, key=lambda g: (g.learner, g.exercise, g.notebook))
