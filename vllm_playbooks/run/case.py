"""The two doors: ``run_case`` measures a plan on the GPUs at hand (live), ``replay_case`` rebuilds it from disk.

Live: one server lifetime per engine config, every load level against it; each finished point is written at once
(raw folder first, then its row), a rerun skips finished points, and a point that fails is kept as a failure file
(retryable) while every finished point stays.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_playbooks import paths
from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.engine.gpu_sampler import GpuSampler, gpu_at_hand, nvml_sampler
from vllm_playbooks.engine.leftovers import SERVERS_FILE, stop_leftovers
from vllm_playbooks.engine.metrics import parse_metrics, scrape
from vllm_playbooks.engine.server import VllmServer
from vllm_playbooks.errors import ConfigError, PlaybookError, ServerError, StorageError
from vllm_playbooks.load.bench import BenchClient, bench_argv
from vllm_playbooks.results import raw, store
from vllm_playbooks.results.identity import engine_gpus, hardware_key
from vllm_playbooks.results.provenance import Provenance, collect_provenance, query_gpus, utc_now
from vllm_playbooks.results.replay import replay_case, sync_rows
from vllm_playbooks.results.schema import RUN_COLUMNS, RunRow
from vllm_playbooks.results.server_logs import has_started, read_failed_startup
from vllm_playbooks.results.textfiles import stored_path
from vllm_playbooks.results.stalls import STALL_S, STALL_SHARE, gaps_between, mark_stalled
from vllm_playbooks.results.store import append_run_row, load_run_rows, rows_to_frame
from vllm_playbooks.run.engine_server import EngineServer, ServerFactory, say
from vllm_playbooks.run.plan import CasePlan, PlannedPoint, load_plan, overrides_for, quiet_plan
from vllm_playbooks.shapes import resolve_model, vllm_path

if TYPE_CHECKING:
    import pandas as pd


#: Builds the sampler for one measured run: (number of GPUs the engine uses, the server's environment) → sampler.
SamplerFactory = Callable[[int, dict[str, str]], GpuSampler]


def _sampler_for(engine: EngineConfig, factory: SamplerFactory | None) -> GpuSampler | None:
    if factory is None:
        return None
    return factory(engine_gpus(engine), {**os.environ, **engine.env})


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


@dataclass
class RunReport:
    """What a live run did, by recorded point id (``<hardware>/<config id>/<load>-r<n>``): points measured, points
    skipped because they were already recorded on this hardware, failures."""

    measured: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    server_startup_s: dict[str, float] = field(default_factory=dict)

    def raise_for_failures(self) -> None:
        """Raise ``PlaybookError`` naming the failed points (finished ones are already on disk)."""
        if self.failed:
            lines = "\n".join(f"- {pid}: {err.splitlines()[0]}" for pid, err in self.failed.items())
            raise PlaybookError(
                f"{len(self.failed)} point(s) failed; {len(self.measured)} measured and kept. "
                f"Rerun the same call to retry only what is missing.\n{lines}"
            )


def require_vllm() -> None:
    """Live mode needs vLLM in this environment; say so before anything starts."""
    if importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            "live mode needs vLLM in this Python environment (pip install -r requirements-gpu.txt); "
            "replay mode needs none"
        )


def hardware_of(engine: EngineConfig, provenance: Provenance) -> str:
    """The hardware key of the points ``engine`` measures on the machine ``provenance`` describes."""
    return hardware_key(provenance.gpu_name, engine_gpus(engine), provenance.vllm_version)


def _point_record(point: PlannedPoint, plan: CasePlan, hardware: str, **extra: Any) -> dict[str, Any]:

    shape = resolve_model(point.engine.model)
    return {
        "case": plan.case,
        "hardware": hardware,
        "point_id": f"{hardware}/{point.point_id}",
        "config_id": point.engine.config_id(),
        "repeat": point.repeat,
        "model_shape": shape.name,
        "quantization": shape.quantization,
        "engine": point.engine.resolved(),
        "load": point.load.model_dump(mode="json"),
        **extra,
    }


def measure_point(
    point: PlannedPoint,
    plan: CasePlan,
    server: VllmServer,
    bench: BenchClient,
    provenance: Provenance,
    data: Path,
    gpu_sampler: SamplerFactory | None = nvml_sampler,
) -> RunRow:
    """Calibrate (uncounted warm-up), then measure one load level between two ``/metrics`` scrapes; record it.

    The engine's GPUs are sampled (``gpu_sampler``; ``None``: not at all) from just before the first scrape to just
    after the second; the samples go into the raw folder as ``gpu_samples.csv`` and ``point.json`` says how it went.
    """
    engine, load = point.engine, point.load

    tokenizer = engine.tokenizer_path()
    model_arg = str(vllm_path(resolve_model(engine.model), create=True))
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        work = Path(tmp)

        def run(num_prompts: int, filename: str) -> tuple[list[str], str]:
            argv = bench_argv(
                load,
                base_url=server.base_url,
                model=model_arg,
                tokenizer=str(tokenizer) if tokenizer else model_arg,
                num_prompts=num_prompts,
                result_dir=work,
                result_filename=filename,
            )
            bench(argv)
            return argv, (work / filename).read_text(encoding="utf-8")

        warmup_prompts = load.warmup_prompts()
        _, warmup_text = run(warmup_prompts, raw.WARMUP_FILE)
        warmup = json.loads(warmup_text)
        rps = warmup["completed"] / warmup["duration"] if warmup.get("duration") else None
        num_prompts = load.measured_prompts(rps, plan.min_duration_s)
        remeasured_because: list[str] = []
        for attempt in (1, 2):
            sampler = _sampler_for(engine, gpu_sampler)
            if sampler is not None:
                sampler.start()
            try:
                before = scrape(server.base_url)
                argv, bench_text = run(num_prompts, raw.BENCH_FILE)
                after = scrape(server.base_url)
            finally:
                if sampler is not None:
                    sampler.stop()
            result = json.loads(bench_text)
            incomplete_run_check(result, num_prompts)
            duration = float(result["duration"])
            short = duration < plan.min_duration_s and load.request_rate_qps is None
            gaps = gaps_between(parse_metrics(before), parse_metrics(after))
            share = gaps.share_of(result["completed"], result["mean_e2el_ms"]) if gaps is not None else 0.0
            stalled = share >= STALL_SHARE
            if attempt == 2 or not (short or stalled):
                break
            # Either run becomes more warm-up and the point is measured once more. A short run: the calibration
            # under-estimated the steady rate (the first requests are the slowest), so the next run gets the count
            # its own rate asks for. A stalled run (output-token gaps of seconds, results/stalls.py): same count.
            if short:
                remeasured_because.append(f"short: {duration:.1f} s < {plan.min_duration_s:g} s")
                num_prompts = max(num_prompts + 1, math.ceil(num_prompts * 1.1 * plan.min_duration_s / duration))
            if stalled and gaps is not None:
                remeasured_because.append(f"stalled: {gaps.stalled} output-token gaps over {STALL_S:g} s, "
                                          f"at least {share:.1%} of the requests' time")  # fmt: skip
    hardware = hardware_of(engine, provenance)
    record = _point_record(
        point,
        plan,
        hardware,
        num_warmup_prompts=warmup_prompts,
        measured_at=utc_now(),
        measurement_attempts=attempt,
        remeasured_because=remeasured_because,
        server_argv=server.argv,
        bench_argv=["vllm", "bench", "serve", *argv],
        server_startup_s=server.startup_s,
        gpu_sampling=sampler.record() if sampler is not None else {"status": "disabled", "reason": "no sampler given"},
    )
    files = {
        raw.POINT_FILE: json.dumps(record, indent=2, sort_keys=True),
        raw.PROVENANCE_FILE: provenance.model_dump_json(indent=2),
        raw.WARMUP_FILE: warmup_text,
        raw.BENCH_FILE: bench_text,
        raw.METRICS_BEFORE: before,
        raw.METRICS_AFTER: after,
    }
    if sampler is not None and sampler.samples:
        files[raw.GPU_SAMPLES_FILE] = sampler.csv_text()
    case_dir = store.case_dir(plan.case, data)
    try:
        folder = raw.write_point(case_dir, f"{hardware}/{point.point_id}", files)
        row = raw.row_from_point(folder, data)
        append_run_row(row, data)
    except OSError as error:
        raise StorageError(f"cannot write to {case_dir}: {error.strerror or error}. The points recorded before are "
                           "kept; make room (or make it writable) and run the same command again") from error
    return row


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


def incomplete_run_check(result: dict[str, Any], sent: int) -> None:
    """Refuse a measured run whose requests did not all complete: ``ServerError`` (the point is kept as a failure
    file and measured again by the next run), never a row of partial or zero throughput."""
    completed, failed = int(result.get("completed") or 0), int(result.get("failed") or 0)
    if failed or completed < sent:
        raise ServerError(f"the measured run completed {completed} of {sent} requests ({failed} failed): not recorded "
                          "as a point; the next run measures it again")  # fmt: skip


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
) -> RunReport:
    """Measure every point of ``plan`` that is not recorded yet; one server per engine config.

    A recorded point whose run stalled (``results.stalls``) is measured once more as the next repeat of the same
    engine config and load (``remeasure_stalled``; the stalled record stays): pages use the repeat that did not stall.

    ``bench`` defaults to vLLM's own ``bench serve`` in-process; ``python`` is the interpreter that starts the
    server (default: this one). ``gpu_sampler`` samples the engine's GPUs during each measured run (default: NVML;
    where NVML is missing the point says so and the run goes on; ``None``: no sampling). Returns a report; call
    ``report.raise_for_failures()`` to fail loudly.
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
    report = RunReport(skipped=[f"{hardware_of(p.engine, provenance)}/{p.point_id}" for p in plan.points()
                                if p.point_id in done])  # fmt: skip
    todo = points_to_measure(plan, done, stalled)
    if not todo:
        return report
    if bench is None:
        require_vllm()
    bar = tqdm(total=len(todo), desc=plan.case, disable=not progress, unit="point")
    with sigterm_as_interrupt():
        _run_groups(plan, todo, bench, server_factory, python, health_timeout_s, provenance, data, report, bar,
                    gpu_sampler)  # fmt: skip
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
        recorded = {raw.split_point_id(pid)[1]: pid in stalled for pid in done
                    if raw.split_point_id(pid)[0] == point}  # fmt: skip
        usable = sum(1 for is_stalled in recorded.values() if not is_stalled)
        planned_missing = sum(1 for p in planned if p.point_id not in done)
        owed = len(planned) - planned_missing - usable
        after = max([*recorded, *(p.repeat for p in planned)]) + 1
        todo.extend(PlannedPoint(engine, load, after + i) for i in range(max(owed, 0)))
    return todo


