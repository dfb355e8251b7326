"""KV-cache budget, batching defaults and CUDA-graph sizes, computed the way vLLM 0.26 does, before any GPU time.

The KV-cache bytes per token and the rounding to 16-token blocks are exact; the memory left for the KV cache is a
model (weights from the shape, an activation peak proportional to the scheduled-token budget), checked against the
start-up lines of every recorded server log (``tests/unit/test_capacity.py``).

Tensor and pipeline parallelism are modelled GPU by GPU: each pipeline stage holds its share of the decoder layers
(split as vLLM splits them), the first stage the embedding and the last the final norm and LM head, and tensor
parallelism divides a stage's weights and KV heads over its GPUs. vLLM gives every GPU the same number of KV blocks,
the smallest any of them can hold, so the fullest GPU sets the budget. The recorded logs are all single-GPU: the
multi-GPU split follows vLLM's code, and the memory NCCL takes outside torch is not modelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.errors import CapacityError
from vllm_playbooks.shapes import ModelShape, resolve_model

if TYPE_CHECKING:
    import pandas as pd

GIB = 1024**3
BLOCK_SIZE = 16
#: Peak activation ≈ ACTIVATION_FACTOR × scheduled tokens × (hidden + 2 × intermediate) × activation bytes.
#: Fitted to one start-up log (Llama-3.1-8B shape on the H200: 1.10 GiB at 8192 batched tokens); the tests check
#: it against every recorded log.
ACTIVATION_FACTOR = 2.2
#: Memory outside torch's allocator that vLLM measures at start-up (0.22-0.27 GiB in the recorded H200 logs).
NON_TORCH_GIB = 0.25
#: Dense decoder architectures whose weight count ``weight_bytes`` knows.
DENSE_ARCHITECTURES = frozenset({"LlamaForCausalLM", "Qwen2ForCausalLM", "MiMoForCausalLM", "MistralForCausalLM"})

_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


def dtype_bytes(dtype: str, shape: ModelShape) -> int:
    """Bytes per element of an activation or KV dtype; 'auto' means the shape's ``torch_dtype``."""
    name = shape.torch_dtype if dtype == "auto" else dtype
    if name not in _DTYPE_BYTES:
        raise CapacityError(f"unknown dtype {name!r}; known: {', '.join(sorted(_DTYPE_BYTES))}")
    return _DTYPE_BYTES[name]


def kv_bytes_per_token(shape: ModelShape, kv_cache_dtype: str = "auto", layers: int | None = None) -> int:
    """KV-cache bytes one token takes in ``layers`` layers (default: all of the shape's).

    GQA/MHA keeps K and V per KV head: 2 × kv_heads × head_dim per layer. MLA (DeepSeek) keeps one compressed
    latent plus the rotary key: kv_lora_rank + qk_rope_head_dim per layer.
    """
    config = shape.config()
    count = shape.num_hidden_layers if layers is None else layers
    element = dtype_bytes(kv_cache_dtype, shape)
    if config.get("kv_lora_rank"):
        return count * (int(config["kv_lora_rank"]) + int(config["qk_rope_head_dim"])) * element
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or shape.hidden_size // heads)
    return count * 2 * kv_heads * head_dim * element


def _linear_bytes_per_weight(shape: ModelShape) -> float:
    quant = shape.config().get("quantization_config") or {}
    method = quant.get("quant_method")
    if method is None:
        return float(dtype_bytes("auto", shape))
    if method in {"awq", "gptq"}:
        bits, group = int(quant.get("bits", 4)), int(quant.get("group_size", 128))
        return bits / 8 + (2 + bits / 8) / group  # packed weights + an fp16 scale and a packed zero per group
    raise CapacityError(f"{shape.name}: no weight-size model for quantization {method!r}")


