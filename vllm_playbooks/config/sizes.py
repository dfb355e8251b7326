"""Bytes and parameter counts of a model shape: weights by quantization scheme, MoE layouts, KV bytes per token,
activations."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from vllm_playbooks.errors import CapacityError
from vllm_playbooks.shapes import ModelShape

#: Peak activation ≈ ACTIVATION_FACTOR × scheduled tokens × (hidden + 2 × intermediate) × activation bytes.
#: Fitted to one start-up log (Llama-3.1-8B shape on the H200: 1.10 GiB at 8192 batched tokens); the tests check
#: it against every recorded log.
ACTIVATION_FACTOR = 2.2


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


_DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}


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
        return (
            self.attention_params
            + (self.routed_experts + self.shared_experts) * self.expert_params
            + self.router_params
        )

    @property
    def moe_layer_bytes(self) -> int:
        """Bytes of one MoE layer, as stored in the checkpoint."""
        return (
            self.attention_bytes + (self.routed_experts + self.shared_experts) * self.expert_bytes + self.router_bytes
        )

    def main_params(self) -> int:
        """Parameters of the main model (no MTP modules): the published total for DeepSeek-V3 is 671 B."""
        dense = self.dense_layers * (self.attention_params + self.dense_mlp_params)
        return (
            dense
            + self.moe_layers * self.moe_layer_params
            + self.embed_params
            + self.head_params
            + self.final_norm_params
        )

    def mtp_params(self) -> int:
        """Parameters of the checkpoint's MTP modules (each one MoE layer plus its extras; head and embedding
        shared)."""
        return self.mtp_layers * (self.moe_layer_params + self.mtp_extra_params)

    def checkpoint_bytes(self) -> int:
        """Bytes of main model and MTP modules in the checkpoint layout (no vLLM-side copies)."""
        dense = self.dense_layers * (self.attention_bytes + self.dense_mlp_bytes)
        main = (
            dense
            + self.moe_layers * self.moe_layer_bytes
            + self.embed_bytes
            + self.head_bytes
            + 2 * self.final_norm_params
        )
        return main + self.mtp_layers * (self.moe_layer_bytes + self.mtp_extra_bytes)

    def served_main_bytes(self) -> int:
        """Bytes vLLM 0.26 holds for the main model without speculation (it skips the MTP modules)."""
        dense = self.dense_layers * (self.attention_bytes + self.dense_mlp_bytes)
        main = (
            dense
            + self.moe_layers * self.moe_layer_bytes
            + self.embed_bytes
            + self.head_bytes
            + 2 * self.final_norm_params
        )
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
        name=shape.name,
        layers=shape.num_hidden_layers,
        moe_layers=shape.num_hidden_layers - int(c.get("first_k_dense_replace") or 0),
        routed_experts=experts,
        experts_per_token=int(c["num_experts_per_tok"]),
        shared_experts=int(c.get("n_shared_experts") or 0),
        expert_params=expert_params,
        expert_bytes=expert_bytes,
        attention_params=attention_params,
        attention_bytes=attention_bytes,
        dense_mlp_params=dense_params,
        dense_mlp_bytes=dense_bytes,
        router_params=experts * h + bias * experts,
        router_bytes=2 * experts * h + 4 * bias * experts,
        embed_params=vocab * h,
        embed_bytes=2 * vocab * h,
        head_params=vocab * h,
        head_bytes=2 * vocab * h,
        final_norm_params=h,
        mtp_layers=shape.num_mtp_layers,
        mtp_extra_params=2 * h * h + 3 * h,
        mtp_extra_bytes=2 * (2 * h * h + 3 * h),
        mtp_head_bytes=2 * vocab * h,
        absorbed_bytes_per_layer=2 * kv_lora * heads * (nope + v),
    )


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
        name=shape.name,
        layers=shape.num_hidden_layers,
        moe_layers=shape.num_hidden_layers,
        routed_experts=experts,
        experts_per_token=int(c.get("num_experts_per_tok") or c["experts_per_token"]),
        shared_experts=0,
        expert_params=expert_params,
        expert_bytes=expert_bytes,
        attention_params=attention_params,
        attention_bytes=2 * attention_params,
        dense_mlp_params=0,
        dense_mlp_bytes=0,
        router_params=experts * h + experts,
        router_bytes=2 * (experts * h + experts),
        embed_params=vocab * h,
        embed_bytes=2 * vocab * h,
        head_params=vocab * h,
        head_bytes=2 * vocab * h,
        final_norm_params=h,
    )


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
        "layers": layers * layer,
        "fc": 3 * h * h,
        "head": draft_vocab * h,
        "embed": shape.vocab_size * h,
        "norm": h,
    }


def linear_bytes_per_weight(shape: ModelShape) -> float:
    """Bytes one weight of a linear layer takes: the model dtype's, or 4-bit AWQ/GPTQ packing with its per-group
    scale and zero point; ``CapacityError`` for another quantization."""
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
    and norms (kept in the model dtype), ``all`` their sum. Used by the roofline's FLOP count (2 × parameters per
    token).
    """
    if shape.architecture not in DENSE_ARCHITECTURES:
        raise CapacityError(
            f"{shape.name} ({shape.architecture}): weights are modelled for dense decoders only "
            f"({', '.join(sorted(DENSE_ARCHITECTURES))}) here; weight_bytes also knows the MoE families "
            f"({', '.join(sorted(MOE_ARCHITECTURES))}) and EAGLE-3 heads"
        )
    c = shape.config()
    hidden, inter, layers, vocab = (
        shape.hidden_size,
        int(c["intermediate_size"]),
        shape.num_hidden_layers,
        shape.vocab_size,
    )
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
    return round(linear * linear_bytes_per_weight(shape) + dense * dtype_bytes("auto", shape))


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
    per_layer = (parameter_count(shape, "linear") / layers) * linear_bytes_per_weight(shape)
    h = shape.hidden_size
    extra = (2 * h * h + 3 * h) * dtype_bytes("auto", shape)
    return round(shape.num_mtp_layers * (per_layer + extra))


def activation_bytes(shape: ModelShape, max_num_batched_tokens: int, dtype: str = "auto") -> int:
    """Estimated peak activation of a forward pass over ``max_num_batched_tokens`` tokens (see ACTIVATION_FACTOR)."""
    width = shape.hidden_size + 2 * int(shape.config()["intermediate_size"])
    element = dtype_bytes(dtype, shape) if dtype != "auto" else min(2, dtype_bytes("auto", shape))
    return round(ACTIVATION_FACTOR * max_num_batched_tokens * width * element)
