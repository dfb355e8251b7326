"""What a case still needs on one hardware: ``vllm-playbooks plan``.

For a GPU model and vLLM version, the runs of a case (or one part of it) that its recorded rows lack, repeats
counted, one line per engine config with the GPU-minutes ``run.budget`` estimates; an engine the KV calculator says
cannot start on that GPU (its weights, or one full-length sequence, do not fit) is named with the reason and left out
of the estimate, and one whose server did not start there before is named with the error its log gave. ``--fresh``
estimates every point as a machine without compile caches measures it; ``--budget-s`` lists what a server started
now can measure in that many seconds. ``quick_check_gib`` is the memory per GPU a case's quick check's servers
need to start. ``cli.plan`` words these tables: the totals, whether a part fits, the failed start-ups.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from vllm_playbooks.config.capacity import budget_is_modelled, refused_engines
from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.config.pairing import BY_RESTART, restart_starts
from vllm_playbooks.engine.gpu_sampler import gpu_at_hand
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.hardware import datasheet_gpu
from vllm_playbooks.results.conditions import with_run_conditions
from vllm_playbooks.results.identity import engine_gpus, hardware_key
from vllm_playbooks.results.server_logs import logged_gpu_memory
from vllm_playbooks.results.stalls import mark_stalled
from vllm_playbooks.results.store import load_runs
from vllm_playbooks.run.budget import (
    LOAD,
    point_estimates,
    remaining_time,
    runs_at_load,
    server_time,
    startups_by_shape,
)
from vllm_playbooks.run.plan import (
    QUICK_PART,
    CasePlan,
    load_part,
    load_plan,
    paired_for_memory,
    part_note,
    part_overrides,
    quiet_plan,
)

if TYPE_CHECKING:
    import pandas as pd


def rows_of_hardware(plan: CasePlan, measured: pd.DataFrame, gpu_name: str, vllm_version: str) -> pd.DataFrame:
    """The rows of ``measured`` recorded on ``gpu_name`` with ``vllm_version``, each engine config of ``plan`` with
    the GPUs it uses (``hardware_key``): what a live run on that hardware would skip. A paired plan skips only runs
    measured in a paired session (``pair_session``, ``results.conditions``; rows without the column count as none)."""
    keys = {engine.label: hardware_key(gpu_name, engine_gpus(engine), vllm_version) for engine in plan.engines}
    if measured.empty:
        return measured
    if plan.pairing is not None:
        measured = measured[measured["pair_session"].notna()] if "pair_session" in measured else measured.iloc[:0]
    return measured[measured["hardware"] == measured["engine_label"].map(keys)]


def hardware_plan(
    plan: CasePlan,
    measured: pd.DataFrame,
    servers: pd.DataFrame,
    gpu_name: str,
    vllm_version: str,
    margin: float = 1.25,
) -> pd.DataFrame:
    """What ``plan`` still needs on ``gpu_name`` with ``vllm_version``: one line per engine config with its model
    shape, the runs recorded there (``recorded``), the runs to measure (``to_measure``, repeats counted) and their
    loads, the GPUs a server uses, ``remaining_time``'s estimates (from the runs recorded on any hardware) with
    ``gpu_minutes``, start-up included (NaN when unknown), and ``cached_startup_s``, the shortest start-up recorded for
    its shape (a server that finds the compile caches of one before it; ``startups_by_shape``)."""
    import pandas as pd

    here = rows_of_hardware(plan, measured, gpu_name, vllm_version)
    points = point_estimates(plan, measured, servers, here)
    times = remaining_time(plan, measured, servers, margin, here).set_index("engine_label")
    shapes, _, shortest_startup = startups_by_shape(plan, measured, servers)
    starts = _server_starts(plan, points)
    records = []
    for engine in plan.engines:
        todo = points[points["engine_label"] == engine.label]
        mine = here[here["engine_label"] == engine.label] if len(here) else here
        recorded = sum(int(runs_at_load(mine, load).sum()) for load in plan.loads_for(engine)) if len(mine) else 0
        loads = pd.Series([_load_name(r) for r in todo.itertuples()]).value_counts(sort=False)
        row = times.loc[engine.label] if engine.label in times.index else None
        gpus = engine_gpus(engine)
        cached = float(shortest_startup.get(shapes[engine.label], math.nan))
        restarts = max(starts[engine.label] - 1, 0)
        records.append(
            {
                "engine_label": engine.label,
                "model_shape": shapes[engine.label],
                "gpus": gpus,
                "recorded": recorded,
                "to_measure": len(todo),
                "loads": ", ".join(f"{name} ×{n}" if n > 1 else name for name, n in loads.items()) or "—",
                "starts": starts[engine.label],
                "startup_s": row["startup_s"] if row is not None else 0.0,
                "cached_startup_s": cached,
                "points_s": row["points_s"] if row is not None else 0.0,
                "time_limit_s": row["time_limit_s"] if row is not None else 0.0,
                "gpu_minutes": (
                    gpus * (row["startup_s"] + restarts * cached + row["points_s"]) / 60.0 if row is not None else 0.0
                ),
            }
        )
    return pd.DataFrame(records)


def _server_starts(plan: CasePlan, points: pd.DataFrame) -> dict[str, int]:
    """How many times each engine's server starts to measure ``points`` (``point_estimates``' rows): once where it
    has a run to measure, or, in a plan paired by restart, once per lifetime (``config.pairing.restart_starts``)."""
    todo = points.groupby(["engine_label", *LOAD], dropna=False).size().groupby("engine_label").max()
    left = {engine.label: int(todo.get(engine.label, 0)) for engine in plan.engines}
    if plan.pairing == BY_RESTART:
        return restart_starts(left)
    return {label: int(repeats > 0) for label, repeats in left.items()}


def _load_name(row: object) -> str:
    """A run's load in a plan line: ``c16``, ``qps4``, with its lengths (``in512-out128-c16``)."""
    concurrency, rate = row.concurrency, row.request_rate_qps
    level = f"qps{rate:g}" if rate is not None and rate == rate else f"c{int(concurrency)}"
    return f"in{row.input_len}-out{row.output_len}-{level}"


