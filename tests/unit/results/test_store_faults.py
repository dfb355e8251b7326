"""A store that survives: concurrent appenders lose nothing, a duplicated row is refused, a damaged raw file is
named, and a point folder is complete or absent."""

from __future__ import annotations

import gzip
import multiprocessing
import shutil
from pathlib import Path

import pytest

from tests.conftest import FROZEN
from vllm_playbooks.errors import SchemaError
from vllm_playbooks.results import raw
from vllm_playbooks.results.store import append_run_row, load_run_rows, runs_file

#: A case of the frozen copy of recorded runs (tests/fixtures/recorded), whose rows and point folders are the material.
CASE = "pp-27462"


def _recorded_row(index: int = 0):  # type: ignore[no-untyped-def]
    return load_run_rows(CASE, FROZEN)[index]


def _append_many(data: str, start: int, count: int) -> None:
    row = _recorded_row()
    for number in range(start, start + count):
        append_run_row(row.model_copy(update={"point_id": f"{row.config_id}/synthetic-{number}-r0"}), Path(data))


def test_concurrent_appenders_lose_no_row(tmp_path: Path) -> None:
    spawn = multiprocessing.get_context("spawn")
    workers = [spawn.Process(target=_append_many, args=(str(tmp_path), start, 40)) for start in (0, 40, 80, 120)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    rows = load_run_rows(CASE, tmp_path)
    assert len(rows) == 160 and len({r.point_id for r in rows}) == 160


def test_a_row_recorded_twice_is_refused_on_load(tmp_path: Path) -> None:
    append_run_row(_recorded_row(), tmp_path)
    table = runs_file(CASE, tmp_path)
    lines = table.read_text(encoding="utf-8").splitlines(keepends=True)
    table.write_text("".join([*lines, lines[-1]]), encoding="utf-8")
    with pytest.raises(SchemaError, match=r"row 2 \(line 3\): point .* is recorded twice"):
        load_run_rows(CASE, tmp_path)
    with pytest.raises(SchemaError, match="is recorded twice"):  # and nothing is appended to a damaged table
        append_run_row(_recorded_row(1), tmp_path)
    assert len(table.read_text(encoding="utf-8").splitlines()) == 3


def test_a_table_whose_last_line_lacks_its_newline_gets_the_next_row_on_a_line_of_its_own(tmp_path: Path) -> None:
    append_run_row(_recorded_row(), tmp_path)
    table = runs_file(CASE, tmp_path)
    good = table.read_text(encoding="utf-8")
    table.write_text(good.removesuffix("\n"), encoding="utf-8")  # an editor or a copy dropped the final newline
    append_run_row(_recorded_row(1), tmp_path)
    text = table.read_text(encoding="utf-8")
    assert text.startswith(good) and text.endswith("\n") and len(text.splitlines()) == 3
    rows = load_run_rows(CASE, tmp_path)
    assert [r.point_id for r in rows] == [_recorded_row().point_id, _recorded_row(1).point_id]
    assert rows[0] == _recorded_row() and rows[1] == _recorded_row(1)


@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("bench.json", lambda p: p.write_text(p.read_text(encoding="utf-8")[:200], encoding="utf-8")),
        ("point.json", lambda p: p.write_text("{}", encoding="utf-8")),
        ("metrics_after.prom.gz", lambda p: p.write_bytes(p.read_bytes()[:100])),
        ("provenance.json", lambda p: p.write_text('{"gpu_name": ""}', encoding="utf-8")),
    ],
)
def test_a_damaged_raw_file_is_named_not_a_bare_error(  # type: ignore[no-untyped-def]
    tmp_path: Path, name: str, damage
) -> None:
    row = _recorded_row()
    source = FROZEN / row.raw_path
    folder = tmp_path / "runs" / CASE / "raw" / row.point_id
    shutil.copytree(source, folder)
    damage(folder / name)
    with pytest.raises(SchemaError, match=str(folder)):
        raw.row_from_point(folder, tmp_path)


def test_a_point_folder_is_written_whole_with_its_files_flushed(tmp_path: Path) -> None:
    files = dict.fromkeys(raw.REQUIRED_FILES, "x")
    target = raw.write_point(tmp_path, "cfg/in8-out8-c1-r0", files)
    assert sorted(p.name for p in target.iterdir()) == sorted(
        f"{n}.gz" if n.endswith(".prom") else n for n in raw.REQUIRED_FILES
    )
    assert gzip.decompress((target / "metrics_before.prom.gz").read_bytes()) == b"x"
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")]  # no staging folder left
