"""A case's grid on a Ray cluster: each engine config one Ray task on a node Ray picks (``vllm-playbooks run --ray``).

``vllm-playbooks run --case discussion-13834 --ray auto`` (or ``--ray HEAD-IP:6379``, the address ``ray start --head``
printed). This machine, the driver, needs neither a GPU nor vLLM; every node needs this package, vLLM and Ray.

How it runs. The driver checks the plan, takes the case's runner lock (``run.runner_lock``: a second driver on the
same case is refused, naming the first) and connects. Each engine config becomes one task that asks for the GPUs its
tensor × pipeline parallelism needs (``num_gpus``; Ray sets ``CUDA_VISIBLE_DEVICES`` on the node it picks). The task
runs the live runner (``run.case.run_case``) on that config alone, every load of it, in a data folder of its own
seeded with the config's recorded points, so the runner's resume skips them as on one machine. The driver is the only
writer of the case's data folder: what tasks send it merges as a local run merges a worker's folder
(``run.importing.merge_into``: raw point folders copied, their rows rebuilt from the raw files and appended to the
append-only ``runs.csv``). Each point's ``provenance.json`` names its node (``node``: host name and Ray node id).

Why points travel one at a time, through a mailbox, rather than as the task's return value: a return value comes only
when the whole config is done, so a node that dies mid-config would take its finished points with it. Instead the
task sends each point as soon as its folder is complete to a small actor on the driver's node (``Mailbox``) and waits
until the actor holds it; the driver empties the mailbox every ``POLL_S`` seconds. A node that dies loses only the
point it was measuring. Ray runs its task once more elsewhere (``max_retries=1``), and the retry seeds itself with
what the mailbox got from the first attempt too, so it measures only the rest; a point that arrives twice is merged
once (its folder is there already), so nothing is recorded twice.

Ctrl-C (or SIGTERM, or ``--time-limit-s``) cancels every task with ``force=True``: Ray kills the task's worker process,
and the server's guard (``engine.guard``), which the kernel tells when its owner dies, stops the server's process
group; so it does when a node's raylet dies and takes its workers along (``RUNTIME_ENV`` keeps Ray from SIGKILLing
the guard first). The points sent so far are merged before the driver exits (130; 124 for the time limit); a rerun
measures only what is missing. A driver killed outright (SIGKILL) loses the points that reached the mailbox in its
last ``POLL_S`` seconds: they are measured again by the rerun, never recorded twice.

Ray could run one machine's GPU groups too, but ``run --gpus`` keeps its own worker pool (``run.parallel``): Ray is an
optional extra (``requirements-gpu.txt``, ``pip install vllm-playbooks[ray]``), not a dependency of the book, and
``run --gpus`` must work without it. Ray is imported only when ``--ray`` is given.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import shutil
import socket
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from vllm_playbooks import paths
from vllm_playbooks.errors import ConfigError, PlaybookError
from vllm_playbooks.results import raw
from vllm_playbooks.results.identity import engine_gpus
from vllm_playbooks.results.provenance import NODE_ENV
from vllm_playbooks.results.store import case_dir
from vllm_playbooks.run.case import check_writable, run_case, sigterm_as_interrupt
from vllm_playbooks.run.importing import merge_into
from vllm_playbooks.run.measure import RunReport
from vllm_playbooks.run.plan import CasePlan, load_plan
from vllm_playbooks.run.runner_lock import case_runner_lock

#: What ``--ray`` says where Ray is not installed.
RAY_MISSING = "--ray needs Ray: pip install ray"
#: How often (seconds) a task looks for newly finished points, and the driver empties the mailbox.
POLL_S = 0.5
#: How long the driver waits for cancelled tasks to end before it takes the mailbox's last points.
CANCEL_WAIT_S = 10.0
#: The environment of this run's Ray workers. A Ray worker that ends (cancelled, or its node's raylet gone) SIGKILLs
#: its child processes by default, the server's guard among them, which would leave the server running: with this the
#: guard outlives its owner long enough to stop the server's process group (``engine.guard``).
RUNTIME_ENV = {"env_vars": {"RAY_kill_child_processes_on_worker_exit": "false"}}
#: The live runner as a task calls it: (one engine config's plan, data=…, progress=…) → its report.
Runner = Callable[..., RunReport]


def require_ray() -> ModuleType:
    """The ``ray`` module; ``ConfigError`` (``RAY_MISSING``) where it is not installed."""
    try:
        import ray
    except ImportError:
        raise ConfigError(RAY_MISSING) from None
    return ray


def pack(root: Path, members: Iterable[Path]) -> bytes:
    """The bytes of a tar of ``members`` (folders or files under ``root``), each named relative to ``root``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for member in members:
            tar.add(member, arcname=member.relative_to(root).as_posix())
    return buffer.getvalue()