def _stalled_point_ids(case: str, data: Path) -> set[str]:
    """Ids of the recorded points of ``case`` whose measured run stalled."""
    rows = load_run_rows(case, data)
    if not rows:
        return set()
    marked = mark_stalled(rows_to_frame(rows, RUN_COLUMNS), data)
    return set(marked.loc[marked["stalled"], "point_id"])


def _run_groups(
    plan: CasePlan,
    todo: list[PlannedPoint],
    bench: BenchClient | None,
    server_factory: ServerFactory,
    python: str | None,
    health_timeout_s: float,
    provenance: Provenance,
    data: Path,
    report: RunReport,
    bar: Any,
    gpu_sampler: SamplerFactory | None = nvml_sampler,
) -> None:
    case_dir = store.case_dir(plan.case, data)
    for engine, group in groupby(todo, key=lambda p: p.engine):
        points = list(group)
        config_id, hardware = engine.config_id(), hardware_of(engine, provenance)
        lifetime = EngineServer(engine, case_dir, bench, server_factory, python, health_timeout_s)
        try:
            with lifetime as server:
                report.server_startup_s[config_id] = server.startup_s or 0.0
                for index, point in enumerate(points):
                    try:
                        measure_point(point, plan, server, lifetime.bench, provenance, data, gpu_sampler)
                        report.measured.append(f"{hardware}/{point.point_id}")
                    except StorageError:
                        raise
                    except (PlaybookError, OSError, KeyError, ValueError, RuntimeError) as error:
                        record_failed_point(case_dir, point, error, report, lifetime.log_path, hardware)
                        if not server.alive():
                            died = RuntimeError("server died earlier in this config")
                            for rest in points[index + 1 :]:
                                record_failed_point(case_dir, rest, died, report, lifetime.log_path, hardware)
                            break
                    bar.update(1)
        except StorageError:
            raise
        except PlaybookError as error:
            cause = startup_cause(error, lifetime.log_path)  # read once for all the points of this server
            for point in points:
                recorded_id = f"{hardware}/{point.point_id}"
                if recorded_id not in report.measured and recorded_id not in report.failed:
                    record_failed_point(case_dir, point, error, report, lifetime.log_path, hardware, cause)
                    bar.update(1)


