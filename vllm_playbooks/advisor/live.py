"""``vllm-playbooks advise --mode live``: the advisor's search on this machine's GPU, measuring through the live runner.

Before any GPU work the command checks the case's plan and the grid the filters pick (``live_plan.live_grid``: one
model shape, one pair of lengths, one kind of load), the SLO, the budget, the GPU group, and that every point of the
grid has a price (``live_plan.live_prices``: ``run.budget``'s estimates from the case's recorded runs, the ones
``vllm-playbooks plan`` prints); then that vLLM and a GPU are here (``run.case``'s checks, as ``run`` makes them).

Then ``advise_live`` prepares the case folder as the runner does (``run.case.open_case_folder``), takes the rows
recorded on this machine's hardware as measured (free; ``use_recorded``), refuses a budget short of the one with
which the search measures speculation off first (``require_baseline_first``), and runs the search (``advisor.search``)
over a ``LiveOracle`` whose measuring function is ``LiveMeasure``: it starts a config's server
(``run.engine_server.EngineServer``), keeps it while the next point is of the same config, measures one point with the
runner's ``measure_point`` (raw folder, row, provenance and hardware key as ``vllm-playbooks run`` writes them, as the
next repeat of that point on this hardware), and stops the server when the search moves to another config, ends,
fails or is interrupted. The search's trace goes to ``data/runs/<case>/advisor/`` (``advisor.trace``).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_playbooks import paths
from vllm_playbooks.advisor.goodput import Slo, point_name
from vllm_playbooks.advisor.grids import GridFilter
from vllm_playbooks.advisor.live_plan import LiveGrid, LivePrices, live_grid, live_prices
from vllm_playbooks.advisor.oracle import LiveOracle, PointKey, point_key
from vllm_playbooks.advisor.search import PLAN_MARGIN, Advice, advise, baseline_first_gpu_s
from vllm_playbooks.advisor.trace import TraceWriter
from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.config.load import LoadPoint
from vllm_playbooks.engine.gpu_sampler import nvml_sampler
from vllm_playbooks.engine.server import VllmServer
from vllm_playbooks.errors import ConfigError, PlaybookError, StorageError
from vllm_playbooks.hardware import datasheet_gpu
from vllm_playbooks.load.bench import BenchClient
from vllm_playbooks.results import raw, store
from vllm_playbooks.results.provenance import Provenance, utc_now
from vllm_playbooks.results.stalls import unstalled
from vllm_playbooks.run.case import (
    live_overrides,
    open_case_folder,
    require_gpu,
    require_vllm,
    sigterm_as_interrupt,
)
from vllm_playbooks.run.engine_server import EngineServer, ServerFactory
from vllm_playbooks.run.measure import (
    RunReport,
    SamplerFactory,
    hardware_of,
    measure_point,
    record_failed_point,
    server_hardware,
    startup_cause,
)
from vllm_playbooks.run.parallel import assign_engines, check_group_sizes
from vllm_playbooks.run.plan import CasePlan, PlannedPoint, quiet_plan

if TYPE_CHECKING:
    import pandas as pd


def _recorded_prefix(hardware: str, engine: EngineConfig, load: LoadPoint) -> str:
    """The point id of ``engine`` at ``load`` on ``hardware`` without its repeat (``raw.split_point_id``'s first
    part): what every recorded repeat of that point shares."""
    return f"{hardware}/{engine.config_id()}/{load.slug()}"


def recorded_rows(grid: LiveGrid, provenance: Provenance, data: Path | None = None) -> pd.DataFrame:
    """The rows of ``grid``'s points recorded on the hardware each config has on the machine ``provenance``
    describes (its GPU model, the GPUs the config uses, the vLLM version), at exactly the planned load, without the
    runs that stalled (``results.stalls``): what a live search counts as measured."""
    case = str(grid.key["case"])
    rows = store.load_runs(case, data)
    prefixes = {
        _recorded_prefix(hardware_of(engine, provenance), engine, load) for engine, load in grid.points.values()
    }
    mine = rows[[raw.split_point_id(pid)[0] in prefixes for pid in rows["point_id"]]] if len(rows) else rows
    return unstalled(mine, data).reset_index(drop=True) if len(mine) else mine


def next_repeat(case_dir: Path, hardware: str, engine: EngineConfig, load: LoadPoint) -> int:
    """The repeat index the next run of ``engine`` at ``load`` on ``hardware`` is recorded under: one past every
    repeat with a point folder (0 for the first), so no recorded folder is ever reused."""
    return raw.next_repeat(raw.raw_root(case_dir) / hardware / engine.config_id(), load.slug())


class LiveMeasure:
    """The live search's measuring function: a catalog line of ``grid`` in, the row the runner recorded for it out.

    It starts the line's config's server (``run.engine_server.EngineServer``) unless that server is already up,
    stopping the one up before; measures the point with ``run.measure.measure_point`` as the next repeat of that point
    on this hardware (``next_repeat``); and keeps the server for the next line. ``close``, or the end of a ``with``
    block whatever ends it, stops the server. A point that fails, or whose server does not start, is kept as a failure
    file beside the recorded points (as the runner keeps one) and ends the search (``PlaybookError``). ``report`` lists
    the points measured and failed (``run.measure.RunReport``)."""

    def __init__(
        self,
        plan: CasePlan,
        grid: LiveGrid,
        provenance: Provenance,
        data: Path,
        *,
        bench: BenchClient | None = None,
        server_factory: ServerFactory = VllmServer,
        python: str | None = None,
        health_timeout_s: float = 900.0,
        gpu_sampler: SamplerFactory | None = nvml_sampler,
    ) -> None:
        self.plan, self.grid, self.provenance, self.data = plan, grid, provenance, data
        self.case_dir = store.case_dir(plan.case, data)
        self.report = RunReport()
        self._bench, self._server_factory, self._python = bench, server_factory, python
        self._health_timeout_s, self._gpu_sampler = health_timeout_s, gpu_sampler
        self._lifetime: EngineServer | None = None

    def __call__(self, line: dict[str, Any]) -> dict[str, Any]:
        engine, load = self.grid.points[point_key(line)]
        hardware = hardware_of(engine, self.provenance)
        point = PlannedPoint(engine, load, next_repeat(self.case_dir, hardware, engine, load))
        try:
            server, bench = self._server_for(engine)
            row = measure_point(point, self.plan, server, bench, self.provenance, self.data, self._gpu_sampler)
        except StorageError:
            raise
        except (PlaybookError, OSError, KeyError, ValueError, RuntimeError) as error:
            log = self._lifetime.log_path if self._lifetime is not None else self.case_dir / "logs"
            record_failed_point(self.case_dir, point, error, self.report, log, hardware, startup_cause(error, log))
            raise PlaybookError(
                f"point {hardware}/{point.point_id} failed ({type(error).__name__}: {error}); the "
                "points measured before it are recorded, and its error is kept beside them"
            ) from error
        self.report.measured.append(row.point_id)
        return row.model_dump()

    def _server_for(self, engine: EngineConfig) -> tuple[VllmServer, BenchClient]:
        """The running server of ``engine`` and its load generator, the server started (after stopping the one up)
        unless it is up already."""
        running = self._lifetime
        if running is not None and running.engine == engine and running.server is not None and running.server.alive():
            return running.server, running.bench
        self.close()
        self._lifetime = EngineServer(
            engine,
            self.case_dir,
            self._bench,
            self._server_factory,
            self._python,
            self._health_timeout_s,
            hardware=server_hardware(engine, self.provenance),
        )
        server = self._lifetime.start()
        self.report.server_startup_s[engine.config_id()] = server.startup_s or 0.0
        return server, self._lifetime.bench

    def close(self) -> None:
        """Stop the server that is up, if any."""
        lifetime, self._lifetime = self._lifetime, None
        if lifetime is not None:
            lifetime.stop()

    def __enter__(self) -> LiveMeasure:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class TracedLiveOracle(LiveOracle):
    """A ``LiveOracle`` that writes each payment to the search's trace as soon as its row is in
    (``TraceWriter.payment``), with the GPU-seconds the GPUs were actually held for it: the wall time of the
    measurement, a server's stop and start included, times the GPUs its config uses (0 for a recorded row)."""

    def __init__(
        self,
        catalog: pd.DataFrame,
        budget_gpu_s: float,
        measure: Callable[[dict[str, Any]], dict[str, Any]],
        prices: LivePrices,
        trace: TraceWriter,
        slo: Slo,
        recorded: pd.DataFrame | None = None,
    ) -> None:
        super().__init__(catalog, budget_gpu_s, measure, prices.run_estimate, prices.startup_estimate, recorded)
        self._trace, self._slo = trace, slo

    def pay(self, key: PointKey) -> dict[str, Any]:
        """As ``LiveOracle.pay``, then the payment's line in the trace."""
        recorded = self._free(key)
        started = time.monotonic()
        row = super().pay(key)
        held = 0.0 if recorded else (time.monotonic() - started) * self.gpus(key[0])
        payment, line = self.payments[-1], self._lines[key]
        self._trace.payment(
            number=len(self.payments),
            point=point_name(line["engine_label"], line["concurrency"], line["request_rate_qps"]),
            repeat=payment.repeat,
            recorded=recorded,
            row=row,
            gpu_s=payment.gpu_s,
            startup_gpu_s=payment.startup_gpu_s,
            held_gpu_s=held,
            spent_gpu_s=self.spent_gpu_s,
            slo=self._slo,
        )
        return row


