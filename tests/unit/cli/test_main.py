"""The one command line: every subcommand listed, each one's module answers, bad input is one line with exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT
from vllm_playbooks import cli


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert stopped.value.code == 0
    for command in cli.COMMANDS:
        assert command.name in out


@pytest.mark.parametrize("command", cli.COMMANDS, ids=lambda c: c.name)
def test_each_subcommand_declares_its_arguments(command: cli.Command, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main([command.name, "--help"])
    assert stopped.value.code == 0 and command.summary in capsys.readouterr().out.replace("\n", " ").replace("  ", " ")


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["frob"], "error: argument COMMAND: invalid choice: 'frob'"),
        (["check-config", "nope"], "error: Unknown case 'nope'"),
        (
            ["check-config", "llama-8b-draft-model", "-p", "concurrency", "[1, "],
            "error: parameter concurrency: cannot read",
        ),
        (
            ["check-config", "llama-8b-draft-model", "-p", "engines", "[spec-of]"],
            "error: case llama-8b-draft-model: no engine",
        ),
        (["run", "--case", "llama-8b-draft-model"], "error: one of the arguments --gpus --ray is required"),
        (["plan", "--case", "llama-8b-draft-model", "--hardware", "NVIDIA H200"], "error: --hardware is now --gpu"),
        (["reproduce", "--case", "nope"], "error: no notebook 'nope'"),
        (["advise"], "error: give --case (with an SLO), --evaluate or --sensitivity"),
        (["advise", "--case", "llama-8b-draft-model"], "error: an SLO needs a TPOT p99 bound"),
        (
            ["advise", "--case", "llama-8b-draft-model", "--slo-tpot-p99-ms", "-3"],
            "error: the SLO's TPOT p99 bound must be",
        ),
        (["advise", "--case", "nope", "--slo-tpot-p99-ms", "8"], "error: unknown case 'nope'"),
        (
            ["advise", "--case", "llama-8b-draft-model", "--slo-tpot-p99-ms", "8", "--budget-gpu-min", "0"],
            "error: --budget-gpu-min must be positive",
        ),
        (
            ["advise", "--case", "llama-8b-draft-model", "--slo-tpot-p99-ms", "8", "--mode", "live"],
            "error: a live search needs --budget-gpu-min",
        ),
    ],
)
def test_bad_input_is_one_line_with_exit_status_2(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        status = cli.main(argv)
    except SystemExit as stopped:
        status = stopped.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert status == 2 and err.startswith(error) and err.count("\n") == 1, err


def test_check_config_prints_what_the_plan_holds(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check-config", "llama-8b-draft-model", "-p", "concurrency", "[1, 16]"]) == 0
    out = capsys.readouterr().out
    assert "llama-8b-draft-model: 3 engine config(s), 6 point(s) to measure" in out and "advisory: " in out


def test_python_dash_m_is_the_same_command_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "vllm_playbooks", "check-config", "nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and done.stderr.startswith("error: Unknown case 'nope'")


@pytest.mark.recorded_data
def test_a_warning_is_one_line_once(capsys: pytest.CaptureFixture[str]) -> None:
    """The draft config's advisories come as ``warning: …``, each once, without Python's file and source line."""
    assert cli.main(["plan", "--case", "llama-8b-draft-model", "--part", "quick", "--fresh"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err and all(line.startswith("warning: ") for line in err), err
    assert len(err) == len(set(err)) and any("async scheduling off" in line for line in err)
