"""The pipeline-parallelism page's concurrency sweep: the engine it runs (the fastest PP=2 setting measured or
predicted), its planned grid, the call that runs it on a GPU machine, and its rows."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from vllm_playbooks.cases.pp_27462 import CASE, best_pp_setting, planned_grid
from vllm_playbooks.cases.results import results_for
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.model.calibration import EfficiencyFit
from vllm_playbooks.model.pipeline import with_layout
from vllm_playbooks.results.engine_steps import step_summary
from vllm_playbooks.results.replay import replay_case
from vllm_playbooks.run.case import run_case
from vllm_playbooks.run.plan import load_plan

#: The concurrency sweep at the best PP=2 setting: below, at and above the cap.
SWEEP_CONCURRENCY = (32, 64, 128, 256, 512, 1024)


def sweep_call(label: str, concurrency: Sequence[int] = SWEEP_CONCURRENCY, case: str = CASE) -> str:
    """The Python call that runs the concurrency sweep of one engine on a GPU machine."""
    return f"run_case(load_plan({case!r}, engines=[{label!r}], concurrency={list(concurrency)!r})).raise_for_failures()"


def sweep_rows(df: pd.DataFrame, label: str | None) -> pd.DataFrame:
    """The rows of one engine at every concurrency, in order (the sweep), with ``layout``."""
    if label is None or df.empty:
        return df.iloc[0:0]
    rows = df[df["engine_label"] == label].sort_values("concurrency")
    return with_layout(rows)


def results_with_sweep(
    case: str,
    mode: str,
    plan_overrides: Mapping[str, Any] | None = None,
    sweep_concurrency: Sequence[int] | None = SWEEP_CONCURRENCY,
    sweep_model: str | None = None,
    **run_kwargs: Any,
) -> pd.DataFrame:
    """What the page calls. Replay: the recorded rows. Live: the grid (``plan_overrides`` as ``load_plan`` takes
    them), then the concurrency sweep of the fastest PP=2 setting of ``sweep_model`` (none when either is None),
    then the replayed rows."""

    overrides = dict(plan_overrides or {})
    df = results_for(case, mode, overrides, **run_kwargs)
    if mode != "live" or not sweep_concurrency or not sweep_model:
        return df

    here = rows_of_newest_gpu(df)  # the grid just measured: this machine's rows, never another GPU's recorded ones
    best = best_pp_setting(here, sweep_model, steps=step_summary(here, run_kwargs.get("data")))
    if best is None:
        raise ConfigError(f"no saturated PP=2 row of {sweep_model} was recorded, so there is no setting to sweep")
    rest = {k: v for k, v in overrides.items() if k not in ("engines", "concurrency", "request_rate_qps")}
    run_case(
        load_plan(case, engines=[best], concurrency=list(sweep_concurrency), **rest), **run_kwargs
    ).raise_for_failures()
    return replay_case(case)


def rows_of_newest_gpu(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``df`` measured on the GPU model (``gpu_name``) of its newest row (``measured_at``): after a live
    run, the rows of this machine's GPU, so that rows recorded on another GPU never choose what it measures next."""
    if df.empty:
        return df
    newest = df.loc[df["measured_at"].map(dt.datetime.fromisoformat).idxmax(), "gpu_name"]
    return df[df["gpu_name"] == newest]


def predicted_best_pp(grid: pd.DataFrame, model: str, pipeline_parallel_size: int = 2) -> str | None:
    """The engine label of the PP setting of ``model`` with the highest predicted output tok/s in a ``planned_grid``
    (the sweep's engine until measured rows name the best)."""
    rows = grid[(grid["model_shape"] == model) & (grid["layout"] == f"PP={pipeline_parallel_size}")]
    if rows.empty or "predicted_output_tok_s" not in rows:
        return None
    return str(rows.sort_values("predicted_output_tok_s", ascending=False)["engine_label"].iloc[0])


def sweep_engine(
    df: pd.DataFrame, grid: pd.DataFrame, model: str | None, steps: pd.DataFrame | None = None
) -> str | None:
    """The engine the concurrency sweep runs: the fastest saturated PP=2 setting of ``model`` measured, else the one
    the roofline predicts fastest (``predicted_best_pp``); None when ``model`` is None (no sweep)."""
    if model is None:
        return None
    return best_pp_setting(df, model, steps=steps) or predicted_best_pp(grid, model)


def sweep_grid(
    case: str,
    label: str | None,
    concurrency: Sequence[int] | None,
    fit: EfficiencyFit | None = None,
    startup_s: Mapping[str, float] | None = None,
    **overrides: Any,
) -> pd.DataFrame:
    """``planned_grid`` of the sweep (one engine at each concurrency); empty when there is no sweep."""
    if label is None or not concurrency:
        return pd.DataFrame()
    return planned_grid(
        load_plan(case, engines=[label], concurrency=list(concurrency), **overrides), fit, startup_s=startup_s
    )


def sweep_note(label: str | None, concurrency: Sequence[int] | None, recorded: int, case: str = CASE) -> str:
    """One sentence for the page: which engine the sweep runs and the call that runs it, or that there is none."""
    if label is None or not concurrency:
        return "No concurrency sweep in this run (sweep_model or sweep_concurrency is empty)."
    return (
        f"Sweep engine: `{label}`. On a 2-GPU machine, after the grid: `{sweep_call(label, concurrency, case)}` "
        f"({recorded} point(s) of this engine recorded)."
    )
