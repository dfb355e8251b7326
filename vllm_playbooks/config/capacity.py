"""KV-cache budget, batching defaults and CUDA-graph sizes, computed the way vLLM 0.26 does, before any GPU time.

The KV-cache bytes per token and the rounding to 16-token blocks are exact (for models that mix attention types, such
as gpt-oss, with the padding layers vLLM adds to keep its KV groups equal); the memory left for the KV cache is a
model (weights from the shape, an activation peak proportional to the scheduled-token budget), checked against the
start-up lines of every recorded server log (``tests/unit/test_capacity.py``).

Tensor and pipeline parallelism are modelled GPU by GPU: each pipeline stage holds its share of the decoder layers
(split as vLLM splits them), the first stage the embedding and the last the final norm and LM head, and tensor
parallelism divides a stage's weights and KV heads over its GPUs. vLLM gives every GPU the same number of KV blocks,
the smallest any of them can hold, so the fullest GPU sets the budget. Recorded start-ups of the 8B shape under TP = 2
and PP = 2 match; the memory NCCL takes outside torch is not modelled.
Weights are counted for dense decoders, for the two MoE families this package ships (DeepSeek-V3 with FP8 block
quantization or bf16, gpt-oss with MXFP4 experts) and for EAGLE-3 heads; the MoE weight counts match vLLM's start-up
logs within 2 %. Two terms of vLLM's budget are not modelled: the MoE layers' activation peak (the activation
model was fitted on a dense shape; vLLM measured 3.5-4.2 GiB for the reduced DeepSeek-V3 at 8192 tokens against our
1.5 GiB) and, for every shape, the CUDA-graph memory estimate vLLM 0.26 takes from the KV budget (logged as 'Estimated CUDA graph
memory': up to 1.6 GiB on the dense shapes recorded, 1.2-6.2 GiB on the MoE ones, the most with MTP). So the KV tokens
of MoE targets are overstated and a tight MoE budget can pass this check and still not fit. With vLLM's logged
activation, non-torch memory and graph estimate in place of ours, every recorded start-up's KV tokens come out within
2.5 % (``startup.calculator_check``), so the weights and the KV bytes per token are right.
"""

from __future__ import annotations

import itertools
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
#: Mixture-of-experts architectures whose layout ``moe_layout`` knows.
MOE_ARCHITECTURES = frozenset({"DeepseekV3ForCausalLM", "GptOssForCausalLM"})
#: Draft heads whose weights ``weight_bytes`` counts.
HEAD_ARCHITECTURES = frozenset({"LlamaForCausalLMEagle3"})
#: Every architecture the KV budget can be computed for.
MODELLED_ARCHITECTURES = DENSE_ARCHITECTURES | MOE_ARCHITECTURES | HEAD_ARCHITECTURES
#: Side of the square weight blocks that share one fp32 scale in FP8 block quantization (DeepSeek-V3's 128 × 128).
FP8_BLOCK = 128
#: Weights that share one e8m0 (1-byte) scale in MXFP4.
MXFP4_GROUP = 32

WeightScheme = Literal["bf16", "fp32", "fp8_block", "mxfp4"]

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


def padded_kv_layers(layers_by_type: dict[str, int]) -> int:
    """The KV layers vLLM 0.26 allocates for a whole model whose layers have several attention types of one page
    size (gpt-oss: sliding-window and full attention): ``kv_layers_per_stage`` of one stage. vLLM's own example:
    gpt-oss-20b with an EAGLE head, 12 sliding + 13 full, is padded to 13 + 13. A single type needs no padding.
    """
    return kv_layers_per_stage([[kind for kind, n in layers_by_type.items() for _ in range(n)]])[0]


