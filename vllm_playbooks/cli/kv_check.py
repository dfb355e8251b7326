"""``vllm-playbooks kv-check``: fit the memory calibration on every recorded server log; write it and the KV check."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from vllm_playbooks.analysis.calculator import write_kv_check


@dataclass(frozen=True)
class Args:
    """The folder the calibration and the KV check go to (None: ``data/checks``)."""

    out: Path | None = None

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """``--out``: the folder the two files go to (default: ``data/checks``)."""
        parser.add_argument("--out", type=Path, default=None, help="folder for the two files (default: data/checks)")

    @classmethod
    def from_cli_args(cls, namespace: argparse.Namespace) -> Self:
        """The parsed arguments as typed values."""
        return cls(out=namespace.out)


def run(args: Args) -> int:
    """Write the calibration and the KV check (``analysis.calculator.write_kv_check``) and print the worst error."""
    check, calibration = write_kv_check(args.out)
    worst = check.loc[check["error_pct"].abs().idxmax()]
    print(
        f"{len(check)} start-ups, {check['config'].nunique()} configs, {len(calibration.rows)} families; worst KV "
        f"error {worst['error_pct']:+.2f} % ({worst['config']})"
    )
    return 0
