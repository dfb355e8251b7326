"""The ``-p NAME VALUE`` option ``check-config`` and ``reproduce`` share: given once per name, each value read as
YAML (``run.plan.parse_parameter_pairs``)."""

from __future__ import annotations

import argparse
from typing import Any

from vllm_playbooks.run.plan import parse_parameter_pairs


def add_parameter_option(parser: argparse.ArgumentParser, what: str) -> None:
    """Add ``-p NAME VALUE`` (also ``--parameter``), repeatable, to ``parser``; ``what`` (its help) says what a
    parameter is."""
    parser.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"), help=what)


def parameters_of(namespace: argparse.Namespace) -> dict[str, Any]:
    """The ``-p`` pairs parsed into ``namespace`` as a dict, each value read as YAML (``ConfigError`` where one
    cannot be read); empty without any."""
    return parse_parameter_pairs(namespace.parameter)
