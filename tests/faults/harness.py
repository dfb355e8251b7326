"""``vllm-playbooks`` as the fault tests run it: the stand-in server and a stand-in ``bench serve`` that talks to it.

``python -m tests.faults.harness run|worker …`` is the command line itself, with only the engine and the load
generator replaced (its workers started through this harness too, and its Ray tasks given the same stand-ins).
Environment:

- ``FAULT_BENCH_S``: seconds each bench call takes (it polls the server's ``/health`` meanwhile and fails when the
  server is gone, as a load generator does);
- ``FAULT_LOAD_FLOOR_S``: the shortest deadline of one bench call (``run.measure.load_deadline_s``; default the
  runner's own);
- ``FAULT_HEALTH_TIMEOUT_S``: how long a starting server may take to answer ``/health`` (default the runner's own);
- ``FAULT_SERVER_ARGS``: extra arguments of the stand-in server (e.g. ``--ignore-sigterm``);
- ``FAULT_FIRST_PORT``: the port the runner gets first (a test holds it, to see the runner move to another);
- ``FAULT_FS``: ``readonly`` (every write under the data folder fails with EROFS) or ``full:N`` (writes under the
  data folder fail with ENOSPC from the ``N``-th point folder on), a read-only mount or a full disk without root.
"""

from __future__ import annotations

import builtins
import errno
import functools
import io
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from tests.conftest import FIXTURES, fake_server_argv
from vllm_playbooks import cli, paths
from vllm_playbooks.engine import server as server_module
from vllm_playbooks.engine.exchange import get
from vllm_playbooks.engine.server import VllmServer
from vllm_playbooks.errors import ServerError
from vllm_playbooks.run import case, parallel, ray_grid


def slow_bench(argv: list[str], timeout_s: float | None = None) -> dict[str, Any]:
    """A ``bench serve`` result (its duration the time it took) after ``FAULT_BENCH_S`` seconds of polling the
    server, which must stay up: as a load generator, it waits for a hung server as long as the run's deadline
    (``timeout_s``) lets it, and fails at once when the server is gone or answers what breaks HTTP."""
    opt = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
    began = time.monotonic()
    done, limit = began + float(os.environ.get("FAULT_BENCH_S", "0.2")), began + (timeout_s or 600.0)
    while True:
        try:
            get(f"{opt['--base-url']}/health", max(limit - time.monotonic(), 0.01))
        except ServerError as error:
            raise ServerError(f"bench serve: the server stopped answering ({error})") from None
        if time.monotonic() >= done:
            break
        time.sleep(0.05)
    result = json.loads((FIXTURES / "h200-draft-c16" / "bench.json").read_text())
    result["num_prompts"] = result["completed"] = int(opt["--num-prompts"])
    result["failed"] = 0
    result["duration"] = time.monotonic() - began  # the rate the runner plans the measured run's deadline with
    result["max_concurrency"] = int(opt["--max-concurrency"]) if "--max-concurrency" in opt else None
    Path(opt["--result-dir"], opt["--result-filename"]).write_text(json.dumps(result))
    return result


def fake_server(argv: list[str], log: Path, port: int, **kwargs: Any) -> VllmServer:
    """The stand-in server on ``port`` instead of vLLM."""
    extra = shlex.split(os.environ.get("FAULT_SERVER_ARGS", ""))
    return VllmServer(fake_server_argv(port, *extra), log, port, **kwargs)


def _first_port_then_free() -> None:
    taken = os.environ.get("FAULT_FIRST_PORT")
    if not taken:
        return
    ports = [int(taken)]
    free = server_module.free_port

    def port(host: str = server_module.LOOPBACK) -> int:
        return ports.pop() if ports else free(host)

    server_module.free_port = port


def _failing_writes(kind: str, data: Path) -> None:
    """Make writes under ``data`` fail as on a read-only or a full file system (``FAULT_FS``)."""
    code, _, after = kind.partition(":")
    number = errno.EROFS if code == "readonly" else errno.ENOSPC
    points_left = [int(after) if after else 0]
    raw_write_point = case.raw.write_point

    def write_point(case_dir: Path, pid: str, files: dict[str, str]) -> Path:
        points_left[0] -= 1
        return raw_write_point(case_dir, pid, files)

    def failing(path: object) -> bool:
        try:
            inside = Path(os.fsdecode(path)).resolve().is_relative_to(data)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
        return inside and points_left[0] <= 0

    def refuse(path: object) -> None:
        raise OSError(number, os.strerror(number), os.fsdecode(path))  # type: ignore[arg-type]

    real_open, real_os_open, real_mkdir = builtins.open, os.open, os.mkdir

    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(c in mode for c in "wax+") and not isinstance(file, int) and failing(file):
            refuse(file)
        return real_open(file, mode, *args, **kwargs)

    def os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and failing(path):
            refuse(path)
        return real_os_open(path, flags, *args, **kwargs)

    def mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
        if failing(path) and not os.path.isdir(path):
            refuse(path)
        real_mkdir(path, *args, **kwargs)

    builtins.open = io.open = open_  # type: ignore[assignment]
    os.open, os.mkdir = os_open, mkdir  # type: ignore[assignment]
    case.raw.write_point = write_point  # type: ignore[assignment]


def worker_argv(case_name: str, labels: Any, overrides: dict[str, Any], python: str | None = None) -> list[str]:
    """A worker of ``vllm-playbooks run``, started through this harness."""
    return [
        sys.executable,
        "-m",
        "tests.faults.harness",
        "worker",
        "--case",
        case_name,
        "--engines",
        *labels,
        "--overrides",
        json.dumps(overrides),
    ]


def main(argv: list[str]) -> int:
    """``vllm-playbooks argv…`` with the stand-ins in place."""
    limits = {
        name: float(os.environ[env])
        for name, env in (("load_floor_s", "FAULT_LOAD_FLOOR_S"), ("health_timeout_s", "FAULT_HEALTH_TIMEOUT_S"))
        if os.environ.get(env)
    }
    parallel.run_case = functools.partial(
        case.run_case,
        bench=slow_bench,
        server_factory=fake_server,  # type: ignore[assignment]
        gpu_sampler=None,
        **limits,
    )
    parallel.worker_argv = worker_argv  # type: ignore[assignment]
    ray_grid.run_case = parallel.run_case  # what each Ray task runs (pickled: its node imports this harness)
    # the stand-in server needs neither vLLM nor a GPU: the checks that live runs make first are skipped
    parallel.require_vllm = parallel.require_gpu = lambda: None  # type: ignore[assignment]
    _first_port_then_free()
    if os.environ.get("FAULT_FS"):
        _failing_writes(os.environ["FAULT_FS"], paths.data_dir().resolve())
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
