"""``vllm-playbooks toc``: write the book's table of contents with a page per case folder."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from vllm_playbooks import paths
from vllm_playbooks.book.toc import BUILT_TOC, write_book_toc


@dataclass(frozen=True)
class Args:
    """Where to write the table of contents."""

    out: Path = BUILT_TOC

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """``--out``: where to write the table of contents."""
        parser.add_argument("--out", type=Path, default=BUILT_TOC, help=f"where to write it (default: {BUILT_TOC})")

    @classmethod
    def from_cli_args(cls, namespace: argparse.Namespace) -> Self:
        """The parsed arguments as typed values."""
        return cls(out=namespace.out)


def run(args: Args) -> int:
    """Write the book's table of contents, ``_toc.yml`` with a page per case folder with a notebook (``book.toc``)."""
    print(f"table of contents: {write_book_toc(paths.find_repo_root(), args.out)}", flush=True)
    return 0