def kv_layers_per_stage(stage_types: list[list[str]]) -> list[int]:
    """The KV layers per token each pipeline stage allocates, given the attention type of every layer it holds.

    vLLM 0.26 forms the KV-cache groups over the whole model
    (``vllm.v1.core.kv_cache_utils._get_kv_cache_groups_uniform_page_size``): the group size is the fewest layers of
    any type, or the most when that is under 1.5 times the fewest; each type's ``n`` layers fill ``ceil(n / size)``
    groups, dealt in layer order like cards (``layers[i::groups]``, so that every stage gets a share of every group).
    Each stage allocates, for every group, as many layers as its fullest group holds there, so a stage whose layers
    fall unevenly across the groups pads more than the whole model does. A single attention type: each stage's own
    layer count.
    """
    every = [kind for stage in stage_types for kind in stage]
    counts = {kind: every.count(kind) for kind in dict.fromkeys(every)}
    if len(counts) < 2:
        return [len(stage) for stage in stage_types]
    fewest, most = min(counts.values()), max(counts.values())
    group = most if most < 1.5 * fewest else fewest
    groups_of = {kind: math.ceil(n / group) for kind, n in counts.items()}
    seen = dict.fromkeys(counts, 0)
    layers = []
    for stage in stage_types:
        in_group: dict[tuple[str, int], int] = {}
        for kind in stage:
            key = (kind, seen[kind] % groups_of[kind])
            in_group[key] = in_group.get(key, 0) + 1
            seen[kind] += 1
        layers.append(max(in_group.values(), default=0) * sum(groups_of.values()))
    return layers


def linear_bytes(out_features: int, in_features: int, scheme: WeightScheme, block: int = FP8_BLOCK) -> int:
    """Bytes of one ``out × in`` weight matrix as stored.

    ``bf16``: 2 per weight; ``fp32``: 4; ``fp8_block``: 1 per weight plus one fp32 scale per ``block × block`` tile
    (``weight_scale_inv``); ``mxfp4``: half a byte per weight plus one 1-byte scale per 32 inputs of each output row.
    """
    weights = out_features * in_features
    if scheme == "bf16":
        return 2 * weights
    if scheme == "fp32":
        return 4 * weights
    if scheme == "fp8_block":
        return weights + 4 * math.ceil(out_features / block) * math.ceil(in_features / block)
    if scheme == "mxfp4":
        return weights // 2 + out_features * math.ceil(in_features / MXFP4_GROUP)
    raise CapacityError(f"unknown weight scheme {scheme!r}")


