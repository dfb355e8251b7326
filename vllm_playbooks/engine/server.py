"""The vLLM server as a context manager: its own process group, a /health wait, and a clean stop.

The server starts in a new session under a guard (``engine.guard``), so stopping it signals the whole group (API
server, engine core, workers): no GPU process outlives the ``with`` block, whether it ends in success, an error or
Ctrl-C, nor the process that started it, even when that process is killed. The server that answers ``/health``
must hold the port itself: a port taken by another process is ``PortTakenError``, and ``start_on_free_port`` tries
another port.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from vllm_playbooks.engine import guard
from vllm_playbooks.engine.exchange import BrokenAnswer, NoAnswer, get
from vllm_playbooks.engine.guard import group_members
from vllm_playbooks.engine.leftovers import forget_server, record_server
from vllm_playbooks.errors import PortTakenError, ServerError

LOOPBACK = "127.0.0.1"
#: How long one ``/health`` poll may take, the whole exchange.
HEALTH_POLL_S = 5.0
#: Answers to ``/health`` in a row that break HTTP (``engine.exchange.BrokenAnswer``) after which a starting server
#: is given up: it answers, but not in HTTP.
BROKEN_HEALTH_ANSWERS = 3
#: The grace of a stop when a process of the group was stopped (SIGSTOP): it is continued, and what a hung server
#: has not finished in these seconds is killed.
STOPPED_GRACE_S = 2.0


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


def stopped_members(pgid: int) -> set[int]:
    """Processes of group ``pgid`` stopped by a signal (state ``T``, SIGSTOP or SIGTSTP), from ``/proc``."""
    stopped = set()
    for pid in group_members(pgid):
        with contextlib.suppress(OSError, IndexError):
            stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
            if stat.rsplit(")", 1)[1].split()[0] == "T":
                stopped.add(pid)
    return stopped


def stop_process_group(process: subprocess.Popen[bytes], pgid: int, grace_s: float = 30.0) -> None:
    """SIGTERM the group ``pgid`` (remembered at start: it is stopped even when its leader was already reaped), wait
    up to ``grace_s`` for all of it to go, then SIGKILL what is left. A group with a stopped process (SIGSTOP: a hung
    server) is continued (SIGCONT, so the SIGTERM is delivered) and given ``STOPPED_GRACE_S`` at most. An interrupt
    (a second Ctrl-C) during the wait does not abort the stop: it goes straight to SIGKILL, and is raised again once
    the group is gone."""
    interrupted: BaseException | None = None
    if stopped_members(pgid):
        grace_s = min(grace_s, STOPPED_GRACE_S)
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            for each in (sig, signal.SIGCONT):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, each)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                if process.poll() is not None and not group_members(pgid):
                    break
                time.sleep(0.05)
            else:
                continue
            break
        except KeyboardInterrupt as error:
            interrupted = interrupted or error
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
    if interrupted is not None:
        raise interrupted


def listening_inodes(port: int) -> set[int]:
    """Socket inodes listening on TCP ``port`` (IPv4 and IPv6) on Linux, from ``/proc/net``; empty elsewhere."""
    inodes: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(int(fields[9]))
    return inodes


def socket_inodes(pids: set[int]) -> set[int]:
    """Inodes of the sockets the processes ``pids`` hold open (those this user may read)."""
    inodes: set[int] = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
    return inodes


class VllmServer:
    """Start ``argv`` (a server on ``host:port``), wait until ``/health`` answers 200, stop the group on exit.

    ``record``: a file listing the servers running (``engine.leftovers``), so that a run killed before it could stop
    this one lets the next run stop it."""

    def __init__(
        self,
        argv: Sequence[str],
        log_path: Path,
        port: int,
        host: str = LOOPBACK,
        env: Mapping[str, str] | None = None,
        health_timeout_s: float = 600.0,
        stop_grace_s: float = 30.0,
        record: Path | None = None,
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
        self.record = record
        self.process: subprocess.Popen[bytes] | None = None
        self.pgid: int | None = None
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
        """Start the process in a new session under its guard and block until it is healthy; raise ``ServerError``
        otherwise (``PortTakenError`` when another process holds the port)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        guarded = [sys.executable, guard.__file__, str(os.getpid()), str(self.stop_grace_s), "--", *self.argv]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                guarded,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        self.pgid = self.process.pid  # a new session: the leader's pid is the group's id
        try:
            if self.record is not None:
                record_server(self.record, self.process.pid, self.port)
            self._wait_healthy(started)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - started

    def _wait_healthy(self, started: float) -> None:
        assert self.process is not None
        deadline = started + self.health_timeout_s
        broken: list[str] = []
        while True:
            code = self.process.poll()
            if code is not None:
                log_tail = tail(self.log_path)
                if "Address already in use" in log_tail:
                    raise PortTakenError(f"port {self.port} was taken by another process before the server bound it")
                raise ServerError(
                    f"vLLM server exited with code {code} before it was healthy. Last lines of {self.log_path}:\n"
                    f"{log_tail}"
                )
            try:
                healthy = self.health_status() == 200
            except BrokenAnswer as error:
                broken.append(str(error))
                healthy = False
            else:
                broken.clear()
            if healthy:
                if not self.holds_port():
                    raise PortTakenError(
                        f"port {self.port} answers /health from another process, not the server started here"
                    )
                return
            if len(broken) >= BROKEN_HEALTH_ANSWERS and self.holds_port():
                raise ServerError(f"the server's /health answers break HTTP ({len(broken)} in a row): {broken[-1]}")
            if time.monotonic() > deadline:
                raise ServerError(
                    f"vLLM server not healthy after {self.health_timeout_s:.0f} s. Last lines of {self.log_path}:\n"
                    f"{tail(self.log_path)}"
                )
            time.sleep(1.0)

    def holds_port(self) -> bool:
        """True when the socket listening on the port belongs to this server's process group (Linux, ``/proc``);
        where ``/proc`` says nothing about the port, True."""
        listening = listening_inodes(self.port)
        if not listening or self.pgid is None:
            return not listening
        return bool(listening & socket_inodes(group_members(self.pgid)))

    def health_status(self) -> int | None:
        """The status ``GET /health`` answers within ``HEALTH_POLL_S``; None when nothing answered in time
        (``engine.exchange.NoAnswer``); ``BrokenAnswer`` when the answer breaks HTTP."""
        try:
            return get(f"{self.base_url}/health", HEALTH_POLL_S).status
        except NoAnswer:
            return None

    def healthy(self) -> bool:
        """True when ``GET /health`` answers 200 within ``HEALTH_POLL_S``; False for any other answer, none, or one
        that breaks HTTP."""
        try:
            return self.health_status() == 200
        except ServerError:
            return False

    def alive(self) -> bool:
        """True while the server process runs."""
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """Stop the whole process group (idempotent) and take it out of the record."""
        if self.process is not None and self.pgid is not None:
            try:
                stop_process_group(self.process, self.pgid, self.stop_grace_s)
            finally:
                # a stopped server's entry that cannot be taken out (a full disk) is harmless: the next run finds
                # its group gone and drops it
                if self.record is not None:
                    with contextlib.suppress(OSError):
                        forget_server(self.record, self.process.pid)


def start_on_free_port(
    make: Callable[[int], VllmServer], attempts: int = 3, say: Callable[[str], None] = print
) -> VllmServer:
    """Start the server ``make(port)`` builds on a free port; when another process takes that port first
    (``PortTakenError``), say so in one line and try another, up to ``attempts`` ports. Returns the started server."""
    for _ in range(attempts - 1):
        server = make(free_port())
        try:
            server.start()
            return server
        except PortTakenError as error:
            say(f"{error}; trying another port")
    server = make(free_port())
    server.start()
    return server