def one_after_another_gpu_minutes(servers: pd.DataFrame) -> float:
    """The GPU-minutes of ``servers`` (``hardware_plan`` lines, in the plan's order, as the runner starts them) on one
    machine: the first server of each model shape with its start-up as estimated (a machine without compile caches),
    each later one with the shortest start-up recorded for its shape, as is every restart of a server."""
    seen: set[str] = set()
    total = 0.0
    for row in servers.itertuples():
        startup = row.cached_startup_s if row.model_shape in seen else row.startup_s
        seen.add(row.model_shape)
        total += row.gpus * (startup + max(row.starts - 1, 0) * row.cached_startup_s + row.points_s) / 60.0
    return total


#: Where ``gpu_memory_gib``'s figure comes from: this machine's GPU (NVML), vLLM's log of a recorded start-up on one,
#: or a datasheet row.
MemorySource = Literal["here", "log", "datasheet"]


@dataclass(frozen=True)
class GpuMemory:
    """The memory of one GPU in GiB (to 0.1) and where the figure comes from; ``datasheet`` names the datasheet row
    where ``source`` is one."""

    gib: float
    source: MemorySource
    datasheet: str = ""


def gpu_memory_gib(gpu_name: str, data: Path | None = None) -> GpuMemory | None:
    """The memory of one GPU called ``gpu_name`` and where the figure comes from: this machine's GPU (NVML) when it is
    one, else what vLLM logged at a recorded start-up on one (``server_logs.logged_gpu_memory``), else the datasheet's
    figure (``data/reference/hardware.csv``) read as GiB. That is an upper bound, as HBM comes in binary sizes and a
    GPU shows a little less than its nominal size, so an engine that ``cannot_start`` refuses on it cannot start
    there. None for a GPU none of them knows."""
    here = gpu_at_hand(os.environ.get("CUDA_VISIBLE_DEVICES"))
    if here is not None and here.name == gpu_name:
        return GpuMemory(round(here.memory_gib, 1), "here")
    logged = logged_gpu_memory(gpu_name, data)
    if logged is not None:
        return GpuMemory(round(logged, 1), "log")
    try:
        sheet = datasheet_gpu(gpu_name)
    except ConfigError:
        return None
    return GpuMemory(sheet.memory_gb, "datasheet", sheet.name)


def cannot_start(plan: CasePlan, table: pd.DataFrame, memory_gib: float) -> dict[str, str]:
    """The engines of ``plan`` that ``table`` (``hardware_plan``) still has to measure and whose weights, activations
    and CUDA graphs, or one full-length sequence, the KV calculator (``config.capacity.check_fits``) says cannot fit a
    GPU of ``memory_gib``, each with the calculator's reason: a live run refuses them before any GPU time. Engines
    whose memory the calculator does not model (``budget_is_modelled``) are not judged."""
    todo = set(table.loc[table["to_measure"] > 0, "engine_label"])
    return refused_engines((engine for engine in plan.engines if engine.label in todo), memory_gib)