@dataclass
class LiveSearch:
    """A finished live search: the case its rows are recorded under, its advice, its trace file and the runner's
    report of what it measured."""

    case: str
    advice: Advice
    trace: Path
    report: RunReport


def advise_live(
    plan: CasePlan,
    grid: LiveGrid,
    slo: Slo,
    budget_gpu_s: float,
    prices: LivePrices,
    *,
    data: Path | None = None,
    use_recorded: bool = True,
    bench: BenchClient | None = None,
    server_factory: ServerFactory = VllmServer,
    python: str | None = None,
    health_timeout_s: float = 900.0,
    gpu_sampler: SamplerFactory | None = nvml_sampler,
) -> LiveSearch:
    """Search ``grid`` for the point of most goodput under ``slo`` on this machine, spending at most
    ``budget_gpu_s`` GPU-seconds of ``prices``' estimates (see the module's docstring). ``use_recorded``: rows
    recorded on this hardware count as measured (False: every run the search pays for is measured, as further
    repeats). ``bench``, ``server_factory``, ``python``, ``health_timeout_s`` and ``gpu_sampler`` are the runner's
    (``run.case.run_case``). Ctrl-C, SIGTERM or a point that fails stop the server and end the trace with the reason,
    then propagate."""
    data = data if data is not None else paths.data_dir()
    provenance = open_case_folder(plan.case, data)
    hardware = sorted({hardware_of(engine, provenance) for engine in grid.engines()})
    gpu = datasheet_gpu(hardware[0])
    recorded = recorded_rows(grid, provenance, data) if use_recorded else None
    measure = LiveMeasure(
        plan,
        grid,
        provenance,
        data,
        bench=bench,
        server_factory=server_factory,
        python=python,
        health_timeout_s=health_timeout_s,
        gpu_sampler=gpu_sampler,
    )
    catalog = grid.catalog()
    unpaid = LiveOracle(catalog, budget_gpu_s, measure, prices.run_estimate, prices.startup_estimate, recorded)
    require_baseline_first(baseline_first_gpu_s(unpaid, slo, gpu), budget_gpu_s)
    started_at = utc_now()
    trace = TraceWriter.create(plan.case, started_at, data)
    trace.search(
        case=plan.case,
        grid=grid.key,
        hardware=hardware,
        slo=slo,
        budget_gpu_s=budget_gpu_s,
        points=len(grid.points),
        grid_gpu_s=prices.grid_gpu_s(),
        recorded_count=use_recorded,
        started_at=started_at,
    )
    with sigterm_as_interrupt(), measure:
        oracle = TracedLiveOracle(catalog, budget_gpu_s, measure, prices, trace, slo, recorded)
        try:
            advice = advise(oracle, slo, gpu)
        except KeyboardInterrupt:
            _end_quietly(trace, "interrupted (Ctrl-C or SIGTERM); the runs paid for are recorded")
            raise
        except PlaybookError as error:
            _end_quietly(trace, str(error))
            raise
    trace.advice(advice)
    return LiveSearch(case=plan.case, advice=advice, trace=trace.path, report=measure.report)


