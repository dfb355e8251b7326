"""The two doors: ``run_case`` measures a plan on the GPUs at hand (live), ``replay_case`` rebuilds it from disk.

Live: one server lifetime per engine config, every load level against it (a paired plan alternates its configs
instead: ``run.paired``); each finished point is written at once
(raw folder first, then its row), a rerun skips finished points, and a point that fails is kept as a failure file
(retryable) while every finished point stays.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import tempfile
import threading
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

import pandas as pd

from vllm_playbooks import paths
from vllm_playbooks.config.pairing import BY_RESTART, CO_RESIDENT, paired_order, pairing_record
from vllm_playbooks.engine.gpu_sampler import gpu_at_hand, nvml_sampler
from vllm_playbooks.engine.leftovers import SERVERS_FILE, stop_leftovers
from vllm_playbooks.engine.server import VllmServer
from vllm_playbooks.errors import ConfigError, PlaybookError, StorageError
from vllm_playbooks.load.bench import BenchClient
from vllm_playbooks.results import raw, store
from vllm_playbooks.results.conditions import with_run_conditions
from vllm_playbooks.results.identity import read_json
from vllm_playbooks.results.provenance import Provenance, collect_provenance, query_gpus, utc_now
from vllm_playbooks.results.replay import replay_case, replay_case_with_same_points, sync_rows
from vllm_playbooks.results.schema import RUN_COLUMNS
from vllm_playbooks.results.stalls import mark_stalled
from vllm_playbooks.results.store import load_run_rows, rows_to_frame
from vllm_playbooks.run.engine_server import ServerFactory, say
from vllm_playbooks.run.measure import (
    GONE_ERRORS,
    LOAD_DEADLINE_FLOOR_S,
    LiveRun,
    RunReport,
    SamplerFactory,
    hardware_of,
    server_gone,
    startup_cause,
)
from vllm_playbooks.run.paired import run_together
from vllm_playbooks.run.plan import CasePlan, PlannedPoint, load_plan, overrides_for, quiet_plan
from vllm_playbooks.run.runner_lock import case_runner_lock


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into ``KeyboardInterrupt`` while measuring, so ``timeout`` or a job scheduler stopping the runner
    unwinds the server's context manager (and stops its process group) instead of orphaning the GPU processes.

    Only the main thread can set signal handlers; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def require_vllm() -> None:
    """Live mode needs vLLM in this environment; say so before anything starts."""
    if importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            "live mode needs vLLM in this Python environment (pip install -r requirements-gpu.txt); "
            "replay mode needs none"
        )


def check_writable(folder: Path) -> None:
    """Refuse to start when ``folder`` (a case's data folder) cannot be written: ``StorageError`` before any server
    starts, instead of a measurement that cannot be kept."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-probe-")
        try:
            os.write(fd, b"ok")
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as error:
        raise StorageError(f"cannot write to {folder}: {error.strerror or error}; nothing was started") from error


