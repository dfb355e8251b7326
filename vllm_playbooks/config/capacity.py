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
logs within 2 %. The activation peak, the non-torch memory and the CUDA-graph memory estimate vLLM 0.26 takes from
the KV budget are calibrated on the recorded start-up logs (``config.memory``, ``data/checks/memory-calibration.csv``);
``data/checks/kv-calculator-vs-vllm.csv`` (``vllm-playbooks kv-check``) holds the budget's KV tokens beside every
recorded start-up's, with the error when the config's family is left out of the fit. With vLLM's logged activation,
non-torch memory and graph estimate in place of ours, every recorded start-up's KV tokens come out within 2.5 %
(``analysis.calculator.calculator_check``), so the weights and the KV bytes per token are right.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import pandas as pd

from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.config.memory import (
    GIB,
    MIN_GRAPH_BYTES,
    CalibrationGap,
    MemoryCalibration,
    activation_width_bytes,
    cudagraph_descs,
    graph_profile,
    load_calibration,
    respecialized_modes,
    uses_v1_runner,
)
from vllm_playbooks.config.parallel_sizes import kv_bytes_per_token_per_gpu, pp_layer_partition, stage_weight_bytes
from vllm_playbooks.config.sizes import (
    DENSE_ARCHITECTURES,
    MODELLED_ARCHITECTURES,
    activation_bytes,
    kv_bytes_per_token,
    kv_layers_per_stage,
    mtp_weight_bytes,
    weight_bytes,
)
from vllm_playbooks.errors import CapacityError
from vllm_playbooks.shapes import ModelShape, resolve_model

if TYPE_CHECKING:
    from collections.abc import Iterable


BLOCK_SIZE = 16


#: Memory outside torch's allocator that vLLM measures at start-up (0.22-0.27 GiB in the recorded H200 logs).
NON_TORCH_GIB = 0.25


