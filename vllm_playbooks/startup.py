"""What vLLM reports about memory when it starts, read back from a recorded server log.

The start-up lines are the ground truth the KV-budget calculator is checked against: total and requested memory,
weights, peak activation, non-torch memory, CUDA-graph memory, the KV-cache memory left, and the KV-cache size in
tokens with the maximum concurrency at ``max_model_len``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vllm_playbooks.errors import SchemaError
from vllm_playbooks.results.server_logs import server_log_files
from vllm_playbooks.results.textfiles import plain_name, read_text

if TYPE_CHECKING:
    import pandas as pd

_FLOAT = r"([0-9][0-9,]*\.?[0-9]*)"
_PATTERNS = {
    "weights_gib": rf"Actual usage is {_FLOAT} GiB for weight",
    "peak_activation_gib": rf"{_FLOAT} GiB for peak activation",
    "non_torch_gib": rf"{_FLOAT} GiB for non-torch memory",
    "total_memory_gib": rf"Free memory on device \({_FLOAT}/{_FLOAT} GiB\)",
    "requested_memory_gib": rf"Desired GPU memory utilization is \([0-9.]+, {_FLOAT} GiB\)",
    "gpu_memory_utilization": r"Desired GPU memory utilization is \(([0-9.]+),",
    "available_kv_gib": rf"Available KV cache memory: {_FLOAT} GiB",
    "kv_cache_tokens": rf"GPU KV cache size: {_FLOAT} tokens",
    "max_concurrency": rf"Maximum concurrency for {_FLOAT} tokens per request: {_FLOAT}x",
    "cudagraph_estimate_gib": rf"Estimated CUDA graph memory: {_FLOAT} GiB",
    "cudagraph_actual_gib": rf"CUDA graph pool memory: {_FLOAT} GiB \(actual\)",
}
#: The lines a start-up that reached its KV cache always logs.
_REQUIRED = ("total_memory_gib", "requested_memory_gib", "available_kv_gib", "kv_cache_tokens", "max_concurrency")


@dataclass(frozen=True)
class StartupMemory:
    """Memory figures one vLLM start-up logged (GiB as vLLM prints them, to two decimals)."""

    log: str
    total_memory_gib: float
    gpu_memory_utilization: float
    requested_memory_gib: float
    weights_gib: float | None
    peak_activation_gib: float | None
    non_torch_gib: float | None
    cudagraph_estimate_gib: float | None
    cudagraph_actual_gib: float | None
    available_kv_gib: float
    kv_cache_tokens: int
    max_model_len: int
    max_concurrency: float


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def read_startup(log: Path) -> StartupMemory:
    """Parse one server log; raises ``SchemaError`` when the KV-cache lines are missing (a start-up that failed)."""
    text = read_text(log)
    found: dict[str, re.Match[str] | None] = {k: re.search(p, text) for k, p in _PATTERNS.items()}
    missing = [k for k in _REQUIRED if found[k] is None]
    if missing:
        raise SchemaError(f"{log}: no start-up memory lines for {', '.join(missing)} (did the server start?)")

    def group(key: str, index: int = 1) -> float | None:
        match = found[key]
        return _number(match.group(index)) if match else None

    return StartupMemory(
        log=plain_name(log),
        total_memory_gib=group("total_memory_gib", 2) or 0.0,
        gpu_memory_utilization=group("gpu_memory_utilization") or 0.0,
        requested_memory_gib=group("requested_memory_gib") or 0.0,
        weights_gib=group("weights_gib"),
        peak_activation_gib=group("peak_activation_gib"),
        non_torch_gib=group("non_torch_gib"),
        cudagraph_estimate_gib=group("cudagraph_estimate_gib"),
        cudagraph_actual_gib=group("cudagraph_actual_gib"),
        available_kv_gib=group("available_kv_gib") or 0.0,
        kv_cache_tokens=int(group("kv_cache_tokens") or 0),
        max_model_len=int(group("max_concurrency", 1) or 0),
        max_concurrency=group("max_concurrency", 2) or 0.0,
    )


def _all_server_logs(case_dir: Path) -> list[Path]:
    return server_log_files(case_dir / "logs")


def has_started(log: Path) -> bool:
    """Whether ``log`` holds vLLM's KV-cache start-up lines; a server stopped or failed during start-up has none."""
    text = read_text(log)
    return all(re.search(_PATTERNS[key], text) for key in _REQUIRED)


def server_logs(case_dir: Path) -> list[Path]:
    """A case's server logs (not the bench logs) of servers that finished starting, oldest first."""
    return [log for log in _all_server_logs(case_dir) if has_started(log)]


def unstarted_server_logs(case_dir: Path) -> list[Path]:
    """A case's server logs of servers that never finished starting (stopped at a session's time limit, or failed):
    kept as the record of the attempt, left out of every start-up check."""
    return [log for log in _all_server_logs(case_dir) if not has_started(log)]


