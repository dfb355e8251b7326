"""Failure files are written atomically, and one that is empty or junk (a full disk, a hand edit) is left out with a
warning instead of crashing ``plan``, ``ledger`` or ``runs``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from vllm_playbooks.paths import data_dir
from vllm_playbooks.results import raw
from vllm_playbooks.results.failed_starts import failed_starts

CASE = "llama-8b-draft-model"
PID = "nvidia-h100-80gb-hbm3-x1-vllm0.26.0/spec-off-0123456789/in1-out1-c1-r0"


def _case_with_failures(tmp_path: Path) -> Path:
    folder = tmp_path / "runs" / CASE
    raw.record_failure(folder, PID, "ServerError: boom", {"server_log": "/x/a.log"})
    for name, text in (("r1", ""), ("r2", "{not json"), ("r3", "[]"), ("r4", '{"point_id": 4, "error": "e"}')):
        raw.failure_file(folder, PID[:-2] + name).write_text(text)
    return folder


def test_record_failure_leaves_no_temporary_beside_its_file(tmp_path: Path) -> None:
    folder = _case_with_failures(tmp_path)
    assert [p.name for p in raw.failure_file(folder, PID).parent.iterdir() if p.name.startswith(".")] == []
    assert json.loads(raw.failure_file(folder, PID).read_text())["error"] == "ServerError: boom"


def test_damaged_failure_files_are_left_out_with_one_warning_each(tmp_path: Path) -> None:
    folder = _case_with_failures(tmp_path)
    with pytest.warns(UserWarning) as caught:
        records = raw.failure_records(folder)
    assert [r["point_id"] for r in records] == [PID]
    assert len(caught) == 4
    with pytest.warns(UserWarning):
        assert failed_starts(CASE, tmp_path).empty


@pytest.mark.recorded_data
@pytest.mark.parametrize("argv", [["plan", "--case", CASE, "--gpu", "H100"], ["ledger"], ["runs", CASE]])
def test_plan_ledger_and_runs_go_on_past_a_damaged_failure_file(argv: list[str], tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(data_dir(), data)
    for other in (data / "runs").iterdir():  # the other cases' rows only lengthen the commands' reading
        if other.is_dir() and other.name != CASE:
            shutil.rmtree(other)
    folder = raw.finished_points(data / "runs" / CASE)[0].parent
    (folder / f"in1-out1-c1-r0{raw.FAILURE_SUFFIX}").write_text("")
    (folder / f"in1-out1-c2-r0{raw.FAILURE_SUFFIX}").write_text("garbage\x00")
    env = {**os.environ, "VLLM_PLAYBOOKS_DATA_DIR": str(data)}
    done = subprocess.run(
        [sys.executable, "-m", "vllm_playbooks", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
