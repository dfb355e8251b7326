"""``vllm-playbooks worker``, internal: one GPU group's share of ``run`` (started by ``run``, not by hand)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from dataclasses import dataclass, field
from typing import Any, Self

from vllm_playbooks.cli.run import INTERRUPTED
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.run.parallel import run_worker


@dataclass(frozen=True)
class Args:
    """A worker's share: the case, its engine labels, the plan overrides."""

    case: str
    engines: tuple[str, ...]
    overrides: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """A worker's share: the case, its engine labels, the plan overrides as JSON."""
        parser.add_argument("--case", required=True)
        parser.add_argument("--engines", nargs="+", required=True)
        parser.add_argument("--overrides", default="{}")

    @classmethod
    def from_cli_args(cls, namespace: argparse.Namespace) -> Self:
        """The parsed arguments, ``--overrides`` read as a JSON object (``ConfigError`` otherwise)."""
        try:
            overrides = json.loads(namespace.overrides)
        except json.JSONDecodeError as error:
            raise ConfigError(f"--overrides is not JSON: {error}") from None
        if not isinstance(overrides, dict):
            raise ConfigError(f"--overrides must be a JSON object, got {namespace.overrides!r}")
        return cls(case=namespace.case, engines=tuple(namespace.engines), overrides=overrides)


def run(args: Args) -> int:
    """Run one worker's engine configs (exit 130 when interrupted, its finished points kept)."""
    # A shell without job control starts background commands with SIGINT ignored, and Python then never turns
    # it into KeyboardInterrupt: the parent's time limit would not stop this worker. Take it back.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        run_worker(args.case, args.engines, args.overrides)
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130
    return 0