def parameter_count(shape: ModelShape, part: Literal["all", "linear", "dense"] = "all") -> int:
    """Weights of a dense decoder, as ``weight_bytes`` counts them.

    ``linear`` is the attention and MLP projections (what AWQ/GPTQ quantize), ``dense`` the embeddings, untied LM head
    and norms (kept in the model dtype), ``all`` their sum. Used by the roofline's FLOP count (2 × parameters per token).
    """
    if shape.architecture not in DENSE_ARCHITECTURES:
        raise CapacityError(
            f"{shape.name} ({shape.architecture}): weights are modelled for dense decoders only "
            f"({', '.join(sorted(DENSE_ARCHITECTURES))}); MoE weights are not modelled yet"
        )
    c = shape.config()
    hidden, inter, layers, vocab = shape.hidden_size, int(c["intermediate_size"]), shape.num_hidden_layers, shape.vocab_size
    heads = int(c["num_attention_heads"])
    kv_heads = int(c.get("num_key_value_heads") or heads)
    head_dim = int(c.get("head_dim") or hidden // heads)
    linear = layers * (hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2 + 3 * hidden * inter)
    dense = vocab * hidden * (1 if c.get("tie_word_embeddings") else 2) + (2 * layers + 1) * hidden
    return {"all": linear + dense, "linear": linear, "dense": dense}[part]


def weight_bytes(shape: ModelShape) -> int:
    """Bytes of a dense decoder's weights (embeddings, attention, MLP, norms, untied head) as loaded."""
    linear, dense = parameter_count(shape, "linear"), parameter_count(shape, "dense")
    return round(linear * _linear_bytes_per_weight(shape) + dense * dtype_bytes("auto", shape))


def pp_layer_partition(num_layers: int, pipeline_parallel_size: int) -> list[int]:
    """Decoder layers on each pipeline stage, as vLLM splits them (``vllm.distributed.utils.get_pp_indices`` without
    ``VLLM_PP_LAYER_PARTITION``): equal shares, and the remainder one layer each to the stages before the last,
    counting back from the second-to-last (the last stage already runs the final norm, LM head and sampler)."""
    if not 1 <= pipeline_parallel_size <= num_layers:
        raise CapacityError(
            f"pipeline_parallel_size must lie between 1 and the model's {num_layers} layers, got {pipeline_parallel_size}"
        )
    parts = [num_layers // pipeline_parallel_size] * pipeline_parallel_size
    for i in range(2, num_layers % pipeline_parallel_size + 2):
        parts[-i] += 1
    return parts


def kv_heads_per_gpu(shape: ModelShape, tensor_parallel_size: int) -> int:
    """KV heads one tensor-parallel GPU keeps: ``max(1, kv_heads // TP)`` as vLLM computes it (with more GPUs than KV
    heads, each GPU keeps a replica of one head). MLA shapes keep one latent per token on every GPU: 1."""
    config = shape.config()
    if config.get("kv_lora_rank"):
        return 1
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    return max(1, kv_heads // tensor_parallel_size)


def kv_bytes_per_token_per_gpu(
    shape: ModelShape, kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1, layers: int | None = None
) -> int:
    """KV-cache bytes one token takes on one GPU that holds ``layers`` layers (default: all) with tensor parallelism
    ``tensor_parallel_size``: the GPU keeps ``kv_heads_per_gpu`` of the KV heads (MLA: the whole latent)."""
    whole = kv_bytes_per_token(shape, kv_cache_dtype, layers)
    config = shape.config()
    if config.get("kv_lora_rank"):
        return whole
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    return whole // kv_heads * kv_heads_per_gpu(shape, tensor_parallel_size)


def stage_weight_bytes(shape: ModelShape, tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1) -> list[int]:
    """Bytes of a dense decoder's weights on one GPU of each pipeline stage.

    A stage holds its layers' projections and norms; the first stage also the embedding, the last the final norm and
    the LM head (a separate copy when the embeddings are tied but live on another stage). Tensor parallelism divides
    projections, embedding and head over the stage's GPUs (norms are replicated). With TP = PP = 1 the single entry
    equals ``weight_bytes``.
    """
    config = shape.config()
    hidden, layers, vocab = shape.hidden_size, shape.num_hidden_layers, shape.vocab_size
    element = dtype_bytes("auto", shape)
    per_layer_linear = parameter_count(shape, "linear") / layers * _linear_bytes_per_weight(shape)
    table = vocab * hidden * element
    tied = bool(config.get("tie_word_embeddings"))
    parts = pp_layer_partition(layers, pipeline_parallel_size)
    out = []
    for index, count in enumerate(parts):
        first, last = index == 0, index == len(parts) - 1
        split = count * per_layer_linear + (table if first else 0) + (table if last and not (tied and first) else 0)
        norms = (2 * count + (1 if last else 0)) * hidden * element
        out.append(round(split / tensor_parallel_size + norms))
    return out


def activation_bytes(shape: ModelShape, max_num_batched_tokens: int, dtype: str = "auto") -> int:
    """Estimated peak activation of a forward pass over ``max_num_batched_tokens`` tokens (see ACTIVATION_FACTOR)."""
    width = shape.hidden_size + 2 * int(shape.config()["intermediate_size"])
    element = dtype_bytes(dtype, shape) if dtype != "auto" else min(2, dtype_bytes("auto", shape))
    return round(ACTIVATION_FACTOR * max_num_batched_tokens * width * element)


def batch_defaults(
    gpu_memory_gib: float, gpu_name: str = "", context: Literal["server", "offline"] = "server",
    performance_mode: Literal["balanced", "interactivity", "throughput"] = "balanced",
) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM 0.26 picks when neither is set (engine/arg_utils.py).

    Devices with at least 70 GiB that are not A100s get the larger values; ``performance_mode="throughput"``
    doubles both (a value you set yourself is not doubled).
    """
    large = gpu_memory_gib >= 70 and "A100" not in gpu_name.upper()
    tokens = {("server", True): 8192, ("offline", True): 16384, ("server", False): 2048, ("offline", False): 8192}[
        (context, large)
    ]
    seqs = 1024 if large else 256
    if performance_mode == "throughput":
        tokens, seqs = tokens * 2, seqs * 2
    return tokens, seqs


def resolve_batching(
    max_model_len: int, gpu_memory_gib: float, gpu_name: str = "", *, max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None, context: Literal["server", "offline"] = "server",
    performance_mode: Literal["balanced", "interactivity", "throughput"] = "balanced", chunked_prefill: bool = True,
) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) that vLLM 0.26 ends up with, given what you set.

    Unset values take the defaults (``batch_defaults``; doubled in throughput mode). An unset token budget is then
    raised to max_model_len without chunked prefill and capped at max_num_seqs × max_model_len; an unset sequence
    cap is capped at the token budget. A token budget below the sequence cap is refused, as vLLM refuses it.
    """
    tokens, seqs = batch_defaults(gpu_memory_gib, gpu_name, context, performance_mode)
    tokens = max_num_batched_tokens or tokens
    seqs = max_num_seqs or seqs
    if max_num_batched_tokens is None:
        if not chunked_prefill:
            tokens = max(max_model_len, tokens)
        tokens = min(seqs * max_model_len, tokens)
    if max_num_seqs is None:
        seqs = min(seqs, tokens)
    if tokens < seqs:
        raise CapacityError(
            f"max_num_batched_tokens ({tokens}) < max_num_seqs ({seqs}): vLLM refuses this; raise the token budget"
        )
    return tokens, seqs


def cudagraph_capture_sizes(max_num_seqs: int, num_speculative_tokens: int = 0, max_num_batched_tokens: int = 8192,
                            full_decode_graphs: bool = True) -> list[int]:  # fmt: skip
    """Batch sizes vLLM 0.26 captures CUDA graphs for (config/vllm.py, config/compilation.py).

    The largest is min(max_num_seqs × (1 + k) × 2, 512), capped at the token budget; sizes are 1, 2, 4, then every
    8 up to 248, then every 16. With speculation and FULL decode graphs (V1), each size is rounded up to a multiple
    of 1 + k and sizes above the largest are dropped, so large decode batches run without a graph.
    """
    largest = min(max_num_seqs * (1 + num_speculative_tokens) * 2, 512, max_num_batched_tokens)
    sizes = [s for s in [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)] if s <= largest]
    step = 1 + num_speculative_tokens
    if full_decode_graphs and step > 1:
        sizes = sorted({math.ceil(s / step) * step for s in sizes if math.ceil(s / step) * step <= largest}) or [step]
    return sizes


@dataclass(frozen=True)
class KVBudget:
    """How the GPU memory divides up for one engine config, and how many sequences fit.

    Byte counts other than ``weight_bytes`` and ``kv_bytes_per_token`` are per GPU, on the GPU that sets the budget
    (the one whose KV cache holds the fewest tokens); with one GPU the two views are the same.
    """

    requested_bytes: int
    weight_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    kv_bytes: int
    kv_bytes_per_token: int
    kv_tokens: int
    max_model_len: int
    max_num_seqs: int
    gpus: int = 1
    weight_bytes_per_gpu: int = 0
    kv_bytes_per_token_per_gpu: int = 0

    @property
    def max_concurrency(self) -> float:
        """Sequences of ``max_model_len`` tokens the KV cache holds at once (vLLM's 'Maximum concurrency')."""
        return self.kv_tokens / self.max_model_len

    @property
    def binding(self) -> Literal["max_num_seqs", "memory"]:
        """Which limit binds for full-length sequences: the ``max_num_seqs`` cap, or the KV-cache memory."""
        return "memory" if self.max_concurrency < self.max_num_seqs else "max_num_seqs"


def _spec_shapes(engine: EngineConfig, target: ModelShape) -> tuple[list[ModelShape], int]:
    """Models whose layers also hold KV cache: a draft model or head, or the target's MTP layers."""
    spec = engine.speculative
    if spec is None:
        return [], 0
    if spec.method == "mtp":
        return [], target.num_mtp_layers
    if spec.model:
        return [resolve_model(spec.model)], 0
    return [], 0


def _stages(engine: EngineConfig, target: ModelShape, drafts: list[ModelShape], mtp_layers: int) -> list[tuple[int, int]]:
    """(weight bytes, KV bytes per token) on one GPU of each pipeline stage; the drafter lives on the last stage."""
    tp, pp = engine.tensor_parallel_size, engine.pipeline_parallel_size
    weights = stage_weight_bytes(target, tp, pp)
    layers = pp_layer_partition(target.num_hidden_layers, pp)
    per_token = [kv_bytes_per_token_per_gpu(target, engine.kv_cache_dtype, tp, count) for count in layers]
    if mtp_layers:
        per_token[-1] += kv_bytes_per_token_per_gpu(target, engine.kv_cache_dtype, tp, mtp_layers)
    draft_tp = (engine.speculative.draft_tensor_parallel_size if engine.speculative else None) or tp
    for draft in drafts:
        weights[-1] += stage_weight_bytes(draft, draft_tp)[0]
        per_token[-1] += kv_bytes_per_token_per_gpu(draft, engine.kv_cache_dtype, draft_tp)
    return list(zip(weights, per_token, strict=True))


def kv_budget(engine: EngineConfig, gpu_memory_gib: float, gpu_name: str = "") -> KVBudget:
    """The KV-cache budget of ``engine`` on GPUs whose framework-visible memory is ``gpu_memory_gib`` each.

    Every GPU gets the same number of KV blocks, the fewest any GPU can hold (vLLM takes the minimum over workers).
    """
    target = resolve_model(engine.model)
    drafts, mtp_layers = _spec_shapes(engine, target)
    batched, seqs = resolve_batching(
        engine.max_model_len, gpu_memory_gib, gpu_name,
        max_num_seqs=engine.max_num_seqs, max_num_batched_tokens=engine.max_num_batched_tokens,
    )  # fmt: skip
    per_token = kv_bytes_per_token(target, engine.kv_cache_dtype)
    if mtp_layers:
        per_token += kv_bytes_per_token(target, engine.kv_cache_dtype, layers=mtp_layers)
    weights = weight_bytes(target)
    for draft in drafts:
        per_token += kv_bytes_per_token(draft, engine.kv_cache_dtype)
        weights += weight_bytes(draft)
    requested = round(engine.gpu_memory_utilization * gpu_memory_gib * GIB)
    activation = activation_bytes(target, batched, engine.dtype)
    non_torch = round(NON_TORCH_GIB * GIB)
    stages = []
    for stage_weights, stage_per_token in _stages(engine, target, drafts, mtp_layers):
        free = requested - stage_weights - activation - non_torch
        blocks = max(free, 0) // (stage_per_token * BLOCK_SIZE)
        stages.append((blocks, free, stage_weights, stage_per_token))
    blocks, kv, stage_weights, stage_per_token = min(stages, key=lambda s: (s[0], s[1]))
    return KVBudget(
        requested_bytes=requested, weight_bytes=weights, activation_bytes=activation, non_torch_bytes=non_torch,
        kv_bytes=kv, kv_bytes_per_token=per_token, kv_tokens=blocks * BLOCK_SIZE, max_model_len=engine.max_model_len,
        max_num_seqs=seqs, gpus=engine.tensor_parallel_size * engine.pipeline_parallel_size,
        weight_bytes_per_gpu=stage_weights, kv_bytes_per_token_per_gpu=stage_per_token,
    )  # fmt: skip


def budget_is_modelled(engine: EngineConfig) -> bool:
    """True when every model of ``engine`` (target and draft) is a dense decoder whose weights are modelled."""
    target = resolve_model(engine.model)
    drafts, _ = _spec_shapes(engine, target)
    return all(shape.architecture in DENSE_ARCHITECTURES for shape in [target, *drafts])


def check_fits(engine: EngineConfig, gpu_memory_gib: float, gpu_name: str = "") -> KVBudget:
    """Raise ``CapacityError`` when the weights or one full-length sequence cannot fit; return the budget."""
    budget = kv_budget(engine, gpu_memory_gib, gpu_name)
    if budget.kv_bytes <= 0:
        raise CapacityError(
            f"engine {engine.label}: weights ({_per_gpu(budget)}) and activations "
            f"({budget.activation_bytes / GIB:.1f} GiB) exceed {engine.gpu_memory_utilization} × {gpu_memory_gib} GiB "
            f"per GPU. Use more GPUs (tensor_parallel_size or pipeline_parallel_size), a quantized shape, or a larger "
            f"gpu_memory_utilization."
        )
    if budget.kv_tokens < engine.max_model_len:
        raise CapacityError(
            f"engine {engine.label}: the KV cache holds {budget.kv_tokens} tokens, fewer than one sequence of "
            f"max_model_len={engine.max_model_len}. Lower max_model_len, use fp8 KV cache, or add GPUs."
        )
    return budget


def _per_gpu(budget: KVBudget) -> str:
    whole = f"{budget.weight_bytes / GIB:.1f} GiB"
    if budget.gpus == 1:
        return whole
    return f"{budget.weight_bytes_per_gpu / GIB:.1f} GiB on the fullest of {budget.gpus} GPUs, {whole} in all"


def budget_table(budget: KVBudget) -> pd.DataFrame:
    """The memory split of a budget as a small table (GiB), for a page."""
    import pandas as pd

    rows = [
        ("requested (gpu_memory_utilization × memory)", budget.requested_bytes / GIB),
        ("weights (target + draft)" if budget.gpus == 1 else f"weights on the fullest of {budget.gpus} GPUs",
         budget.weight_bytes_per_gpu / GIB),
        ("peak activation (estimate)", budget.activation_bytes / GIB),
        ("non-torch memory (estimate)", budget.non_torch_bytes / GIB),
        ("left for the KV cache", budget.kv_bytes / GIB),
    ]
    return pd.DataFrame(rows, columns=["part", "GiB"])


def describe_budget(budget: KVBudget) -> str:
    """One paragraph: tokens, full-length sequences at once, and which limit binds."""
    per_token_kib = budget.kv_bytes_per_token / 1024
    limit = (
        f"memory binds: only {budget.max_concurrency:.1f} sequences of {budget.max_model_len} tokens fit, fewer than "
        f"max_num_seqs={budget.max_num_seqs}, so long requests queue or get preempted before the cap is reached"
        if budget.binding == "memory"
        else f"max_num_seqs={budget.max_num_seqs} binds: the cache could hold {budget.max_concurrency:.1f} sequences "
        f"of {budget.max_model_len} tokens"
    )
    where = (
        f"{budget.kv_bytes / GIB:.1f} GiB"
        if budget.gpus == 1
        else f"{budget.kv_bytes / GIB:.1f} GiB on each of {budget.gpus} GPUs, which keep "
        f"{budget.kv_bytes_per_token_per_gpu / 1024:g} KiB of each token"
    )
    return f"The KV cache takes {per_token_kib:g} KiB per token and holds {budget.kv_tokens:,} tokens ({where}); {limit}."
