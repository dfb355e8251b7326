"""The vLLM server as a context manager: its own process group, a /health wait, and a clean stop.

The server starts in a new session, so stopping it signals the whole group (API server, engine core, workers): no
GPU process outlives the ``with`` block, whether it ends in success, an error or Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from vllm_playbooks.errors import ServerError

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    if not path.exists():
        return ""
    with path.open(encoding="utf-8", errors="replace") as handle:
        return "".join(deque(handle, maxlen=lines))


def stop_process_group(process: subprocess.Popen[bytes], grace_s: float = 30.0) -> None:
    """SIGTERM the process's group, wait up to ``grace_s``, then SIGKILL whatever is left of the group."""
    try:
        pgid = os.getpgid(process.pid)
    except ProcessLookupError:
        process.wait()
        return
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if process.poll() is not None and not _group_alive(pgid):
                return
            time.sleep(0.2)
    process.wait(timeout=10)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class VllmServer:
    """Start ``argv`` (a server on ``host:port``), wait until ``/health`` answers 200, stop the group on exit."""

    def __init__(
        self,
        argv: Sequence[str],
        log_path: Path,
        port: int,
        host: str = LOOPBACK,
        env: Mapping[str, str] | None = None,
        health_timeout_s: float = 600.0,
        stop_grace_s: float = 30.0,
    ) -> None:
        if host != LOOPBACK:
            raise ServerError(f"the server binds to {LOOPBACK} only, not {host}")
        self.argv = list(argv)
        self.log_path = log_path
        self.host = host
        self.port = port
        self.env = dict(env or {})
        self.health_timeout_s = health_timeout_s
        self.stop_grace_s = stop_grace_s
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the running server."""
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start the process in a new session and block until it is healthy; raise ``ServerError`` otherwise."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 (argv list, no shell)
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        try:
            self._wait_healthy(started)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - started

    def _wait_healthy(self, started: float) -> None:
        assert self.process is not None
        deadline = started + self.health_timeout_s
        while True:
            code = self.process.poll()
            if code is not None:
                raise ServerError(
                    f"vLLM server exited with code {code} before it was healthy. Last lines of {self.log_path}:\n"
                    f"{tail(self.log_path)}"
                )
            if self.healthy():
                return
            if time.monotonic() > deadline:
                raise ServerError(
                    f"vLLM server not healthy after {self.health_timeout_s:.0f} s. Last lines of {self.log_path}:\n"
                    f"{tail(self.log_path)}"
                )
            time.sleep(1.0)

    def healthy(self) -> bool:
        """True when ``GET /health`` answers 200."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/health", timeout=5) as response:  # noqa: S310 (loopback)
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def alive(self) -> bool:
        """True while the server process runs."""
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """Stop the whole process group (idempotent)."""
        if self.process is not None:
            stop_process_group(self.process, self.stop_grace_s)
