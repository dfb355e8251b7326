"""``vllm-playbooks compress``: gzip the plain ``/metrics`` scrapes and server logs left in recorded folders."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from vllm_playbooks.errors import ConfigError
from vllm_playbooks.results.textfiles import compress_tree


@dataclass(frozen=True)
class Args:
    """The folders to compress."""

    folders: tuple[Path, ...]

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """The folders to compress."""
        parser.add_argument("folders", nargs="+", type=Path, help="folders to compress, e.g. data/runs/gpt-oss-eagle3")

    @classmethod
    def from_cli_args(cls, namespace: argparse.Namespace) -> Self:
        """The parsed folders; ``ConfigError`` naming those that are not folders."""
        missing = [str(folder) for folder in namespace.folders if not folder.is_dir()]
        if missing:
            raise ConfigError(f"not a folder: {', '.join(missing)}")
        return cls(folders=tuple(namespace.folders))


def run(args: Args) -> int:
    """Compress the recorded scrapes and logs under the given folders and say how many files were written."""
    written = compress_tree(args.folders)
    print(f"compressed {len(written)} files")
    return 0
