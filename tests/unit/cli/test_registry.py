"""The command registry names real modules under ``vllm_playbooks.cli``, each with its typed arguments and its run
function; the command line's argument parsing lives there and nowhere else in the package."""

from __future__ import annotations

import argparse
import ast
import dataclasses
from pathlib import Path

import pytest

from tests.unit.test_layers import GRAPH, MODULES, layer, upward_imports
from vllm_playbooks import cli

#: The library modules that import an argument parser, each to run one of vLLM's own command lines in this process,
#: not a command line of ours: ``load.bench`` imports ``argparse`` because vLLM's ``vllm bench serve`` options are
#: added to a parser the caller makes (``vllm.benchmarks.serve.add_cli_args``; ``load.bench.InProcessBench``), and
#: ``run.crosscheck`` imports vLLM's ``vllm.utils.argparse_utils.FlexibleArgumentParser`` to put each case to the
#: parser ``vllm serve`` uses (``run.crosscheck.vllm_verdict``).
VLLM_PARSER_USERS = {"vllm_playbooks.load.bench", "vllm_playbooks.run.crosscheck"}


def test_every_command_has_a_module_of_its_own() -> None:
    modules = [command.module_name for command in cli.COMMANDS]
    assert len(set(modules)) == len(modules) == len(cli.COMMANDS)
    for name in modules:
        assert name in MODULES and name.startswith("vllm_playbooks.cli."), name
        assert layer(name) == layer("vllm_playbooks.cli")


@pytest.mark.parametrize("command", cli.COMMANDS, ids=lambda c: c.name)
def test_each_command_module_has_frozen_typed_arguments_and_a_run_function(command: cli.Command) -> None:
    module = cli.command_module(command)
    args = module.Args
    assert dataclasses.is_dataclass(args) and args.__dataclass_params__.frozen
    assert callable(args.add_cli_args) and callable(args.from_cli_args) and callable(module.run)
    assert not upward_imports({command.module_name: GRAPH[command.module_name]})


def test_each_commands_parsed_arguments_become_its_typed_arguments(tmp_path: Path) -> None:
    """Parsing a command's required arguments gives an ``Args`` of plain values, never the namespace itself."""
    argv = {
        "compress": [str(tmp_path)],
        "site-check": ["x"],
        "workshop": ["grade", "x"],
        "notebooks": ["check"],
        "run": ["--case", "c", "--gpus", "0", "--concurrency", "4"],
        "plan": ["--case", "c", "--budget-s", "60"],
        "crosscheck": ["--out", "x"],
        "worker": ["--case", "c", "--engines", "e", "--overrides", '{"repeats": 2}'],
        "import-runs": ["x"],
        "check-config": ["c", "-p", "concurrency", "[1, 16]"],
        "reproduce": ["--case", "c"],
    }
    for command in cli.COMMANDS:
        module = cli.command_module(command)
        parser = cli.OneLineParser(prog=command.name)
        module.Args.add_cli_args(parser)
        made = module.Args.from_cli_args(parser.parse_args(argv.get(command.name, [])))
        assert isinstance(made, module.Args), command.name
        assert not any(isinstance(v, argparse.Namespace) for v in dataclasses.asdict(made).values())


def test_the_run_commands_arguments_are_plain_values() -> None:
    from vllm_playbooks.cli.run import Args

    parser = cli.OneLineParser(prog="run")
    Args.add_cli_args(parser)
    argv = ["--case", "c", "--gpus", "0", "1", "--concurrency", "4", "16", "--time-limit-s", "90"]
    made = Args.from_cli_args(parser.parse_args(argv))
    assert made == Args(case="c", gpus=("0", "1"), concurrency=(4, 16), time_limit_s=90.0)


def test_argparse_is_imported_only_by_the_command_line() -> None:
    importers = set()
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names):
                importers.add(name)
            elif isinstance(node, ast.ImportFrom) and "argparse" in (node.module or ""):
                importers.add(name)
    outside = {m for m in importers if m != "vllm_playbooks.cli" and not m.startswith("vllm_playbooks.cli.")}
    assert outside == VLLM_PARSER_USERS
