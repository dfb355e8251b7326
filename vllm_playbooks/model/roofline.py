"""What one forward pass reads and computes (bytes, FLOPs, MoE experts touched) and the time a roofline gives it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from vllm_playbooks.config.sizes import (
    HEAD_ARCHITECTURES,
    MOE_ARCHITECTURES,
    dtype_bytes,
    eagle3_head_parts,
    kv_bytes_per_token,
    moe_layout,
    mtp_weight_bytes,
    parameter_count,
    weight_bytes,
)
from vllm_playbooks.hardware import Gpu, as_gpu
from vllm_playbooks.shapes import ModelShape, resolve_model


def step_time_s(
    bytes_moved: float, flops: float, bandwidth_bytes_s: float, flops_per_s: float, overhead_s: float = 0.0
) -> float:
    """Roofline time of one forward pass: max(bytes / bandwidth, flops / peak) + overhead.

    Memory-bound while flops / bytes is below the ridge point ``flops_per_s / bandwidth_bytes_s``, compute-bound above.
    """
    if min(bytes_moved, flops, overhead_s) < 0 or min(bandwidth_bytes_s, flops_per_s) <= 0:
        raise ValueError("bytes, flops and overhead must be >= 0; bandwidth and peak must be > 0")
    return max(bytes_moved / bandwidth_bytes_s, flops / flops_per_s) + overhead_s


def decode_step_bytes(shape: ModelShape, batch: float, context_len: float, kv_cache_dtype: str = "auto") -> float:
    """Bytes one decode step reads: every weight once, plus each sequence's KV cache (``context_len`` tokens)."""
    return float(weight_bytes(shape) + batch * context_len * kv_bytes_per_token(shape, kv_cache_dtype))


def decode_step_flops(shape: ModelShape, batch: float, q: int = 1) -> float:
    """Matmul FLOPs of one step: 2 × parameters × batch × q (q query tokens per sequence; k + 1 when verifying).

    Attention-score FLOPs (∝ context) are left out: below ~10 % of the total at the contexts modelled here.
    """
    return 2.0 * parameter_count(shape) * batch * q


def compute_bound_batch(
    shape: ModelShape, gpu: Gpu | str, context_len: float, kv_cache_dtype: str = "auto", q: int = 1
) -> int | None:
    """Smallest batch at which one step turns compute-bound: FLOPs per byte reach the GPU's BF16 ridge point.

    With W weight bytes, P parameters, L tokens of context and b KV bytes per token, a step over B sequences of q query
    tokens (q = k + 1 when verifying k drafts) does 2·P·q·B FLOPs on W + B·L·b bytes. That intensity rises with B
    towards 2·P·q / (L·b); the answer is ⌈ridge · W / (2·P·q − ridge · L·b)⌉, or None when the limit stays at or below
    the ridge (the KV reads keep the step memory-bound at any batch).
    """
    if q < 1 or context_len < 0:
        raise ValueError(f"q must be >= 1 and context_len >= 0, got q={q}, context_len={context_len}")
    ridge = as_gpu(gpu).ridge_point_bf16
    weights = decode_step_bytes(shape, 0, context_len, kv_cache_dtype)
    per_sequence_bytes = decode_step_bytes(shape, 1, context_len, kv_cache_dtype) - weights
    per_sequence_flops = decode_step_flops(shape, 1, q)
    margin = per_sequence_flops - ridge * per_sequence_bytes
    if margin <= 0:
        return None
    batch = max(1, math.ceil(ridge * weights / margin))
    while batch > 1 and decode_step_flops(shape, batch - 1, q) >= ridge * decode_step_bytes(
        shape, batch - 1, context_len, kv_cache_dtype
    ):
        batch -= 1  # float rounding in the closed form
    while decode_step_flops(shape, batch, q) < ridge * decode_step_bytes(shape, batch, context_len, kv_cache_dtype):
        batch += 1
    return batch


def expected_distinct_experts(num_experts: int, top_k: int, tokens: float) -> float:
    """Experts that ``tokens`` tokens touch in one MoE layer under uniform random routing: E·(1 − (1 − k/E)^tokens).

    Each token picks ``top_k`` distinct experts of ``num_experts``, independently of the others; this is the routing
    ``VLLM_MOE_ROUTING_SIMULATION_STRATEGY=uniform_random`` imposes. Real routers concentrate on fewer experts.
    """
    if num_experts < 1 or not 0 <= top_k <= num_experts or tokens < 0:
        raise ValueError(f"need 0 <= top_k <= num_experts and tokens >= 0, got {num_experts}, {top_k}, {tokens}")
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)


