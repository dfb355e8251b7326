"""The guard that leads a server's process group: the group goes when the server exits, when the guard is told to
stop, and when the process that started it dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import fake_server_argv
from tests.unit.engine.test_server import _alive, _wait_gone
from vllm_playbooks.engine import guard
from vllm_playbooks.engine.guard import group_members, start_ticks
from vllm_playbooks.engine.server import free_port

#: An owner that starts a guarded stand-in server (with a child of its own), prints the pids, then sleeps.
OWNER = """
import os, subprocess, sys, time
guarded = [sys.executable, {guard!r}, str(os.getpid()), "1", "--", *{argv!r}]
leader = subprocess.Popen(guarded, start_new_session=True)
while not os.path.exists({pid_file!r}):
    time.sleep(0.05)
print(leader.pid, open({pid_file!r}).read(), flush=True)
time.sleep(60)
"""


def _owner(tmp_path: Path) -> tuple[subprocess.Popen[str], int, int]:
    pid_file = tmp_path / "child.pid"
    argv = fake_server_argv(free_port(), "--child-pid-file", str(pid_file))
    code = OWNER.format(guard=guard.__file__, argv=argv, pid_file=str(pid_file))
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    leader, child = (int(word) for word in owner.stdout.readline().split())
    return owner, leader, child


def test_the_group_goes_when_its_owner_is_killed(tmp_path: Path) -> None:
    owner, leader, child = _owner(tmp_path)
    assert _alive(child) and child in group_members(leader)
    owner.kill()
    owner.wait()
    assert _wait_gone(child) and _wait_gone(leader)
    assert not group_members(leader)


def test_the_group_goes_when_the_server_exits_on_its_own(tmp_path: Path) -> None:
    owner, leader, child = _owner(tmp_path)
    server = next(pid for pid in group_members(leader) if pid not in (leader, child))
    os.kill(server, signal.SIGKILL)  # the API server dies; its engine core (here: its child) must not stay
    assert _wait_gone(child) and _wait_gone(leader)
    owner.kill()
    owner.wait()


def test_start_ticks_tell_a_process_from_a_later_one_with_its_pid() -> None:
    ticks = start_ticks(os.getpid())
    assert ticks is not None and ticks == start_ticks(os.getpid())
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert start_ticks(int(done.stdout)) is None  # a finished process has no start time


def test_a_zombie_has_no_start_time() -> None:
    """A killed process its parent has not collected yet has ended: a record it owns is a leftover."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert start_ticks(process.pid) is not None
    process.kill()  # not waited for: a zombie until process.wait()
    deadline = time.monotonic() + 5
    while start_ticks(process.pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert start_ticks(process.pid) is None
    process.wait()