def startup_cause(error: BaseException, log: Path) -> str | None:
    """For a ``ServerError`` of a server that did not start, the first error its log ``log`` names
    (``read_failed_startup``); None for any other error, or where the log names none."""
    if not isinstance(error, ServerError):
        return None
    found = stored_path(log)
    if found is None or not found.is_file() or has_started(log):
        return None
    return read_failed_startup(log).error


def record_failed_point(case_dir: Path, point: PlannedPoint, error: BaseException, report: RunReport, log: Path,
                        hardware: str, cause: str | None = None) -> None:  # fmt: skip
    """Note ``point`` as failed in ``report`` and keep its error beside the finished points
    (``raw/<hardware>/<point id>.failure.json``, naming the server log ``log``): the next run measures it again. A
    ``cause`` (``startup_cause``: why a server did not start) goes in front, so that the one line a failure gets says
    why."""
    name, recorded_id = type(error).__name__, f"{hardware}/{point.point_id}"
    message = f"{name} ({cause}): {error}" if cause else f"{name}: {error}"
    report.failed[recorded_id] = message
    raw.record_failure(case_dir, recorded_id, message, {"server_log": str(log)})


#: Notebook parameters that choose which replayed rows a page shows (besides ``part``, which sets them).
ROW_FILTERS = ("engines", "concurrency", "request_rate_qps", "profiles", "input_len", "output_len",
               "random_range_ratio")  # fmt: skip


