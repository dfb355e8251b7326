"""A point's row rebuilt again in one process: its files are parsed once, and a file that changed is read anew."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import FROZEN
from vllm_playbooks.errors import SchemaError
from vllm_playbooks.results import raw
from vllm_playbooks.results.store import load_run_rows

CASE = "pp-27462"


@pytest.fixture
def point(tmp_path: Path) -> Path:
    """A copy of a recorded point folder of the frozen data, laid out under ``tmp_path`` as a data folder."""
    row = load_run_rows(CASE, FROZEN)[0]
    folder = tmp_path / "runs" / CASE / "raw" / row.point_id
    shutil.copytree(FROZEN / row.raw_path, folder)
    return folder


def test_a_point_rebuilt_again_is_not_parsed_again(
    point: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[Path] = []
    parse = raw._parse_point
    monkeypatch.setattr(raw, "_parse_point", lambda folder, data: parsed.append(folder) or parse(folder, data))
    first = raw.row_from_point(point, tmp_path)
    assert raw.row_from_point(point, tmp_path) == first and parsed == [point]
    copy = shutil.copytree(point, point.with_name(point.name.replace("-r0", "-r1")))  # same bytes, another folder
    assert raw.row_from_point(copy, tmp_path).point_id == first.point_id.replace("-r0", "-r1")
    assert parsed == [point, copy]


def test_a_file_changed_since_the_last_rebuild_gives_its_new_row(point: Path, tmp_path: Path) -> None:
    before = raw.row_from_point(point, tmp_path)
    bench_file = point / raw.BENCH_FILE
    bench = json.loads(bench_file.read_text(encoding="utf-8"))
    bench["completed"] -= 1
    bench_file.write_text(json.dumps(bench), encoding="utf-8")
    assert raw.row_from_point(point, tmp_path).completed == before.completed - 1
    bench_file.write_text("{", encoding="utf-8")
    with pytest.raises(SchemaError, match="damaged"):
        raw.row_from_point(point, tmp_path)


def test_a_file_digest_is_read_again_while_recent_and_kept_once_settled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "bench.json"
    path.write_text('{"value": 1}')
    first = raw._file_digest(path)
    path.write_text('{"value": 2}')  # same size, within the clock's granularity: not taken from the cache
    assert raw._file_digest(path) != first
    monkeypatch.setattr(raw, "_SETTLED_S", 0.0)
    settled = raw._file_digest(path)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("a settled, unchanged file was read again"))
    assert raw._file_digest(path) == settled
