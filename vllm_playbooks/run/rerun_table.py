"""The rerun table: per case and part, the GPUs, the memory and the minutes a GPU owner needs, from what
``vllm-playbooks plan`` knows.

One row per part of each case with a grid: its quick check, the parts that decide a claim, then the parts that cover
the grid (a case without such parts has one, ``all``). The memory per GPU is ``hardware_plan.least_gpu_memory_gib``,
whether the part fits a GPU of the reference memory is ``hardware_plan.part_fits``, and the minutes per GPU model are
``budget.fresh_time_per_gpu``'s, from the runs recorded on that GPU model alone (NaN where they do not time every point
of the part), as ``book.page_notes.part_time`` gives them to the case pages.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from vllm_playbooks.config.case_file import grid_names
from vllm_playbooks.config.spec_detection import SpeculativeConfigWarning
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.hardware import datasheet_gpu, get_gpu
from vllm_playbooks.results.conditions import with_run_conditions
from vllm_playbooks.results.identity import engine_gpus
from vllm_playbooks.results.store import load_runs
from vllm_playbooks.run.budget import fresh_time_per_gpu, server_time
from vllm_playbooks.run.hardware_plan import GpuMemory, gpu_memory_gib, least_gpu_memory_gib, part_fits
from vllm_playbooks.run.plan import (
    QUICK_PART,
    CasePlan,
    NamedPart,
    case_parts,
    named_parts,
    paired_for_memory,
    quiet_plan,
)

#: The GPU models the table gives minutes for: its column name's GPU → the row of ``data/reference/hardware.csv``.
GPU_MODELS: dict[str, str] = {"A100-80GB": "A100-80GB", "H100": "H100-SXM", "H200": "H200-SXM"}
#: The GPU whose memory the ``fits`` column judges each part against (its datasheet row; read as GiB, an upper bound).
FIT_GPU = "A100-80GB"


def fit_gpu_memory(data: Path | None = None) -> GpuMemory:
    """The memory (GiB) of ``FIT_GPU`` and where the figure comes from (``hardware_plan.gpu_memory_gib``: this
    machine's GPU, a recorded start-up on one, else its datasheet row)."""
    memory = gpu_memory_gib(FIT_GPU, data)
    if memory is None:  # the datasheet's row is missing: data/reference/hardware.csv was edited
        raise ConfigError(f"no memory known for {FIT_GPU}: data/reference/hardware.csv needs its row")
    return memory


def table_parts(case: str) -> list[NamedPart]:
    """The parts of ``case`` in the table's order: ``quick`` (which may decide a claim too), the other parts that
    decide a claim, then those that cover the grid (``case_parts``: ``all`` for a case without them)."""
    named = named_parts(case)
    quick = [part for part in named if part.name == QUICK_PART]
    deciding = [part for part in named if part.decides and part.name != QUICK_PART]
    return [*quick, *deciding, *(NamedPart(name, overrides) for name, overrides in case_parts(case))]


def part_memory(memory_gib: float, cases: Iterable[str] | None = None) -> pd.DataFrame:
    """One row per part of each case (``table_parts``; every case with a grid by default): ``case``, ``part``, the
    claims it decides (``decides``, comma-separated, '' for none), its ``servers`` (engine configs) and ``points``
    (repeats counted), the most GPUs one server uses (``gpus``), the least memory per GPU with which every server
    starts (``min_gib``, ``least_gpu_memory_gib``; NaN where the KV calculator models none) and ``fits``: whether every
    server starts on GPUs of ``memory_gib`` (``part_fits``; None where one is not modelled). A paired part's servers
    are judged as they run by restart, each with the whole GPU: side by side only where they fit, they need no more."""
    records = []
    for case in grid_names() if cases is None else cases:
        for part in table_parts(case):
            plan = _plan(case, part)
            by_restart = (
                plan if plan.pairing is None else _plan(case, NamedPart(part.name, {**part.overrides, "paired": False}))
            )
            least = least_gpu_memory_gib(by_restart)
            fits = part_fits(by_restart, memory_gib)["fits"]
            records.append(
                {
                    "case": case,
                    "part": part.name,
                    "decides": ", ".join(part.decides),
                    "servers": len(plan.engines),
                    "points": len(plan.points()),
                    "gpus": max(engine_gpus(engine) for engine in plan.engines),
                    "min_gib": float("nan") if least is None else least,
                    "fits": None if fits.isna().any() else bool(fits.all()),
                }
            )
    return pd.DataFrame(records)


def rerun_table(memory_gib: float, cases: Iterable[str] | None = None, data: Path | None = None) -> pd.DataFrame:
    """``part_memory``'s rows with, for each of ``GPU_MODELS``, ``minutes_<GPU>``: the part's wall minutes on one
    machine without compile caches, start-ups included, from the runs recorded on that GPU model in ``data``
    (``fresh_time_per_gpu``; NaN where they do not time every point of the part); a paired part's servers side by
    side where they fit the model's memory, else by restart, each restart counted (``run.plan.paired_for_memory``)."""
    table = part_memory(memory_gib, cases)
    minutes = []
    for case in dict.fromkeys(table["case"]):
        measured, servers = load_runs(case, data), server_time(case, data)
        if not measured.empty:  # which rows ran with their servers side by side (``budget.point_walls``)
            measured = with_run_conditions(measured, data, gpu_samples=False)
        for part in table_parts(case):
            plan, per_model = _plan(case, part), {}
            timed: dict[str | None, dict[str, float]] = {}  # by pairing: an unpaired part is timed once
            for model, row in GPU_MODELS.items():  # a paired part runs side by side or by restart as the model fits
                with warnings.catch_warnings():  # a start-up's advisories say nothing about its time (as in part_time)
                    warnings.simplefilter("ignore", SpeculativeConfigWarning)
                    on_model = paired_for_memory(case, plan, get_gpu(row).memory_gb, **part.overrides)
                    if on_model.pairing not in timed:
                        timed[on_model.pairing] = _minutes_per_model(fresh_time_per_gpu(on_model, measured, servers))
                per_model[f"minutes_{model}"] = timed[on_model.pairing].get(row, float("nan"))
            minutes.append(per_model)
    return pd.concat([table, pd.DataFrame(minutes, index=table.index)], axis=1)


def _plan(case: str, part: NamedPart) -> CasePlan:
    """The plan of one part, its speculative advisories (which say nothing about memory or time) left out."""
    return quiet_plan(case, **part.overrides)[0]


def _minutes_per_model(tables: dict[str, pd.DataFrame]) -> dict[str, float]:
    """``fresh_time_per_gpu``'s tables as wall minutes per datasheet row (nvidia-smi's names read by
    ``datasheet_gpu``; two names of one row keep the longer estimate)."""
    minutes: dict[str, float] = {}
    for gpu, table in tables.items():
        row = datasheet_gpu(gpu).name
        minutes[row] = max(minutes.get(row, 0.0), float(table["total_s"].sum()) / 60.0)
    return minutes
