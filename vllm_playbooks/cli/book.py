"""``vllm-playbooks book``: execute in replay mode the notebooks whose executed copy is stale (the book's pages)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from vllm_playbooks import paths
from vllm_playbooks.book import cache
from vllm_playbooks.book.notebooks import book_parameters, execute, list_notebooks
from vllm_playbooks.book.toc import BUILT_TOC, write_book_toc


@dataclass(frozen=True)
class Args:
    """Where the executed notebooks go, whether to execute every one, and where the table of contents goes."""

    out: Path = Path("book") / "executed"
    force: bool = False
    toc: Path = BUILT_TOC

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """``--out``: the folder the executed notebooks go to; ``--force``: execute every notebook; ``--toc``."""
        parser.add_argument(
            "--out",
            type=Path,
            default=Path("book") / "executed",
            help="folder for the executed notebooks (default: book/executed)",
        )
        parser.add_argument(
            "--force", action="store_true", help="execute every notebook, also those whose executed copy is current"
        )
        parser.add_argument(
            "--toc",
            type=Path,
            default=BUILT_TOC,
            help=f"where to write the table of contents with the case pages (default: {BUILT_TOC})",
        )

    @classmethod
    def from_cli_args(cls, namespace: argparse.Namespace) -> Self:
        """The parsed arguments as typed values."""
        return cls(out=namespace.out, force=bool(namespace.force), toc=namespace.toc)


def run(args: Args) -> int:
    """Execute in replay mode into ``args.out`` every notebook whose executed copy is stale; reuse the others.

    A copy is stale when the notebook, the package files or the data its last run read, or the parameters changed
    (``vllm_playbooks.book.cache``); ``--force`` executes all. Copies whose source notebook is gone are removed.
    Each notebook gets one line saying whether it was reused or executed, and why. Last, the table of contents with
    a page per case (``book.toc``) is written to ``args.toc``, where ``jupyter-book build --toc`` reads it (where the
    repository has a ``_toc.yml``).
    """
    sources = list_notebooks()
    names = {source.name for source in sources}
    for old in sorted(args.out.glob("*.ipynb")):
        if old.name not in names:
            old.unlink()
            print(f"removed {old}: no notebooks/{old.name}", flush=True)
    executed = 0
    for source in sources:
        target = args.out / source.name
        parameters = book_parameters(source)
        reason = "--force" if args.force else cache.stale_reason(source, target, parameters)
        if reason is None:
            print(f"reused {source.name}: nothing it depends on changed", flush=True)
            continue
        print(f"papermill {source.name} (replay): {reason}", flush=True)
        execute(source, target, parameters)
        executed += 1
    print(f"book: {executed} executed, {len(sources) - executed} reused", flush=True)
    root = paths.find_repo_root()
    if (root / "_toc.yml").is_file():  # a folder of notebooks alone has no book to list them in
        print(f"table of contents: {write_book_toc(root, args.toc)}", flush=True)
    return 0