@dataclass(frozen=True)
class MoeLayout:
    """Parameters and bytes of an MoE model, by part, as vLLM 0.26 holds them on the GPU (one shard, TP = 1).

    Per-layer figures are per transformer layer; ``expert_*`` is one routed expert (shared experts are counted in
    units of it: DeepSeek's shared expert has the routed experts' width times ``n_shared_experts``). ``mtp_extra_*``
    is what an MTP module adds to its one MoE layer (the ``eh_proj`` projection and three norms), ``mtp_head_bytes``
    the bf16 output head each MTP module reads (vLLM 0.26 points it at the target's ``lm_head`` after loading, so it
    takes no memory of its own), ``absorbed_bytes_per_layer`` the bf16 copies of MLA's
    absorbed ``W_UK`` / ``W_UV`` vLLM keeps per attention layer (both read from vLLM's code; see the DeepSeek shapes'
    ``SOURCE.md``).
    """

    name: str
    layers: int
    moe_layers: int
    routed_experts: int
    experts_per_token: int
    shared_experts: int
    expert_params: int
    expert_bytes: int
    attention_params: int
    attention_bytes: int
    dense_mlp_params: int
    dense_mlp_bytes: int
    router_params: int
    router_bytes: int
    embed_params: int
    embed_bytes: int
    head_params: int
    head_bytes: int
    final_norm_params: int
    mtp_layers: int = 0
    mtp_extra_params: int = 0
    mtp_extra_bytes: int = 0
    mtp_head_bytes: int = 0
    absorbed_bytes_per_layer: int = 0

    @property
    def dense_layers(self) -> int:
        """Layers with a dense MLP instead of experts."""
        return self.layers - self.moe_layers

    @property
    def moe_layer_params(self) -> int:
        """One MoE layer: attention, every expert (routed and shared) and the router."""
        return self.attention_params + (self.routed_experts + self.shared_experts) * self.expert_params + self.router_params

    @property
    def moe_layer_bytes(self) -> int:
        """Bytes of one MoE layer, as stored in the checkpoint."""
        return self.attention_bytes + (self.routed_experts + self.shared_experts) * self.expert_bytes + self.router_bytes

    def main_params(self) -> int:
        """Parameters of the main model (no MTP modules): the published total for DeepSeek-V3 is 671 B."""
        dense = self.dense_layers * (self.attention_params + self.dense_mlp_params)
        return dense + self.moe_layers * self.moe_layer_params + self.embed_params + self.head_params + self.final_norm_params

    def mtp_params(self) -> int:
        """Parameters of the checkpoint's MTP modules (each one MoE layer plus its extras; head and embedding shared)."""
        return self.mtp_layers * (self.moe_layer_params + self.mtp_extra_params)

    def checkpoint_bytes(self) -> int:
        """Bytes of main model and MTP modules in the checkpoint layout (no vLLM-side copies)."""
        dense = self.dense_layers * (self.attention_bytes + self.dense_mlp_bytes)
        main = dense + self.moe_layers * self.moe_layer_bytes + self.embed_bytes + self.head_bytes + 2 * self.final_norm_params
        return main + self.mtp_layers * (self.moe_layer_bytes + self.mtp_extra_bytes)

    def served_main_bytes(self) -> int:
        """Bytes vLLM 0.26 holds for the main model without speculation (it skips the MTP modules)."""
        dense = self.dense_layers * (self.attention_bytes + self.dense_mlp_bytes)
        main = dense + self.moe_layers * self.moe_layer_bytes + self.embed_bytes + self.head_bytes + 2 * self.final_norm_params
        return main + self.layers * self.absorbed_bytes_per_layer

    def served_mtp_bytes(self) -> int:
        """Bytes ``method: mtp`` adds: each MTP module with its absorbed copies. Embedding and head are the
        target's: vLLM 0.26 logs 'Shared target model lm_head with MTP shared_head.head.' at load, and the reduced
        shape's recorded start-ups loaded 97.47 GiB with MTP against 95.71 GiB without."""
        return self.mtp_layers * (self.moe_layer_bytes + self.mtp_extra_bytes + self.absorbed_bytes_per_layer)

    def active_params(self) -> int:
        """Parameters one token multiplies through in the main model (the embedding lookup is not counted)."""
        per_moe = self.attention_params + (self.experts_per_token + self.shared_experts) * self.expert_params
        per_moe += self.router_params
        dense = self.dense_layers * (self.attention_params + self.dense_mlp_params)
        return dense + self.moe_layers * per_moe + self.head_params


