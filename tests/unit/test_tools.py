"""tools/run-detached.sh and tools/wait-for-run.sh on a small tree: the command runs detached, its exit status and
log land in the run's folder, and the wait packs what the case recorded. No GPU: a shell command stands in for
``vllm-playbooks run``."""

from __future__ import annotations

import os
import signal
import subprocess
import tarfile
from pathlib import Path

from tests.conftest import ROOT

DETACHED, WAIT = str(ROOT / "tools" / "run-detached.sh"), str(ROOT / "tools" / "wait-for-run.sh")
#: Writes a row where the runner records and a worker log where `vllm-playbooks run` puts its workers ($TMPDIR).
JOB = (
    'echo r1 >> data/runs/demo/runs.csv && mkdir -p "$TMPDIR/demo-parallel-x" && '
    'echo "point done" > "$TMPDIR/demo-parallel-x/gpus0.log" && echo "argument: $0" && exit 5'
)


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    (tree / "data" / "runs" / "demo").mkdir(parents=True)
    (tree / "data" / "runs" / "demo" / "runs.csv").write_text("header\n")
    return tree


def _run(argv: list[str], tree: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", *argv], cwd=tree, env={**os.environ, **env}, capture_output=True, text=True, timeout=60, check=False
    )


def _names(archive: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        return set(tar.getnames())


def test_the_run_goes_on_detached_and_the_wait_packs_what_it_recorded(tmp_path: Path) -> None:
    tree, folder = _tree(tmp_path), tmp_path / "run"
    started = _run([DETACHED, str(folder), "bash", "-c", JOB, "two words"], tree)
    assert started.returncode == 0 and "started at" in started.stdout
    waited = _run([WAIT, str(folder), "30", "demo"], tree)
    assert waited.returncode == 0, waited.stderr
    assert "run finished, exit 5" in waited.stdout  # the command's own exit status
    assert "argument: two words" in waited.stdout and "point done" in waited.stdout  # its log and its worker's
    with tarfile.open(folder / "demo-data.tgz") as tar:
        assert tar.extractfile("runs/demo/runs.csv").read() == b"header\nr1\n"  # type: ignore[union-attr]
    assert "demo-parallel-x/gpus0.log" in _names(folder / "demo-workers.tgz")


def test_the_wait_says_a_run_is_still_going_and_the_data_folder_is_the_runs(tmp_path: Path) -> None:
    tree, folder, data = _tree(tmp_path), tmp_path / "run", tmp_path / "elsewhere"
    (data / "runs" / "demo").mkdir(parents=True)
    (data / "runs" / "demo" / "runs.csv").write_text("moved\n")
    assert _run([DETACHED, str(folder), "sleep", "30"], tree, VLLM_PLAYBOOKS_DATA_DIR=str(data)).returncode == 0
    try:
        again = _run([DETACHED, str(folder), "true"], tree)
        assert again.returncode == 2 and "a run is still going" in again.stderr
        waited = _run([WAIT, str(folder), "1", "demo"], tree)
        assert waited.returncode == 0 and "run still running" in waited.stdout and waited.stderr == ""
        with tarfile.open(folder / "demo-data.tgz") as tar:  # packed from the run's data folder, not the tree's
            assert tar.extractfile("runs/demo/runs.csv").read() == b"moved\n"  # type: ignore[union-attr]
        assert not (folder / "demo-workers.tgz").exists()  # no worker yet: no archive
    finally:
        os.killpg(int((folder / "run.pid").read_text()), signal.SIGTERM)  # the run's whole process group


def test_the_wait_ends_at_once_where_no_run_was_started(tmp_path: Path) -> None:
    tree, folder = _tree(tmp_path), tmp_path / "empty"
    folder.mkdir()
    waited = subprocess.run(
        ["bash", WAIT, str(folder), "60", "demo"], cwd=tree, capture_output=True, text=True, timeout=10, check=False
    )
    assert waited.returncode == 3 and "no run was started" in waited.stderr
    assert list(folder.iterdir()) == []
