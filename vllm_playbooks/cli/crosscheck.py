"""``vllm-playbooks crosscheck``: record our speculative_config validation against vLLM's own parser (needs vLLM)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from vllm_playbooks.run.crosscheck import record_crosscheck


@dataclass(frozen=True)
class Args:
    """The folder for the table and its provenance, and how many vLLM processes run at a time."""

    out: Path
    workers: int = 8

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """``--out`` folder and ``--workers``."""
        parser.add_argument("--out", type=Path, required=True, help="folder for the table and its provenance")
        parser.add_argument(
            "--workers",
            type=int,
            default=8,
            help="vLLM processes at a time, one per case (default: 8); 1 runs every case in this process",
        )

    @classmethod
    def from_cli_args(cls, namespace: argparse.Namespace) -> Self:
        """The parsed arguments as typed values."""
        return cls(out=namespace.out, workers=int(namespace.workers))


def run(args: Args) -> int:
    """Record the cross-check (``run.crosscheck.record_crosscheck``) and print each case's two verdicts."""
    table = record_crosscheck(args.out, args.workers)
    print(table[["label", "ours", "vllm", "agree"]].to_string(index=False))
    return 0
