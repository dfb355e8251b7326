"""The KV calculator against vLLM's own start-up logs: what the budget predicts beside what the server logged."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vllm_playbooks import paths
from vllm_playbooks.config.capacity import GIB, kv_budget, kv_tokens_fitting, max_capture_size_of, resolve_batching
from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.config.memory import (
    CALIBRATION_COLUMNS,
    CALIBRATION_NAME,
    FALLBACK_FAMILY,
    MIN_GRAPH_BYTES,
    FamilyCalibration,
    GraphProfile,
    MemoryCalibration,
    activation_width_bytes,
    cudagraph_descs,
    graph_profile,
    memory_family,
    uses_v1_runner,
)
from vllm_playbooks.config.sizes import MOE_ARCHITECTURES
from vllm_playbooks.results.server_logs import StartupMemory, read_startup, server_logs
from vllm_playbooks.run.budget import engine_for_log, recorded_engine_json
from vllm_playbooks.shapes import resolve_model

if TYPE_CHECKING:
    import pandas as pd


def calculator_check(data: Path):  # type: ignore[no-untyped-def]
    """Every recorded start-up beside the KV-budget calculator's prediction for the same config (a DataFrame). vLLM
    logs weights and KV-cache tokens per GPU (under TP or PP, of the GPU it reports for), so the weights compared are
    the calculator's per-GPU figure. ``moe`` marks mixture-of-experts targets. The budget is the calibrated one
    (``config.memory``); ``kv_tokens_error_uncalibrated_pct`` is the error without the calibration (the dense
    activation estimate, no CUDA-graph reserve), which overstates MoE targets' KV tokens.

    Where vLLM logged them, its peak activation and its CUDA-graph memory estimate (which vLLM 0.26 takes from the
    KV budget) stand beside ours (``config.memory``'s calibrated terms), with the memory
    the graph pool took once captured (``cudagraph_gib_actual``) and our KV bytes per token on that GPU, and
    ``kv_tokens_error_with_vllm_overheads_pct`` is the error our weights and KV bytes per token give when the budget
    subtracts vLLM's logged activation, non-torch memory and graph estimate instead of our estimates."""
    import pandas as pd

    records = []
    for case_dir in sorted(p for p in (data / "runs").iterdir() if p.is_dir()):
        logs = server_logs(case_dir)
        recorded = recorded_engine_json(case_dir.name, data) if logs else {}
        for log in logs:
            start = read_startup(log)
            engine = engine_for_log(log, data, recorded)
            budget = kv_budget(engine, start.total_memory_gib)
            uncalibrated = kv_budget(engine, start.total_memory_gib, calibration=None)
            with_vllm_overheads = float("nan")
            if start.peak_activation_gib is not None and start.non_torch_gib is not None:
                overheads = start.peak_activation_gib + start.non_torch_gib + (start.cudagraph_estimate_gib or 0.0)
                free = budget.requested_bytes - budget.weight_bytes_per_gpu - overheads * GIB
                tokens = kv_tokens_fitting(free, budget.kv_bytes_per_token_per_gpu)
                with_vllm_overheads = 100 * (tokens / start.kv_cache_tokens - 1)
            records.append(
                {
                    "case": case_dir.name,
                    "engine_label": engine.label,
                    "model": engine.model,
                    "moe": resolve_model(engine.model).architecture in MOE_ARCHITECTURES,
                    "draft": engine.speculative.model if engine.speculative else None,
                    "kv_cache_dtype": engine.kv_cache_dtype,
                    "max_model_len": engine.max_model_len,
                    "tensor_parallel_size": engine.tensor_parallel_size,
                    "pipeline_parallel_size": engine.pipeline_parallel_size,
                    "weights_gib_vllm": start.weights_gib,
                    "weights_gib_ours": budget.weight_bytes_per_gpu / GIB,
                    "kv_tokens_vllm": start.kv_cache_tokens,
                    "kv_tokens_ours": budget.kv_tokens,
                    "kv_tokens_error_pct": 100 * (budget.kv_tokens / start.kv_cache_tokens - 1),
                    "kv_tokens_error_uncalibrated_pct": 100 * (uncalibrated.kv_tokens / start.kv_cache_tokens - 1),
                    "max_concurrency_vllm": start.max_concurrency,
                    "max_concurrency_ours": budget.max_concurrency,
                    "activation_gib_vllm": start.peak_activation_gib,
                    "activation_gib_ours": budget.activation_bytes / GIB,
                    "cudagraph_gib_vllm": start.cudagraph_estimate_gib,
                    "cudagraph_gib_actual": start.cudagraph_actual_gib,
                    "cudagraph_gib_ours": budget.cudagraph_bytes / GIB,
                    "kv_bytes_per_token_ours": budget.kv_bytes_per_token_per_gpu,
                    "kv_tokens_error_with_vllm_overheads_pct": with_vllm_overheads,
                }
            )
    return pd.DataFrame(records)


# --- the calibrated memory model: fitted on every recorded start-up, checked against each -----------------------


@dataclass(frozen=True)
class Startup:
    """One recorded server start-up: its case, what vLLM logged, and the engine config that wrote the log."""

    case: str
    start: StartupMemory
    engine: EngineConfig


def recorded_startups(data: Path) -> list[Startup]:
    """Every started server of every recorded case, in case and log order."""
    startups = []
    for case_dir in sorted(p for p in (data / "runs").iterdir() if p.is_dir()):
        logs = server_logs(case_dir)
        recorded = recorded_engine_json(case_dir.name, data) if logs else {}
        startups += [Startup(case_dir.name, read_startup(log), engine_for_log(log, data, recorded)) for log in logs]
    return startups


def _graph_profile(startup: Startup) -> GraphProfile:
    engine, start = startup.engine, startup.start
    batched, seqs = resolve_batching(
        engine.max_model_len,
        start.total_memory_gib,
        max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=engine.max_num_batched_tokens,
    )
    return graph_profile(cudagraph_descs(engine, seqs, batched, max_capture_size_of(engine.model)))


def _activation_unit(startup: Startup) -> float:
    engine, start = startup.engine, startup.start
    batched, _ = resolve_batching(
        engine.max_model_len,
        start.total_memory_gib,
        max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=engine.max_num_batched_tokens,
    )
    return activation_width_bytes(resolve_model(engine.model), batched) / engine.tensor_parallel_size / GIB


def _median(values: list[float], default: float) -> float:
    return float(statistics.median(values)) if values else default


def _graph_logs(startups: list[Startup]) -> list[tuple[str, GraphProfile, float]]:
    """(family, graph profile, logged estimate less the 1 MiB graphs) of the V1-runner start-ups that logged one, each
    distinct one once: a config started twenty times with the same estimate weighs as much as one started once."""
    logs = set()
    for s in startups:
        if s.start.cudagraph_estimate_gib is None or not uses_v1_runner(s.engine):
            continue
        profile = _graph_profile(s)
        if profile.largest:
            plain = profile.plain_graphs * MIN_GRAPH_BYTES / GIB
            logs.add((memory_family(s.engine), profile, s.start.cudagraph_estimate_gib - plain))
    return sorted(logs, key=lambda g: (g[0], dataclasses.astuple(g[1]), g[2]))


def respecialized_graph_gib(logs: list[tuple[str, GraphProfile, float]]) -> float:
    """GiB per respecialized graph (``config.memory.GraphProfile``) fitted on one architecture's ``_graph_logs``: least
    squares of the logged estimates (less the 1 MiB graphs) on the largest graph's tokens, one coefficient per family,
    and the respecialized graphs, one coefficient for all; 1 MiB (vLLM's floor) where the logs cannot tell the two
    terms apart (every log of a family alike) or the fit says less."""
    import numpy as np

    families = sorted({family for family, _, _ in logs})
    design = np.array(
        [[p.largest * (f == family) for family in families] + [p.respecialized_graphs] for f, p, _ in logs], dtype=float
    )
    floor = MIN_GRAPH_BYTES / GIB
    if not logs or np.linalg.matrix_rank(design) < design.shape[1]:
        return floor
    solution, *_ = np.linalg.lstsq(design, np.array([y for _, _, y in logs]), rcond=None)
    return max(float(solution[-1]), floor)


def _first_capture_gib_per_token(graphs: list[tuple[GraphProfile, float]], per_graph: float) -> float:
    """The first capture's GiB per token of the largest graph: least squares through zero of what each logged
    estimate (less its 1 MiB graphs) leaves after ``per_graph`` GiB per respecialized graph; 0 without logs."""
    if not graphs:
        return 0.0
    left = [(p.largest, estimate - per_graph * p.respecialized_graphs) for p, estimate in graphs]
    return max(sum(tokens * y for tokens, y in left) / sum(tokens**2 for tokens, _ in left), 0.0)


def fit_calibration(startups: list[Startup]) -> MemoryCalibration:
    """The calibration table fitted on ``startups``: per family (``config.memory.memory_family``) the median logged
    activation per unit (``activation_width_bytes``), the median non-torch memory, and the CUDA-graph estimate of
    vLLM 0.26 split as it computes it: GiB per respecialized graph per target architecture
    (``respecialized_graph_gib``), then per family the first capture's GiB per token of the largest graph
    (``_first_capture_gib_per_token``); an architecture's row (its start-ups with any drafter) backs a drafter not
    recorded.
    ``fallback_error_pct`` is filled by ``calibrate``."""
    groups: dict[str, list[Startup]] = {}
    by_target: dict[str, list[Startup]] = {}
    for s in startups:
        family = memory_family(s.engine)
        groups.setdefault(family, []).append(s)
        groups.setdefault(family.split("+")[0], [])
        by_target.setdefault(family.split("+")[0], []).append(s)
    graph_logs = _graph_logs(startups)
    respecialized = {
        architecture: respecialized_graph_gib([g for g in graph_logs if g[0].split("/")[0] == architecture])
        for architecture in {family.split("/")[0] for family in groups}
    }
    rows = {}
    for family, members in groups.items():
        members = members or by_target[family]
        names = {memory_family(s.engine) for s in members}
        activation = [
            s.start.peak_activation_gib / _activation_unit(s)
            for s in members
            if s.start.peak_activation_gib is not None
        ]
        per_graph = respecialized[family.split("/")[0]]
        first = _first_capture_gib_per_token([(p, y) for f, p, y in graph_logs if f in names], per_graph)
        non_torch = [s.start.non_torch_gib for s in members if s.start.non_torch_gib is not None]
        rows[family] = FamilyCalibration(
            family=family,
            logs=len(members),
            activation_factor=_median(activation, 0.0),
            cudagraph_first_gib_per_token=first,
            cudagraph_respecialized_gib_per_graph=per_graph,
            non_torch_gib=_median(non_torch, 0.0),
            fallback_error_pct=0.0,
        )
    return MemoryCalibration(rows)


def predicted_tokens(startup: Startup, calibration: MemoryCalibration | None) -> int:
    """The KV tokens the budget predicts for ``startup``'s config on its GPU, with ``calibration``."""
    return kv_budget(startup.engine, startup.start.total_memory_gib, calibration=calibration).kv_tokens


def held_out_calibrations(startups: list[Startup]) -> dict[str, MemoryCalibration]:
    """Per family, the calibration fitted again on every other family's start-ups (what the budget knows of a config
    whose family was never recorded); the dense fallback family keeps its own logs, the fallback of every other."""
    families = {memory_family(s.engine) for s in startups}
    return {
        family: fit_calibration([s for s in startups if memory_family(s.engine) != family or family == FALLBACK_FAMILY])
        for family in families
    }


def calibrate(startups: list[Startup]) -> MemoryCalibration:
    """``fit_calibration`` with each row's ``fallback_error_pct``: the worst KV-token error its start-ups show when
    their family is left out of the fit (``held_out_calibrations``: the budget then falls back, as it does for an
    uncalibrated family)."""
    fitted = fit_calibration(startups)
    held_out = held_out_calibrations(startups)
    rows = dict(fitted.rows)
    for family, row in fitted.rows.items():
        if family == FALLBACK_FAMILY or family not in held_out:
            continue
        members = [s for s in startups if memory_family(s.engine) == family]
        errors = [100 * (predicted_tokens(s, held_out[family]) / s.start.kv_cache_tokens - 1) for s in members]
        rows[family] = dataclasses.replace(row, fallback_error_pct=max(errors, key=abs, default=0.0))
    return MemoryCalibration(rows)


def calibration_table(calibration: MemoryCalibration) -> pd.DataFrame:
    """The calibration as a table in ``config.memory.CALIBRATION_COLUMNS``, one row per family."""
    import pandas as pd

    return pd.DataFrame([dataclasses.asdict(r) for r in calibration.rows.values()], columns=list(CALIBRATION_COLUMNS))


#: The KV check's file name, under ``data/checks/``.
KV_CHECK_NAME = "kv-calculator-vs-vllm.csv"


def kv_check(startups: list[Startup], calibration: MemoryCalibration) -> pd.DataFrame:
    """One row per recorded start-up: its case, config id and family, the KV tokens the calibrated budget predicts,
    the tokens vLLM logged, the error in %, and the error with the family held out of the fit
    (``held_out_calibrations``)."""
    import pandas as pd

    held_out = held_out_calibrations(startups)
    records = []
    for s in startups:
        family = memory_family(s.engine)
        predicted = predicted_tokens(s, calibration)
        records.append(
            {
                "case": s.case,
                "config": s.engine.config_id(),
                "log": s.start.log,
                "family": family,
                "predicted_kv_tokens": predicted,
                "logged_kv_tokens": s.start.kv_cache_tokens,
                "error_pct": round(100 * (predicted / s.start.kv_cache_tokens - 1), 2),
                "error_pct_family_held_out": round(
                    100 * (predicted_tokens(s, held_out[family]) / s.start.kv_cache_tokens - 1), 2
                ),
            }
        )
    return pd.DataFrame(records)


def write_kv_check(out: Path | None = None) -> tuple[pd.DataFrame, MemoryCalibration]:
    """Fit the memory calibration on every recorded server log and write it (``CALIBRATION_NAME``) and the KV check
    (``KV_CHECK_NAME``) into ``out`` (default: ``data/checks``); return the check and the calibration."""
    data = paths.data_dir()
    folder = out or data / "checks"
    folder.mkdir(parents=True, exist_ok=True)
    startups = recorded_startups(data)
    calibration = calibrate(startups)
    calibration_table(calibration).to_csv(folder / CALIBRATION_NAME, index=False)
    check = kv_check(startups, calibration)
    check.to_csv(folder / KV_CHECK_NAME, index=False)
    return check, calibration
