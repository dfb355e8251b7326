"""A model's bytes split over GPUs as vLLM splits them: decoder layers per pipeline stage, KV heads and KV bytes
per tensor-parallel GPU, and each stage's weights."""

from __future__ import annotations

from vllm_playbooks.config.sizes import dtype_bytes, kv_bytes_per_token, linear_bytes_per_weight, parameter_count
from vllm_playbooks.errors import CapacityError
from vllm_playbooks.shapes import ModelShape


def pp_layer_partition(num_layers: int, pipeline_parallel_size: int) -> list[int]:
    """Decoder layers on each pipeline stage, as vLLM splits them (``vllm.distributed.utils.get_pp_indices`` without
    ``VLLM_PP_LAYER_PARTITION``): equal shares, and the remainder one layer each to the stages before the last,
    counting back from the second-to-last (the last stage already runs the final norm, LM head and sampler)."""
    if not 1 <= pipeline_parallel_size <= num_layers:
        raise CapacityError(
            f"pipeline_parallel_size must lie between 1 and the model's {num_layers} layers, got "
            f"{pipeline_parallel_size}"
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
    per_layer_linear = parameter_count(shape, "linear") / layers * linear_bytes_per_weight(shape)
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
