"""What a run leaves behind when it is killed: the servers it started, recorded so that the next run stops them.

Each server a run starts is listed in its case folder's ``.servers.json`` (pid, process group, port, who started it)
from just after it is launched until it is stopped. A run that is killed cannot take its entries out; the next run
stops every listed server whose owner is gone (``stop_leftovers``) before it starts its own. The same locked JSON
list keeps other such records (``update_record``), e.g. the worker folders of ``vllm-playbooks run``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vllm_playbooks.engine.guard import group_members, start_ticks, stop_group
from vllm_playbooks.files import atomic_write_text, file_lock

#: The record of a case folder's running servers.
SERVERS_FILE = ".servers.json"

Record = list[dict[str, Any]]


def read_record(path: Path) -> Record:
    """The entries of a record file (empty when there is none, or when it is not a JSON list)."""
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def update_record(path: Path, change: Callable[[Record], Record]) -> Record:
    """Replace the record at ``path`` with ``change(entries)`` under a lock (atomic, fsynced; no file once empty)."""
    with file_lock(path):
        entries = change(read_record(path))
        if not entries:
            path.unlink(missing_ok=True)
            return entries
        atomic_write_text(path, json.dumps(entries, indent=1))
        return entries


def this_process() -> dict[str, Any]:
    """Who owns a record entry: this process's pid and start time."""
    return {"owner": os.getpid(), "owner_started": start_ticks(os.getpid())}


def owner_alive(entry: dict[str, Any]) -> bool:
    """True while the process that made ``entry`` still runs (the same pid, started at the same time)."""
    pid = entry.get("owner")
    return isinstance(pid, int) and start_ticks(pid) is not None and start_ticks(pid) == entry.get("owner_started")


def record_server(path: Path, pid: int, port: int) -> None:
    """List a server just launched (its group leader ``pid``, which is also its group id) in ``path``."""
    entry = {"pid": pid, "pgid": pid, "port": port, "started": start_ticks(pid), **this_process()}
    update_record(path, lambda entries: [*entries, entry])


def forget_server(path: Path, pid: int) -> None:
    """Take a stopped server out of ``path``."""
    update_record(path, lambda entries: [e for e in entries if e.get("pid") != pid])


def stop_leftovers(path: Path, grace_s: float = 10.0) -> list[str]:
    """Stop every server listed in ``path`` whose owner is gone (a killed run's), drop their entries, and return one
    line per server stopped. Servers of a run still going are left alone; a pid now held by another process (its
    start time differs) is never signalled."""
    stopped: list[str] = []

    def change(entries: Record) -> Record:
        kept = []
        for entry in entries:
            if owner_alive(entry):
                kept.append(entry)
                continue
            pid, pgid = int(entry.get("pid", 0)), int(entry.get("pgid", 0))
            leader = start_ticks(pid)
            if pgid > 1 and group_members(pgid) and (leader is None or leader == entry.get("started")):
                stop_group(pgid, grace_s)
                stopped.append(
                    f"stopped a server left running by an earlier run (process group {pgid}, port {entry.get('port')})"
                )
        return kept

    if path.exists():
        update_record(path, change)
    return stopped