def run_case(
    plan: CasePlan,
    *,
    data: Path | None = None,
    resume: bool = True,
    bench: BenchClient | None = None,
    server_factory: ServerFactory = VllmServer,
    python: str | None = None,
    health_timeout_s: float = 900.0,
    progress: bool = True,
    gpu_sampler: SamplerFactory | None = nvml_sampler,
    remeasure_stalled: bool = True,
    load_floor_s: float = LOAD_DEADLINE_FLOOR_S,
) -> RunReport:
    """Measure every point of ``plan`` that is not recorded yet; one server per engine config.

    A recorded point whose run stalled (``results.stalls``) is measured once more as the next repeat of the same
    engine config and load (``remeasure_stalled``; the stalled record stays): pages use the repeat that did not stall.
    A paired plan (``config.pairing``) treats a recorded point measured outside a paired session the same way.

    ``bench`` defaults to vLLM's own ``bench serve`` in-process; ``python`` is the interpreter that starts the
    server (default: this one). ``gpu_sampler`` samples the engine's GPUs during each measured run (default: NVML;
    where NVML is missing the point says so and the run goes on; ``None``: no sampling). Returns a report; call
    ``report.raise_for_failures()`` to fail loudly. ``load_floor_s``: the shortest deadline of one ``bench serve`` run
    (``run.measure.load_deadline_s``). After a point fails, the rest of its config fails at once when its server died
    or stopped answering ``/health`` (``run.measure.server_gone``).
    """
    from tqdm.auto import tqdm

    data = data if data is not None else paths.data_dir()
    case_dir = store.case_dir(plan.case, data)
    provenance = open_case_folder(plan.case, data)
    recorded = {p.relative_to(raw.raw_root(case_dir)).as_posix() for p in raw.finished_points(case_dir)}
    done = recorded_here(plan, recorded, provenance)
    if not resume and done:
        raise ConfigError(
            f"{case_dir} already holds {len(done)} recorded point(s) of this hardware; recorded runs are never "
            "overwritten. Use resume=True to add what is missing, or a new case directory."
        )
    stalled = recorded_here(plan, _stalled_point_ids(plan.case, data), provenance) if remeasure_stalled else set()
    if plan.pairing is not None:  # a paired plan pairs its own runs: one measured on its own is measured again
        stalled |= recorded_here(plan, _unpaired_point_ids(case_dir), provenance)
    report = RunReport(
        skipped=[f"{hardware_of(p.engine, provenance)}/{p.point_id}" for p in plan.points() if p.point_id in done]
    )
    todo = points_to_measure(plan, done, stalled)
    if not todo:
        return report
    if bench is None:
        require_vllm()
    if plan.pairing is not None:
        todo = paired_order(todo, plan.pairing)
    bar = tqdm(total=len(todo), desc=plan.case, disable=not progress, unit="point")
    run = LiveRun(
        plan, bench, server_factory, python, health_timeout_s, provenance, data, report, bar, gpu_sampler, load_floor_s
    )
    with sigterm_as_interrupt():
        if plan.pairing == CO_RESIDENT:
            run_together(run, todo, utc_now())
        else:
            _run_groups(run, todo, utc_now() if plan.pairing == BY_RESTART else None)
    bar.close()
    return report


def open_case_folder(case: str, data: Path) -> Provenance:
    """What a live run does in ``case``'s data folder before it measures: refuse a folder it cannot write
    (``check_writable``), stop the servers an earlier run left running (``engine.leftovers``), bring ``runs.csv`` up
    to date with the raw point folders (``sync_rows``); returns this machine's provenance, which every point it
    records carries."""
    case_dir = store.case_dir(case, data)
    check_writable(case_dir)
    for line in stop_leftovers(case_dir / SERVERS_FILE):
        say(line)
    sync_rows(case, data)
    return collect_provenance(paths.find_repo_root() if data == paths.data_dir() else None)


def recorded_here(plan: CasePlan, point_ids: set[str], provenance: Provenance) -> set[str]:
    """Of recorded ``point_ids`` (``<hardware>/<config id>/<load>-r<n>``), the point keys (``<config id>/<load>-r<n>``,
    as ``PlannedPoint.point_id``) recorded on the hardware each of ``plan``'s engines has on the machine that
    ``provenance`` describes: only those count as measured here."""
    hardware = {engine.config_id(): hardware_of(engine, provenance) for engine in plan.engines}
    here = set()
    for pid in point_ids:
        recorded_on, key = pid.split("/", 1)
        if hardware.get(key.split("/", 1)[0]) == recorded_on:
            here.add(key)
    return here


