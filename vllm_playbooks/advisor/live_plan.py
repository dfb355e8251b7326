"""What a live search (``advisor.live``) chooses from and pays before it measures: the one grid of a case's plan
that the filters pick (``live_grid``: one model shape, one pair of lengths, one kind of load and one acceptance
scenario) and each of its points' price (``live_prices``: ``run.budget``'s estimates from the case's recorded runs,
the ones ``vllm-playbooks plan`` prints)."""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_playbooks.advisor.goodput import given, point_name
from vllm_playbooks.advisor.grids import GridFilter
from vllm_playbooks.advisor.oracle import CATALOG_COLUMNS, PointKey, point_key
from vllm_playbooks.advisor.scenarios import acceptance_scenarios, label_matches
from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.config.load import LoadPoint
from vllm_playbooks.config.spec_detection import SpeculativeConfigWarning
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.results import store
from vllm_playbooks.results.identity import engine_gpus
from vllm_playbooks.run.budget import point_estimates, server_time
from vllm_playbooks.run.plan import CasePlan
from vllm_playbooks.shapes import resolve_model

if TYPE_CHECKING:
    import pandas as pd


def catalog_line(engine: EngineConfig, load: LoadPoint) -> dict[str, Any]:
    """A planned point as the advisor's catalog holds it (``CATALOG_COLUMNS``), spelled as its recorded row will be."""
    return {
        "config_id": engine.config_id(),
        "engine_label": engine.label,
        "model_shape": resolve_model(engine.model).name,
        "engine_config_json": json.dumps(engine.resolved(), sort_keys=True),
        "max_num_seqs": engine.max_num_seqs,
        "input_len": load.input_len,
        "output_len": load.output_len,
        "concurrency": float(load.concurrency) if load.concurrency is not None else math.nan,
        "request_rate_qps": load.request_rate_qps if load.request_rate_qps is not None else math.nan,
    }


@dataclass(frozen=True)
class LiveGrid:
    """The points a live search chooses from: one model shape, one pair of lengths and one kind of load of a case's
    plan (``key``: case, model shape, input and output lengths, load kind), each with its engine config and load."""

    key: dict[str, Any]
    points: dict[PointKey, tuple[EngineConfig, LoadPoint]]

    def catalog(self) -> pd.DataFrame:
        """The grid's points as the oracle's catalog (``CATALOG_COLUMNS``), in plan order."""
        import pandas as pd

        return pd.DataFrame([catalog_line(e, load) for e, load in self.points.values()], columns=list(CATALOG_COLUMNS))

    def engines(self) -> list[EngineConfig]:
        """The grid's engine configs, in plan order."""
        return list({engine.config_id(): engine for engine, _ in self.points.values()}.values())


def live_grid(plan: CasePlan, filters: GridFilter = GridFilter()) -> LiveGrid:
    """The one grid of ``plan`` the filters leave (``GridFilter``), its closed-loop loads limited to their
    ``max_concurrency`` clients when given. ``ConfigError``
    naming the choices when none or several are left, when two planned loads of one engine config differ only in
    what the advisor does not tell apart (length spread, burstiness, seed, temperature), or when an engine config
    leaves ``max_num_seqs`` unset (the model needs it)."""
    unset = [engine.label for engine in plan.engines if engine.max_num_seqs is None]
    if unset:
        raise ConfigError(
            f"case {plan.case}: the advisor's model needs each engine config's max_num_seqs, and "
            f"{', '.join(unset)} leave(s) it to vLLM's default: set it in the case file"
        )
    by_workload: dict[tuple[str, int, int, str], dict[PointKey, tuple[EngineConfig, LoadPoint]]] = {}
    for engine in plan.engines:
        for load in plan.loads_for(engine):
            line = catalog_line(engine, load)
            kind = "rate" if given(line["request_rate_qps"]) else "concurrency"
            points = by_workload.setdefault((line["model_shape"], load.input_len, load.output_len, kind), {})
            if point_key(line) in points:
                raise ConfigError(
                    f"case {plan.case}: {engine.label} is planned twice at {load.slug()} (loads that "
                    "differ only in length spread, burstiness, seed or temperature); the advisor "
                    "searches one load per point: give a case file with one of them"
                )
            points[point_key(line)] = (engine, load)
    grids: dict[tuple[str, int, int, str, str], dict[PointKey, tuple[EngineConfig, LoadPoint]]] = {}
    for workload, points in by_workload.items():
        engines = {engine.config_id(): engine for engine, _ in points.values()}
        for scenario in acceptance_scenarios(engines):
            grids[(*workload, scenario.label)] = {
                key: point for key, point in points.items() if key[0] in scenario.config_ids
            }
    wanted = (filters.model_shape, filters.input_len, filters.output_len, filters.load_kind)
    chosen = [
        key
        for key in grids
        if all(w is None or str(w) == str(k) for w, k in zip(wanted, key, strict=False))
        and (filters.acceptance is None or label_matches(key[4], filters.acceptance))
    ]
    if len(chosen) != 1:
        choices = "; ".join(
            f"--model-shape {shape} --input-len {ins} --output-len {outs} --load {kind} --acceptance '{label}'"
            for shape, ins, outs, kind, label in grids
        )
        raise ConfigError(f"{len(chosen)} planned grids of {plan.case} match; pick one of: {choices}")
    points = {
        key: (engine, load)
        for key, (engine, load) in grids[chosen[0]].items()
        if filters.max_concurrency is None or load.concurrency is None or load.concurrency <= filters.max_concurrency
    }
    if not points:
        raise ConfigError(f"no planned load of that grid has at most {filters.max_concurrency:g} clients")
    shape, ins, outs, kind, label = chosen[0]
    key = {
        "case": plan.case,
        "model_shape": shape,
        "input_len": ins,
        "output_len": outs,
        "load_kind": kind,
        "acceptance": label,
    }
    return LiveGrid(key=key, points=points)


