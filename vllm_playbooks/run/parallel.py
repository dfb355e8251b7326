"""Several engine configs of one case at once: one worker process per GPU group of this machine.

On a machine with more GPUs than one engine config needs, the configs of a grid are independent: each worker runs
``run.case.run_case`` on its own configs with ``CUDA_VISIBLE_DEVICES`` set to its GPU group and its own data folder
(a copy of the case's recorded runs, so resume works), and nothing is shared but the host's CPUs. When all workers
are done (or stopped), the raw point folders and server logs they recorded are copied into the case's data folder and
their rows appended (``results.replay.sync_rows`` rebuilds each row from its raw files), so ``runs.csv`` stays
append-only and is written by one process.

``vllm-playbooks run --case discussion-13834 --gpus 0 1 --engines spec-off draft3b-k3-a0.72``
(``--time-limit-s 540`` stops the workers in time for a machine you hold for a limited time, keeping every finished
point; ``--repeats 2`` measures each chosen point a second time when its first run is recorded.)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_playbooks import paths
from vllm_playbooks.engine.guard import die_with_parent, start_ticks
from vllm_playbooks.engine.leftovers import (
    SERVERS_FILE,
    owner_alive,
    read_record,
    stop_leftovers,
    this_process,
    update_record,
)
from vllm_playbooks.errors import ConfigError, PlaybookError
from vllm_playbooks.results.identity import engine_gpus
from vllm_playbooks.results.store import case_dir
from vllm_playbooks.run.case import (
    live_overrides,
    require_gpu,
    require_vllm,
    run_case,
    sigterm_as_interrupt,
)
from vllm_playbooks.run.importing import merge_into
from vllm_playbooks.run.plan import load_plan, overrides_for
from vllm_playbooks.run.runner_lock import case_runner_lock

#: The record, in the case folder, of the worker folders a run has not merged yet (``merge_leftover_workers``).
WORKERS_FILE = ".workers.json"


def assign_engines(labels: Sequence[str], groups: Sequence[str]) -> dict[str, list[str]]:
    """Engine labels dealt round-robin over GPU groups (``CUDA_VISIBLE_DEVICES`` values such as ``"0"`` or
    ``"2,3"``), in the plan's order (the order ``--engines`` names them, else the case file's); a group that gets none
    is left out. No GPU may be in two groups."""
    if not groups:
        raise ConfigError("give at least one GPU group, e.g. --gpus 0 1")
    gpus = [gpu.strip() for group in groups for gpu in group.split(",")]
    if any(not gpu for gpu in gpus) or len(set(gpus)) != len(gpus):
        raise ConfigError(f"GPU groups must name distinct GPUs, each once: {list(groups)}")
    assignment: dict[str, list[str]] = {group: [] for group in groups}
    for index, label in enumerate(labels):
        assignment[groups[index % len(groups)]].append(label)
    return {group: taken for group, taken in assignment.items() if taken}


def check_group_sizes(plan_engines: Sequence[Any], assignment: dict[str, list[str]]) -> None:
    """Refuse, before any GPU time, an engine config that needs more GPUs (TP × PP) than its group has."""

    by_label = {engine.label: engine for engine in plan_engines}
    for group, labels in assignment.items():
        size = len(group.split(","))
        for label in labels:
            need = engine_gpus(by_label[label])
            if need > size:
                raise ConfigError(
                    f"engine {label} needs {need} GPUs (tensor × pipeline parallel size) but GPU group {group!r} has "
                    f"{size}; give groups such as --gpus 0,1 2,3"
                )


def worker_argv(case: str, labels: Sequence[str], overrides: dict[str, Any], python: str | None = None) -> list[str]:
    """The command one worker runs: this module's ``worker`` entry with its engine labels and the plan overrides."""
    return [
        python or sys.executable,
        "-m",
        "vllm_playbooks",
        "worker",
        "--case",
        case,
        "--engines",
        *labels,
        "--overrides",
        json.dumps(overrides),
    ]