def points_to_measure(plan: CasePlan, done: set[str], stalled: set[str]) -> list[PlannedPoint]:
    """The points of ``plan`` a live run measures, in plan order: every planned point not in ``done`` (recorded
    point ids), and for each engine config and load, one further repeat per recorded repeat in ``stalled`` that no
    unstalled recorded repeat makes up for. A further repeat takes the next index after every recorded and planned one
    (a stalled ``…-r0`` is measured again as ``…-r1``)."""
    todo: list[PlannedPoint] = []
    for (engine, load), group in groupby(plan.points(), key=lambda p: (p.engine, p.load)):
        planned = list(group)
        todo.extend(p for p in planned if p.point_id not in done)
        point = raw.split_point_id(planned[0].point_id)[0]
        recorded = {raw.split_point_id(pid)[1]: pid in stalled for pid in done if raw.split_point_id(pid)[0] == point}
        usable = sum(1 for is_stalled in recorded.values() if not is_stalled)
        planned_missing = sum(1 for p in planned if p.point_id not in done)
        owed = len(planned) - planned_missing - usable
        after = max([*recorded, *(p.repeat for p in planned)]) + 1
        todo.extend(PlannedPoint(engine, load, after + i) for i in range(max(owed, 0)))
    return todo


def _unpaired_point_ids(case_dir: Path) -> set[str]:
    """Ids of the recorded points in ``case_dir`` measured outside a paired session (no ``pairing`` record)."""
    root = raw.raw_root(case_dir)
    return {
        folder.relative_to(root).as_posix()
        for folder in raw.finished_points(case_dir)
        if "pairing" not in read_json(folder / raw.POINT_FILE)
    }


def _stalled_point_ids(case: str, data: Path) -> set[str]:
    """Ids of the recorded points of ``case`` whose measured run stalled."""
    rows = load_run_rows(case, data)
    if not rows:
        return set()
    marked = mark_stalled(rows_to_frame(rows, RUN_COLUMNS), data)
    return set(marked.loc[marked["stalled"], "point_id"])


def _run_groups(run: LiveRun, todo: list[PlannedPoint], restart_session: str | None = None) -> None:
    """One server lifetime per run of consecutive points of one engine config in ``todo``. ``restart_session``: the
    session of a paired plan run by restart (``config.pairing.BY_RESTART``), which each point records with its place
    in ``todo``; ``None`` for a plan that is not paired."""
    labels = list(dict.fromkeys(point.engine.label for point in todo))
    positions = {point.point_id: position for position, point in enumerate(todo)}
    for engine, group in groupby(todo, key=lambda p: p.engine):
        points = list(group)
        config_id, hardware = engine.config_id(), hardware_of(engine, run.provenance)
        lifetime = run.lifetime(engine)
        try:
            with lifetime as server:
                run.report.server_startup_s[config_id] = server.startup_s or 0.0
                for index, point in enumerate(points):
                    pairing = (
                        None
                        if restart_session is None
                        else pairing_record(BY_RESTART, restart_session, positions[point.point_id], labels)
                    )
                    if not run.measure(point, lifetime, server, pairing) and (gone := server_gone(server)):
                        died = RuntimeError(GONE_ERRORS[gone].format(scope="config"))
                        for rest in points[index + 1 :]:
                            run.fail(rest, died, lifetime)
                        break
                    run.bar.update(1)
        except StorageError:
            raise
        except PlaybookError as error:
            cause = startup_cause(error, lifetime.log_path)  # read once for all the points of this server
            for point in points:
                recorded_id = f"{hardware}/{point.point_id}"
                if recorded_id not in run.report.measured and recorded_id not in run.report.failed:
                    run.fail(point, error, lifetime, cause)
                    run.bar.update(1)


#: Notebook parameters that choose which replayed rows a page shows (besides ``part``, which sets them).
ROW_FILTERS = (
    "engines",
    "concurrency",
    "request_rate_qps",
    "profiles",
    "input_len",
    "output_len",
    "random_range_ratio",
)


def require_gpu() -> None:
    """Live mode needs an NVIDIA GPU this process can see (NVML, ``CUDA_VISIBLE_DEVICES``: ``query_gpus``); say so
    before anything starts."""
    _, count, _, _ = query_gpus()
    if count == 0:
        raise ConfigError(
            "live mode needs an NVIDIA GPU, and this machine shows none (NVML: no driver, no "
            "nvidia-ml-py or vLLM to read it, or CUDA_VISIBLE_DEVICES hides every GPU); replay mode "
            "needs none"
        )


