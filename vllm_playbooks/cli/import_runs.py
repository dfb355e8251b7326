"""``vllm-playbooks import-runs SOURCE``: add the points measured in another data folder to this one."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from vllm_playbooks import paths
from vllm_playbooks.run.importing import cases_to_import, import_case


@dataclass(frozen=True)
class Args:
    """The data folder to import from, and the cases to import (empty: every case there)."""

    source: Path
    cases: tuple[str, ...] = ()

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """``SOURCE`` and ``--case``."""
        parser.add_argument(
            "source",
            type=Path,
            help="a data folder holding runs/<case>/ (another clone's data/, or the "
            "folder VLLM_PLAYBOOKS_DATA_DIR named while measuring)",
        )
        parser.add_argument(
            "--case", nargs="+", default=None, help="the cases to import (default: every case in SOURCE)"
        )

    @classmethod
    def from_cli_args(cls, namespace: argparse.Namespace) -> Self:
        """The parsed arguments as typed values."""
        return cls(source=namespace.source, cases=tuple(namespace.case or ()))


def run(args: Args) -> int:
    """Import the cases (every one checked first) and print, per case, what was added, renumbered and already here."""
    cases = cases_to_import(args.source, args.cases)
    source, data = args.source.resolve(), paths.data_dir().resolve()
    for case in cases:
        done = import_case(case, source, data)
        print(
            f"{case}: {len(done.added)} point(s) added ({len(done.renumbered)} at a new repeat number), "
            f"{len(done.already_here)} already here, {done.failures} failure(s), {done.logs} server log(s), "
            f"{done.traces} live-search trace(s)"
        )
        for pid in done.added:
            print(f"  + {pid}")
    return 0