def engine_memory_gib(engine: EngineConfig) -> float | None:
    """The least memory per GPU (GiB, rounded up to 0.1) with which the KV calculator (``check_fits``) lets ``engine``
    start: its weights, activations and CUDA graphs within its ``gpu_memory_utilization``, and a KV cache of at least
    one full-length sequence. None when the calculator does not model it (``budget_is_modelled``)."""
    if not budget_is_modelled(engine):
        return None
    low, high = 0.0, 4096.0  # GiB: refused at low, started at high
    while high - low > 0.05:
        middle = (low + high) / 2
        low, high = (middle, high) if refused_engines([engine], middle) else (low, middle)
    return math.ceil(high * 10) / 10


def least_gpu_memory_gib(plan: CasePlan) -> float | None:
    """The least memory per GPU (GiB, rounded up to 0.1) with which the KV calculator lets every engine of ``plan``
    start (``engine_memory_gib``); None when the calculator models no engine of it (``budget_is_modelled``)."""
    needs = [need for engine in plan.engines if (need := engine_memory_gib(engine)) is not None]
    return max(needs) if needs else None


def part_fits(plan: CasePlan, memory_gib: float) -> pd.DataFrame:
    """Whether each engine config of ``plan`` starts on GPUs of ``memory_gib`` each, recorded rows or not: its model
    shape, the GPUs it uses, the memory per GPU it needs (``engine_memory_gib``), ``fits`` (None where the calculator
    does not model it) and ``why_not``, the KV calculator's reason where it does not fit."""
    import pandas as pd

    refused = refused_engines(plan.engines, memory_gib)
    records = []
    for engine in plan.engines:
        needs = engine_memory_gib(engine)
        records.append(
            {
                "engine_label": engine.label,
                "model_shape": Path(engine.model).name,
                "gpus": engine_gpus(engine),
                "needs_gib": needs,
                "fits": None if needs is None else engine.label not in refused,
                "why_not": refused.get(
                    engine.label, "" if needs is not None else "memory not modelled for this config"
                ),
            }
        )
    return pd.DataFrame(records)


def quick_check_gib(case: str) -> float | None:
    """The memory per GPU (GiB) that the servers of a case's quick check need to start, as the KV calculator reckons
    it (``least_gpu_memory_gib``); None where the calculator models none of its engines. ``ConfigError`` where the
    case has no quick check."""
    plan, _ = quiet_plan(case, **part_overrides(case, QUICK_PART))
    return least_gpu_memory_gib(plan)


@dataclass(frozen=True)
class PlanInputs:
    """What ``vllm-playbooks plan`` reads for a case (or one part of it): its plan, the recorded rows (stalls marked;
    with run conditions where the case pairs its configs), the servers' recorded time and the part's note."""

    plan: CasePlan
    measured: pd.DataFrame
    servers: pd.DataFrame
    note: str | None


def plan_inputs(case: str, part: str | None = None, data: Path | None = None) -> PlanInputs:
    """Read what a plan of ``case`` (or its ``part``) is computed from, in ``data`` (default: the book's data/); a
    paired plan runs its servers together or by restart as the case file's ``gpu_memory_gib`` decides
    (``on_gpu_memory`` decides it for another GPU)."""
    plan = load_part(case, part) if part else load_plan(case)
    measured = mark_stalled(load_runs(plan.case, data), data)
    if plan.pairing is not None and not measured.empty:
        measured = with_run_conditions(measured, data, gpu_samples=False)
    return PlanInputs(plan, measured, server_time(case, data), part_note(case, part) if part else None)


def on_gpu_memory(inputs: PlanInputs, case: str, part: str | None, gpu_memory_gib: float) -> PlanInputs:
    """``inputs`` (``plan_inputs(case, part)``) with a paired plan's servers together or by restart as they fit GPUs
    of ``gpu_memory_gib`` (``run.plan.paired_for_memory``), as the live runner decides on the GPU at hand; the rows
    read already are kept."""
    overrides = part_overrides(case, part) if part else {}
    return replace(inputs, plan=paired_for_memory(case, inputs.plan, gpu_memory_gib, **overrides))
