"""The recorded grids the advisor is scored on and replays (``advisor.evaluate``, ``vllm-playbooks advise``): a
case's priced rows per hardware, without stalled runs, split into one grid per ``goodput.GRID_COLUMNS`` group and
acceptance scenario (``advisor.scenarios``), and the one grid a set of filters leaves."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_playbooks.advisor.goodput import GRID_COLUMNS, with_grid_columns
from vllm_playbooks.advisor.oracle import prices_per_hardware
from vllm_playbooks.advisor.predict import engine_of
from vllm_playbooks.advisor.scenarios import acceptance_scenarios, label_matches
from vllm_playbooks.config.case_file import grid_names
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.hardware import REFERENCE_GPU
from vllm_playbooks.results.replay import replay_case
from vllm_playbooks.results.stalls import unstalled
from vllm_playbooks.run.budget import server_time

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class GridFilter:
    """What picks one grid of a case, recorded (``evaluate.advise_replay``) or planned (``live_plan.live_grid``,
    ``live.search_live``): its model shape, input and output lengths, kind of load ('concurrency' or 'rate') and
    acceptance scenario (a label, ``scenarios.label_matches``), each None for any; ``max_concurrency`` limits its
    closed-loop loads to that many clients (None: all)."""

    model_shape: str | None = None
    input_len: int | None = None
    output_len: int | None = None
    load_kind: str | None = None
    max_concurrency: float | None = None
    acceptance: str | None = None


def case_grids(
    case: str, data: Path | None = None, hardware_contains: str = "h200"
) -> list[tuple[dict[str, Any], pd.DataFrame, dict[str, float]]]:
    """The grids of one case on hardware whose key contains ``hardware_contains``: (grid key, its priced rows
    without stalled runs, its configs' start-up GPU-seconds), one per ``GRID_COLUMNS`` group and acceptance scenario
    (``advisor.scenarios``: a grid that imposes several acceptances is several grids; the key's ``acceptance`` names
    the scenario)."""
    grids = []
    for hardware, (priced, startups) in prices_per_hardware(replay_case(case, data), server_time(case, data)).items():
        if hardware_contains not in hardware.lower():
            continue
        grids += _hardware_grids(with_grid_columns(unstalled(priced, data)), startups)
    return grids


def _hardware_grids(
    priced: pd.DataFrame, startups: dict[str, float]
) -> list[tuple[dict[str, Any], pd.DataFrame, dict[str, float]]]:
    """``case_grids``' tuples of one hardware's priced rows and its configs' start-ups."""
    grids = []
    for values, group in priced.groupby(list(GRID_COLUMNS), sort=True):
        key = dict(zip(GRID_COLUMNS, values, strict=True))
        engines = {line["config_id"]: engine_of(line) for line in group.drop_duplicates("config_id").to_dict("records")}
        for scenario in acceptance_scenarios(engines):
            rows_in = group[group["config_id"].isin(scenario.config_ids)].reset_index(drop=True)
            grids.append(
                (
                    {**key, "acceptance": scenario.label},
                    rows_in,
                    {c: startups[c] for c in rows_in["config_id"].unique()},
                )
            )
    return grids


def recorded_grids(
    cases: list[str] | None, data: Path | None
) -> list[tuple[dict[str, Any], pd.DataFrame, dict[str, float]]]:
    """``case_grids`` of every case of ``cases`` (default: every packaged case), in order."""
    return [grid for case in cases or grid_names() for grid in case_grids(case, data)]


def one_grid(
    case: str,
    hardware: str | None,
    model_shape: str | None,
    input_len: int | None,
    output_len: int | None,
    load_kind: str | None,
    max_concurrency: float | None,
    data: Path | None = None,
    *,
    acceptance: str | None = None,
) -> tuple[dict[str, Any], pd.DataFrame, dict[str, float]]:
    """The one recorded grid of ``case`` the filters leave (``acceptance``: a scenario's label, see
    ``scenarios.label_matches``; ``ConfigError`` naming the choices when none or several do), its loads limited to
    ``max_concurrency`` clients (closed loop) when given. Without ``hardware``, grids that differ only in their
    hardware leave the reference GPU's (``hardware.REFERENCE_GPU``), as the case pages show it."""
    if case not in grid_names():
        raise ConfigError(f"unknown case {case!r}; cases: {', '.join(grid_names())}")
    wanted = {
        "hardware": hardware,
        "model_shape": model_shape,
        "input_len": input_len,
        "output_len": output_len,
        "load_kind": load_kind,
    }
    every = case_grids(case, data, hardware_contains="")
    grids = [
        g
        for g in every
        if all(v is None or str(g[0][k]) == str(v) for k, v in wanted.items())
        and (acceptance is None or label_matches(g[0]["acceptance"], acceptance))
    ]
    if hardware is None and len(grids) > 1:
        on_reference = [g for g in grids if set(g[1]["gpu_name"]) == {REFERENCE_GPU}]
        grids = on_reference if len(on_reference) == 1 else grids
    if len(grids) != 1:
        choices = "; ".join(
            f"--hardware {g[0]['hardware']} --model-shape {g[0]['model_shape']} --input-len "
            f"{g[0]['input_len']} --output-len {g[0]['output_len']} --load {g[0]['load_kind']} "
            f"--acceptance '{g[0]['acceptance']}'"
            for g in every
        )
        raise ConfigError(f"{len(grids)} recorded grids of {case} match; pick one of: {choices}")
    key, rows, startups = grids[0]
    if max_concurrency is not None:
        rows = rows[rows["concurrency"].isna() | (rows["concurrency"] <= max_concurrency)].reset_index(drop=True)
        if rows.empty:
            raise ConfigError(f"no recorded load of that grid has at most {max_concurrency:g} clients")
    return key, rows, startups
