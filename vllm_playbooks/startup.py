"""What vLLM reports about memory when it starts, read back from a recorded server log.

The start-up lines are the ground truth the KV-budget calculator is checked against: total and requested memory,
weights, peak activation, non-torch memory, CUDA-graph memory, the KV-cache memory left, and the KV-cache size in
tokens with the maximum concurrency at ``max_model_len``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from vllm_playbooks.errors import SchemaError

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
}


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
    available_kv_gib: float
    kv_cache_tokens: int
    max_model_len: int
    max_concurrency: float


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def read_startup(log: Path) -> StartupMemory:
    """Parse one server log; raises ``SchemaError`` when the KV-cache lines are missing (a start-up that failed)."""
    text = log.read_text(encoding="utf-8", errors="replace")
    found: dict[str, re.Match[str] | None] = {k: re.search(p, text) for k, p in _PATTERNS.items()}
    required = ("total_memory_gib", "requested_memory_gib", "available_kv_gib", "kv_cache_tokens", "max_concurrency")
    missing = [k for k in required if found[k] is None]
    if missing:
        raise SchemaError(f"{log}: no start-up memory lines for {', '.join(missing)} (did the server start?)")

    def group(key: str, index: int = 1) -> float | None:
        match = found[key]
        return _number(match.group(index)) if match else None

    return StartupMemory(
        log=log.name,
        total_memory_gib=group("total_memory_gib", 2) or 0.0,
        gpu_memory_utilization=group("gpu_memory_utilization") or 0.0,
        requested_memory_gib=group("requested_memory_gib") or 0.0,
        weights_gib=group("weights_gib"),
        peak_activation_gib=group("peak_activation_gib"),
        non_torch_gib=group("non_torch_gib"),
        cudagraph_estimate_gib=group("cudagraph_estimate_gib"),
        available_kv_gib=group("available_kv_gib") or 0.0,
        kv_cache_tokens=int(group("kv_cache_tokens") or 0),
        max_model_len=int(group("max_concurrency", 1) or 0),
        max_concurrency=group("max_concurrency", 2) or 0.0,
    )


def server_logs(case_dir: Path) -> list[Path]:
    """A case's server logs (not the bench logs), oldest first."""
    return sorted(p for p in (case_dir / "logs").glob("*.log") if not p.name.endswith(".bench.log"))
