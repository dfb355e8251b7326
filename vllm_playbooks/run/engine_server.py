"""One server lifetime of one engine config, as the live runner keeps it (``EngineServer``): ``run.case.run_case``
measures all of a config's points on one, the live advisor (``advisor.live``) one point at a time, keeping it while
the next point is of the same config."""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
from collections.abc import Callable
from pathlib import Path

from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.engine.leftovers import SERVERS_FILE
from vllm_playbooks.engine.server import LOOPBACK, VllmServer, start_on_free_port
from vllm_playbooks.load.bench import BenchClient, InProcessBench
from vllm_playbooks.results.provenance import utc_now
from vllm_playbooks.results.server_logs import write_server_record
from vllm_playbooks.results.textfiles import compress_file

#: The servers this process has made (a log name holds the count, so two within one second differ).
_STARTED = itertools.count()

#: Builds the server of one lifetime: (argv, log path, port, **VllmServer's keywords) → server (``VllmServer`` itself,
#: or a stand-in in tests).
ServerFactory = Callable[..., VllmServer]


def say(line: str) -> None:
    """One line for the person running the case (standard error, beside the progress bar)."""
    print(line, file=sys.stderr, flush=True)


def store_logs(server_log: Path) -> None:
    """Compress a stopped server's log and its load generator's (``textfiles``); a log never opened is skipped, and
    one that cannot be compressed (a full disk) is kept as it is."""
    for log in (server_log, server_log.with_suffix(".bench.log")):
        if log.exists():
            with contextlib.suppress(OSError):
                compress_file(log)


class EngineServer:
    """One server lifetime of one engine config, as the runner keeps it: its log ``logs/<config id>-<launch>.log``
    in the case folder, its load generator (``bench``, default vLLM's ``bench serve`` in-process, its console output
    beside the server's log), started on a free port and listed in the case folder's record of running servers
    (``engine.leftovers``); ``hardware`` (its key, GPU name and vLLM version) is recorded beside the log
    (``results.server_logs``). ``stop`` stops the server's process group and compresses both logs; ``with`` starts the
    server, gives it, and stops it whatever ends the block (an error, Ctrl-C)."""

    def __init__(
        self,
        engine: EngineConfig,
        case_dir: Path,
        bench: BenchClient | None = None,
        server_factory: ServerFactory = VllmServer,
        python: str | None = None,
        health_timeout_s: float = 900.0,
        hardware: tuple[str, str, str] | None = None,
    ) -> None:
        self.engine = engine
        self.hardware = hardware
        self.case_dir = case_dir
        # the second, then this process and its count of servers: two servers never share a log
        started = f"{utc_now().replace(':', '')}-p{os.getpid()}n{next(_STARTED)}"
        self.log_path = case_dir / "logs" / f"{engine.config_id()}-{started}.log"
        self.bench: BenchClient = bench or InProcessBench(self.log_path.with_suffix(".bench.log"))
        self.server: VllmServer | None = None
        self._server_factory = server_factory
        self._python = python
        self._health_timeout_s = health_timeout_s

    def _make(self, port: int) -> VllmServer:
        return self._server_factory(
            self.engine.server_argv(LOOPBACK, port, self._python),
            self.log_path,
            port,
            env=self.engine.env,
            health_timeout_s=self._health_timeout_s,
            record=self.case_dir / SERVERS_FILE,
        )

    def start(self) -> VllmServer:
        """Start the server on a free port and wait until it is healthy (``ServerError`` otherwise, its log kept),
        first recording beside its log the hardware it launches on (``hardware``: key, GPU name and vLLM version),
        where known."""
        if self.hardware is not None:
            write_server_record(self.log_path, *self.hardware)
        try:
            self.server = start_on_free_port(self._make, say=say)
        except BaseException:
            self.stop()
            raise
        return self.server

    def stop(self) -> None:
        """Stop the server (when one was started) and compress its logs; safe to call more than once."""
        try:
            if self.server is not None:
                self.server.stop()
        finally:
            store_logs(self.log_path)

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
