"""A source folder is checked whole before ``import-runs`` copies anything: a bad point, failure file or link is
refused naming it, and the target data folder stays byte for byte as it was."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.faults.conftest import tree_digest
from vllm_playbooks.errors import PlaybookError
from vllm_playbooks.paths import data_dir
from vllm_playbooks.results import raw
from vllm_playbooks.results.textfiles import stored_path
from vllm_playbooks.run.importing import import_case

CASE = "llama-8b-draft-model"
RECORDED = data_dir() / "runs" / CASE

pytestmark = pytest.mark.recorded_data


def _source(tmp_path: Path, count: int = 3) -> tuple[Path, list[Path]]:
    """A data folder holding copies of ``count`` recorded points of CASE (the first is the one each test damages;
    the good ones sort after it, so a copy made before the check would show)."""
    points = raw.finished_points(RECORDED)[:count]
    source = tmp_path / "source"
    copies = []
    for point in points:
        target = raw.raw_root(source / "runs" / CASE) / point.relative_to(raw.raw_root(RECORDED))
        shutil.copytree(point, target)
        copies.append(target)
    return source, copies


def _edit_json(path: Path, change: Callable[[dict], object]) -> None:
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


def _other_case(point: Path) -> None:
    _edit_json(point / raw.POINT_FILE, lambda r: r.update(case="discussion-13834"))


def _no_bench(point: Path) -> None:
    (point / raw.BENCH_FILE).unlink()


def _truncated_scrape(point: Path) -> None:
    scrape = stored_path(point / raw.METRICS_AFTER)
    assert scrape is not None and scrape.suffix == ".gz"
    scrape.write_bytes(gzip.compress(b"vllm:num_requests_running 1\n" * 50)[:40])


def _junk_bench(point: Path) -> None:
    (point / raw.BENCH_FILE).write_text("[1, 2")


def _link_out(point: Path) -> None:
    (point / "extra.txt").symlink_to("/etc/hostname")


def _bad_label(point: Path) -> None:
    _edit_json(point / raw.POINT_FILE, lambda r: r["engine"].update(label="../../bad label"))


def _point_json_a_list(point: Path) -> None:
    (point / raw.POINT_FILE).write_text("[]")


def _junk_failure(point: Path) -> None:
    (point.parent / f"in1-out1-c1-r0{raw.FAILURE_SUFFIX}").write_text("not json {")


def _empty_failure(point: Path) -> None:
    (point.parent / f"in1-out1-c1-r0{raw.FAILURE_SUFFIX}").write_text("")


def _failure_of_another_point(point: Path) -> None:
    (point.parent / f"in1-out1-c1-r0{raw.FAILURE_SUFFIX}").write_text(json.dumps({"point_id": "x", "error": "e"}))


def _linked_log(point: Path) -> None:
    logs = point.parents[3] / "logs"
    logs.mkdir(exist_ok=True)
    (logs / "server.log").symlink_to("/etc/passwd")


DAMAGES = [
    _other_case,
    _no_bench,
    _truncated_scrape,
    _junk_bench,
    _link_out,
    _bad_label,
    _point_json_a_list,
    _junk_failure,
    _empty_failure,
    _failure_of_another_point,
    _linked_log,
]


@pytest.mark.parametrize("damage", DAMAGES, ids=[d.__name__.strip("_") for d in DAMAGES])
def test_a_bad_source_is_refused_before_anything_is_copied(damage: Callable[[Path], None], tmp_path: Path) -> None:
    source, copies = _source(tmp_path)
    damage(copies[0])
    data = tmp_path / "data"
    (data / "runs").mkdir(parents=True)
    before = tree_digest(data)
    with pytest.raises(PlaybookError):
        import_case(CASE, source, data)
    assert tree_digest(data) == before


def test_the_undamaged_source_imports_every_point(tmp_path: Path) -> None:
    source, copies = _source(tmp_path)
    data = tmp_path / "data"
    (data / "runs").mkdir(parents=True)
    assert len(import_case(CASE, source, data).added) == len(copies)


@pytest.mark.parametrize("damage", [_other_case, _link_out, _bad_label])
def test_the_command_line_refuses_in_one_line_naming_the_point(damage: Callable[[Path], None], tmp_path: Path) -> None:
    source, copies = _source(tmp_path, count=2)
    damage(copies[0])
    data = tmp_path / "data"
    (data / "runs").mkdir(parents=True)
    before = tree_digest(data)
    env = {**os.environ, "VLLM_PLAYBOOKS_DATA_DIR": str(data)}
    done = subprocess.run(
        [sys.executable, "-m", "vllm_playbooks", "import-runs", str(source)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert copies[0].name in lines[0]
    assert tree_digest(data) == before


def test_a_case_name_with_path_segments_is_refused(tmp_path: Path) -> None:
    source, _ = _source(tmp_path, count=1)
    env = {**os.environ, "VLLM_PLAYBOOKS_DATA_DIR": str(tmp_path / "data")}
    (tmp_path / "data" / "runs").mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, "-m", "vllm_playbooks", "import-runs", str(source), "--case", "../x"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1