def _load_key(input_len: Any, output_len: Any, concurrency: Any, rate: Any) -> tuple[int, int, float, float]:
    """A load level as rows and plans both spell it: lengths, then concurrency and rate (-1 for none)."""

    def number(value: Any) -> float:
        return -1.0 if value is None or pd.isna(value) else float(value)

    return int(input_len), int(output_len), number(concurrency), number(rate)


def _refuse_unrecorded(rows: pd.DataFrame, column: str, asked: list[Any], case: str, what: str) -> None:
    """Refuse the values of ``asked`` that no row of ``rows`` holds in ``column``, naming the recorded ones."""

    def shown(values: Iterable[Any]) -> list[Any]:
        return [int(v) if isinstance(v, float) and v.is_integer() else v for v in values]

    recorded = shown(sorted(set(rows[column].dropna())))
    absent = shown(value for value in asked if not (rows[column] == value).any())
    if absent:
        raise ConfigError(
            f"case {case}: no recorded row at {what} {absent}; recorded: {recorded or 'none'} "
            "(replay shows recorded rows; mode=live measures new ones)"
        )


def select_rows(rows: pd.DataFrame, plan: CasePlan, given: Collection[str]) -> pd.DataFrame:
    """The replayed ``rows`` that the filter parameters named in ``given`` (``ROW_FILTERS``, as applied to ``plan``)
    choose: the plan's engine labels when ``engines`` was given, the plan's load levels (per engine) when a load was
    given. A value that names no recorded row is refused (``ConfigError``, naming the recorded values), and so is a
    choice that leaves no row; engine labels are refused only where none of them is recorded (a part may name a
    config no run has measured yet beside recorded ones). With no filter given every row is kept."""
    chosen = set(given) & set(ROW_FILTERS)
    if not chosen:
        return rows
    out = rows
    if "engines" in chosen:
        labels = [engine.label for engine in plan.engines]
        if not out["engine_label"].isin(labels).any():  # a part's config not measured yet is left out, not refused
            _refuse_unrecorded(out, "engine_label", labels, plan.case, "engine")
        out = out[out["engine_label"].isin(labels)]
    if chosen - {"engines"}:
        if "concurrency" in chosen:
            asked = sorted({load.concurrency for e in plan.engines for load in plan.loads_for(e) if load.concurrency})
            _refuse_unrecorded(out, "concurrency", asked, plan.case, "concurrency")
        if "request_rate_qps" in chosen:
            asked = sorted(
                {
                    load.request_rate_qps
                    for e in plan.engines
                    for load in plan.loads_for(e)
                    if load.request_rate_qps is not None
                }
            )
            _refuse_unrecorded(out, "request_rate_qps", asked, plan.case, "request rate")
        planned = {engine.label: plan.loads_for(engine) for engine in plan.engines}
        with_ratio = "random_range_ratio" in chosen
        keep = []
        for row in out.itertuples():
            loads = planned.get(row.engine_label, plan.loads)
            key = _load_key(row.input_len, row.output_len, row.concurrency, row.request_rate_qps)
            keep.append(
                any(
                    key == _load_key(load.input_len, load.output_len, load.concurrency, load.request_rate_qps)
                    and (not with_ratio or float(row.random_range_ratio) == load.random_range_ratio)
                    for load in loads
                )
            )
        out = out[keep]
    if out.empty:
        raise ConfigError(
            f"case {plan.case}: no recorded row of the chosen engines at the chosen loads; the recorded "
            f"engines are {sorted(set(rows['engine_label']))}"
        )
    return out.reset_index(drop=True)


