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
    changed_code,
    file_digest,
    listing_digest,
    make_record,
    notebook_digest,
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
    reads = read_log(log)
    assert reads.files == {"runs/a/runs.csv", "runs/b/runs.csv", "runs/a/missing.json"}
    assert reads.dirs == {"runs", "runs/a", "runs/b", "raw", "raw/p1"}
    assert {"__init__.py", "book/page_kernel.py", "book/cache.py"} <= reads.code  # imported before the hook
    assert all((cache.PACKAGE / path).is_file() for path in reads.code)


def test_without_a_data_folder_the_kernel_records_only_the_package_files_and_still_imports(tmp_path: Path) -> None:
    log = tmp_path / "reads.log"
    log.touch()
    env = {k: v for k, v in os.environ.items() if k != "VLLM_PLAYBOOKS_DATA_DIR"} | {cache.READ_LOG_ENV: str(log)}
    code = (
        "from vllm_playbooks.book.page_kernel import set_up_page_kernel; set_up_page_kernel(); "
        "open('x.txt', 'w').write('x'); open('x.txt').read()"
    )
    subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, check=True)  # no _config.yml above tmp_path
    reads = read_log(log)
    assert not reads.files and not reads.dirs and "book/page_kernel.py" in reads.code


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


CODE_READER = """
import os, sys
from pathlib import Path
from vllm_playbooks.book.cache import record_reads
sys.path.insert(0, sys.argv[1])
import pkg.early
record_reads(Path(sys.argv[2]), None, Path(sys.argv[1]) / "pkg")
import pkg.late
(Path(sys.argv[1]) / "pkg" / "cases" / "a.yaml").read_text()
os.listdir(Path(sys.argv[1]) / "pkg" / "cases")
"""


def _package(root: Path) -> Path:
    package = root / "pkg"
    (package / "cases").mkdir(parents=True)
    (package / "cases" / "a.yaml").write_text("engines: []\n")
    for name in ("__init__", "early", "late", "unused"):
        (package / f"{name}.py").write_text("X = 1\n")
    return package


def test_a_run_records_the_package_modules_it_imported_opened_and_listed_and_only_those_count(tmp_path: Path) -> None:
    package, log = _package(tmp_path), tmp_path / "reads.log"
    for run in ("compiles the bytecode", "imports from the bytecode"):
        log.unlink(missing_ok=True)
        subprocess.run([sys.executable, "-c", CODE_READER, str(tmp_path), str(log)], check=True)
        reads = read_log(log)
        assert reads.code == {"__init__.py", "early.py", "late.py", "cases/a.yaml"}, run
        assert reads.code_dirs == {"cases"} and not reads.files and not reads.dirs, run
    record = make_record(_notebook(tmp_path), {}, reads, tmp_path, package)
    (package / "cases" / "__pycache__").mkdir()  # written by Python: not an entry that counts
    (package / "unused.py").write_text("X = 2\n")
    assert changed_code(record, package) == []
    (package / "late.py").write_text("X = 2\n")
    (package / "cases" / "b.yaml").write_text("engines: []\n")
    assert changed_code(record, package) == ["cases/", "late.py"]


def _notebook(folder: Path) -> Path:
    path = folder / "n.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), path)
    return path


def _executed_with_record(tiny_repo: Path, reads: Reads) -> tuple[Path, Path]:
    source, executed = tiny_repo / "notebooks" / "tiny.ipynb", tiny_repo / "executed" / "tiny.ipynb"
    executed.parent.mkdir()
    nb = nbformat.read(source, as_version=4)
    store_record(nb, make_record(source, {"mode": "replay"}, reads, tiny_repo / "data", tiny_repo / "pkg"))
    nbformat.write(nb, executed)
    return source, executed


def test_stale_reason_names_what_changed(tiny_repo: Path) -> None:
    package = _package(tiny_repo)
    reads = Reads(files=frozenset({"runs/a/runs.csv"}), dirs=frozenset({"runs"}), code=frozenset({"early.py"}))
    source, executed = _executed_with_record(tiny_repo, reads)
    assert read_record(executed) == make_record(source, {"mode": "replay"}, reads, tiny_repo / "data", package)
    assert stale_reason(source, executed, {"mode": "replay"}, package) is None
    (tiny_repo / "data" / "unread.txt").write_text("changed, but no run read it\n")
    (package / "unused.py").write_text("X = 2\n")
    assert stale_reason(source, executed, {"mode": "replay"}, package) is None
    (package / "early.py").write_text("X = 2\n")
    assert stale_reason(source, executed, {"mode": "replay"}, package) == "the package's source changed: early.py"
    (package / "early.py").write_text("X = 1\n")
    assert stale_reason(source, executed, {"mode": "live"}, package) == "parameters changed (were {'mode': 'replay'})"
    add_row(tiny_repo, "b")  # a case the run did not open
    assert stale_reason(source, executed, {"mode": "replay"}, package) is None
    (tiny_repo / "data" / "runs" / "c").mkdir()  # a new case in the folder the run listed
    assert stale_reason(source, executed, {"mode": "replay"}, package) == "data changed: runs/"
    add_row(tiny_repo, "a")
    assert stale_reason(source, executed, {"mode": "replay"}, package) == "data changed: runs/, runs/a/runs.csv"
    nb = nbformat.read(source, as_version=4)
    nb.cells[2].source += "\nprint('more')"
    nbformat.write(nb, source)
    assert stale_reason(source, executed, {"mode": "replay"}, package) == "the notebook changed"
    old_form = {"execution": {"notebook": "n", "package": "p", "parameters": {}, "files": {}, "dirs": {}}}
    executed.write_text(json.dumps({"cells": [], "metadata": {cache.METADATA_KEY: old_form}}))
    assert stale_reason(source, executed, {"mode": "replay"}, package) == "its executed copy has no execution record"
    executed.write_text(json.dumps({"cells": [], "metadata": {}}))
    assert stale_reason(source, executed, {"mode": "replay"}, package) == "its executed copy has no execution record"
    executed.unlink()
    assert stale_reason(source, executed, {"mode": "replay"}, package) == "no executed copy"


def test_the_data_digest_is_over_the_paths_read_and_their_content() -> None:
    record = ExecutionRecord("n", {}, files={"runs/a/runs.csv": "1"}, dirs={"runs": "2"})
    other = ExecutionRecord("other", {"mode": "live"}, {"m.py": "5"}, files=dict(record.files), dirs=dict(record.dirs))
    assert record.data == other.data
    assert record.data != ExecutionRecord("n", {}, files={"runs/a/runs.csv": "3"}, dirs={"runs": "2"}).data
    assert record.data != ExecutionRecord("n", {}, files=dict(record.files), dirs={"runs": "2", "x": "4"}).data


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
