"""The notebook pattern every case follows, and the papermill wrapper's refusals."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from tests.conftest import ROOT
from vllm_playbooks import cli
from vllm_playbooks.book.notebooks import (
    changed_check_outputs,
    check_notebook,
    default_parameters,
    execute,
    list_notebooks,
    require_mode,
)
from vllm_playbooks.cli import notebooks as notebooks_command
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.run.plan import parse_parameter_pairs

NOTEBOOKS = list_notebooks(ROOT)


def test_there_are_case_notebooks() -> None:
    assert {p.stem for p in NOTEBOOKS} >= {"discussion-13834", "llama-8b-draft-model"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_follows_the_pattern(path: Path) -> None:
    assert check_notebook(path) == []
    assert default_parameters(path)["mode"] == "replay"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_notebook_has_a_regression_check(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    checks = [c for c in nb.cells if "nbval-check-output" in c.metadata.get("tags", [])]
    assert checks and all(c.outputs for c in checks)


def _broken_copy(tmp_path: Path, change) -> Path:  # type: ignore[no-untyped-def]
    target = tmp_path / "copy.ipynb"
    shutil.copy(NOTEBOOKS[0], target)
    nb = nbformat.read(target, as_version=4)
    change(nb)
    nbformat.write(nb, target)
    return target


def test_pattern_check_catches_live_default(tmp_path: Path) -> None:
    def live(nb) -> None:  # type: ignore[no-untyped-def]
        cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
        cell.source = cell.source.replace('mode = "replay"', 'mode = "live"')

    assert any("mode" in p for p in check_notebook(_broken_copy(tmp_path, live)))


def test_pattern_check_catches_logic_and_stray_outputs(tmp_path: Path) -> None:
    def logic(nb) -> None:  # type: ignore[no-untyped-def]
        nb.cells.append(nbformat.v4.new_code_cell("def helper():\n    return 1"))
        cell = nbformat.v4.new_code_cell("1 + 1")
        cell.outputs = [nbformat.v4.new_output("stream", text="2\n")]
        nb.cells.append(cell)

    problems = check_notebook(_broken_copy(tmp_path, logic))
    assert any("defines a function" in p for p in problems)
    assert any("keeps outputs" in p for p in problems)


def test_pattern_check_names_a_cell_that_is_not_python(tmp_path: Path) -> None:
    def broken(nb) -> None:  # type: ignore[no-untyped-def]
        nb.cells.append(nbformat.v4.new_code_cell('x = f"{d["k"]}"'))

    problems = check_notebook(_broken_copy(tmp_path, broken))
    assert any("is not valid Python" in p for p in problems)


def test_pattern_check_refuses_a_check_cell_that_keeps_more_than_printed_text(tmp_path: Path) -> None:
    def rich(nb) -> None:  # type: ignore[no-untyped-def]
        cell = nbformat.v4.new_code_cell("gains.round(1)")
        cell.metadata["tags"] = ["nbval-check-output"]
        cell.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "41.4"}, execution_count=1)]
        nb.cells.append(cell)

    problems = check_notebook(_broken_copy(tmp_path, rich))
    assert any("keeps more than printed text" in p for p in problems)


def test_pattern_check_catches_a_missing_parameters_cell(tmp_path: Path) -> None:
    def untag(nb) -> None:  # type: ignore[no-untyped-def]
        for cell in nb.cells:
            cell.metadata["tags"] = []

    assert any("parameters" in p for p in check_notebook(_broken_copy(tmp_path, untag)))


def test_unknown_papermill_parameter_is_refused_before_running(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown parameter\(s\) \['concurrencies'\]"):
        execute(NOTEBOOKS[0], tmp_path / "out.ipynb", {"concurrencies": [1]})
    assert not (tmp_path / "out.ipynb").exists()


def test_parameter_values_are_read_as_yaml() -> None:
    assert parse_parameter_pairs([["concurrency", "[1, 4]"], ["model", "/m"], ["k", "3"], ["x", "null"]]) == {
        "concurrency": [1, 4],
        "model": "/m",
        "k": 3,
        "x": None,
    }


def test_reproduce_of_an_unknown_notebook_says_which_exist(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["reproduce", "--case", "nope"]) == 2
    assert (
        "known: advisor, batching_calculator, claims_ledger, config_crosscheck, deepseek-mtp, discussion-13834"
        in capsys.readouterr().err
    )


def test_a_bad_mode_is_refused() -> None:
    from vllm_playbooks.cases.results import results_for

    with pytest.raises(ConfigError, match="mode must be 'replay' or 'live'"):
        results_for("llama-8b-draft-model", "Live")


def test_a_replay_only_page_refuses_live_mode() -> None:
    require_mode("replay", live=False)
    with pytest.raises(ConfigError, match=r"mode must be one of \('replay',\) on this page, got 'live'"):
        require_mode("live", live=False)
    nb = nbformat.read(ROOT / "notebooks" / "config_crosscheck.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "require_mode(mode, live=False)" in code[1].source  # recorded with vLLM 0.26: nothing to run live


def _checked_pair(tmp_path: Path, recorded: list[str], printed: list[str]) -> tuple[Path, Path]:
    """A source notebook whose check cell recorded ``recorded`` (stream chunks) and a run that printed ``printed``."""
    paths = []
    for name, chunks in (("source", recorded), ("ran", printed)):
        cell = nbformat.v4.new_code_cell("print(2 + 2)", id="check01")
        cell.metadata["tags"] = ["nbval-check-output"]
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=chunk) for chunk in chunks]
        other = nbformat.v4.new_code_cell("x = 1", id="plain01")
        other.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ignored " + name)]
        path = tmp_path / f"{name}.ipynb"
        nbformat.write(nbformat.v4.new_notebook(cells=[cell, other]), path)
        paths.append(path)
    return paths[0], paths[1]


def test_check_outputs_match_when_the_run_prints_the_same_text_in_other_chunks(tmp_path: Path) -> None:
    source, ran = _checked_pair(tmp_path, ["gain +41.4 %\nbest k 2\n"], ["gain +41.4 %\n", "best k 2\n"])
    assert changed_check_outputs(source, ran) == []


def test_a_changed_check_output_names_the_cell_and_the_first_line_that_differs(tmp_path: Path) -> None:
    source, ran = _checked_pair(tmp_path, ["gain +41.4 %\nbest k 2\n"], ["gain +41.4 %\nbest k 3\n"])
    assert changed_check_outputs(source, ran) == [
        "source.ipynb: check cell 'check01' (stdout) line 2: recorded 'best k 2', now 'best k 3'"
    ]
    source, ran = _checked_pair(tmp_path, ["a\n"], ["a\nb\n"])
    assert changed_check_outputs(source, ran) == [
        "source.ipynb: check cell 'check01' (stdout) line 2: recorded '<nothing>', now 'b'"
    ]


def test_a_check_cell_missing_from_the_run_is_reported(tmp_path: Path) -> None:
    source, ran = _checked_pair(tmp_path, ["a\n"], ["a\n"])
    nb = nbformat.read(ran, as_version=4)
    nb.cells = nb.cells[1:]
    nbformat.write(nb, ran)
    assert changed_check_outputs(source, ran) == [f"source.ipynb: check cell 'check01' is missing from {ran}"]


def test_compare_refuses_a_folder_without_the_executed_notebooks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["notebooks", "compare", "--executed", str(tmp_path)]) == 2
    assert "run `vllm-playbooks book --out" in capsys.readouterr().err


def test_compare_lists_the_stale_check_cells_and_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:

    source, ran = _checked_pair(tmp_path, ["best k 2\n"], ["best k 2\n"])
    executed = tmp_path / "executed"
    executed.mkdir()
    ran.rename(executed / source.name)
    monkeypatch.setattr(notebooks_command, "list_notebooks", lambda: [source])
    assert cli.main(["notebooks", "compare", "--executed", str(executed)]) == 0
    _, stale = _checked_pair(tmp_path, ["best k 2\n"], ["best k 3\n"])
    stale.rename(executed / source.name)
    assert cli.main(["notebooks", "compare", "--executed", str(executed)]) == 1
    assert "line 1: recorded 'best k 2', now 'best k 3'" in capsys.readouterr().err
