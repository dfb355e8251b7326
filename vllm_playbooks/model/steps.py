"""What one engine step of a closed-loop row reads and computes: its forwards' bytes (dense and 4-bit), FLOPs and
MoE layers, its acceptance length, and the measured points its repeats reduce to."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from vllm_playbooks.config.sizes import (
    HEAD_ARCHITECTURES,
    MOE_ARCHITECTURES,
    dtype_bytes,
    moe_layout,
    parameter_count,
    weight_bytes,
)
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.model.roofline import expected_distinct_experts, forward_cost, kv_read_bytes
from vllm_playbooks.model.speculative import expected_tokens_per_step
from vllm_playbooks.shapes import ModelShape, resolve_model


@dataclass(frozen=True)
class _Forward:
    dense_bytes: float
    quant_bytes: float
    flops: float
    moe_layers: float = 0.0


def _get(row: Any, name: str, default: Any = None) -> Any:
    if isinstance(row, Mapping):
        return row.get(name, default)
    return getattr(row, name, default)


def _four_bit_bytes(shape: ModelShape, tokens: float) -> float:
    """Bytes of 4-bit weights one forward over ``tokens`` tokens reads: AWQ linear layers, or the MXFP4 experts
    those tokens touch (uniform routing). FP8 weights run on the tensor cores natively and count as dense bytes."""
    if shape.quantization == "awq":
        return float(weight_bytes(shape) - parameter_count(shape, "dense") * dtype_bytes("auto", shape))
    if shape.quantization == "mxfp4" and shape.architecture in MOE_ARCHITECTURES:
        m = moe_layout(shape)
        touched = expected_distinct_experts(m.routed_experts, m.experts_per_token, tokens)
        return float(m.moe_layers * touched * m.expert_bytes)
    return 0.0


def _forward(
    shape: ModelShape,
    batch: float,
    q: int,
    context_len: float,
    kv_dtype: str,
    prefill_tokens: float,
    role: str = "target",
    prefill_share: float = 1.0,
) -> _Forward:
    """Bytes and FLOPs of one forward, averaged over steps: ``batch`` sequences of ``q`` new tokens over
    ``context_len`` tokens of KV, beside ``prefill_tokens`` prompt tokens per step on average, which arrive whole in
    a ``prefill_share`` of the steps (``roofline.forward_cost``: MoE layers read the experts the tokens of that step
    touch, so a prompt that comes in one step reads far fewer expert bytes than the same tokens spread over many)."""
    decode = max(1, round(batch * q))
    kv = kv_read_bytes(shape, 1, context_len, kv_dtype) * batch  # linear in the batch
    flops = forward_cost(shape, 1, max(1, round(batch * q + prefill_tokens)), 0.0, kv_dtype, role).flops
    share = min(max(prefill_share, 0.0), 1.0) if prefill_tokens > 0 else 0.0
    weights = quant = 0.0
    for tokens, weight in ((decode, 1.0 - share), (max(1, round(decode + prefill_tokens / max(share, 1e-9))), share)):
        if weight > 0:
            weights += weight * forward_cost(shape, 1, tokens, 0.0, kv_dtype, role).bytes
            quant += weight * _four_bit_bytes(shape, tokens)
    moe = moe_layers_run(shape, role)
    return _Forward(dense_bytes=weights + kv - quant, quant_bytes=quant, flops=flops, moe_layers=moe)


def moe_layers_run(shape: ModelShape, role: str = "target") -> int:
    """MoE layers one forward of ``shape`` in ``role`` (``roofline.forward_cost``'s) runs: all of a MoE target's, one
    for one of its MTP modules, none for a dense shape or a draft."""
    if shape.architecture not in MOE_ARCHITECTURES or role == "draft":
        return 0
    return 1 if role == "mtp" else moe_layout(shape).moe_layers


def _row_terms(row: Any, alpha: float | None = None) -> tuple[_Forward, _Forward | None, int, float]:
    """(target forward, draft forward or None, k, τ) for a measured or hypothetical row.

    τ is the row's measured mean acceptance length when it has one, else τ(α, k) from ``alpha`` or ``imposed_alpha``
    (``ConfigError`` without either). Closed loop: ``concurrency`` sequences decode at once; each finished request is
    replaced, so on average batch · τ / output_len requests join per step, each bringing ``input_len`` prompt tokens;
    the TPOT of one request sees the prompts of the other batch − 1 (its own came before its first token), so a step
    carries (batch − 1) · τ · input_len / output_len prompt tokens on average, each prompt whole in one step. The mean
    context is input_len + output_len / 2.
    """
    batch = int(_get(row, "concurrency") or 0)
    if batch < 1:
        raise ConfigError("the model needs a closed-loop row: concurrency >= 1")
    k = int(_get(row, "num_speculative_tokens") or 0)
    input_len, output_len = int(_get(row, "input_len")), int(_get(row, "output_len"))
    kv_dtype = _get(row, "kv_cache_dtype") or "auto"
    tau = 1.0
    if k:
        measured = _get(row, "mean_acceptance_length")
        a = alpha if alpha is not None else _get(row, "imposed_alpha")
        if alpha is None and measured and not _missing(measured):
            tau = float(measured)
        elif a is not None and not _missing(a):
            tau = expected_tokens_per_step(float(a), k)
        else:
            raise ConfigError("a speculative row needs its acceptance: mean_acceptance_length, imposed_alpha or alpha")
    context = input_len + output_len / 2
    joins = (batch - 1) * tau / output_len
    target = _forward(
        resolve_model(_get(row, "model_shape")), batch, k + 1, context, kv_dtype, joins * input_len, prefill_share=joins
    )
    draft = None
    if k:
        draft_shape = resolve_model(_get(row, "draft_model"))
        role = "draft" if draft_shape.architecture in HEAD_ARCHITECTURES else "target"
        draft = _forward(draft_shape, batch, 1, context, kv_dtype, 0.0, role)
    return target, draft, k, tau


def _missing(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


#: What identifies one measured point: repeats of it are reduced to their median before fitting.
POINT_COLUMNS = (
    "case",
    "model_shape",
    "kv_cache_dtype",
    "input_len",
    "output_len",
    "concurrency",
    "num_speculative_tokens",
    "draft_model",
    "imposed_alpha",
)


def median_points(rows: Iterable[Any]) -> list[dict[str, Any]]:
    """One dict per measured point (``POINT_COLUMNS``), in first-seen order, with the median TPOT, output tok/s and
    mean acceptance length of its repeats and ``repeats``: how many rows it stands for. Fits weigh every point once,
    however often it was run."""
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for row in rows:
        key = tuple(None if _missing(v) else v for v in (_get(row, c) for c in POINT_COLUMNS))
        groups.setdefault(key, []).append(row)
    points = []
    for key, members in groups.items():
        point: dict[str, Any] = dict(zip(POINT_COLUMNS, key, strict=True))
        for column in ("tpot_mean_ms", "output_tok_s", "mean_acceptance_length"):
            values = [float(v) for v in (_get(r, column) for r in members) if v is not None and not _missing(v)]
            point[column] = float(np.median(values)) if values else None
        point["repeats"] = len(members)
        points.append(point)
    return points
