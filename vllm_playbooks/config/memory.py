"""The memory vLLM 0.26 takes before its KV cache, per architecture: activation peak, CUDA-graph reserve, non-torch.

vLLM 0.26 sizes its KV cache as ``gpu_memory_utilization × memory − weights − peak activation − non-torch memory −
estimated CUDA-graph memory``. Weights and KV bytes per token are exact (``config.sizes``); the other three terms are
measured by vLLM at start-up, so this module predicts them from a calibration table fitted on the recorded start-up
logs (``data/checks/memory-calibration.csv``, written by ``vllm-playbooks kv-check`` from every recorded server log,
never typed in):

* **activation peak**: a factor per target architecture on scheduled tokens × (hidden + 2 × intermediate) ×
  activation bytes (dense decoders, the MoE families with their routing buffers, MLA) — ``activation_factor``;
* **CUDA-graph reserve**: vLLM 0.26's V1 runner (Model Runner V2 logs no estimate) profiles only the two largest
  graphs of each mode and takes from the KV budget the largest first capture of its modes plus, per mode,
  (n − 1) × that mode's second capture, counted as at least 1 MiB (gpu_model_runner.py
  ``profile_cudagraph_memory``). Modelled from the graph sizes this config captures (``cudagraph_descs``): the first
  capture as GiB per token of the largest graph, per family (``cudagraph_first_gib_per_token``); a mode's second
  capture as the 1 MiB floor where its size falls in the same integer class as the first (both multiples of 16 or
  both not: the class Triton specializes kernels on), else as GiB per graph, per target architecture
  (``cudagraph_respecialized_gib_per_graph``; ``GraphProfile``). The recorded logs follow this rule: gpt-oss-120b
  EAGLE3 k=3 (1024 then 1008 tokens) and k=4 (1010, 995) logged 1.2 GiB, k=2 (1008, 993) and k=5 (1008, 996)
  7.9-9.5 GiB. Why a change of class costs memory (new kernel variants compiled and loaded, we believe) is read off
  the logs, not off vLLM's code;
* **non-torch memory**: the median vLLM logged.

An architecture (or drafter) the table lacks falls back to the dense calibration and the budget says so
(``MemoryCalibration.warning``) with the error that fallback showed on the recorded families.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from vllm_playbooks import paths
from vllm_playbooks.config.engine import EngineConfig, cudagraph_mode_forced_by
from vllm_playbooks.shapes import ModelShape, resolve_model

#: The calibration table's file name, under ``data/checks/``.
CALIBRATION_NAME = "memory-calibration.csv"

#: Its columns: the family key, what it was fitted on, the three fitted terms, and the KV-token error the fallback
#: (the dense calibration) shows on that family, which is what an uncalibrated family of its kind may expect.
CALIBRATION_COLUMNS: tuple[str, ...] = (
    "family",
    "logs",
    "activation_factor",
    "cudagraph_first_gib_per_token",
    "cudagraph_respecialized_gib_per_graph",
    "non_torch_gib",
    "fallback_error_pct",
)

GIB = 1024**3

#: The least vLLM 0.26 counts for every graph after a mode's first ("at least 1 MiB per graph for driver overhead").
MIN_GRAPH_BYTES = 1 << 20

#: Target architectures vLLM 0.26 runs on Model Runner V2 when nothing forces V1 (config/vllm.py): dense decoders.
V2_RUNNER_ARCHITECTURES = frozenset({"LlamaForCausalLM", "Qwen2ForCausalLM", "MiMoForCausalLM", "MistralForCausalLM"})

#: Speculative methods Model Runner V2 supports; the others make vLLM 0.26 fall back to V1 (config/vllm.py).
V2_RUNNER_METHODS = frozenset({"none", "eagle", "eagle3", "mtp"})

#: The family every uncalibrated one falls back to: a dense decoder without speculation.
FALLBACK_FAMILY = "LlamaForCausalLM/llama-3.1-8b"


def drafter_tag(engine: EngineConfig) -> str:
    """What drafts, for the calibration key: ``none``, ``mtp``, ``ngram``/``suffix``, or the draft's architecture."""
    spec = engine.speculative
    if spec is None:
        return "none"
    if spec.model and spec.method != "mtp":
        return f"{spec.method}:{resolve_model(spec.model).architecture}"
    return spec.method


def memory_family(engine: EngineConfig) -> str:
    """The calibration key of ``engine``: its target's architecture and shape (``Arch/shape``: two shapes of one
    architecture differ in their activation and graph memory), ``@tpNppM`` on several GPUs (vLLM logs one GPU's
    share), and ``+drafter`` with speculation."""
    tag = drafter_tag(engine)
    target = f"{resolve_model(engine.model).architecture}/{Path(engine.model).name}"
    tp, pp = engine.tensor_parallel_size, engine.pipeline_parallel_size
    if tp * pp > 1:
        target += f"@tp{tp}pp{pp}"
    return target if tag == "none" else f"{target}+{tag}"