def _deepseek_layout(shape: ModelShape) -> MoeLayout:
    c = shape.config()
    scheme: WeightScheme = "fp8_block" if (c.get("quantization_config") or {}).get("quant_method") == "fp8" else "bf16"
    h, heads = shape.hidden_size, int(c["num_attention_heads"])
    nope, rope, v = int(c["qk_nope_head_dim"]), int(c["qk_rope_head_dim"]), int(c["v_head_dim"])
    kv_lora, q_lora = int(c["kv_lora_rank"]), c.get("q_lora_rank")
    projections = []
    if q_lora:
        projections += [(int(q_lora), h), (heads * (nope + rope), int(q_lora))]
    else:
        projections += [(heads * (nope + rope), h)]
    projections += [(kv_lora + rope, h), (heads * (nope + v), kv_lora), (h, heads * v)]
    norms = (int(q_lora) if q_lora else 0) + kv_lora + 2 * h
    attention_params = sum(o * i for o, i in projections) + norms
    attention_bytes = sum(linear_bytes(o, i, scheme) for o, i in projections) + 2 * norms

    def mlp(width: int) -> tuple[int, int]:  # fused gate_up (2·width × h) and down (h × width)
        return 3 * h * width, linear_bytes(2 * width, h, scheme) + linear_bytes(h, width, scheme)

    experts, moe_inter = int(c["n_routed_experts"]), int(c["moe_intermediate_size"])
    expert_params, expert_bytes = mlp(moe_inter)
    dense_params, dense_bytes = mlp(int(c["intermediate_size"]))
    bias = 1 if c.get("topk_method") == "noaux_tc" else 0  # e_score_correction_bias, fp32
    vocab = shape.vocab_size
    return MoeLayout(
        name=shape.name, layers=shape.num_hidden_layers,
        moe_layers=shape.num_hidden_layers - int(c.get("first_k_dense_replace") or 0),
        routed_experts=experts, experts_per_token=int(c["num_experts_per_tok"]),
        shared_experts=int(c.get("n_shared_experts") or 0), expert_params=expert_params, expert_bytes=expert_bytes,
        attention_params=attention_params, attention_bytes=attention_bytes, dense_mlp_params=dense_params,
        dense_mlp_bytes=dense_bytes, router_params=experts * h + bias * experts,
        router_bytes=2 * experts * h + 4 * bias * experts, embed_params=vocab * h, embed_bytes=2 * vocab * h,
        head_params=vocab * h, head_bytes=2 * vocab * h, final_norm_params=h,
        mtp_layers=shape.num_mtp_layers, mtp_extra_params=2 * h * h + 3 * h, mtp_extra_bytes=2 * (2 * h * h + 3 * h),
        mtp_head_bytes=2 * vocab * h, absorbed_bytes_per_layer=2 * kv_lora * heads * (nope + v),
    )  # fmt: skip


def _gpt_oss_layout(shape: ModelShape) -> MoeLayout:
    c = shape.config()
    scheme: WeightScheme = "mxfp4" if (c.get("quantization_config") or {}).get("quant_method") == "mxfp4" else "bf16"
    h, heads, kv_heads = shape.hidden_size, int(c["num_attention_heads"]), int(c["num_key_value_heads"])
    head_dim, inter, experts = int(c["head_dim"]), int(c["intermediate_size"]), int(c["num_local_experts"])
    q, kv = heads * head_dim, kv_heads * head_dim
    # q, k, v, o with biases, the per-head sinks, two norms: all bf16 (modules_to_not_convert)
    attention_params = h * q + q + 2 * (h * kv + kv) + q * h + h + heads + 2 * h
    # gate_up (2·inter × h) and down (h × inter), with bf16 biases
    expert_params = 3 * h * inter + 2 * inter + h
    expert_bytes = linear_bytes(2 * inter, h, scheme) + linear_bytes(h, inter, scheme) + 2 * (2 * inter + h)
    vocab = shape.vocab_size
    return MoeLayout(
        name=shape.name, layers=shape.num_hidden_layers, moe_layers=shape.num_hidden_layers, routed_experts=experts,
        experts_per_token=int(c.get("num_experts_per_tok") or c["experts_per_token"]), shared_experts=0,
        expert_params=expert_params, expert_bytes=expert_bytes, attention_params=attention_params,
        attention_bytes=2 * attention_params, dense_mlp_params=0, dense_mlp_bytes=0,
        router_params=experts * h + experts, router_bytes=2 * (experts * h + experts), embed_params=vocab * h,
        embed_bytes=2 * vocab * h, head_params=vocab * h, head_bytes=2 * vocab * h, final_norm_params=h,
    )  # fmt: skip


def moe_layout(shape: ModelShape) -> MoeLayout:
    """The parts of an MoE shape (DeepSeek-V3 family, gpt-oss), with parameters and bytes; see ``MoeLayout``."""
    if shape.architecture == "DeepseekV3ForCausalLM":
        return _deepseek_layout(shape)
    if shape.architecture == "GptOssForCausalLM":
        return _gpt_oss_layout(shape)
    raise CapacityError(
        f"{shape.name} ({shape.architecture}): MoE layouts are known for {', '.join(sorted(MOE_ARCHITECTURES))}"
    )


