"""One runner per case at a time: an exclusive ``flock`` on the case's data folder, which the kernel drops when the
holder dies (SIGKILL included), so a stale lock never needs removing. A second runner is refused before it starts a
server, naming the holder: its pid, host and start time, as the holder wrote them into the lock file."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from vllm_playbooks.errors import ConfigError
from vllm_playbooks.results.provenance import utc_now

#: The lock file in a case's data folder (hidden; ``.*.lock`` is ignored by git).
LOCK_FILE = ".runner.lock"


@contextlib.contextmanager
def case_runner_lock(case_dir: Path) -> Iterator[None]:
    """Hold the runner lock of ``case_dir`` for the block; ``ConfigError`` naming the holder (pid, host, start time)
    when another process holds it."""
    case_dir.mkdir(parents=True, exist_ok=True)
    with (case_dir / LOCK_FILE).open("a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = " ".join(handle.read().split()) or "a process that has not named itself yet"
            raise ConfigError(
                f"{case_dir} is being measured by another run ({holder}); wait for it to end or stop "
                "it, then run again (recorded points are skipped)"
            ) from None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()} on {socket.gethostname()}, started {utc_now()}\n")
            handle.flush()
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