def kv_read_bytes(shape: ModelShape | str, batch: int, context_len: float, kv_cache_dtype: str = "auto") -> float:
    """KV-cache bytes one forward reads for ``batch`` sequences of ``context_len`` tokens, every layer of the shape.

    Sliding-window layers (``layer_types`` marks them ``sliding_attention``, ``sliding_window`` sizes them, as in
    gpt-oss) read at most their window; every other layer reads the whole context.
    """
    shape = resolve_model(shape) if isinstance(shape, str) else shape
    config = shape.config()
    per_layer = kv_bytes_per_token(shape, kv_cache_dtype, layers=1)
    window = config.get("sliding_window")
    if window:
        tokens = sum(
            min(context_len, float(window)) if kind == "sliding_attention" else context_len
            for kind in shape.attention_types()
        )
    else:
        tokens = shape.num_hidden_layers * context_len
    return float(batch * per_layer * tokens)


@dataclass(frozen=True)
class ForwardCost:
    """Bytes one forward pass reads (weights touched + KV cache) and the matmul FLOPs it does."""

    bytes: float
    flops: float


def forward_cost(
    shape: ModelShape | str,
    batch: int,
    q: int,
    context_len: float,
    kv_cache_dtype: str = "auto",
    role: str = "target",
    routing: str = "uniform",
) -> ForwardCost:
    """One forward pass of ``batch`` sequences with ``q`` new tokens each (q = k + 1 when verifying).

    ``role``: ``target`` (the main model), ``mtp`` (one of the shape's MTP modules: vLLM runs one per draft step) or
    ``draft`` (the shape is a separate draft model or EAGLE-3 head). MoE layers read only the experts the step's
    tokens touch (``expected_distinct_experts`` under ``routing="uniform"``; ``routing="fixed"``: every token picks the
    same experts, the degenerate case of a router that does not depend on the token), the rest of the weights once;
    every sequence reads its KV cache of ``context_len`` tokens in the layers that run. The embedding lookup is not
    counted.
    """

    shape = resolve_model(shape) if isinstance(shape, str) else shape
    tokens = batch * q
    kv_layer = kv_bytes_per_token(shape, kv_cache_dtype, layers=1)
    if role not in ("target", "mtp", "draft"):
        raise ValueError(f"role must be target, mtp or draft, got {role!r}")
    if shape.architecture in MOE_ARCHITECTURES:
        m = moe_layout(shape)
        if routing not in ("uniform", "fixed"):
            raise ValueError(f"routing must be uniform or fixed, got {routing!r}")
        touched = (
            m.experts_per_token
            if routing == "fixed"
            else expected_distinct_experts(m.routed_experts, m.experts_per_token, tokens)
        )
        experts = touched * m.expert_bytes
        moe_fixed = m.attention_bytes + m.router_bytes + m.shared_experts * m.expert_bytes + m.absorbed_bytes_per_layer
        active_moe = m.attention_params + m.router_params + (m.experts_per_token + m.shared_experts) * m.expert_params
        if role == "mtp":
            if m.mtp_layers < 1:
                raise ValueError(f"{shape.name} has no MTP module")
            weights = moe_fixed + experts + m.mtp_extra_bytes + m.mtp_head_bytes
            return ForwardCost(
                weights + batch * context_len * kv_layer,
                2.0 * tokens * (active_moe + m.mtp_extra_params + m.head_params),
            )
        dense = m.dense_layers * (m.attention_bytes + m.dense_mlp_bytes + m.absorbed_bytes_per_layer)
        weights = dense + m.moe_layers * (moe_fixed + experts) + m.head_bytes
        return ForwardCost(
            weights + kv_read_bytes(shape, batch, context_len, kv_cache_dtype), 2.0 * tokens * m.active_params()
        )
    if shape.architecture in HEAD_ARCHITECTURES:
        parts = eagle3_head_parts(shape)
        params = parts["layers"] + parts["fc"] + parts["head"] + parts["norm"]
        kv = batch * context_len * kv_bytes_per_token(shape, kv_cache_dtype)
        return ForwardCost(2.0 * params + kv, 2.0 * tokens * params)
    if role == "mtp":
        head = shape.vocab_size * shape.hidden_size * dtype_bytes("auto", shape)  # the target's head, read each step
        per_module = mtp_weight_bytes(shape) / shape.num_mtp_layers + head
        params = per_module / dtype_bytes("auto", shape)
        return ForwardCost(per_module + batch * context_len * kv_layer, 2.0 * tokens * params)
    return ForwardCost(decode_step_bytes(shape, batch, context_len, kv_cache_dtype), decode_step_flops(shape, batch, q))
