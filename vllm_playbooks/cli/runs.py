"""``vllm-playbooks runs``: what was measured per case and hardware, when, and the GPU minutes its servers held."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from vllm_playbooks.analysis.runs import check_cases_recorded, recorded_runs
from vllm_playbooks.book.run_notes import describe_recorded_runs


@dataclass(frozen=True)
class Args:
    """The cases to list (empty: every case with recorded runs) and the data folder (None: the book's)."""

    cases: tuple[str, ...] = ()
    data: Path | None = None

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """The cases to list, and the data folder."""
        parser.add_argument("cases", nargs="*", help="case names (default: every case with recorded runs)")
        parser.add_argument("--data", type=Path, help="the data folder (default: the book's data/)")

    @classmethod
    def from_cli_args(cls, namespace: argparse.Namespace) -> Self:
        """The parsed arguments as typed values."""
        return cls(cases=tuple(namespace.cases), data=namespace.data)


def run(args: Args) -> int:
    """Print what was measured per case and hardware (``recorded_runs``) and one line of totals."""
    check_cases_recorded(args.cases, args.data)
    table = recorded_runs(list(args.cases) or None, args.data)
    if not table.empty:
        print(table.to_string(index=False, float_format="{:.1f}".format))
    print(describe_recorded_runs(table))
    return 0