def hardware_in_words(rows: pd.DataFrame) -> str:
    """What measured ``rows``, in words: each GPU model with its count per server and vLLM version, e.g.
    'NVIDIA H200 (1 GPU per server), vLLM 0.26.0'; 'no rows' for none."""
    if rows.empty:
        return "no rows"
    parts = []
    for (gpu, vllm), group in rows.groupby(["gpu_name", "vllm_version"], sort=True):
        counts = sorted({int(c) for c in group["gpu_count"]})
        per = " or ".join(map(str, counts))
        parts.append(f"{gpu} ({per} GPU{'s' if counts != [1] else ''} per server), vLLM {vllm}")
    return "; ".join(parts)


def checked_choice(
    case: str, mode: str, plan_overrides: dict[str, Any] | None = None, part: str | None = None
) -> tuple[CasePlan, dict[str, Any]]:
    """Everything a case page checks before any work: ``mode`` is 'replay' or 'live'; ``part`` (a name under the
    case's ``parts:``) and ``plan_overrides`` (``None`` values ignored) build the plan as ``load_plan`` does, so a bad
    case, part, engine, profile or value is refused (``ConfigError``); live mode needs vLLM and a GPU. Returns the
    plan (its speculative advisories left to the page) and the overrides it was built with."""
    if mode not in ("replay", "live"):
        raise ConfigError(f"mode must be 'replay' or 'live', got {mode!r}")
    overrides = overrides_for(case, part, **(plan_overrides or {}))
    plan, _ = quiet_plan(case, **overrides)
    if mode == "live":
        require_vllm()
        require_gpu()
    return plan, overrides


def live_overrides(overrides: dict[str, Any] | None, nvml: Any = None) -> dict[str, Any]:
    """A live run's plan overrides: ``gpu_memory_gib`` (what the KV-budget check assumes) from the GPU at hand, read
    through NVML (``nvml``: the module, default pynvml), instead of the case file's figure; a value given explicitly
    stays, and without NVML the case file's figure is used."""
    given = dict(overrides or {})
    if given.get("gpu_memory_gib") is None:
        gpu = gpu_at_hand(os.environ.get("CUDA_VISIBLE_DEVICES"), nvml)
        if gpu is not None:
            given["gpu_memory_gib"] = round(gpu.memory_gib, 1)
    return given


@dataclass(frozen=True)
class LiveReport:
    """What the live run of ``case_rows`` did: its run's report, the case's rows once it ended and their folder."""

    report: RunReport
    rows: pd.DataFrame
    folder: Path


def case_rows(
    case: str,
    mode: str,
    plan_overrides: dict[str, Any] | None = None,
    part: str | None = None,
    **run_kwargs: Any,
) -> tuple[pd.DataFrame, LiveReport | None]:
    """A case page's rows: replay the recorded rows, or run the plan live first (``run_case``), then replay.

    The checks of ``checked_choice`` come first. The rows returned are those the filter parameters choose
    (``select_rows``): every row of the case when none is given, with the runs other cases recorded of the same points
    (``replay_case_with_same_points``), each with its paired session and host readings
    (``results.conditions``; the GPU samples left unread), so comparisons judge paired runs pair by pair. Live mode
    takes ``gpu_memory_gib`` from the GPU at hand (``live_overrides``) and returns, beside the rows, what the run did
    (``LiveReport``; None in replay mode): ``cases.results.results_for`` prints it in a line.
    """
    plan, overrides = checked_choice(case, mode, plan_overrides, part)
    data = run_kwargs.get("data")
    live = None
    if mode == "live":
        with case_runner_lock(store.case_dir(plan.case, data)):
            report = run_case(load_plan(case, **live_overrides(overrides)), **run_kwargs)
        report.raise_for_failures()
        live = LiveReport(report, replay_case(plan.case, data), store.case_dir(plan.case, data))
    rows = replay_case_with_same_points(plan.case, data)
    if not rows.empty:
        rows = with_run_conditions(rows, data, gpu_samples=False)
    return select_rows(rows, plan, overrides), live