def unpack(blob: bytes, root: Path) -> None:
    """Extract a ``pack`` tar under ``root`` (plain files and folders only: tar's ``data`` filter)."""
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(root, filter="data")


def config_seed(case: str, config_id: str, data: Path) -> bytes:
    """The recorded points of one engine config (``config_id``, on any hardware) in ``data``, packed: what its task
    starts from, so that it measures only what is missing."""
    points = [point for point in raw.finished_points(case_dir(case, data)) if point.parent.name == config_id]
    return pack(data, points)


def check_fits(engines: Iterable[Any], node_gpus: Iterable[float]) -> None:
    """Refuse (``ConfigError``) an engine config that needs more GPUs (tensor × pipeline parallel size) than any node
    has: its task could never start. ``node_gpus``: the GPUs of each live node of the cluster."""
    most = max(node_gpus, default=0.0)
    for engine in engines:
        if engine_gpus(engine) > most:
            raise ConfigError(
                f"engine {engine.label} needs {engine_gpus(engine)} GPUs of one node (tensor × pipeline parallel "
                f"size), and the largest node of the cluster has {most:g}"
            )


class Mailbox:
    """The actor on the driver's node that holds what tasks send until the driver takes it. It also keeps everything
    each engine config's task sent, for a retry of that task to start from."""

    def __init__(self) -> None:
        self.waiting: list[bytes] = []
        self.by_label: dict[str, list[bytes]] = {}

    def put(self, label: str, blob: bytes) -> None:
        """Hold ``blob`` (``pack``ed points, failures or logs) that the task of engine ``label`` sent."""
        self.waiting.append(blob)
        self.by_label.setdefault(label, []).append(blob)

    def take(self) -> list[bytes]:
        """What was sent since the last ``take``, oldest first."""
        taken, self.waiting = self.waiting, []
        return taken

    def sent(self, label: str) -> list[bytes]:
        """Everything the task of engine ``label`` sent, in any attempt."""
        return list(self.by_label.get(label, []))


class _Sender:
    """In a task: sends each point the runner finishes in ``data`` to the mailbox, every ``POLL_S`` seconds, from a
    thread of its own; ``stop`` sends the rest, the failures and the server logs."""

    def __init__(self, case: str, label: str, data: Path, mailbox: Any) -> None:
        self.case_dir, self.label, self.data, self.mailbox = case_dir(case, data), label, data, mailbox
        self.sent = set(raw.finished_points(self.case_dir))  # the seed: recorded already
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.done.wait(POLL_S):
            self.send_new()

    def send_new(self, extra: Iterable[Path] = ()) -> None:
        """Send the points finished since the last call, with ``extra`` files or folders, and wait until the mailbox
        holds them."""
        import ray

        new = [point for point in raw.finished_points(self.case_dir) if point not in self.sent]
        members = [*new, *extra]
        if members:
            ray.get(self.mailbox.put.remote(self.label, pack(self.data, members)))
        self.sent.update(new)

    def stop(self) -> None:
        """Stop the thread; send what is left, the failures kept for points and the server logs."""
        self.done.set()
        self.thread.join()
        failures = sorted(raw.raw_root(self.case_dir).glob(f"*/*/*{raw.FAILURE_SUFFIX}"))
        logs = [self.case_dir / "logs"] if (self.case_dir / "logs").is_dir() else []
        self.send_new([*failures, *logs])