def require_baseline_first(needed_gpu_s: float | None, budget_gpu_s: float) -> None:
    """``ConfigError`` when a live search's budget is short of ``needed_gpu_s``, the least with which it measures
    speculation off first (``advisor.search.baseline_first_gpu_s``; None: the grid has no such plan): on less it would
    start with a speculative config and could recommend one with nothing measured beside it."""
    if needed_gpu_s is None or budget_gpu_s >= needed_gpu_s:
        return
    needed_min = math.ceil(needed_gpu_s / 6.0) / 10.0
    raise ConfigError(
        f"--budget-gpu-min {budget_gpu_s / 60.0:g} is short of the {needed_min:.1f} GPU-minutes with "
        "which the search measures speculation off first (its first point and then a speculative one, "
        f"server start-ups included, at this grid's prices, times {PLAN_MARGIN:g}); on less it would "
        "start with a speculative config and could recommend one with no baseline measured beside it: "
        f"give --budget-gpu-min {needed_min:.1f} or more"
    )


def _end_quietly(trace: TraceWriter, reason: str) -> None:
    """End the trace with ``reason``; a trace that cannot be written (a full disk) does not hide the error itself."""
    with contextlib.suppress(OSError):
        trace.stopped(reason)


def search_live(
    case: str,
    slo: Slo,
    budget_gpu_s: float,
    *,
    filters: GridFilter = GridFilter(),
    gpus: str | None = None,
    use_recorded: bool = True,
) -> LiveSearch:
    """``vllm-playbooks advise --mode live``: the checks (see the module's docstring: the plan, the grid ``filters``
    pick, the GPU group ``gpus`` when given, the prices, vLLM and a GPU), then the search (``advise_live``) spending
    at most ``budget_gpu_s`` GPU-seconds; ``gpus`` also becomes ``CUDA_VISIBLE_DEVICES`` of this process."""
    plan, _ = quiet_plan(case)
    grid = live_grid(plan, filters)
    if gpus is not None:
        engines = grid.engines()
        check_group_sizes(engines, assign_engines([e.label for e in engines], [gpus]))
    prices = live_prices(plan, grid)
    require_vllm()
    if gpus is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpus
    require_gpu()
    quiet_plan(case, **live_overrides({}))  # a config that cannot fit the GPU at hand is refused here
    return advise_live(plan, grid, slo, budget_gpu_s, prices, use_recorded=use_recorded)