#: The line vLLM's API server logs once it serves requests.
_READY = "Available routes are"


def _log_name(log: Path):  # type: ignore[no-untyped-def]
    """(config id, launch time) of a server log, from its file name; ``SchemaError`` for a name the runner did not
    write."""
    from vllm_playbooks.results.server_logs import parse_log_name

    parsed = parse_log_name(log.name)
    if parsed is None:
        raise SchemaError(f"{log}: no launch time in the file name (the runner writes <config id>-<launch>.log)")
    return parsed


def engine_for_log(log: Path, data: Path):  # type: ignore[no-untyped-def]
    """The resolved engine config that wrote ``log``: read from a point measured with that config, or, for a server
    stopped before its first point finished, the packaged case's engine config of the same id."""
    from vllm_playbooks.config.engine import EngineConfig
    from vllm_playbooks.errors import ConfigError
    from vllm_playbooks.plan import load_plan
    from vllm_playbooks.runner import replay_rows

    case = log.parent.parent.name
    config_id = _log_name(log)[0]
    for row in replay_rows(case, data):
        if row.config_id == config_id:
            return EngineConfig.model_validate(json.loads(row.engine_config_json))
    try:
        planned = load_plan(case).engines
    except ConfigError:  # a case file of one's own, not packaged
        planned = []
    for engine in planned:
        if engine.config_id() == config_id:
            return engine
    raise SchemaError(f"{log}: no recorded point and no planned engine of config {config_id} in case {case}")


def calculator_check(data: Path):  # type: ignore[no-untyped-def]
    """Every recorded start-up beside the KV-budget calculator's prediction for the same config (a DataFrame). vLLM
    logs weights and KV-cache tokens per GPU (under TP or PP, of the GPU it reports for), so the weights compared are
    the calculator's per-GPU figure. ``moe`` marks mixture-of-experts targets, whose activation peak the calculator
    does not model (it overstates their KV tokens; the batching calculator's page shows by how much).

    Where vLLM logged them, its peak activation and its CUDA-graph memory estimate (which vLLM 0.26 takes from the
    KV budget; the calculator models neither for MoE shapes nor the graphs at all) stand beside ours, with the memory
    the graph pool took once captured (``cudagraph_gib_actual``) and our KV bytes per token on that GPU, and
    ``kv_tokens_error_with_vllm_overheads_pct`` is the error our weights and KV bytes per token give when the budget
    subtracts vLLM's logged activation, non-torch memory and graph estimate instead of our estimates."""
    import pandas as pd

    from vllm_playbooks.config.capacity import GIB, MOE_ARCHITECTURES, kv_budget, kv_tokens_fitting
    from vllm_playbooks.shapes import resolve_model

    records = []
    for case_dir in sorted(p for p in (data / "runs").iterdir() if p.is_dir()):
        for log in server_logs(case_dir):
            start = read_startup(log)
            engine = engine_for_log(log, data)
            budget = kv_budget(engine, start.total_memory_gib)
            with_vllm_overheads = float("nan")
            if start.peak_activation_gib is not None and start.non_torch_gib is not None:
                overheads = start.peak_activation_gib + start.non_torch_gib + (start.cudagraph_estimate_gib or 0.0)
                free = budget.requested_bytes - budget.weight_bytes_per_gpu - overheads * GIB
                tokens = kv_tokens_fitting(free, budget.kv_bytes_per_token_per_gpu)
                with_vllm_overheads = 100 * (tokens / start.kv_cache_tokens - 1)
            records.append({
                "case": case_dir.name, "engine_label": engine.label, "model": engine.model,
                "moe": resolve_model(engine.model).architecture in MOE_ARCHITECTURES,
                "draft": engine.speculative.model if engine.speculative else None,
                "kv_cache_dtype": engine.kv_cache_dtype, "max_model_len": engine.max_model_len,
                "tensor_parallel_size": engine.tensor_parallel_size,
                "pipeline_parallel_size": engine.pipeline_parallel_size,
                "weights_gib_vllm": start.weights_gib, "weights_gib_ours": budget.weight_bytes_per_gpu / GIB,
                "kv_tokens_vllm": start.kv_cache_tokens, "kv_tokens_ours": budget.kv_tokens,
                "kv_tokens_error_pct": 100 * (budget.kv_tokens / start.kv_cache_tokens - 1),
                "max_concurrency_vllm": start.max_concurrency, "max_concurrency_ours": budget.max_concurrency,
                "activation_gib_vllm": start.peak_activation_gib, "activation_gib_ours": budget.activation_bytes / GIB,
                "cudagraph_gib_vllm": start.cudagraph_estimate_gib, "cudagraph_gib_actual": start.cudagraph_actual_gib,
                "kv_bytes_per_token_ours": budget.kv_bytes_per_token_per_gpu,
                "kv_tokens_error_with_vllm_overheads_pct": with_vllm_overheads,
            })  # fmt: skip
    return pd.DataFrame(records)


