"""Synthetic grids for the advisor's tests: engine configs of real shapes, measured numbers chosen by the test."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.config.speculative import SpeculativeConfig

HARDWARE = "nvidia-h200-x1-vllm0.26.0"


def engine_json(
    label: str,
    model: str = "llama-3.1-8b",
    draft: str | None = None,
    k: int = 0,
    alpha: float = 0.8,
    max_num_seqs: int = 256,
) -> str:
    """The engine_config_json of a config: spec off, or a draft model at k with imposed acceptance alpha."""
    spec = None
    if draft:
        spec = SpeculativeConfig.model_validate(
            {"method": "draft_model", "model": draft, "num_speculative_tokens": k, "acceptance_alpha": alpha},
            context={"advisories": False},
        )
    engine = EngineConfig(label=label, model=model, max_model_len=2048, max_num_seqs=max_num_seqs, speculative=spec)
    return engine.model_dump_json()


def row(
    config: str,
    concurrency: int,
    tpot: float,
    rps: float,
    *,
    repeat: int = 0,
    gpu_s: float = 40.0,
    ttft: float = 50.0,
    engine: str | None = None,
    model: str = "llama-3.1-8b",
    rate: float | None = None,
) -> dict[str, Any]:
    """One measured row of ``config`` at closed-loop ``concurrency``, or at request ``rate`` (req/s) when given."""
    engine = engine or engine_json(config, model=model)
    speculative = json.loads(engine).get("speculative")
    return {
        "case": "synthetic",
        "hardware": HARDWARE,
        "config_id": f"{config}-id",
        "engine_label": config,
        "spec_method": speculative["method"] if speculative else "none",
        "model_shape": model,
        "engine_config_json": engine,
        "max_num_seqs": 256,
        "input_len": 512,
        "output_len": 128,
        "concurrency": float(concurrency) if rate is None else float("nan"),
        "request_rate_qps": float("nan") if rate is None else float(rate),
        "repeat": repeat,
        "measured_at": f"2026-12-01T00:{repeat:02d}:{concurrency % 60:02d}+00:00",
        "tpot_p99_ms": tpot,
        "ttft_p99_ms": ttft,
        "request_throughput_rps": rps,
        "gpu_s": gpu_s,
    }


def frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The rows as a table."""
    return pd.DataFrame(rows)


def startups(rows: pd.DataFrame, seconds: float = 100.0) -> dict[str, float]:
    """The same start-up for every config of ``rows``."""
    return {c: seconds for c in rows["config_id"].unique()}
