"""``vllm-playbooks``: one command line for what the book's users do (also ``python -m vllm_playbooks``).

Each subcommand is registered here as (name, summary, the module and functions that implement it): the module's
``add_…`` function declares its arguments and its ``…main`` function runs it. Only the chosen subcommand's module
is imported, so ``--help`` stays fast. Bad input ends with one line, ``error: …``, and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vllm_playbooks.errors import PlaybookError

PROG = "vllm-playbooks"
DESCRIPTION = (
    "The vLLM tuning playbooks: re-run a case on your GPUs, plan its GPU time, check a config, print the "
    "claims ledger, build the book. `vllm-playbooks COMMAND --help` describes each command."
)


@dataclass(frozen=True)
class Command:
    """A subcommand: its name, a one-line summary, and ``module:add_arguments`` / ``module:main`` of its code."""

    name: str
    summary: str
    arguments: str
    main: str


#: Every subcommand, in the order ``--help`` lists them (what readers and GPU owners use first).
COMMANDS = (
    Command(
        "reproduce",
        "run one case notebook live on this machine's GPUs and render its page",
        "vllm_playbooks.book.notebooks:add_reproduce_arguments",
        "vllm_playbooks.book.notebooks:reproduce_main",
    ),
    Command(
        "run",
        "measure a case's grid on this machine's GPUs: one server per GPU group, resumable, time-limited",
        "vllm_playbooks.run.parallel:add_run_arguments",
        "vllm_playbooks.run.parallel:run_main",
    ),
    Command(
        "plan",
        "the points of a case still to measure and the GPU minutes they take, from the recorded runs",
        "vllm_playbooks.run.hardware_plan:add_plan_arguments",
        "vllm_playbooks.run.hardware_plan:plan_main",
    ),
    Command(
        "runs",
        "what was measured, per case and hardware: when, rows, points, the GPU minutes its servers held",
        "vllm_playbooks.analysis.runs:add_arguments",
        "vllm_playbooks.analysis.runs:main",
    ),
    Command(
        "check-config",
        "check a case's grid (or your own case file) as the runner would, without a GPU",
        "vllm_playbooks.run.check_config:add_check_arguments",
        "vllm_playbooks.run.check_config:check_main",
    ),
    Command(
        "ledger",
        "the claims ledger: every claim, its sources and our verdict (markdown or CSV)",
        "vllm_playbooks.book.ledger:add_arguments",
        "vllm_playbooks.book.ledger:main",
    ),
    Command(
        "book",
        "execute the notebooks (papermill, replay mode) whose executed copy is stale: the book's pages",
        "vllm_playbooks.book.notebooks:add_book_arguments",
        "vllm_playbooks.book.notebooks:book_main",
    ),
    Command(
        "toc",
        "write the book's table of contents with a page per case folder (what the book build reads)",
        "vllm_playbooks.book.notebooks:add_toc_arguments",
        "vllm_playbooks.book.notebooks:toc_main",
    ),
    Command(
        "notebooks",
        "for contributors: check the notebook pattern, compare/refresh check outputs, strip outputs",
        "vllm_playbooks.book.notebooks:add_notebooks_arguments",
        "vllm_playbooks.book.notebooks:notebooks_main",
    ),
    Command(
        "site-check",
        "open the built book in headless Chromium: links, figures, search, screenshots",
        "vllm_playbooks.book.sitecheck:add_arguments",
        "vllm_playbooks.book.sitecheck:main",
    ),
    Command(
        "workshop",
        "for workshop hosts: grade every learner notebook in a folder (passed / not yet / did not run)",
        "vllm_playbooks.book.grading:add_workshop_arguments",
        "vllm_playbooks.book.grading:workshop_main",
    ),
    Command(
        "advise",
        "the tuning advisor: the config of most goodput under an SLO, measured within a GPU-time budget",
        "vllm_playbooks.advisor.evaluate:add_arguments",
        "vllm_playbooks.advisor.evaluate:main",
    ),
    Command(
        "kv-check",
        "fit the memory calibration on every recorded server log; write it and the KV check",
        "vllm_playbooks.analysis.calculator:add_kv_check_arguments",
        "vllm_playbooks.analysis.calculator:kv_check_main",
    ),
    Command(
        "crosscheck",
        "record our speculative_config validation against vLLM's own parser (needs vLLM)",
        "vllm_playbooks.run.crosscheck:add_arguments",
        "vllm_playbooks.run.crosscheck:main",
    ),
    Command(
        "migrate",
        "move recorded points to their identity (hardware, config id) and rebuild their tables",
        "vllm_playbooks.run.migrate:add_arguments",
        "vllm_playbooks.run.migrate:main",
    ),
    Command(
        "import-runs",
        "add the points measured in another data folder to this one, each as a new repeat",
        "vllm_playbooks.run.importing:add_arguments",
        "vllm_playbooks.run.importing:main",
    ),
    Command(
        "compress",
        "gzip the plain /metrics scrapes and server logs left in recorded folders",
        "vllm_playbooks.results.textfiles:add_arguments",
        "vllm_playbooks.results.textfiles:main",
    ),
    Command(
        "build-tokenizer",
        "for maintainers: rebuild the bundled tokenizer the load generator uses",
        "vllm_playbooks.tokenizer.build:add_arguments",
        "vllm_playbooks.tokenizer.build:main",
    ),
    Command(
        "worker",
        "internal: one GPU group's share of `run` (started by `run`, not by hand)",
        "vllm_playbooks.run.parallel:add_worker_arguments",
        "vllm_playbooks.run.parallel:worker_main",
    ),
)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ``error: …``, with exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        """Print ``error: <message> (see <prog> --help)`` and exit 2."""
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def _function(reference: str):  # type: ignore[no-untyped-def]
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


def build_parser(chosen: str | None = None) -> OneLineParser:
    """The parser: every subcommand with its summary; the arguments of ``chosen`` only (its module is imported)."""
    parser = OneLineParser(prog=PROG, description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)
    for command in COMMANDS:
        child = sub.add_parser(command.name, help=command.summary, description=command.summary)
        if command.name == chosen:
            _function(command.arguments)(child)
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
            return int(_function(by_name[opts.command].main)(opts))
    except PlaybookError as error:
        print("error: " + " ".join(str(error).splitlines()), file=sys.stderr)  # one line, whatever the message holds
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
