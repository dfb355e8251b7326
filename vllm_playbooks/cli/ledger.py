"""``vllm-playbooks ledger``: the claims ledger on the command line, as the ledger page shows it or as CSV."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Self

from vllm_playbooks.book.ledger import ledger_markdown
from vllm_playbooks.cases import load_evidence
from vllm_playbooks.claims.ledger import build_ledger, ledger_export

FORMATS = ("markdown", "csv")


@dataclass(frozen=True)
class Args:
    """The format the ledger is printed in: ``markdown`` (as the ledger page) or ``csv``."""

    format: str = "markdown"

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """``--format markdown|csv``."""
        parser.add_argument(
            "--format",
            choices=FORMATS,
            default="markdown",
            help="markdown: as the ledger page; csv: one row per claim and GPU it is judged on, with the "
            "noise its verdict rests on (claim_id, hardware, headline, verdict, runs_per_side, "
            "re_measured, points, spread_pct, band_pct, deciding_part)",
        )

    @classmethod
    def from_cli_args(cls, namespace: argparse.Namespace) -> Self:
        """The parsed arguments as typed values."""
        return cls(format=str(namespace.format))


def run(args: Args) -> int:
    """Build the ledger from the recorded rows (with every case's checks) and print it."""
    ledger = build_ledger(load_evidence())
    if args.format == "csv":
        ledger_export(ledger).to_csv(sys.stdout, index=False)
    else:
        print(ledger_markdown(ledger))
    return 0
