"""The record of the servers a run started, and how the next run stops those a killed run left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import fake_server_argv
from tests.unit.engine.test_server import _wait_gone
from vllm_playbooks.engine.guard import group_members, start_ticks
from vllm_playbooks.engine.leftovers import (
    SERVERS_FILE,
    owner_alive,
    read_record,
    record_server,
    stop_leftovers,
    this_process,
    update_record,
)
from vllm_playbooks.engine.server import VllmServer, free_port


def test_a_server_is_listed_while_it_runs(tmp_path: Path) -> None:
    record, port = tmp_path / SERVERS_FILE, free_port()
    with VllmServer(fake_server_argv(port), tmp_path / "s.log", port, record=record) as server:
        (entry,) = read_record(record)
        assert entry["pid"] == entry["pgid"] == server.pgid and entry["port"] == port and owner_alive(entry)
    assert not record.exists()


def test_a_server_whose_owner_is_gone_is_stopped_and_one_whose_owner_runs_is_not(tmp_path: Path) -> None:
    record = tmp_path / SERVERS_FILE
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    record_server(record, orphan.pid, 1234)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    update_record(record, lambda entries: [{**entries[0], "owner": int(dead.stdout)}])
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    record_server(record, live.pid, 5678)  # owned by this process, which runs
    lines = stop_leftovers(record, grace_s=2)
    assert len(lines) == 1 and "port 1234" in lines[0]
    orphan.wait(timeout=10)
    assert [e["port"] for e in read_record(record)] == [5678] and live.poll() is None
    live.kill()
    live.wait()


def test_a_pid_now_held_by_another_process_is_never_signalled(tmp_path: Path) -> None:
    record = tmp_path / SERVERS_FILE
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    entry = {
        "pid": other.pid,
        "pgid": other.pid,
        "port": 1,
        "started": (start_ticks(other.pid) or 0) - 1,
        "owner": 1 << 22,
        "owner_started": 0,
    }
    record.write_text(json.dumps([entry]))
    assert stop_leftovers(record, grace_s=1) == [] and not record.exists()
    assert other.poll() is None and group_members(other.pid)
    other.kill()
    other.wait()
    assert _wait_gone(other.pid)


def test_this_process_owns_what_it_records() -> None:
    assert owner_alive(this_process()) and this_process()["owner"] == os.getpid()
    assert not owner_alive({"owner": os.getpid(), "owner_started": -1})
