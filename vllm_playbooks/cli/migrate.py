"""``vllm-playbooks migrate``: move recorded points to their identity (hardware, config id), rebuild their tables."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Self

from vllm_playbooks.results.schema import SCHEMA_VERSION
from vllm_playbooks.run.migrate import cases_to_migrate, migrate_case


@dataclass(frozen=True)
class Args:
    """The cases to migrate (empty: every case folder under ``data/runs``)."""

    cases: tuple[str, ...] = ()

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """The cases to migrate."""
        parser.add_argument("cases", nargs="*", help="case names (default: every case folder under data/runs)")

    @classmethod
    def from_cli_args(cls, namespace: argparse.Namespace) -> Self:
        """The parsed arguments as typed values."""
        return cls(cases=tuple(namespace.cases))


def run(args: Args) -> int:
    """Migrate the cases and print, per case, its rows, whether its table was rebuilt, the folders and logs moved."""
    for case in cases_to_migrate(args.cases):
        done = migrate_case(case)
        table = "rebuilt" if done.table_rewritten else "unchanged"
        print(
            f"{case}: {done.rows} rows ({table}, schema {SCHEMA_VERSION}), {done.moved} point folders moved, "
            f"{done.logs_renamed} logs renamed"
        )
    return 0