@dataclass(frozen=True)
class LivePrices:
    """What the live search is charged before it measures: each point's estimated GPU-seconds (``run_gpu_s``) and
    each config's server start-up (``startup_gpu_s``), both times the GPUs the config uses."""

    run_gpu_s: dict[PointKey, float]
    startup_gpu_s: dict[str, float]

    def run_estimate(self, line: dict[str, Any]) -> float:
        """GPU-seconds one run of the catalog line ``line`` is charged."""
        return self.run_gpu_s[point_key(line)]

    def startup_estimate(self, config_id: str) -> float:
        """GPU-seconds a start-up of ``config_id``'s server is charged."""
        return self.startup_gpu_s[config_id]

    def grid_gpu_s(self) -> float:
        """What one run of every point costs, one start-up per config included."""
        return sum(self.run_gpu_s.values()) + sum(self.startup_gpu_s.values())


def live_prices(plan: CasePlan, grid: LiveGrid, data: Path | None = None) -> LivePrices:
    """The grid's prices from ``run.budget``'s estimates (what ``vllm-playbooks plan`` prints): a point's run is the
    longest wall time recorded at its load on its model shape, a start-up the longest recorded for the shape (a
    machine without compile caches), each times the GPUs the config uses. ``ConfigError`` naming the points that
    have no estimate (a shape or load never recorded): the search needs a price to keep to its budget."""
    measured = store.load_runs(plan.case, data)
    with warnings.catch_warnings():  # a recorded config's advisories say nothing about its time
        warnings.simplefilter("ignore", SpeculativeConfigWarning)
        servers = server_time(plan.case, data)
    every_point = point_estimates(plan, measured, servers, recorded=measured.iloc[:0])

    def load_of(row: Any) -> tuple[int, int, float, float]:
        return (
            int(row.input_len),
            int(row.output_len),
            _or_missing(row.concurrency),
            _or_missing(row.request_rate_qps),
        )

    estimates = {(row.engine_label, *load_of(row)): (row.startup_s, row.wall_s) for row in every_point.itertuples()}
    run_gpu_s, startup_gpu_s, missing = {}, {}, []
    for key, (engine, load) in grid.points.items():
        startup, wall = estimates[(engine.label, *key[1:])]
        if math.isnan(startup) or math.isnan(wall):
            missing.append(point_name(engine.label, _or_missing(load.concurrency), _or_missing(load.request_rate_qps)))
            continue
        run_gpu_s[key] = float(wall) * engine_gpus(engine)
        startup_gpu_s[engine.config_id()] = float(startup) * engine_gpus(engine)
    if missing:
        raise ConfigError(
            f"no GPU-time estimate for {', '.join(missing)}: its model shape never started, or never ran "
            f"at that load, in the recorded runs of {plan.case} (`vllm-playbooks plan --case "
            f"{plan.case} --fresh` shows the same gaps); a live search needs a price for every point to "
            "keep to its budget"
        )
    return LivePrices(run_gpu_s=run_gpu_s, startup_gpu_s=startup_gpu_s)


def _or_missing(value: float | None) -> float:
    return -1.0 if value is None or value != value else float(value)