def batch_defaults(
    gpu_memory_gib: float,
    gpu_name: str = "",
    context: Literal["server", "offline"] = "server",
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
    max_model_len: int,
    gpu_memory_gib: float,
    gpu_name: str = "",
    *,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    context: Literal["server", "offline"] = "server",
    performance_mode: Literal["balanced", "interactivity", "throughput"] = "balanced",
    chunked_prefill: bool = True,
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


def cudagraph_capture_sizes(
    max_num_seqs: int,
    num_speculative_tokens: int = 0,
    max_num_batched_tokens: int = 8192,
    full_decode_graphs: bool = True,
    model_max_capture_size: int | None = None,
) -> list[int]:
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
    cudagraph_bytes: int = 0
    #: The calibration the budget borrows, for a family no recorded start-up calibrates (``config.memory``).
    calibration_warning: CalibrationGap | None = None
    #: Why the CUDA-graph reserve is large, where graphs are counted at the respecialized cost (``_graph_note``).
    cudagraph_note: GraphNote | None = None

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


def _whole_model(
    engine: EngineConfig, target: ModelShape, drafts: list[ModelShape], mtp_layers: int
) -> tuple[int, int]:
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
    kv_cache_dtype: str,
    target: ModelShape,
    drafts: list[ModelShape],
    mtp_layers: int,
    partition: list[int],
    tp: int = 1,
    draft_tp: int = 1,
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


#: Stands for "the calibration recorded in data/checks" (``config.memory.load_calibration``).
RECORDED = "recorded"


def _overheads(
    engine: EngineConfig, target: ModelShape, batched: int, seqs: int, calibration: MemoryCalibration | None
) -> tuple[int, int, int, CalibrationGap | None, GraphNote | None]:
    """(activation, non-torch, CUDA-graph bytes, warning, graph note) vLLM 0.26 takes before the KV cache, per GPU:
    calibrated per family where a calibration is given (``config.memory``), else the dense activation estimate and
    no graphs."""
    if calibration is None:
        return activation_bytes(target, batched, engine.dtype), round(NON_TORCH_GIB * GIB), 0, None, None
    row, _ = calibration.for_engine(engine)
    activation = round(row.activation_factor * activation_width_bytes(target, batched) / engine.tensor_parallel_size)
    graphs, note = 0, None
    if uses_v1_runner(engine):
        descs = cudagraph_descs(engine, seqs, batched, max_capture_size_of(engine.model))
        graphs = row.cudagraph_bytes(graph_profile(descs))
        note = _graph_note(descs, row.cudagraph_respecialized_gib_per_graph)
    return activation, round(row.non_torch_gib * GIB), graphs, calibration.warning(engine), note


@dataclass(frozen=True)
class GraphNote:
    """Why a CUDA-graph reserve is large (``_graph_note``): how many graphs vLLM 0.26 counts at the respecialized
    cost, that cost (GiB a graph), and the modes whose two largest capture sizes differ in integer class, each as
    (mode, largest size, second size)."""

    graphs: int
    per_graph_gib: float
    modes: tuple[tuple[str, int, int], ...]


def _graph_note(descs: dict[str, list[int]], per_graph_gib: float) -> GraphNote | None:
    """The modes whose two largest capture sizes differ in integer class (``config.memory.respecialized_modes``),
    each of whose later graphs vLLM 0.26 counts at the cost its second capture showed; None where no mode does or
    that cost is vLLM's 1 MiB floor."""
    modes = respecialized_modes(descs)
    if not modes or per_graph_gib * GIB <= MIN_GRAPH_BYTES:
        return None
    graphs = sum(n for *_, n in modes)
    return GraphNote(graphs, per_graph_gib, tuple((mode, first, second) for mode, first, second, _ in modes))


def kv_budget(
    engine: EngineConfig,
    gpu_memory_gib: float,
    gpu_name: str = "",
    calibration: MemoryCalibration | None | Literal["recorded"] = RECORDED,
) -> KVBudget:
    """The KV-cache budget of ``engine`` on GPUs whose framework-visible memory is ``gpu_memory_gib`` each.

    Every GPU gets the same number of KV blocks, the fewest any GPU can hold (vLLM takes the minimum over workers).
    ``calibration`` sets the activation, non-torch and CUDA-graph terms: the recorded one by default
    (``config.memory``), a table of one's own, or None for the uncalibrated dense estimate without graphs.
    """
    if calibration == RECORDED:
        calibration = load_calibration()
    target = resolve_model(engine.model)
    drafts, mtp_layers = _spec_shapes(engine, target)
    batched, seqs = resolve_batching(
        engine.max_model_len,
        gpu_memory_gib,
        gpu_name,
        max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=engine.max_num_batched_tokens,
    )
    weights, per_token = _whole_model(engine, target, drafts, mtp_layers)
    requested = round(engine.gpu_memory_utilization * gpu_memory_gib * GIB)
    activation, non_torch, graphs, warning, graph_note = _overheads(engine, target, batched, seqs, calibration)
    stages = []
    for stage_weights, stage_per_token in _stages(engine, target, drafts, mtp_layers, (weights, per_token)):
        free = requested - stage_weights - activation - non_torch - graphs
        stages.append((kv_tokens_fitting(free, stage_per_token), free, stage_weights, stage_per_token))
    tokens, kv, stage_weights, stage_per_token = min(stages, key=lambda s: (s[0], s[1]))
    return KVBudget(
        requested_bytes=requested,
        weight_bytes=weights,
        activation_bytes=activation,
        non_torch_bytes=non_torch,
        kv_bytes=kv,
        kv_bytes_per_token=per_token,
        kv_tokens=tokens,
        max_model_len=engine.max_model_len,
        max_num_seqs=seqs,
        gpus=engine.tensor_parallel_size * engine.pipeline_parallel_size,
        weight_bytes_per_gpu=stage_weights,
        kv_bytes_per_token_per_gpu=stage_per_token,
        cudagraph_bytes=graphs,
        calibration_warning=warning,
        cudagraph_note=graph_note,
    )


def budget_is_modelled(engine: EngineConfig) -> bool:
    """True when the weights of every model of ``engine`` (target and draft) are modelled (``MODELLED_ARCHITECTURES``)
    on the GPUs it runs on: on one GPU every modelled family; split over several GPUs dense decoders only (how vLLM
    places MoE experts and heads over tensor and pipeline ranks is not modelled)."""
    target = resolve_model(engine.model)
    drafts, _ = _spec_shapes(engine, target)
    known = (
        DENSE_ARCHITECTURES
        if engine.tensor_parallel_size * engine.pipeline_parallel_size > 1
        else MODELLED_ARCHITECTURES
    )
    return all(shape.architecture in known for shape in [target, *drafts])


def check_fits(engine: EngineConfig, gpu_memory_gib: float, gpu_name: str = "") -> KVBudget:
    """Raise ``CapacityError`` when the weights or one full-length sequence cannot fit; return the budget."""
    budget = kv_budget(engine, gpu_memory_gib, gpu_name)
    if budget.kv_bytes <= 0:
        weights = f"{budget.weight_bytes / GIB:.1f} GiB"
        if budget.gpus > 1:
            weights = (
                f"{budget.weight_bytes_per_gpu / GIB:.1f} GiB on the fullest of {budget.gpus} GPUs, {weights} in all"
            )
        note, graphs = budget.cudagraph_note, ""
        if note is not None:
            sizes = "; ".join(f"{mode} {first} then {second} tokens" for mode, first, second in note.modes)
            graphs = (
                f" {note.graphs} of its CUDA graphs count {note.per_graph_gib:.3f} GiB each, "
                f"{note.graphs * note.per_graph_gib:.1f} GiB in all, because the two largest capture sizes of a mode "
                f"differ in integer class (a multiple of 16 or not: {sizes}) and vLLM 0.26 extrapolates every later "
                "graph from the second capture."
            )
        raise CapacityError(
            f"engine {engine.label}: weights ({weights}), activations "
            f"({budget.activation_bytes / GIB:.1f} GiB) and CUDA graphs ({budget.cudagraph_bytes / GIB:.1f} GiB) "
            f"exceed {engine.gpu_memory_utilization} × {gpu_memory_gib} GiB per GPU.{graphs} Use more GPUs "
            f"(tensor_parallel_size or pipeline_parallel_size), a quantized shape, or a larger gpu_memory_utilization."
        )
    if budget.kv_tokens < engine.max_model_len:
        raise CapacityError(
            f"engine {engine.label}: the KV cache holds {budget.kv_tokens} tokens, fewer than one sequence of "
            f"max_model_len={engine.max_model_len}. Lower max_model_len, use fp8 KV cache, or add GPUs."
        )
    return budget


def refused_engines(engines: Iterable[EngineConfig], gpu_memory_gib: float) -> dict[str, str]:
    """The engines of ``engines`` whose memory is modelled (``budget_is_modelled``) and that ``check_fits`` refuses on
    GPUs of ``gpu_memory_gib`` each, by label, each with the reason; the others are left out."""
    refused = {}
    for engine in engines:
        if budget_is_modelled(engine):
            try:
                check_fits(engine, gpu_memory_gib)
            except CapacityError as error:
                refused[engine.label] = str(error)
    return refused


def refusal(refused: dict[str, str], engines: Iterable[EngineConfig]) -> CapacityError:
    """One error for a grid some of whose ``engines`` cannot start (``refused``: ``refused_engines``): the first
    one's reason, the labels of the others refused, and those that fit, which a run can be limited to."""
    first, *others = refused
    fitting = [engine.label for engine in engines if engine.label not in refused]
    also = f" Also refused there: {', '.join(others)}." if others else ""
    rest = (
        f" The other configs fit; to measure only them, pass --engines {' '.join(fitting)} (in a notebook, "
        f"engines={fitting!r})."
        if fitting
        else ""
    )
    return CapacityError(f"{refused[first]}{also}{rest}")


def budget_table(budget: KVBudget) -> pd.DataFrame:
    """The memory split of a budget as a small table (GiB), for a page."""
    rows = [
        ("requested (gpu_memory_utilization × memory)", budget.requested_bytes / GIB),
        (
            "weights (target + draft)" if budget.gpus == 1 else f"weights on the fullest of {budget.gpus} GPUs",
            budget.weight_bytes_per_gpu / GIB,
        ),
        ("peak activation (estimate)", budget.activation_bytes / GIB),
        ("non-torch memory (estimate)", budget.non_torch_bytes / GIB),
        ("CUDA-graph reserve (estimate)", budget.cudagraph_bytes / GIB),
        ("left for the KV cache", budget.kv_bytes / GIB),
    ]
    return pd.DataFrame(rows, columns=["part", "GiB"])
