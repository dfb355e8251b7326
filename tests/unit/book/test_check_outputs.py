"""Stored check outputs that survive new data: strict on the data they were stored from, a refresh note on other
data."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from tests.unit.book.conftest import CHECK_SOURCE, add_row
from vllm_playbooks import cli
from vllm_playbooks.book import cache
from vllm_playbooks.book.notebooks import (
    CHECK_DATA_KEY,
    changed_check_outputs,
    check_notebook,
    data_changed_note,
    store_check_outputs,
)
from vllm_playbooks.errors import ConfigError

NOTE = (
    "tiny: data changed since its check outputs were stored ({} check output(s) differ now): refresh with "
    "`vllm-playbooks notebooks refresh tiny`"
)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def _printed(path: Path, cell_id: str) -> str:
    cell = next(c for c in nbformat.read(path, as_version=4).cells if c.get("id") == cell_id)
    return "".join(o.get("text", "") for o in cell.outputs)


def test_refresh_stores_the_check_outputs_and_the_data_digest(
    tiny_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, executed = tiny_repo / "notebooks" / "tiny.ipynb", tiny_repo / "book" / "executed" / "tiny.ipynb"
    status, out = _run(capsys, "notebooks", "refresh", "tiny")
    assert status == 0 and "papermill tiny.ipynb (replay): no executed copy" in out
    assert f"refreshed {source}: 1 check cell(s) print other text than was stored" in out
    assert _printed(source, "check01") == "rows=1\ncases ['a', 'b']\n"
    assert _printed(source, "plain01") == ""  # only check cells keep outputs
    record = cache.read_record(executed)
    assert record is not None
    assert nbformat.read(source, as_version=4).metadata[cache.METADATA_KEY] == {CHECK_DATA_KEY: record.data}
    assert check_notebook(source) == []
    assert changed_check_outputs(source, executed) == [] and data_changed_note(source, executed) is None
    # storing outputs does not make the executed copy stale: refreshing again reuses it
    assert _run(capsys, "notebooks", "refresh", "tiny") == (
        0,
        f"refreshed {source}: 0 check cell(s) print other text than was stored\n",
    )
    assert _run(capsys, "notebooks", "refresh", "nope")[0] == 2


def test_a_changed_output_on_the_same_data_still_fails(tiny_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, executed = tiny_repo / "notebooks" / "tiny.ipynb", tiny_repo / "book" / "executed" / "tiny.ipynb"
    assert _run(capsys, "notebooks", "refresh", "tiny")[0] == 0
    nb = nbformat.read(source, as_version=4)  # a code change: the same data, another printed number
    nb.cells[2].source = CHECK_SOURCE.replace("len(rows) - 1", "len(rows)")
    nbformat.write(nb, source)
    status, out = _run(capsys, "book")
    assert status == 0 and "papermill tiny.ipynb (replay): the notebook changed" in out
    assert changed_check_outputs(source, executed) == [
        "tiny.ipynb: check cell 'check01' (stdout) line 1: recorded 'rows=1', now 'rows=2'"
    ]
    assert data_changed_note(source, executed) is None
    status, out = _run(capsys, "notebooks", "compare", "--executed", "book/executed")
    assert status == 1 and "recorded 'rows=1', now 'rows=2'" in out and "data changed" not in out


def test_new_data_asks_for_a_refresh_instead_of_failing(tiny_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, executed = tiny_repo / "notebooks" / "tiny.ipynb", tiny_repo / "book" / "executed" / "tiny.ipynb"
    assert _run(capsys, "notebooks", "refresh", "tiny")[0] == 0
    add_row(tiny_repo, "a")
    status, out = _run(capsys, "book")
    assert status == 0 and "papermill tiny.ipynb (replay): data changed: runs/a/runs.csv" in out
    assert changed_check_outputs(source, executed) == []
    assert data_changed_note(source, executed) == NOTE.format(1)
    assert _run(capsys, "notebooks", "compare", "--executed", "book/executed") == (0, NOTE.format(1) + "\n")
    status, out = _run(capsys, "notebooks", "refresh", "tiny")  # reuses the current executed copy
    assert status == 0 and "papermill" not in out and "1 check cell(s) print other text" in out
    assert _printed(source, "check01") == "rows=2\ncases ['a', 'b']\n"
    assert data_changed_note(source, executed) is None and changed_check_outputs(source, executed) == []


def _pair(tmp_path: Path, stored: str | None, ran: str | None) -> tuple[Path, Path]:
    """A source whose check cell stored 'rows=1' with data digest ``stored``; a run that printed 'rows=2', read
    ``ran``."""
    paths = []
    for name, text, digest in (("source", "rows=1\n", stored), ("ran", "rows=2\n", ran)):
        cell = nbformat.v4.new_code_cell("print(rows)", id="check01")
        cell.metadata["tags"] = ["nbval-check-output"]
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
        nb = nbformat.v4.new_notebook(cells=[cell])
        if name == "source" and digest:
            nb.metadata[cache.METADATA_KEY] = {CHECK_DATA_KEY: digest}
        if name == "ran" and digest:
            cache.store_record(nb, cache.ExecutionRecord("n", {}, files={"runs/a/runs.csv": digest}))
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
        paths.append(tmp_path / f"{name}.ipynb")
    return paths[0], paths[1]


def test_the_comparison_is_strict_unless_both_digests_say_the_data_differs(tmp_path: Path) -> None:
    failure = ["source.ipynb: check cell 'check01' (stdout) line 1: recorded 'rows=1', now 'rows=2'"]
    same = cache.ExecutionRecord("n", {}, files={"runs/a/runs.csv": "d1"}).data
    for stored, ran in ((None, None), (None, "d1"), (same, None), (same, "d1")):
        source, executed = _pair(tmp_path, stored, ran)
        assert changed_check_outputs(source, executed) == failure, (stored, ran)
        assert data_changed_note(source, executed) is None
    source, executed = _pair(tmp_path, same, "d2")
    assert changed_check_outputs(source, executed) == []
    assert data_changed_note(source, executed) == (
        "source: data changed since its check outputs were stored (1 check output(s) differ now): "
        "refresh with `vllm-playbooks notebooks refresh source`"
    )


def test_storing_needs_an_execution_record(tmp_path: Path) -> None:
    source, executed = _pair(tmp_path, None, None)
    with pytest.raises(ConfigError, match="has no execution record"):
        store_check_outputs(source, executed)