def overheads_note(check: pd.DataFrame) -> str:
    """One Markdown paragraph on a ``calculator_check`` table: how far the MoE targets' KV tokens are overstated, the
    activation peaks and CUDA-graph estimates vLLM logged for them against ours, and how close the KV tokens come with
    vLLM's logged overheads in place of ours ('' without MoE rows)."""
    moe = check[check["moe"]]
    if moe.empty:
        return ""

    def span(values: pd.Series, unit: str = " GiB", digits: int = 2) -> str:
        low, high = (f"{v:.{digits}f}" for v in (values.min(), values.max()))
        return f"{low}{unit}" if low == high else f"{low}-{high}{unit}"

    parts = []
    for model, rows in moe.groupby("model", sort=True):
        graphs = rows["cudagraph_gib_vllm"].dropna()
        graph = f", and set aside {span(graphs)} for CUDA graphs" if not graphs.empty else ""
        parts.append(f"`{model}`: KV tokens overstated by {span(rows['kv_tokens_error_pct'], ' %', 1)}; vLLM measured a "
                     f"{span(rows['activation_gib_vllm'])} activation peak against our "
                     f"{span(rows['activation_gib_ours'])}{graph}")  # fmt: skip
    adjusted = check["kv_tokens_error_with_vllm_overheads_pct"].dropna()
    closing = ""
    if not adjusted.empty:
        closing = (f" With vLLM's logged activation, non-torch memory and CUDA-graph estimate in place of ours, the "
                   f"calculator's weights and KV bytes per token give the KV tokens of {len(adjusted)} of the "
                   f"{len(check)} start-ups within {adjusted.abs().max():.1f} %: the gap is those two terms.")  # fmt: skip
    return "**Where the MoE budgets go.** " + "; ".join(parts) + "." + closing


def server_time(case: str, data: Path | None = None) -> pd.DataFrame:
    """The GPU time each recorded server of ``case`` (a packaged case's name, or the path of a case file) held, from
    its log: one row per server log (started or not), from the launch (the time in the log's file name) to its last
    timestamped line, times the GPUs its engine config uses (TP × PP). ``startup_s`` runs from the launch to vLLM's
    'Available routes' line (NaN for a server that never became ready). Installing vLLM and a lease's idle time are
    not in any log, so they are not counted."""
    import pandas as pd

    from vllm_playbooks import paths
    from vllm_playbooks.results.server_logs import LINE_STAMP, stamp_time
    from vllm_playbooks.results.store import case_dir
    from vllm_playbooks.runner import engine_gpus

    if case.endswith((".yaml", ".yml")):
        from vllm_playbooks.plan import load_plan

        case = load_plan(case).case
    base = data if data is not None else paths.data_dir()
    folder = case_dir(case, base)
    records = []
    for log in _all_server_logs(folder) if (folder / "logs").is_dir() else []:
        launched = _log_name(log)[1]
        ready, last = None, launched
        for line in read_text(log).splitlines():
            stamp = LINE_STAMP.search(line)
            if stamp is None:
                continue
            try:
                moment = stamp_time(stamp["stamp"], launched)
            except ValueError:  # not a date after all
                continue
            last = max(last, moment)
            if ready is None and _READY in line:
                ready = moment
        engine = engine_for_log(log, base)
        gpus, held = engine_gpus(engine), (last - launched).total_seconds()
        records.append({
            "log": plain_name(log), "engine_label": engine.label, "gpus": gpus, "launched_at": launched,
            "startup_s": (ready - launched).total_seconds() if ready is not None else float("nan"),
            "held_s": held, "gpu_minutes": gpus * held / 60.0,
        })  # fmt: skip
    columns = ["log", "engine_label", "gpus", "launched_at", "startup_s", "held_s", "gpu_minutes"]
    return pd.DataFrame(records, columns=columns)


def gpu_time_note(servers: pd.DataFrame, gpu: str = "GPU") -> str:
    """One sentence on a ``server_time`` table: the GPU-minutes its servers held, how many of them went to starting,
    and what the figure leaves out ('' for an empty table)."""
    if servers.empty:
        return ""
    starting = (servers["startup_s"].fillna(servers["held_s"]) * servers["gpus"]).sum() / 60.0
    unready = int(servers["startup_s"].isna().sum())
    never = f" ({unready} of them never became ready)" if unready else ""
    return (f"**GPU time.** The {len(servers)} recorded server starts{never} held {gpu}s for "
            f"{servers['gpu_minutes'].sum():.1f} GPU-minutes, {starting:.1f} of them starting (launch to ready); the "
            "rest served the measured points, their warm-ups and calibration runs. Read from the server logs (launch "
            "to the last logged line), so installing vLLM and the idle time of a GPU lease are not in it; the sessions "
            "table of `data/runs/README.md` gives each lease.")


