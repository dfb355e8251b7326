"""Importing the points measured in another data folder: each becomes a repeat here, nothing is overwritten."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from vllm_playbooks import cli
from vllm_playbooks.errors import SchemaError
from vllm_playbooks.paths import data_dir
from vllm_playbooks.results import raw
from vllm_playbooks.results.replay import replay_rows
from vllm_playbooks.results.store import TRACE_FOLDER
from vllm_playbooks.run.importing import import_case

CASE = "llama-8b-draft-model"
RECORDED = data_dir() / "runs" / CASE


def _point_folders(case_root: Path) -> dict[str, Path]:
    return {p.relative_to(raw.raw_root(case_root)).as_posix(): p for p in raw.finished_points(case_root)}


def _data_with(points: list[Path], root: Path, logs: bool = True) -> Path:
    """A data folder holding copies of ``points`` (recorded folders, at their own ids) and, with ``logs``, the case's
    server logs."""
    case_root = root / "runs" / CASE
    for point in points:
        shutil.copytree(point, raw.raw_root(case_root) / point.relative_to(raw.raw_root(RECORDED)))
    if logs:
        shutil.copytree(RECORDED / "logs", case_root / "logs")
    return root


def _first_repeats() -> tuple[Path, Path]:
    """Two recorded repeats of one spec-off point: r0 and r1."""
    folders = _point_folders(RECORDED)
    r0 = next(pid for pid in sorted(folders) if "/spec-off-" in pid and pid.endswith("-c16-r0"))
    return folders[r0], folders[r0[:-1] + "1"]


@pytest.mark.recorded_data
def test_a_new_measurement_at_a_taken_repeat_number_gets_the_next_free_one(tmp_path: Path) -> None:
    r0, r1 = _first_repeats()
    data = _data_with([r0], tmp_path / "data")
    # the other machine measured the same point afresh and called it r0 too
    other = tmp_path / "other"
    target = raw.raw_root(other / "runs" / CASE) / r0.relative_to(raw.raw_root(RECORDED))
    shutil.copytree(r1, target)
    done = import_case(CASE, other, data)
    new_id = r0.relative_to(raw.raw_root(RECORDED)).as_posix()[:-1] + "1"
    assert done.added == [new_id] and done.renumbered == [new_id] and done.already_here == []
    rows = {row.point_id: row for row in replay_rows(CASE, data)}  # the table agrees with the raw folders
    assert set(rows) == {new_id[:-1] + "0", new_id} and rows[new_id].repeat == 1
    assert (raw.raw_root(data / "runs" / CASE) / new_id / raw.POINT_FILE).read_bytes() == (
        r1 / raw.POINT_FILE
    ).read_bytes()  # the files come as they are
    assert import_case(CASE, other, data).already_here == [r0.relative_to(raw.raw_root(RECORDED)).as_posix()]


@pytest.mark.recorded_data
def test_points_and_logs_go_into_an_empty_folder_at_their_own_ids(tmp_path: Path) -> None:
    r0, r1 = _first_repeats()
    source = _data_with([r0, r1], tmp_path / "source")
    data = tmp_path / "data"
    done = import_case(CASE, source, data)
    assert sorted(done.added) == sorted(_point_folders(source / "runs" / CASE)) and done.renumbered == []
    assert done.logs == len(list((RECORDED / "logs").iterdir()))
    assert len(replay_rows(CASE, data)) == 2


@pytest.mark.recorded_data
def test_a_live_search_trace_comes_along_naming_where_its_runs_lie_here(tmp_path: Path) -> None:
    r0, r1 = _first_repeats()
    r0_id, r1_id = (p.relative_to(raw.raw_root(RECORDED)).as_posix() for p in (r0, r1))
    data = _data_with([r0], tmp_path / "data")
    # the other machine's search measured the point afresh as its r0, and counted the recorded r1 as measured
    other = tmp_path / "other"
    shutil.copytree(r1, raw.raw_root(other / "runs" / CASE) / r0_id)
    shutil.copytree(r0, raw.raw_root(other / "runs" / CASE) / r1_id)
    records = [
        {"record": "search", "case": CASE},
        {"record": "payment", "number": 1, "point_id": r0_id, "tpot_p99_ms": 7.25},
        {"record": "payment", "number": 2, "point_id": r1_id, "tpot_p99_ms": 6.5},
        {"record": "advice", "steps": [{"number": 1, "point_id": r0_id}, {"number": 2, "point_id": r1_id}]},
    ]
    trace = other / "runs" / CASE / TRACE_FOLDER / "2026-12-06T075605+0000.jsonl"
    trace.parent.mkdir(parents=True)
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    done = import_case(CASE, other, data)
    assert done.added == [r1_id] and done.renumbered == [r1_id] and done.already_here == [r1_id] and done.traces == 1
    copied = [json.loads(line) for line in (data / "runs" / CASE / TRACE_FOLDER / trace.name).read_text().splitlines()]
    # its fresh run is this folder's r1 now, and its recorded run the r0 it was all along
    assert [r.get("point_id") for r in copied] == [None, r1_id, r0_id, None]
    assert [s["point_id"] for s in copied[3]["steps"]] == [r1_id, r0_id]
    assert copied[1]["tpot_p99_ms"] == 7.25 and copied[0] == records[0]
    assert import_case(CASE, other, data).traces == 0  # nothing twice


@pytest.mark.recorded_data
def test_the_failures_of_a_run_whose_server_did_not_start_are_imported_with_its_log(tmp_path: Path) -> None:
    r0, _ = _first_repeats()
    source = tmp_path / "source"
    case_root = source / "runs" / CASE
    pid = f"{r0.relative_to(raw.raw_root(RECORDED)).parent.as_posix()}/in1-out1-c1-r0"
    raw.record_failure(case_root, pid, "ServerError: exited before it was healthy", {"server_log": "/m/s.log"})
    (case_root / "logs").mkdir(parents=True)
    (case_root / "logs" / "s.log").write_text("ValueError: no memory\n")
    data = tmp_path / "data"
    done = import_case(CASE, source, data)
    assert done.added == [] and done.failures == 1 and done.logs == 1
    assert raw.failure_records(data / "runs" / CASE)[0]["point_id"] == pid
    assert import_case(CASE, source, data).failures == 0  # nothing twice


@pytest.mark.recorded_data
def test_a_misplaced_point_is_refused_before_anything_is_copied(tmp_path: Path) -> None:
    r0, _ = _first_repeats()
    source = tmp_path / "source" / "runs" / CASE / "raw" / "nvidia-a100-x1-vllm0.26.0" / r0.parent.name / r0.name
    shutil.copytree(r0, source)
    data = tmp_path / "data"
    with pytest.raises(SchemaError, match="migrate"):
        import_case(CASE, tmp_path / "source", data)
    assert not data.exists()


def test_the_command_refuses_a_folder_that_is_not_a_data_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_PLAYBOOKS_DATA_DIR", str(tmp_path / "data"))
    assert cli.main(["import-runs", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {tmp_path} is not a data folder: it has no runs/ folder"
    ]
    (tmp_path / "runs").mkdir()
    assert cli.main(["import-runs", str(tmp_path), "--case", CASE]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path} has no runs of {CASE}")
