"""The execution cache: the kernel's read log, the digests, and `vllm-playbooks book` reusing what did not change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tests.unit.book.conftest import add_row
from vllm_playbooks import cli
from vllm_playbooks.book import cache
from vllm_playbooks.book.cache import (
    ABSENT,
    ExecutionRecord,
    Reads,
    file_digest,
    listing_digest,
    make_record,
    notebook_digest,
    package_digest,
    read_log,
    read_record,
    stale_reason,
    store_record,
)

READER = """
import glob, os
from pathlib import Path
from vllm_playbooks.book.page_kernel import set_up_page_kernel
set_up_page_kernel()
data = Path(os.environ["VLLM_PLAYBOOKS_DATA_DIR"])
(data / "runs" / "a" / "runs.csv").read_text()
os.chdir(data / "runs")
open("b/runs.csv").close()                     # relative to the working directory
list((data / "runs").iterdir())                # os.listdir
glob.glob(str(data / "runs" / "*" / "*.csv"))  # os.scandir
list(os.walk(data / "raw"))
try:
    open(data / "runs" / "a" / "missing.json")
except FileNotFoundError:
    pass
(data.parent / "outside.txt").write_text("x")
"""


def test_the_kernel_records_the_data_it_opens_and_lists_and_nothing_else(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for case in ("a", "b"):
        (data / "runs" / case).mkdir(parents=True)
        (data / "runs" / case / "runs.csv").write_text("point\n")
    (data / "raw" / "p1").mkdir(parents=True)
    log = tmp_path / "reads.log"
    env = {**os.environ, "VLLM_PLAYBOOKS_DATA_DIR": str(data), cache.READ_LOG_ENV: str(log)}
    subprocess.run([sys.executable, "-c", READER], env=env, check=True)
    assert read_log(log) == Reads(
        files=frozenset({"runs/a/runs.csv", "runs/b/runs.csv", "runs/a/missing.json"}),
        dirs=frozenset({"runs", "runs/a", "runs/b", "raw", "raw/p1"}),
    )


def test_without_a_data_folder_the_kernel_records_nothing_and_still_imports(tmp_path: Path) -> None:
    log = tmp_path / "reads.log"
    log.touch()
    env = {k: v for k, v in os.environ.items() if k != "VLLM_PLAYBOOKS_DATA_DIR"} | {cache.READ_LOG_ENV: str(log)}
    code = (
        "from vllm_playbooks.book.page_kernel import set_up_page_kernel; set_up_page_kernel(); "
        "open('x.txt', 'w').write('x'); open('x.txt').read()"
    )
    subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, check=True)  # no _config.yml above tmp_path
    assert log.read_text() == ""


def test_reads_logged_names_a_fresh_log_for_the_block_only() -> None:
    with cache.reads_logged() as log:
        assert os.environ[cache.READ_LOG_ENV] == str(log) and log.read_text() == ""
    assert cache.READ_LOG_ENV not in os.environ and not log.exists()


def test_a_listing_digest_changes_with_the_entries_not_with_their_content(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("1\n")
    before = listing_digest(tmp_path)
    (tmp_path / "a.csv").write_text("2\n")
    assert listing_digest(tmp_path) == before
    (tmp_path / "logs").mkdir()
    assert listing_digest(tmp_path) != before
    assert listing_digest(tmp_path / "nope") == ABSENT == file_digest(tmp_path / "nope.csv")
    assert file_digest(tmp_path / "a.csv") != file_digest(tmp_path / "logs")


def test_the_notebook_digest_leaves_out_stored_outputs_and_their_data_digest(tmp_path: Path) -> None:
    path = tmp_path / "n.ipynb"
    cell = nbformat.v4.new_code_cell("print(1)", id="c1")
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), path)
    before = notebook_digest(path)
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", text="1\n")]
    nb.cells[0].execution_count = 3
    nb.metadata[cache.METADATA_KEY] = {"check_outputs_data": "abc"}
    nbformat.write(nb, path)
    assert notebook_digest(path) == before
    nb.cells[0].source = "print(2)"
    nbformat.write(nb, path)
    assert notebook_digest(path) != before


def test_the_package_digest_covers_every_file_but_bytecode(tmp_path: Path) -> None:
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "a.yaml").write_text("engines: []\n")
    (tmp_path / "mod.py").write_text("X = 1\n")
    before = package_digest(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0")
    assert package_digest(tmp_path) == before
    (tmp_path / "cases" / "a.yaml").write_text("engines: [spec-off]\n")
    assert package_digest(tmp_path) != before
    assert package_digest() == package_digest(Path(cache.__file__).parents[1])


def _executed_with_record(tiny_repo: Path, reads: Reads) -> tuple[Path, Path]:
    source, executed = tiny_repo / "notebooks" / "tiny.ipynb", tiny_repo / "executed" / "tiny.ipynb"
    executed.parent.mkdir()
    nb = nbformat.read(source, as_version=4)
    store_record(nb, make_record(source, {"mode": "replay"}, reads, tiny_repo / "data", "pkg"))
    nbformat.write(nb, executed)
    return source, executed


def test_stale_reason_names_what_changed(tiny_repo: Path) -> None:
    reads = Reads(files=frozenset({"runs/a/runs.csv"}), dirs=frozenset({"runs"}))
    source, executed = _executed_with_record(tiny_repo, reads)
    assert read_record(executed) == make_record(source, {"mode": "replay"}, reads, tiny_repo / "data", "pkg")
    assert stale_reason(source, executed, {"mode": "replay"}, "pkg") is None
    (tiny_repo / "data" / "unread.txt").write_text("changed, but no run read it\n")
    assert stale_reason(source, executed, {"mode": "replay"}, "pkg") is None
    assert stale_reason(source, executed, {"mode": "replay"}, "other") == "the package's source changed"
    assert stale_reason(source, executed, {"mode": "live"}, "pkg") == "parameters changed (were {'mode': 'replay'})"
    add_row(tiny_repo, "b")  # a case the run did not open
    assert stale_reason(source, executed, {"mode": "replay"}, "pkg") is None
    (tiny_repo / "data" / "runs" / "c").mkdir()  # a new case in the folder the run listed
    assert stale_reason(source, executed, {"mode": "replay"}, "pkg") == "data changed: runs/"
    add_row(tiny_repo, "a")
    assert stale_reason(source, executed, {"mode": "replay"}, "pkg") == "data changed: runs/, runs/a/runs.csv"
    nb = nbformat.read(source, as_version=4)
    nb.cells[2].source += "\nprint('more')"
    nbformat.write(nb, source)
    assert stale_reason(source, executed, {"mode": "replay"}, "pkg") == "the notebook changed"
    executed.write_text(json.dumps({"cells": [], "metadata": {}}))
    assert stale_reason(source, executed, {"mode": "replay"}, "pkg") == "its executed copy has no execution record"
    executed.unlink()
    assert stale_reason(source, executed, {"mode": "replay"}, "pkg") == "no executed copy"


def test_the_data_digest_is_over_the_paths_read_and_their_content() -> None:
    record = ExecutionRecord("n", "p", {}, files={"runs/a/runs.csv": "1"}, dirs={"runs": "2"})
    assert record.data == ExecutionRecord("other", "q", {"mode": "live"}, dict(record.files), dict(record.dirs)).data
    assert record.data != ExecutionRecord("n", "p", {}, files={"runs/a/runs.csv": "3"}, dirs={"runs": "2"}).data
    assert record.data != ExecutionRecord("n", "p", {}, files=dict(record.files), dirs={"runs": "2", "x": "4"}).data


def _book(capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    assert cli.main(["book", "--out", "executed", *flags]) == 0
    return capsys.readouterr().out


def test_book_executes_only_what_changed(tiny_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "papermill tiny.ipynb (replay): no executed copy" in _book(capsys)
    record = read_record(tiny_repo / "executed" / "tiny.ipynb")
    assert record is not None and set(record.files) == {"runs/a/runs.csv"} and set(record.dirs) == {"runs"}
    mtime = (tiny_repo / "executed" / "tiny.ipynb").stat().st_mtime_ns
    assert _book(capsys).splitlines() == [
        "reused tiny.ipynb: nothing it depends on changed",
        "book: 0 executed, 1 reused",
    ]
    assert (tiny_repo / "executed" / "tiny.ipynb").stat().st_mtime_ns == mtime  # untouched: Sphinx skips the page
    add_row(tiny_repo, "b")
    assert "reused tiny.ipynb" in _book(capsys)
    add_row(tiny_repo, "a")
    assert "papermill tiny.ipynb (replay): data changed: runs/a/runs.csv" in _book(capsys)
    assert "papermill tiny.ipynb (replay): --force" in _book(capsys, "--force")
    (tiny_repo / "executed" / "gone.ipynb").write_text("{}")
    assert "removed executed/gone.ipynb: no notebooks/gone.ipynb" in _book(capsys)
    assert not (tiny_repo / "executed" / "gone.ipynb").exists()
