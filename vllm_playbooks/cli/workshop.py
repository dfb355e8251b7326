"""``vllm-playbooks workshop grade DIR``: grade every learner notebook in a folder (for workshop hosts)."""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from vllm_playbooks.book.grading import DEFAULT_TIMEOUT_S, DID_NOT_RUN, Graded, grade_folder, learner_notebooks
from vllm_playbooks.errors import ConfigError


@dataclass(frozen=True)
class Args:
    """``grade``'s folder of learner notebooks, where to keep the executed copies, and the time one may run."""

    folder: Path
    out: Path | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """``grade DIR [--out DIR] [--timeout-s S]``."""
        sub = parser.add_subparsers(dest="action", required=True, parser_class=type(parser))
        grade = sub.add_parser("grade", help="run every learner notebook in a folder through papermill and grade it")
        grade.add_argument(
            "folder", type=Path, help="the learners' notebooks: DIR/<learner>/*.ipynb or DIR/<learner>.ipynb"
        )
        grade.add_argument(
            "--out",
            type=Path,
            default=None,
            help="keep the executed notebooks here (default: a temporary folder, removed)",
        )
        grade.add_argument(
            "--timeout-s",
            type=float,
            default=DEFAULT_TIMEOUT_S,
            help=f"seconds one notebook may run (default {DEFAULT_TIMEOUT_S})",
        )

    @classmethod
    def from_cli_args(cls, namespace: argparse.Namespace) -> Self:
        """The parsed arguments; ``ConfigError`` for a time limit that is not positive."""
        if namespace.timeout_s <= 0:
            raise ConfigError(f"--timeout-s must be positive, got {namespace.timeout_s:g}")
        return cls(folder=namespace.folder, out=namespace.out, timeout_s=float(namespace.timeout_s))


def grades_table(graded: list[Graded]) -> list[str]:
    """One line per learner and exercise (learner, exercise, result, detail) under a heading, in aligned columns."""
    rows = [("learner", "exercise", "result", "detail")]
    rows += [(g.learner, str(g.exercise or "-"), g.result, g.detail) for g in graded]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[3] for row in rows
    ]


def run(args: Args) -> int:
    """Print one row per learner and exercise; exit 1 where any notebook did not run, else 0 (answers not yet right
    are the room's business, not an error)."""
    learner_notebooks(args.folder)  # bad input ends here, before any kernel starts
    with tempfile.TemporaryDirectory(prefix="workshop-grade-") as tmp:
        graded = grade_folder(args.folder, args.out or Path(tmp), args.timeout_s)
    for line in grades_table(graded):
        print(line)
    return 1 if any(g.result == DID_NOT_RUN for g in graded) else 0