def cudagraph_reserve_note(check: pd.DataFrame, threshold_gib: float = 1.0) -> str:
    """One Markdown paragraph on a ``calculator_check`` table: where vLLM's CUDA-graph estimate (taken from the KV
    budget before capture) exceeded what the graph pool then took by more than ``threshold_gib``, the KV memory and
    tokens that went unused (at our KV bytes per token), and where it fell short ('' when no start-up logged both)."""
    logged = check.dropna(subset=["cudagraph_gib_vllm", "cudagraph_gib_actual"])
    if logged.empty:
        return ""
    excess = logged["cudagraph_gib_vllm"] - logged["cudagraph_gib_actual"]
    over = logged[excess > threshold_gib]
    text = (f"**The CUDA-graph reserve is an estimate.** vLLM 0.26 estimates the memory its CUDA graphs will take, "
            f"takes that from the KV-cache budget, then captures the graphs and logs what their pool took. In "
            f"{len(over)} of the {len(logged)} start-ups that logged both, the estimate was more than "
            f"{threshold_gib:g} GiB too high")  # fmt: skip
    configs = over.groupby(["model", "engine_label"], sort=True)
    if configs.ngroups != len(over):
        text += f" ({configs.ngroups} configs)" if configs.ngroups > 1 else " (one config)"
    if not over.empty:
        from vllm_playbooks.config.capacity import GIB, kv_tokens_fitting

        cases = []
        for (model, label), rows in configs:
            row = rows.iloc[0]
            lost = row["cudagraph_gib_vllm"] - row["cudagraph_gib_actual"]
            tokens = kv_tokens_fitting(lost * GIB, int(row["kv_bytes_per_token_ours"]))
            cases.append(f"`{model}` {label} ({row['cudagraph_gib_vllm']:.2f} GiB estimated, "
                         f"{row['cudagraph_gib_actual']:.2f} GiB taken: {lost:.2f} GiB, about {tokens:,} KV tokens, "
                         f"left unused)")  # fmt: skip
        text += (": " + "; ".join(cases) + ". Such a server holds fewer KV tokens than its memory allows; its log "
                 "names two remedies: a higher `--gpu-memory-utilization`, or "
                 "`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0`")  # fmt: skip
    short = logged[excess < 0]
    if not short.empty:
        text += (f". In {len(short)} the estimate fell short, by up to {-excess.min():.2f} GiB: those graphs took more "
                 "than was set aside")  # fmt: skip
    return text + "."


_ASYNC_SCHEDULING = re.compile(r"Asynchronous scheduling is (enabled|disabled)")
_CUDAGRAPH_MODE = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.([A-Z_]+)")
#: vLLM 0.26 logs this when it runs Model Runner V2; the V1 runner's lines come from gpu_model_runner.py.
_V2_RUNNER = "Using V2 Model Runner"
_V1_RUNNER = "[gpu_model_runner.py:"


def server_modes(case: str, data: Path | None = None) -> pd.DataFrame:
    """How each started server of ``case`` ran, as its log says: one row per server log with its ``config_id`` and
    ``engine_label`` (the config id without its hash), ``model_runner`` ("V2" where vLLM said it used Model Runner
    V2, "V1" where the V1 runner logged, e.g. after falling back for draft_model; None where neither shows),
    ``cudagraph_mode`` (from the engine config vLLM printed, e.g. FULL_AND_PIECEWISE, or PIECEWISE where a speculative
    schedule forced it) and ``async_scheduling`` (True/False; None where the log does not say)."""
    import pandas as pd

    from vllm_playbooks import paths
    from vllm_playbooks.results.store import case_dir

    folder = case_dir(case, data if data is not None else paths.data_dir())
    records = []
    for log in server_logs(folder) if (folder / "logs").is_dir() else []:
        text = read_text(log)
        modes = _CUDAGRAPH_MODE.findall(text)
        scheduling = _ASYNC_SCHEDULING.findall(text)
        config_id = _log_name(log)[0]
        runner = "V2" if _V2_RUNNER in text else "V1" if _V1_RUNNER in text else None
        records.append({
            "log": plain_name(log), "config_id": config_id, "engine_label": config_id.rsplit("-", 1)[0],
            "model_runner": runner, "cudagraph_mode": modes[-1] if modes else None,
            "async_scheduling": scheduling[-1] == "enabled" if scheduling else None,
        })  # fmt: skip
    columns = ["log", "config_id", "engine_label", "model_runner", "cudagraph_mode", "async_scheduling"]
    return pd.DataFrame(records, columns=columns)