def require_gpu() -> None:
    """Live mode needs an NVIDIA GPU this process can see (NVML, ``CUDA_VISIBLE_DEVICES``: ``query_gpus``); say so
    before anything starts."""
    _, count, _, _ = query_gpus()
    if count == 0:
        raise ConfigError("live mode needs an NVIDIA GPU, and this machine shows none (NVML: no driver, no "
                          "nvidia-ml-py or vLLM to read it, or CUDA_VISIBLE_DEVICES hides every GPU); replay mode "
                          "needs none")  # fmt: skip


def _load_key(input_len: Any, output_len: Any, concurrency: Any, rate: Any) -> tuple[int, int, float, float]:
    """A load level as rows and plans both spell it: lengths, then concurrency and rate (-1 for none)."""
    import pandas as pd

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
        raise ConfigError(f"case {case}: no recorded row at {what} {absent}; recorded: {recorded or 'none'} "
                          "(replay shows recorded rows; mode=live measures new ones)")  # fmt: skip


def select_rows(rows: pd.DataFrame, plan: CasePlan, given: Collection[str]) -> pd.DataFrame:
    """The replayed ``rows`` that the filter parameters named in ``given`` (``ROW_FILTERS``, as applied to ``plan``)
    choose: the plan's engine labels when ``engines`` was given, the plan's load levels (per engine) when a load was
    given. A value that names no recorded row is refused (``ConfigError``, naming the recorded values), and so is a
    choice that leaves no row; with no filter given every row is kept."""
    chosen = set(given) & set(ROW_FILTERS)
    if not chosen:
        return rows
    out = rows
    if "engines" in chosen:
        labels = [engine.label for engine in plan.engines]
        _refuse_unrecorded(out, "engine_label", labels, plan.case, "engine")
        out = out[out["engine_label"].isin(labels)]
    if chosen - {"engines"}:
        if "concurrency" in chosen:
            asked = sorted({load.concurrency for e in plan.engines for load in plan.loads_for(e) if load.concurrency})
            _refuse_unrecorded(out, "concurrency", asked, plan.case, "concurrency")
        if "request_rate_qps" in chosen:
            asked = sorted({load.request_rate_qps for e in plan.engines for load in plan.loads_for(e)
                            if load.request_rate_qps is not None})  # fmt: skip
            _refuse_unrecorded(out, "request_rate_qps", asked, plan.case, "request rate")
        planned = {engine.label: plan.loads_for(engine) for engine in plan.engines}
        with_ratio = "random_range_ratio" in chosen
        keep = []
        for row in out.itertuples():
            loads = planned.get(row.engine_label, plan.loads)
            key = _load_key(row.input_len, row.output_len, row.concurrency, row.request_rate_qps)
            keep.append(any(
                key == _load_key(load.input_len, load.output_len, load.concurrency, load.request_rate_qps)
                and (not with_ratio or float(row.random_range_ratio) == load.random_range_ratio)
                for load in loads
            ))  # fmt: skip
        out = out[keep]
    if out.empty:
        raise ConfigError(f"case {plan.case}: no recorded row of the chosen engines at the chosen loads; the recorded "
                          f"engines are {sorted(set(rows['engine_label']))}")  # fmt: skip
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


