"""One runner per case: a second is refused naming the holder; the lock goes with its holder, even killed; two
servers never share a log name."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.results.server_logs import LOG_NAME
from vllm_playbooks.run.engine_server import EngineServer
from vllm_playbooks.run.runner_lock import LOCK_FILE, case_runner_lock

HOLD = (
    "import sys, time; from pathlib import Path; from vllm_playbooks.run.runner_lock import case_runner_lock\n"
    "with case_runner_lock(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(60)\n"
)


def _holder(case_dir: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(case_dir)], stdout=subprocess.PIPE, text=True, env=env)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_second_runner_is_refused_naming_the_holder_until_it_dies(tmp_path: Path) -> None:
    case_dir = tmp_path / "runs" / "my-case"
    holder = _holder(case_dir)
    try:
        with pytest.raises(ConfigError, match=rf"pid {holder.pid} on "), case_runner_lock(case_dir):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    started = time.monotonic()
    with case_runner_lock(case_dir):  # the kernel dropped the dead holder's lock
        assert f"pid {os.getpid()} " in (case_dir / LOCK_FILE).read_text()
    assert time.monotonic() - started < 1.0


def test_the_lock_is_taken_again_after_the_block(tmp_path: Path) -> None:
    with case_runner_lock(tmp_path):
        pass
    with case_runner_lock(tmp_path):
        pass


def test_two_servers_of_one_config_started_in_one_second_get_different_logs(tmp_path: Path) -> None:
    engine = EngineConfig(label="spec-off", model="tiny-llama", max_model_len=512)
    first, second = EngineServer(engine, tmp_path), EngineServer(engine, tmp_path)
    assert first.log_path != second.log_path
    for log in (first.log_path, second.log_path):
        match = LOG_NAME.match(log.name)
        assert match is not None and match["config_id"] == engine.config_id()
