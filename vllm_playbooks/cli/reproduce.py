"""``vllm-playbooks reproduce``: run one case notebook live on this machine's GPUs and render its page."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from vllm_playbooks.book.notebooks import reproduce
from vllm_playbooks.cli.parameters import add_parameter_option, parameters_of


@dataclass(frozen=True)
class Args:
    """The notebook (the case's name), where the executed copy goes, and the notebook parameters from ``-p``."""

    notebook: str
    out: Path | None = None
    parameters: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """``--case`` (the notebook), ``--out`` and ``-p NAME VALUE`` parameters."""
        parser.add_argument(
            "--case",
            dest="notebook",
            required=True,
            help="the case, as its notebook is named without .ipynb, e.g. llama-8b-draft-model",
        )
        parser.add_argument("--out", type=Path, default=None, help="the executed notebook (default: _build/reproduce/)")
        add_parameter_option(parser, "a notebook parameter, its value read as YAML (e.g. -p concurrency '[1, 16]')")

    @classmethod
    def from_cli_args(cls, namespace: argparse.Namespace) -> Self:
        """The parsed arguments, each ``-p`` value read as YAML (``ConfigError`` where one cannot be read)."""
        return cls(notebook=namespace.notebook, out=namespace.out, parameters=parameters_of(namespace))


def run(args: Args) -> int:
    """Execute the notebook (``book.notebooks.reproduce``) and say where the executed copy is."""
    print(f"executed notebook: {reproduce(args.notebook, args.parameters, args.out)}")
    return 0