@dataclass
class ParallelReport:
    """What each GPU group ran, its exit status, its log, and the rows merged into the data folder."""

    assignment: dict[str, list[str]]
    returncodes: dict[str, int] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)
    added: list[str] = field(default_factory=list)
    #: True when the time limit stopped at least one worker (its finished points are merged all the same).
    timed_out: bool = False
    #: Worker folders whose merge failed (kept, and merged again by the next run), with the error.
    merge_failed: dict[str, str] = field(default_factory=dict)

    def raise_for_failures(self) -> None:
        """Raise ``PlaybookError`` naming each group whose worker did not exit 0 (its rows are merged anyway)."""
        bad = {group: code for group, code in self.returncodes.items() if code != 0}
        if self.merge_failed:
            detail = "; ".join(f"{folder}: {error}" for folder, error in self.merge_failed.items())
            raise PlaybookError(
                f"{len(self.merge_failed)} worker folder(s) could not be merged ({detail}); they are "
                "kept, and the next run merges them"
            )
        if self.timed_out:
            raise PlaybookError(
                f"the time limit stopped the workers of GPUs {', '.join(bad) or '(none)'}; the points they finished "
                "were merged, and a later run resumes the rest"
            )
        if bad:
            detail = "; ".join(f"GPUs {g}: exit {c}, log {self.logs[g]}" for g, c in bad.items())
            raise PlaybookError(f"{len(bad)} worker(s) failed ({detail}); the points they finished were merged")


def run_on_gpus(
    case: str,
    groups: Sequence[str],
    *,
    data: Path | None = None,
    python: str | None = None,
    workdir: Path | None = None,
    time_limit_s: float | None = None,
    **overrides: Any,
) -> ParallelReport:
    """Run the engine configs of ``load_plan(case, **overrides)`` spread over ``groups``, one worker per group, and
    merge what they recorded into ``data`` (default: the repo's data folder). The plan and its checks run here first,
    so a bad input is refused before any worker starts. Ctrl-C is passed on to the workers, whose runners stop their
    servers; the points already finished are merged. After ``time_limit_s`` seconds (a machine held for a limited
    time) the workers still running get the same interrupt and ``timed_out`` is set: a later run skips what was
    recorded."""

    data = data if data is not None else paths.data_dir()
    if case.endswith((".yaml", ".yml")):
        case = str(Path(case).resolve())  # the workers start in the repository root
    plan = load_plan(case, **overrides)  # ``case``: a packaged case's name or a case file; its runs go to plan.case
    assignment = assign_engines([engine.label for engine in plan.engines], list(groups))
    check_group_sizes(plan.engines, assignment)
    report = ParallelReport(assignment=assignment)
    recorded = case_dir(plan.case, data)
    registry = recorded / WORKERS_FILE
    report.added += merge_leftover_workers(plan.case, data, report)
    root = Path(tempfile.mkdtemp(prefix=f"{plan.case}-parallel-", dir=workdir))
    workers: dict[str, subprocess.Popen[bytes]] = {}
    folders: dict[str, Path] = {}
    try:
        with sigterm_as_interrupt():
            for index, (group, labels) in enumerate(assignment.items()):
                folder = root / f"gpus{index}"
                if recorded.is_dir():
                    shutil.copytree(recorded, case_dir(plan.case, folder), ignore=_NOT_COPIED)
                folders[group] = folder
                report.logs[group] = root / f"gpus{index}.log"
                env = {**os.environ, "CUDA_VISIBLE_DEVICES": group, paths.DATA_DIR_ENV: str(folder)}
                with report.logs[group].open("wb") as log:
                    workers[group] = subprocess.Popen(
                        worker_argv(case, labels, {k: v for k, v in overrides.items() if k != "engines"}, python),
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        cwd=paths.find_repo_root(),
                        start_new_session=True,
                        preexec_fn=_interrupt_when_parent_dies,  # noqa: PLW1509
                    )
                entry = {
                    "folder": str(folder),
                    "worker": workers[group].pid,
                    "worker_started": start_ticks(workers[group].pid),
                    **this_process(),
                }
                update_record(registry, lambda entries, entry=entry: [*entries, entry])
            _wait_for_workers(workers, report, time_limit_s)
    except KeyboardInterrupt:
        _interrupt_and_wait(workers, report)
        raise
    finally:
        for folder in folders.values():
            report.added += _merge_worker(plan.case, folder, data, report)
    return report


#: What a worker's copy of the case folder leaves out: the records of this run's own servers and workers, and locks.
_NOT_COPIED = shutil.ignore_patterns(WORKERS_FILE, SERVERS_FILE, ".*.lock")


def _interrupt_when_parent_dies() -> None:
    """In a worker, before it runs: the kernel sends it SIGINT when the parallel runner dies (Linux), so it stops its
    server and keeps its finished points for the next run to merge."""
    die_with_parent(signal.SIGINT)


