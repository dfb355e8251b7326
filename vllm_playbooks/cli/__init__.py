"""``vllm-playbooks``: one command line for what the book's users do (also ``python -m vllm_playbooks``).

Each subcommand is registered here as (name, summary, its module under ``vllm_playbooks.cli``). A command's module
holds ``Args``, a frozen dataclass whose ``add_cli_args(parser)`` declares the arguments and whose
``from_cli_args(namespace)`` turns what was parsed into typed values, and ``run(args) -> int``, which calls the
library with those values and prints the command's output. Only the chosen subcommand's module is imported, so
``--help`` stays fast. Bad input ends with one line, ``error: …``, and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from vllm_playbooks.errors import PlaybookError

PROG = "vllm-playbooks"
DESCRIPTION = (
    "The vLLM tuning playbooks: re-run a case on your GPUs, plan its GPU time, check a config, print the "
    "claims ledger, build the book. `vllm-playbooks COMMAND --help` describes each command."
)


@dataclass(frozen=True)
class Command:
    """A subcommand: its name, a one-line summary, and its module's name under ``vllm_playbooks.cli``."""

    name: str
    summary: str
    module: str

    @property
    def module_name(self) -> str:
        """The full name of the command's module, e.g. ``vllm_playbooks.cli.plan``."""
        return f"{__name__}.{self.module}"


#: Every subcommand, in the order ``--help`` lists them (what readers and GPU owners use first).
COMMANDS = (
    Command(
        "reproduce",
        "run one case notebook live on this machine's GPUs and render its page",
        "reproduce",
    ),
    Command(
        "run",
        "measure a case's grid on this machine's GPUs: one server per GPU group, resumable, time-limited",
        "run",
    ),
    Command(
        "plan",
        "the points of a case still to measure and the GPU minutes they take, from the recorded runs",
        "plan",
    ),
    Command(
        "runs",
        "what was measured, per case and hardware: when, rows, points, the GPU minutes its servers held",
        "runs",
    ),
    Command(
        "check-config",
        "check a case's grid (or your own case file) as the runner would, without a GPU",
        "check_config",
    ),
    Command(
        "ledger",
        "the claims ledger: every claim, its sources and our verdict (markdown or CSV)",
        "ledger",
    ),
    Command(
        "book",
        "execute the notebooks (papermill, replay mode) whose executed copy is stale: the book's pages",
        "book",
    ),
    Command(
        "toc",
        "write the book's table of contents with a page per case folder (what the book build reads)",
        "toc",
    ),
    Command(
        "notebooks",
        "for contributors: check the notebook pattern, compare/refresh check outputs, strip outputs",
        "notebooks",
    ),
    Command(
        "site-check",
        "open the built book in headless Chromium: links, figures, search, screenshots",
        "site_check",
    ),
    Command(
        "workshop",
        "for workshop hosts: grade every learner notebook in a folder (passed / not yet / did not run)",
        "workshop",
    ),
    Command(
        "advise",
        "the tuning advisor: the config of most goodput under an SLO, measured within a GPU-time budget",
        "advise",
    ),
    Command(
        "kv-check",
        "fit the memory calibration on every recorded server log; write it and the KV check",
        "kv_check",
    ),
    Command(
        "crosscheck",
        "record our speculative_config validation against vLLM's own parser (needs vLLM)",
        "crosscheck",
    ),
    Command(
        "migrate",
        "move recorded points to their identity (hardware, config id) and rebuild their tables",
        "migrate",
    ),
    Command(
        "import-runs",
        "add the points measured in another data folder to this one, each as a new repeat",
        "import_runs",
    ),
    Command(
        "compress",
        "gzip the plain /metrics scrapes and server logs left in recorded folders",
        "compress",
    ),
    Command(
        "build-tokenizer",
        "for maintainers: rebuild the bundled tokenizer the load generator uses",
        "build_tokenizer",
    ),
    Command(
        "worker",
        "internal: one GPU group's share of `run` (started by `run`, not by hand)",
        "worker",
    ),
)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ``error: …``, with exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        """Print ``error: <message> (see <prog> --help)`` and exit 2."""
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def command_module(command: Command) -> ModuleType:
    """The command's module (imported now): its ``Args`` and ``run``."""
    return importlib.import_module(command.module_name)


def build_parser(chosen: str | None = None) -> OneLineParser:
    """The parser: every subcommand with its summary; the arguments of ``chosen`` only (its module is imported)."""
    parser = OneLineParser(prog=PROG, description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)
    for command in COMMANDS:
        child = sub.add_parser(command.name, help=command.summary, description=command.summary)
        if command.name == chosen:
            command_module(command).Args.add_cli_args(child)
    return parser


def one_line_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """Show a warning as ``warning: <message>`` on standard error, without the source line Python adds."""
    print(f"warning: {message}", file=sys.stderr if file is None else file)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; ``PlaybookError`` becomes ``error: …`` and exit status 2, Ctrl-C exit status 130; a
    warning is one line, ``warning: …``."""
    args = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in args if not a.startswith("-")), None)
    by_name = {command.name: command for command in COMMANDS}
    opts = build_parser(chosen if chosen in by_name else None).parse_args(args)
    try:
        with warnings.catch_warnings():  # the filters stay as they are (-W, PYTHONWARNINGS); only the form changes
            warnings.showwarning = one_line_warning
            module = command_module(by_name[opts.command])
            return int(module.run(module.Args.from_cli_args(opts)))
    except PlaybookError as error:
        print("error: " + " ".join(str(error).splitlines()), file=sys.stderr)  # one line, whatever the message holds
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