def uses_v1_runner(engine: EngineConfig) -> bool:
    """Whether vLLM 0.26 runs ``engine`` on the V1 model runner, the one that reserves CUDA-graph memory from the KV
    budget: MoE targets, drafters V2 lacks (draft_model, ngram, suffix), or ``VLLM_USE_V2_MODEL_RUNNER=0``."""
    forced = engine.env.get("VLLM_USE_V2_MODEL_RUNNER")
    if forced is not None:
        return forced == "0"
    return (
        resolve_model(engine.model).architecture not in V2_RUNNER_ARCHITECTURES
        or engine.spec_method not in V2_RUNNER_METHODS
    )


def _capture_sizes(largest: int, step: int) -> list[int]:
    sizes = [s for s in [1, 2, 4, *range(8, 256, 8), *range(256, largest + 1, 16)] if s <= largest]
    if step > 1:
        sizes = sorted({-(-s // step) * step for s in sizes if -(-s // step) * step <= largest}) or [step]
    return sizes


def cudagraph_descs(
    engine: EngineConfig, max_num_seqs: int, max_num_batched_tokens: int, model_max_capture_size: int | None = None
) -> dict[str, list[int]]:
    """The CUDA graphs vLLM 0.26's V1 runner captures for ``engine``, by mode (``PIECEWISE`` then ``FULL``), each
    mode's token sizes largest first (empty where nothing is captured): mixed prefill-decode (PIECEWISE) graphs up to
    min(max_num_seqs × (1 + k) × 2, 512) tokens (the model's own cap where it sets one, ``model_max_capture_size``),
    rounded up to multiples of 1 + k with speculation, and decode-only (FULL) graphs of those sizes up to
    max_num_seqs × (1 + k); a batch-size schedule or a PIECEWISE ``cudagraph_mode`` drops the FULL ones and the
    rounding. They match the 'Profiling CUDA graph memory' lines of the recorded logs."""
    if engine.enforce_eager:
        return {}
    k = engine.num_speculative_tokens
    if model_max_capture_size is not None:
        largest = min(model_max_capture_size, max_num_batched_tokens)
    else:
        largest = min(max_num_seqs * (1 + k) * 2, 512, max_num_batched_tokens)
    mode = cudagraph_mode_forced_by(engine.extra_args) or "FULL_AND_PIECEWISE"
    scheduled = engine.speculative is not None and not engine.speculative.keeps_full_cudagraphs
    if mode == "NONE":
        return {}
    if mode == "PIECEWISE" or scheduled:
        return {"PIECEWISE": _capture_sizes(largest, 1)[::-1]}
    pieces = _capture_sizes(largest, 1 + k)[::-1]
    full = [s for s in pieces if s <= max_num_seqs * (1 + k)]
    return {"FULL": full} if mode in {"FULL", "FULL_DECODE_ONLY"} else {"PIECEWISE": pieces, "FULL": full}


def specialization(tokens: int) -> int:
    """The class Triton compiles an integer argument into: 1 for one, 16 for a multiple of 16, 0 otherwise."""
    return 1 if tokens == 1 else 16 if tokens % 16 == 0 else 0


@dataclass(frozen=True)
class GraphProfile:
    """What vLLM 0.26's CUDA-graph estimate extrapolates from, for one config: the largest graph over its modes (the
    first capture that counts), the graphs counted at 1 MiB (their mode's second capture is of the first one's
    integer class) and the graphs counted at the second capture's cost in another class (``specialization``)."""

    largest: int
    plain_graphs: int
    respecialized_graphs: int


def graph_profile(descs: dict[str, list[int]]) -> GraphProfile:
    """The ``GraphProfile`` of the graphs ``cudagraph_descs`` lists (all zero where none is captured)."""
    plain = respecialized = 0
    for sizes in descs.values():
        if len(sizes) > 1 and specialization(sizes[1]) != specialization(sizes[0]):
            respecialized += len(sizes) - 1
        else:
            plain += max(len(sizes) - 1, 0)
    return GraphProfile(max((s[0] for s in descs.values() if s), default=0), plain, respecialized)


def respecialized_modes(descs: dict[str, list[int]]) -> list[tuple[str, int, int, int]]:
    """(mode, largest size, second size, graphs after the first) of each mode in ``descs`` (``cudagraph_descs``)
    whose second capture is of another integer class than its first (``specialization``): the modes whose graphs
    vLLM 0.26's estimate counts at the respecialized cost instead of 1 MiB (``graph_profile``)."""
    return [
        (mode, sizes[0], sizes[1], len(sizes) - 1)
        for mode, sizes in descs.items()
        if len(sizes) > 1 and specialization(sizes[1]) != specialization(sizes[0])
    ]


def activation_width_bytes(shape: ModelShape, tokens: int) -> int:
    """The activation factor's unit: tokens × (hidden + 2 × intermediate) × 2 bytes (16-bit activations)."""
    width = shape.hidden_size + 2 * int(shape.config()["intermediate_size"])
    return tokens * width * 2


@dataclass(frozen=True)
class CalibrationGap:
    """An engine's memory family that no recorded vLLM start-up calibrates (``MemoryCalibration.warning``): the
    family, the calibration its KV budget borrows, and how far off that one was at most on the recorded families of
    the same kind (``moe``: MoE, else dense) it was not fitted on."""

    family: str
    borrowed: str
    worst_error_pct: float
    moe: bool


@dataclass(frozen=True)
class FamilyCalibration:
    """One row of the calibration table."""

    family: str
    logs: int
    activation_factor: float
    cudagraph_first_gib_per_token: float
    cudagraph_respecialized_gib_per_graph: float
    non_torch_gib: float
    fallback_error_pct: float

    def cudagraph_bytes(self, profile: GraphProfile) -> int:
        """The CUDA-graph estimate this row predicts for a config's ``GraphProfile``: the first capture, 1 MiB per
        graph whose mode's second capture kept its integer class, the respecialized cost (at least 1 MiB) per other."""
        first = self.cudagraph_first_gib_per_token * profile.largest * GIB
        respecialized = max(self.cudagraph_respecialized_gib_per_graph * GIB, MIN_GRAPH_BYTES)
        return round(first + MIN_GRAPH_BYTES * profile.plain_graphs + respecialized * profile.respecialized_graphs)


@dataclass(frozen=True)
class MemoryCalibration:
    """The calibration table, by family; ``for_engine`` picks the row that applies."""

    rows: dict[str, FamilyCalibration]

    def for_engine(self, engine: EngineConfig) -> tuple[FamilyCalibration, bool]:
        """(the row for ``engine``, whether it is the engine's own family): its family, else the same target without
        its drafter, else the other shape of its architecture with the same drafter fitted on the most logs (a new
        DeepSeek-V3 shape with MTP takes the MTP row of another: MTP's activation and graphs are in it), else
        another shape of its architecture without a drafter, else the dense fallback."""
        family = memory_family(engine)
        if family in self.rows:
            return self.rows[family], True
        target = family.split("+")[0]
        for candidate in (target, target.split("@")[0]):
            if candidate in self.rows:
                return self.rows[candidate], False
        architecture = target.split("/")[0] + "/"
        drafter = family[len(target) :]
        alike = [
            r
            for f, r in self.rows.items()
            if drafter and f.startswith(architecture) and f.endswith(drafter) and "@" not in f
        ]
        if alike:
            return max(alike, key=lambda r: (r.logs, r.family)), False
        same = sorted(f for f in self.rows if f.startswith(architecture) and "+" not in f and "@" not in f)
        return self.rows[same[0] if same else FALLBACK_FAMILY], False

    def warning(self, engine: EngineConfig) -> CalibrationGap | None:
        """What to warn of for an engine whose family the recorded logs do not calibrate: the calibration it borrows
        and the error to expect (the largest fallback error of a recorded family of the same kind, MoE or dense);
        None for a calibrated one."""
        row, own = self.for_engine(engine)
        if own:
            return None
        moe = resolve_model(engine.model).architecture not in V2_RUNNER_ARCHITECTURES
        kind = [
            r.fallback_error_pct
            for r in self.rows.values()
            if (r.family.split("/")[0] not in V2_RUNNER_ARCHITECTURES) == moe
        ]
        worst = max((abs(e) for e in kind), default=float("nan"))
        return CalibrationGap(family=memory_family(engine), borrowed=row.family, worst_error_pct=worst, moe=moe)


def calibration_path(data: Path | None = None) -> Path:
    """``data/checks/memory-calibration.csv`` (``data`` defaults to ``paths.data_dir()``)."""
    return (data or paths.data_dir()) / "checks" / CALIBRATION_NAME


def load_calibration(data: Path | None = None) -> MemoryCalibration | None:
    """The recorded calibration table, None where none is recorded or its columns are not ``CALIBRATION_COLUMNS``
    (a table of an older model, until ``vllm-playbooks kv-check`` writes it again): the budget then uses the
    uncalibrated model."""
    path = calibration_path(data)
    if not path.is_file():
        return None
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != CALIBRATION_COLUMNS:
            return None
        rows = {
            r["family"]: FamilyCalibration(
                family=r["family"],
                logs=int(r["logs"]),
                activation_factor=float(r["activation_factor"]),
                cudagraph_first_gib_per_token=float(r["cudagraph_first_gib_per_token"]),
                cudagraph_respecialized_gib_per_graph=float(r["cudagraph_respecialized_gib_per_graph"]),
                non_torch_gib=float(r["non_torch_gib"]),
                fallback_error_pct=float(r["fallback_error_pct"]),
            )
            for r in reader
        }
    return MemoryCalibration(rows) if FALLBACK_FAMILY in rows else None