def _wait_for_workers(
    workers: dict[str, subprocess.Popen[bytes]], report: ParallelReport, time_limit_s: float | None
) -> None:
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
    for group, worker in workers.items():
        try:
            timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            report.returncodes[group] = worker.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            report.timed_out = True
            _interrupt_and_wait(workers, report)
            return


def _interrupt_and_wait(workers: dict[str, subprocess.Popen[bytes]], report: ParallelReport) -> None:
    """SIGINT every worker still running and wait for each (they stop their servers); a further interrupt while
    waiting is passed on to the workers too, whose servers then go straight to SIGKILL."""
    for worker in workers.values():
        if worker.poll() is None:
            worker.send_signal(signal.SIGINT)
    for group, worker in workers.items():
        while True:
            try:
                report.returncodes[group] = worker.wait()
                break
            except KeyboardInterrupt:
                for other in workers.values():
                    if other.poll() is None:
                        other.send_signal(signal.SIGINT)


def _merge_worker(case: str, folder: Path, data: Path, report: ParallelReport) -> list[str]:
    """Merge one worker folder into ``data``; then remove it and its registry entry. A merge that fails is noted in
    ``report.merge_failed`` and the folder kept (the next run merges it); the other workers' merges go on."""
    try:
        added = merge_into(case, folder, data) if folder.is_dir() else []
    except (PlaybookError, OSError) as error:
        report.merge_failed[str(folder)] = f"{type(error).__name__}: {error}"
        return []
    shutil.rmtree(folder, ignore_errors=True)
    update_record(
        case_dir(case, data) / WORKERS_FILE, lambda entries: [e for e in entries if e.get("folder") != str(folder)]
    )
    return added


def merge_leftover_workers(case: str, data: Path, report: ParallelReport | None = None) -> list[str]:
    """Merge the worker folders an earlier ``vllm-playbooks run`` of ``case`` left (killed before it could merge
    them), once their runner and worker are gone; stop any server they left; return the ids of the rows added."""
    report = report if report is not None else ParallelReport(assignment={})
    added: list[str] = []
    for entry in read_record(case_dir(case, data) / WORKERS_FILE):
        worker = {"owner": entry.get("worker"), "owner_started": entry.get("worker_started")}
        if owner_alive(entry) or owner_alive(worker):
            continue
        folder = Path(str(entry.get("folder")))
        for line in stop_leftovers(case_dir(case, folder) / SERVERS_FILE):
            print(line, file=sys.stderr)
        rows = _merge_worker(case, folder, data, report)
        print(f"merged {len(rows)} point(s) from {folder}, left by an earlier run that was stopped", file=sys.stderr)
        added += rows
    return added


def run_worker(case: str, engines: Sequence[str], overrides: dict[str, Any]) -> None:
    """Run one worker's share: the engine configs ``engines`` of ``load_plan(case, **overrides)``, without progress
    bars; a failed point raises (``run_case``'s report), an interrupt keeps the points finished."""
    plan = load_plan(case, engines=list(engines), **overrides)
    run_case(plan, progress=False).raise_for_failures()


def run_parallel(
    case: str,
    gpus: Sequence[str],
    *,
    part: str | None = None,
    engines: Sequence[str] | None = None,
    concurrency: Sequence[int] | None = None,
    repeats: int | None = None,
    paired: bool | None = None,
    time_limit_s: float | None = None,
) -> ParallelReport:
    """Run a case (or one ``part`` of it, with the choices given replacing the part's) over the GPU groups ``gpus``
    (``run_on_gpus``), under the case's runner lock. The plan's checks, then vLLM and a GPU, are checked first:
    ``ConfigError`` before any worker starts, also for a paired run given more than one group. The report is returned
    whatever the workers' exit status (``ParallelReport.raise_for_failures`` says what failed)."""
    chosen = {
        "engines": None if engines is None else list(engines),
        "concurrency": None if concurrency is None else list(concurrency),
        "repeats": repeats,
        "paired": paired,
    }
    overrides = overrides_for(case, part, **chosen)
    if load_plan(case, **overrides).pairing is not None and len(gpus) > 1:
        raise ConfigError(
            f"a paired run compares its configs on one GPU group; got {len(gpus)} ({' '.join(gpus)}): give one"
        )
    # a bad case, part or value was refused above; then what the machine lacks
    require_vllm()
    require_gpu()
    overrides = live_overrides(overrides)
    with case_runner_lock(case_dir(load_plan(case, **overrides).case)):
        return run_on_gpus(case, gpus, time_limit_s=time_limit_s, **overrides)
