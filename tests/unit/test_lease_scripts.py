"""The lent-GPU helpers (.lease/bg.sh, .lease/poll.sh) on a small tree: the job runs detached on its own copy of the
tree, and the poll brings back what it recorded. No GPU: the command stands in for python -m vllm_playbooks.parallel."""

from __future__ import annotations

import os
import signal
import subprocess
import tarfile
from pathlib import Path

from tests.conftest import ROOT

#: Writes a row into the copied tree and a worker log where the parallel runner would, then prints the commit.
JOB = ('echo "r1" >> data/runs/demo/runs.csv && mkdir -p "$TMPDIR/demo-parallel-x" && '
       'echo "point done" > "$TMPDIR/demo-parallel-x/gpus0.log" && echo "sha=$VLLM_PLAYBOOKS_GIT_SHA"')  # fmt: skip


def _names(archive: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        return set(tar.getnames())


def test_the_job_runs_on_a_copy_and_the_poll_brings_its_records_back(tmp_path: Path) -> None:
    tree, lease, out = tmp_path / "tree", tmp_path / "lease", tmp_path / "out"
    (tree / "data" / "runs" / "demo").mkdir(parents=True)
    (tree / "data" / "runs" / "demo" / "runs.csv").write_text("header\n")
    env = {**os.environ, "LEASE_TMP": str(lease), "OUT": str(out)}
    started = subprocess.run(["bash", str(ROOT / ".lease" / "bg.sh"), "abc1234", JOB], cwd=tree, env=env,
                             capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert f"started in {lease}/repo" in started.stdout
    polled = subprocess.run(["bash", str(ROOT / ".lease" / "poll.sh"), "30", "demo"], cwd=tree, env=env,
                            capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert "job exit 0" in polled.stdout and "sha=abc1234" in polled.stdout and "point done" in polled.stdout
    assert (tree / "data" / "runs" / "demo" / "runs.csv").read_text() == "header\n"  # the synced tree is untouched
    assert "data/runs/demo/runs.csv" in _names(out / "case-data.tgz")
    with tarfile.open(out / "case-data.tgz") as tar:
        assert tar.extractfile("data/runs/demo/runs.csv").read() == b"header\nr1\n"  # type: ignore[union-attr]
    assert "demo-parallel-x/gpus0.log" in _names(out / "workers.tgz")


def test_the_poll_says_a_job_is_still_running(tmp_path: Path) -> None:
    tree, lease, out = tmp_path / "tree", tmp_path / "lease", tmp_path / "out"
    (tree / "data" / "runs" / "demo").mkdir(parents=True)
    env = {**os.environ, "LEASE_TMP": str(lease), "OUT": str(out)}
    subprocess.run(["bash", str(ROOT / ".lease" / "bg.sh"), "abc1234", "sleep 30"], cwd=tree, env=env,
                   capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    try:
        polled = subprocess.run(["bash", str(ROOT / ".lease" / "poll.sh"), "1", "demo"], cwd=tree, env=env,
                                capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
        assert "job running" in polled.stdout and (out / "case-data.tgz").is_file()
        assert not (out / "workers.tgz").exists() and polled.stderr == ""  # no worker yet: no archive, no error
    finally:
        os.killpg(int((lease / "job.pid").read_text()), signal.SIGTERM)  # the job's whole process group


def test_the_poll_ends_at_once_on_a_machine_where_no_job_was_started(tmp_path: Path) -> None:
    """A fresh machine (the last one went back with its job) has nothing to wait for: the poll says so and exits 3
    before its wait, so it spends no device time and packs nothing."""
    tree, lease, out = tmp_path / "tree", tmp_path / "lease", tmp_path / "out"
    (tree / "data" / "runs" / "demo").mkdir(parents=True)
    env = {**os.environ, "LEASE_TMP": str(lease), "OUT": str(out)}
    polled = subprocess.run(["bash", str(ROOT / ".lease" / "poll.sh"), "60", "demo"], cwd=tree, env=env,
                            capture_output=True, text=True, timeout=10)  # fmt: skip
    assert polled.returncode == 3 and "no job on this machine" in polled.stderr
    assert not out.exists()
