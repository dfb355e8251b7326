"""The server context manager against a real process tree: health wait, timeout, crash, and group cleanup."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.conftest import fake_server_argv
from vllm_playbooks.engine.server import VllmServer, free_port
from vllm_playbooks.errors import ServerError


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); read its state
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def _wait_gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_healthy_server_and_its_child_are_stopped_on_exit(tmp_path: Path) -> None:
    port, pid_file = free_port(), tmp_path / "child.pid"
    with VllmServer(fake_server_argv(port, "--child-pid-file", str(pid_file)), tmp_path / "s.log", port) as server:
        assert server.healthy()
        child = int(pid_file.read_text())
        server_pid = server.process.pid  # type: ignore[union-attr]
        assert _alive(child)
    assert _wait_gone(server_pid) and _wait_gone(child)


def test_group_is_stopped_when_the_block_raises(tmp_path: Path) -> None:
    port, pid_file = free_port(), tmp_path / "child.pid"
    with pytest.raises(KeyboardInterrupt):
        with VllmServer(fake_server_argv(port, "--child-pid-file", str(pid_file)), tmp_path / "s.log", port):
            child = int(pid_file.read_text())
            raise KeyboardInterrupt  # what Ctrl-C raises in the runner's process
    assert _wait_gone(child)


def test_sigterm_ignored_then_killed(tmp_path: Path) -> None:
    port = free_port()
    server = VllmServer(fake_server_argv(port, "--ignore-sigterm"), tmp_path / "s.log", port, stop_grace_s=1.0)
    with server:
        pid = server.process.pid  # type: ignore[union-attr]
    assert _wait_gone(pid)


def test_exit_before_healthy_reports_the_log_tail(tmp_path: Path) -> None:
    port = free_port()
    with pytest.raises(ServerError, match=r"exited with code 7(.|\n)*failing at start-up as asked"):
        with VllmServer(fake_server_argv(port, "--exit-at-start", "7"), tmp_path / "s.log", port):
            pass


def test_health_timeout_stops_the_server_and_reports(tmp_path: Path) -> None:
    port, pid_file = free_port(), tmp_path / "child.pid"
    argv = fake_server_argv(port, "--never-healthy", "--child-pid-file", str(pid_file))
    started = time.monotonic()
    with pytest.raises(ServerError, match=r"not healthy after 3 s(.|\n)*listening on"):
        with VllmServer(argv, tmp_path / "s.log", port, health_timeout_s=3):
            pass
    assert time.monotonic() - started < 20
    assert _wait_gone(int(pid_file.read_text()))


def test_only_loopback() -> None:
    with pytest.raises(ServerError, match="127.0.0.1"):
        VllmServer(["true"], Path("/dev/null"), 1, host="0.0.0.0")  # noqa: S104


def test_the_server_process_gets_its_env_on_top_of_ours(tmp_path: Path) -> None:
    import sys

    out = tmp_path / "env.txt"
    script = (
        "import os, sys; "
        f"open({str(out)!r}, 'w').write(os.environ['PLAYBOOK_TEST_ENV'] + '|' + os.environ.get('PATH', '')[:1]); "
        "sys.exit(3)"
    )
    server = VllmServer([sys.executable, "-c", script], tmp_path / "log", free_port(), env={"PLAYBOOK_TEST_ENV": "on"})
    with pytest.raises(ServerError, match="exited with code 3"):
        server.start()
    value, path_start = out.read_text().split("|")
    assert value == "on" and path_start  # its own variable, and the inherited environment (PATH) kept
