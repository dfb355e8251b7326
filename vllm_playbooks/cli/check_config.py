"""``vllm-playbooks check-config``: build a case's plan as the live runner would and say whether it passes."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, Self

from vllm_playbooks.cli.parameters import add_parameter_option, parameters_of
from vllm_playbooks.run.plan import OVERRIDE_KEYS, overrides_for, quiet_plan


@dataclass(frozen=True)
class Args:
    """The case (a packaged name or a case file), one part of its grid, and the overrides read from ``-p``."""

    case: str
    part: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """The case (a packaged name or your own case file) and ``-p NAME VALUE`` overrides."""
        parser.add_argument(
            "case", help="a packaged case's name (e.g. llama-8b-draft-model) or the path of a case file"
        )
        parser.add_argument("--part", default=None, help="one part of the case's grid (its 'parts:')")
        add_parameter_option(parser, f"an override, its value read as YAML; one of: {', '.join(OVERRIDE_KEYS)}")

    @classmethod
    def from_cli_args(cls, namespace: argparse.Namespace) -> Self:
        """The parsed arguments, each ``-p`` value read as YAML (``ConfigError`` where one cannot be read)."""
        return cls(case=namespace.case, part=namespace.part, parameters=parameters_of(namespace))


def run(args: Args) -> int:
    """Build the plan as the live runner would (every config, load and KV budget checked), print what it holds and
    the advisories; a config the runner would refuse raises ``ConfigError`` (exit 2, one line)."""
    overrides = overrides_for(args.case, args.part, **args.parameters)
    plan, advisories = quiet_plan(args.case, **overrides)
    for advisory in advisories:
        print(f"advisory: {advisory}")
    print(
        f"{plan.case}: {len(plan.engines)} engine config(s), {len(plan.points())} point(s) to measure; "
        "every config and load passes the checks the runner makes before a server starts"
    )
    return 0