def eagle3_head_parts(shape: ModelShape) -> dict[str, int]:
    """Parameters of an EAGLE-3 head (``LlamaForCausalLMEagle3``), by part, as vLLM 0.26 builds it.

    One Llama decoder layer whose q/k/v take the concatenated embedding and hidden state (2 × hidden inputs), the
    ``fc`` that fuses the three auxiliary hidden states (3 × hidden → hidden), the draft-vocabulary head, and the
    embedding table (vLLM shares the target's when the shapes match, so counting it is an upper bound).
    """
    c = shape.config()
    h, heads = shape.hidden_size, int(c["num_attention_heads"])
    kv_heads = int(c.get("num_key_value_heads") or heads)
    head_dim = int(c.get("head_dim") or h // heads)
    inter, layers = int(c["intermediate_size"]), shape.num_hidden_layers
    draft_vocab = int(c.get("draft_vocab_size") or shape.vocab_size)
    layer = 2 * h * (heads + 2 * kv_heads) * head_dim + heads * head_dim * h + 3 * h * inter + 4 * h
    return {
        "layers": layers * layer, "fc": 3 * h * h, "head": draft_vocab * h, "embed": shape.vocab_size * h,
        "norm": h,
    }  # fmt: skip


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
    """Weights of a dense decoder, as ``weight_bytes`` counts them (MoE models: ``moe_layout``).

    ``linear`` is the attention and MLP projections (what AWQ/GPTQ quantize), ``dense`` the embeddings, untied LM head
    and norms (kept in the model dtype), ``all`` their sum. Used by the roofline's FLOP count (2 × parameters per token).
    """
    if shape.architecture not in DENSE_ARCHITECTURES:
        raise CapacityError(
            f"{shape.name} ({shape.architecture}): weights are modelled for dense decoders only "
            f"({', '.join(sorted(DENSE_ARCHITECTURES))}) here; weight_bytes also knows the MoE families "
            f"({', '.join(sorted(MOE_ARCHITECTURES))}) and EAGLE-3 heads"
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
    """Bytes of a model's weights as vLLM 0.26 holds them without speculation.

    Dense decoders: embeddings, attention, MLP, norms, untied head. MoE models: ``MoeLayout.served_main_bytes`` (every
    expert is resident, the MTP modules are not loaded). EAGLE-3 heads: every part in bf16 (``eagle3_head_parts``).
    """
    if shape.architecture in MOE_ARCHITECTURES:
        return moe_layout(shape).served_main_bytes()
    if shape.architecture in HEAD_ARCHITECTURES:
        return 2 * sum(eagle3_head_parts(shape).values())
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


def mtp_weight_bytes(shape: ModelShape) -> int:
    """Bytes ``method: mtp`` adds to the target's: its MTP modules as vLLM 0.26 loads them.

    MoE (DeepSeek): ``MoeLayout.served_mtp_bytes``. Dense (MiMo): per module one decoder layer, the 2·hidden → hidden
    input projection and three norms; vLLM 0.26's drafter shares the target's embedding and output head with any MTP
    model ('Detected MTP model. Sharing target model lm_head weights with the draft model.', seen on DeepSeek's runs;
    MiMo-7B's loaded 14.6 GiB with its MTP module and 14.21 without, as this sum gives).
    """
    if shape.num_mtp_layers == 0:
        return 0
    if shape.architecture in MOE_ARCHITECTURES:
        return moe_layout(shape).served_mtp_bytes()
    layers = shape.num_hidden_layers
    per_layer = (parameter_count(shape, "linear") / layers) * _linear_bytes_per_weight(shape)
    h = shape.hidden_size
    extra = (2 * h * h + 3 * h) * dtype_bytes("auto", shape)
    return round(shape.num_mtp_layers * (per_layer + extra))


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


#: Largest CUDA-graph size vLLM 0.26 sets for a model family when the user sets none (model_executor/models/
#: config.py: GptOssForCausalLMConfig raises it to 1024 "for performance"), instead of the max_num_seqs-based default.
MODEL_MAX_CAPTURE_SIZE = {"GptOssForCausalLM": 1024}


def max_capture_size_of(model: str) -> int | None:
    """The largest CUDA-graph size vLLM fixes for ``model``'s architecture, None where it keeps its default."""
    return MODEL_MAX_CAPTURE_SIZE.get(resolve_model(model).architecture)


def cudagraph_capture_sizes(max_num_seqs: int, num_speculative_tokens: int = 0, max_num_batched_tokens: int = 8192,
                            full_decode_graphs: bool = True, model_max_capture_size: int | None = None) -> list[int]:  # fmt: skip
    """Batch sizes vLLM 0.26 captures CUDA graphs for (config/vllm.py, config/compilation.py).

    The largest is min(max_num_seqs × (1 + k) × 2, 512), capped at the token budget, unless the model's family fixes
    it (``model_max_capture_size``, ``max_capture_size_of``); sizes are 1, 2, 4, then every 8 up to 248, then every
    16. With speculation and FULL decode graphs (V1), each size is rounded up to a multiple of 1 + k and sizes above
    the largest are dropped, so large decode batches run without a graph. These are the sizes of mixed
    prefill-decode (PIECEWISE) graphs; some attention backends capture decode-only (FULL) graphs up to a lower size.
    """
    if model_max_capture_size is not None:
        largest = min(model_max_capture_size, max_num_batched_tokens)
    else:
        largest = min(max_num_seqs * (1 + num_speculative_tokens) * 2, 512, max_num_batched_tokens)
    sizes = [s for s in [1, 2, 4, *range(8, 256, 8), *range(256, largest + 1, 16)] if s <= largest]
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


def _whole_model(engine: EngineConfig, target: ModelShape, drafts: list[ModelShape], mtp_layers: int) -> tuple[int, int]:
    """(weight bytes, KV bytes per token) of everything the engine serves: target, MTP modules, drafts."""
    weights = weight_bytes(target) + (mtp_weight_bytes(target) if mtp_layers else 0)
    per_token = kv_bytes_per_token(target, engine.kv_cache_dtype)
    if mtp_layers:
        per_token += kv_bytes_per_token(target, engine.kv_cache_dtype, layers=mtp_layers)
    for draft in drafts:
        weights += weight_bytes(draft)
        per_token += kv_bytes_per_token(draft, engine.kv_cache_dtype)
    hybrid = _hybrid_kv_per_token(engine.kv_cache_dtype, target, drafts, mtp_layers, [target.num_hidden_layers])
    return weights, hybrid[0] if hybrid else per_token


def _hybrid_kv_per_token(
    kv_cache_dtype: str, target: ModelShape, drafts: list[ModelShape], mtp_layers: int, partition: list[int],
    tp: int = 1, draft_tp: int = 1,
) -> list[int] | None:
    """KV bytes per token on one GPU of each pipeline stage (``partition``: the target's layers per stage) when the
    target mixes attention types and every layer, the drafts' included, takes the same bytes per token on its GPU:
    ``kv_layers_per_stage`` layers of that size, padding included. ``None`` for a single attention type, or drafts
    of another page size (vLLM groups such layers another way, not modelled). MTP and draft layers count as full
    attention (EAGLE heads and draft models here have no sliding window) and live on the last stage."""
    types = target.attention_types()
    if len(set(types)) < 2:
        return None
    layer = kv_bytes_per_token_per_gpu(target, kv_cache_dtype, tp, 1)
    if any(kv_bytes_per_token_per_gpu(draft, kv_cache_dtype, draft_tp, 1) != layer for draft in drafts):
        return None
    stage_types = [types[end - count : end] for count, end in zip(partition, itertools.accumulate(partition))]
    stage_types[-1] += ["full_attention"] * (mtp_layers + sum(draft.num_hidden_layers for draft in drafts))
    return [count * layer for count in kv_layers_per_stage(stage_types)]


def _stages(
    engine: EngineConfig, target: ModelShape, drafts: list[ModelShape], mtp_layers: int, whole: tuple[int, int]
) -> list[tuple[int, int]]:
    """(weight bytes, KV bytes per token) on one GPU of each pipeline stage; the drafter lives on the last stage.
    On one GPU that is ``whole`` (the whole-model counts, MoE and EAGLE-3 heads included)."""
    tp, pp = engine.tensor_parallel_size, engine.pipeline_parallel_size
    if tp == pp == 1:
        return [whole]
    weights = stage_weight_bytes(target, tp, pp)
    if mtp_layers:
        weights[-1] += mtp_weight_bytes(target) // tp
    layers = pp_layer_partition(target.num_hidden_layers, pp)
    per_token = [kv_bytes_per_token_per_gpu(target, engine.kv_cache_dtype, tp, count) for count in layers]
    if mtp_layers:
        per_token[-1] += kv_bytes_per_token_per_gpu(target, engine.kv_cache_dtype, tp, mtp_layers)
    draft_tp = (engine.speculative.draft_tensor_parallel_size if engine.speculative else None) or tp
    for draft in drafts:
        weights[-1] += stage_weight_bytes(draft, draft_tp)[0]
        per_token[-1] += kv_bytes_per_token_per_gpu(draft, engine.kv_cache_dtype, draft_tp)
    hybrid = _hybrid_kv_per_token(engine.kv_cache_dtype, target, drafts, mtp_layers, layers, tp, draft_tp)
    return list(zip(weights, hybrid or per_token, strict=True))


def kv_tokens_fitting(free_bytes: float, bytes_per_token: int) -> int:
    """KV-cache tokens ``free_bytes`` hold: whole blocks of ``BLOCK_SIZE`` tokens, none when nothing is free."""
    return int(max(free_bytes, 0) // (bytes_per_token * BLOCK_SIZE)) * BLOCK_SIZE


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
    weights, per_token = _whole_model(engine, target, drafts, mtp_layers)
    requested = round(engine.gpu_memory_utilization * gpu_memory_gib * GIB)
    activation = activation_bytes(target, batched, engine.dtype)
    non_torch = round(NON_TORCH_GIB * GIB)
    stages = []
    for stage_weights, stage_per_token in _stages(engine, target, drafts, mtp_layers, (weights, per_token)):
        free = requested - stage_weights - activation - non_torch
        stages.append((kv_tokens_fitting(free, stage_per_token), free, stage_weights, stage_per_token))
    tokens, kv, stage_weights, stage_per_token = min(stages, key=lambda s: (s[0], s[1]))
    return KVBudget(
        requested_bytes=requested, weight_bytes=weights, activation_bytes=activation, non_torch_bytes=non_torch,
        kv_bytes=kv, kv_bytes_per_token=per_token, kv_tokens=tokens, max_model_len=engine.max_model_len,
        max_num_seqs=seqs, gpus=engine.tensor_parallel_size * engine.pipeline_parallel_size,
        weight_bytes_per_gpu=stage_weights, kv_bytes_per_token_per_gpu=stage_per_token,
    )  # fmt: skip


def budget_is_modelled(engine: EngineConfig) -> bool:
    """True when the weights of every model of ``engine`` (target and draft) are modelled (``MODELLED_ARCHITECTURES``)
    on the GPUs it runs on: on one GPU every modelled family; split over several GPUs dense decoders only (how vLLM
    places MoE experts and heads over tensor and pipeline ranks is not modelled)."""
    target = resolve_model(engine.model)
    drafts, _ = _spec_shapes(engine, target)
    known = DENSE_ARCHITECTURES if engine.tensor_parallel_size * engine.pipeline_parallel_size > 1 else MODELLED_ARCHITECTURES
    return all(shape.architecture in known for shape in [target, *drafts])


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