def measure_config(plan: CasePlan, seed: bytes, mailbox: Any, runner: Runner) -> dict[str, Any]:
    """A Ray task: run ``plan`` (one engine config) on this node with ``runner`` in a data folder of its own, seeded
    with ``seed`` and with what an earlier attempt sent; each point goes to ``mailbox`` as soon as it is recorded.
    Returns the node (``provenance.node`` of its points), and the ids of the points measured and failed."""
    import ray

    label = plan.engines[0].label
    node = f"{socket.gethostname()} ray:{ray.get_runtime_context().get_node_id()}"
    os.environ[NODE_ENV] = node
    work = Path(tempfile.mkdtemp(prefix=f"{plan.case}-ray-"))
    try:
        for blob in [seed, *ray.get(mailbox.sent.remote(label))]:
            unpack(blob, work)
        sender = _Sender(plan.case, label, work, mailbox)
        try:
            report = runner(plan, data=work, progress=False)
        finally:
            sender.stop()
        return {"node": node, "measured": report.measured, "failed": report.failed}
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclass
class RayReport:
    """What each engine config's task did (by label): the node that ran it, its points measured and failed, or the
    error that ended it; the rows merged into the data folder; whether the time limit stopped it."""

    nodes: dict[str, str] = field(default_factory=dict)
    measured: dict[str, list[str]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    added: list[str] = field(default_factory=list)
    timed_out: bool = False

    def lines(self) -> list[str]:
        """One line per engine config, then the rows added."""
        out = [f"{label}: {error}" for label, error in self.errors.items()]
        out += [f"{label}: {len(ids)} point(s) measured on {self.nodes[label]}" for label, ids in self.measured.items()]
        return [*out, f"rows added: {len(self.added)}"]

    def raise_for_failures(self) -> None:
        """``PlaybookError`` when the time limit stopped the tasks, a task ended in an error, or points failed (the
        points finished are merged all the same)."""
        if self.timed_out:
            raise PlaybookError(
                "the time limit stopped the Ray tasks; the points they finished were merged, and a later run "
                "resumes the rest"
            )
        if self.errors:
            detail = "; ".join(f"{label}: {error}" for label, error in self.errors.items())
            raise PlaybookError(
                f"{len(self.errors)} Ray task(s) failed ({detail}); the points they finished were merged"
            )
        if self.failed:
            raise PlaybookError(
                f"{len(self.failed)} point(s) failed ({', '.join(self.failed)}); the rest are merged, and a rerun "
                "measures only what is missing"
            )


def run_on_ray(
    case: str,
    address: str,
    *,
    data: Path | None = None,
    time_limit_s: float | None = None,
    runner: Runner | None = None,
    **overrides: Any,
) -> RayReport:
    """Measure the engine configs of ``load_plan(case, **overrides)`` on the Ray cluster at ``address`` (``auto``:
    the one this machine belongs to), one task per config, and merge what they send into ``data`` (default: the
    repo's data folder). ``runner`` is what each task runs (default ``run.case.run_case``). Refused before any server
    starts (``ConfigError``): Ray missing, a bad plan, a paired plan, a cluster that cannot be reached (all before the
    data folder is touched), a case another run holds, an unwritable data folder, an engine config wider than every
    node (``check_fits``). After ``time_limit_s`` seconds the tasks are cancelled and ``timed_out`` set."""
    ray = require_ray()
    data = data if data is not None else paths.data_dir()
    plan = load_plan(case, **overrides)
    if plan.pairing is not None:
        raise ConfigError("a paired run compares its configs on one GPU group: run it with --gpus, not --ray")
    folder = case_dir(plan.case, data)
    report = RayReport()
    _connect(ray, address)
    try:
        with case_runner_lock(folder):
            check_writable(folder)
            _run_tasks(ray, plan, data, report, runner or run_case, time_limit_s)
    finally:
        ray.shutdown()
    return report


def _connect(ray: ModuleType, address: str, timeout_s: float = 5.0) -> None:
    """Connect this process to the cluster as its driver; ``ConfigError`` in one line when it cannot. A ``HOST:PORT``
    where nothing answers within ``timeout_s`` is refused at once (``ray.init`` would wait minutes)."""
    host, colon, port = address.rpartition(":")
    if colon and port.isdigit() and "://" not in address:
        try:
            socket.create_connection((host, int(port)), timeout=timeout_s).close()
        except OSError as error:
            raise ConfigError(f"cannot reach the Ray cluster at {address}: {error.strerror or error}") from None
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True, runtime_env=RUNTIME_ENV)
    except (ConnectionError, ValueError, RuntimeError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(f"cannot reach the Ray cluster at {address}: {reason}") from None


def _run_tasks(
    ray: ModuleType, plan: CasePlan, data: Path, report: RayReport, runner: Runner, time_limit_s: float | None
) -> None:
    """Start the mailbox on this node and one task per engine config (each refused first if no node has its GPUs,
    ``check_fits``); merge what they send until all have ended (cancelled on Ctrl-C, SIGTERM or the time limit)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    check_fits(plan.engines, [node["Resources"].get("GPU", 0.0) for node in ray.nodes() if node["Alive"]])
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    mailbox = ray.remote(Mailbox).options(num_cpus=0, scheduling_strategy=here).remote()
    task = ray.remote(measure_config)
    tasks = {
        task.options(num_gpus=engine_gpus(engine), max_retries=1, name=f"{plan.case} {engine.label}").remote(
            dataclasses.replace(plan, engines=(engine,)),
            config_seed(plan.case, engine.config_id(), data),
            mailbox,
            runner,
        ): engine.label
        for engine in plan.engines
    }
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
    pending = list(tasks)
    with sigterm_as_interrupt():
        try:
            while pending:
                wait_s = POLL_S if deadline is None else max(min(POLL_S, deadline - time.monotonic()), 0.0)
                done, pending = ray.wait(pending, num_returns=len(pending), timeout=wait_s)
                for ref in done:
                    _note(ray, ref, tasks[ref], report)
                report.added += _merge(ray.get(mailbox.take.remote()), plan.case, data)
                if pending and deadline is not None and time.monotonic() >= deadline:
                    report.timed_out = True
                    _cancel(ray, pending)
                    pending = []
        except KeyboardInterrupt:
            _cancel(ray, pending)
            raise
        finally:
            report.added += _merge(ray.get(mailbox.take.remote()), plan.case, data)


def _note(ray: ModuleType, ref: Any, label: str, report: RayReport) -> None:
    """Note in ``report`` what the ended task of engine ``label`` returned, or the error it ended in (one line)."""
    try:
        result = ray.get(ref)
    except ray.exceptions.RayError as error:
        cause = error.cause if isinstance(error, ray.exceptions.RayTaskError) else error
        report.errors[label] = f"{type(cause).__name__}: {(str(cause).strip().splitlines() or [''])[0]}"
        return
    report.nodes[label] = result["node"]
    report.measured[label] = result["measured"]
    report.failed.update(result["failed"])


def _cancel(ray: ModuleType, refs: list[Any]) -> None:
    """Cancel ``refs`` with force (their worker processes are killed, and the guards stop the servers), then wait up
    to ``CANCEL_WAIT_S`` for them to end, so that what they sent last is in the mailbox."""
    for ref in refs:
        ray.cancel(ref, force=True)
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=CANCEL_WAIT_S)


def _merge(blobs: list[bytes], case: str, data: Path) -> list[str]:
    """Merge what tasks sent (``pack``ed points, failures, logs) into ``data`` through ``merge_into``; return the ids
    of the rows added."""
    if not blobs:
        return []
    staging = Path(tempfile.mkdtemp(prefix=f"{case}-ray-merge-"))
    try:
        for blob in blobs:
            unpack(blob, staging)
        return merge_into(case, staging, data)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