def live_summary(report: RunReport, rows: pd.DataFrame, folder: Path) -> str:
    """One line on a live run: the points it measured and on what hardware (from their rows), those it skipped as
    already recorded, and the folder its rows are in."""
    mine = rows[rows["point_id"].isin(report.measured)]
    measured = "no point measured"
    if report.measured:
        measured = f"{len(report.measured)} point(s) measured on {hardware_in_words(mine)}"
    return f"live: {measured}, {len(report.skipped)} already recorded and skipped; rows in {folder}"


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


def results_for(
    case: str,
    mode: str,
    plan_overrides: dict[str, Any] | None = None,
    part: str | None = None,
    **run_kwargs: Any,
) -> pd.DataFrame:
    """What a case notebook calls: replay the recorded rows, or run the plan live first (``run_case``), then replay.

    The checks of ``checked_choice`` come first. The rows returned are those the filter parameters choose
    (``select_rows``): every row of the case when none is given. Live mode takes ``gpu_memory_gib`` from the GPU at
    hand (``live_overrides``) and prints one line: the points measured, on what hardware, the points skipped as
    already recorded on it, and where the rows are.
    """
    plan, overrides = checked_choice(case, mode, plan_overrides, part)
    data = run_kwargs.get("data")
    if mode == "live":
        report = run_case(load_plan(case, **live_overrides(overrides)), **run_kwargs)
        report.raise_for_failures()
        rows = replay_case(plan.case, data)
        print(live_summary(report, rows, store.case_dir(plan.case, data)))
    else:
        rows = replay_case(plan.case, data)
    return select_rows(rows, plan, overrides)
