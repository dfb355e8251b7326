"""The leader of a server's process group: nothing in the group outlives the process that started the server.

``VllmServer`` starts this file as a script (``python guard.py OWNER_PID GRACE_S -- ARGV…``, in a new session), and
it starts the server (``ARGV``) in its own group. It stops the whole group (SIGTERM, then SIGKILL after ``GRACE_S``)
when the server exits on its own (an engine core left behind by a dead API server goes too), when it gets SIGTERM,
SIGINT or SIGHUP, and when its owner dies, even by SIGKILL: on Linux the kernel tells it (``PR_SET_PDEATHSIG``),
elsewhere it sees its parent change. It imports nothing but the standard library, so it starts in milliseconds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

#: ``prctl`` option: the signal this process gets when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux); False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def group_members(pgid: int) -> set[int]:
    """Live (not zombie) processes of process group ``pgid``, from ``/proc``; empty where there is no ``/proc``."""
    members: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.add(int(entry))
    return members


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot, ``/proc/<pid>/stat``); None if it is gone (a zombie
    too: it has ended, only its parent has not collected it yet) or unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return None if fields[0] == "Z" else int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def stop_group(pgid: int, grace_s: float, keep: int | None = None) -> None:
    """SIGTERM every process of group ``pgid``, wait up to ``grace_s`` for them to go, then SIGKILL the rest;
    ``keep`` (the caller's own pid, when it is in the group) is spared. Each signal is followed by SIGCONT, so that
    a stopped (SIGSTOP) process gets it."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        others = group_members(pgid) - {keep}
        for each in (sig, signal.SIGCONT):
            if keep is None:
                _signal_group(pgid, each)
            for pid in others:
                _signal(pid, each)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if keep is not None:  # the guard reaps its own children; the runner's Popen reaps its guard
                with contextlib.suppress(ChildProcessError):
                    while os.waitpid(-1, os.WNOHANG)[0] > 0:
                        pass
            if not group_members(pgid) - {keep}:
                return
            time.sleep(0.05)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def main(argv: Sequence[str]) -> int:
    """Start ``argv[3:]`` (after ``OWNER_PID GRACE_S --``) and stop the group when it, the owner or a signal ends it;
    return the server's exit status (128 + signal when it was stopped)."""
    owner, grace_s, command = int(argv[0]), float(argv[1]), list(argv[3:])
    die_with_parent(signal.SIGTERM)
    stop: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: stop.append(signum))
    if os.getppid() != owner:  # the owner died before the kernel could be told
        return 128 + signal.SIGTERM
    server = subprocess.Popen(command)
    code = None
    while code is None and not stop and os.getppid() == owner:
        time.sleep(0.1)
        code = server.poll()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    stop_group(os.getpgrp(), grace_s, keep=os.getpid())
    return code if code is not None else 128 + (stop[0] if stop else signal.SIGTERM)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
