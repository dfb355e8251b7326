"""One schema for every measured row, and one for every published number.

Column names carry their units (``ttft_p99_ms``, ``output_tok_s``), as in vLLM's benchmark JSON. The CSV header,
the book's column table and the loaders' checks all come from these models, so they cannot drift apart.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: Bumped when a column is added, renamed or changes meaning; stored in every row.
SCHEMA_VERSION = 3

_LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
_LATENCY_STATS = ("mean", "p50", "p90", "p99")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RunRow(_Frozen):
    """One measured point: one engine configuration at one load level, with its results and provenance."""

    # identity
    schema_version: int = Field(SCHEMA_VERSION, description="schema version of this row")
    case: str = Field(min_length=1, description="case the point belongs to")
    hardware: str = Field(min_length=1, description="GPU model, GPUs the server used and vLLM version, as a key")
    point_id: str = Field(min_length=1, description="stable id of (hardware, engine config, load, repeat)")
    config_id: str = Field(min_length=1, description="label and hash of what the server sees: its flags and env")
    engine_label: str = Field(min_length=1, description="the case's name for the engine config")
    repeat: int = Field(0, ge=0, description="repeat index of the same point")
    # engine configuration
    model_shape: str = Field(min_length=1, description="shape name, or the model path's last part")
    load_format: str = Field(min_length=1, description="dummy (random weights) or auto (real weights)")
    quantization: str | None = Field(None, description="quantization method of the target model")
    dtype: str = Field(description="activation dtype passed to vLLM")
    kv_cache_dtype: str = Field(description="KV-cache dtype")
    spec_method: str = Field(description="speculative method, or 'none'")
    num_speculative_tokens: int = Field(ge=0, description="k; 0 without speculation")
    draft_model: str | None = Field(None, description="draft shape or path, where the method has one")
    draft_tensor_parallel_size: int | None = Field(None, ge=1, description="draft TP")
    imposed_acceptance_rates: str | None = Field(
        None, description="JSON list of imposed unconditional per-position acceptance p_i (synthetic sampling)"
    )
    imposed_alpha: float | None = Field(
        None, ge=0, le=1, description="i.i.d. per-token acceptance alpha when the imposed rates are alpha^i"
    )
    max_num_seqs: int | None = Field(None, ge=1, description="--max-num-seqs (None: vLLM's default)")
    max_num_batched_tokens: int | None = Field(None, ge=1, description="--max-num-batched-tokens (None: default)")
    max_model_len: int = Field(ge=1, description="--max-model-len")
    tensor_parallel_size: int = Field(ge=1, description="--tensor-parallel-size")
    pipeline_parallel_size: int = Field(ge=1, description="--pipeline-parallel-size")
    gpu_memory_utilization: float = Field(gt=0, le=1, description="--gpu-memory-utilization")
    engine_config_json: str = Field(description="the fully resolved engine config as JSON")
    # load
    concurrency: int | None = Field(None, ge=1, description="--max-concurrency (closed loop); None: unbounded")
    request_rate_qps: float | None = Field(None, gt=0, description="--request-rate; None: all at once")
    burstiness: float = Field(gt=0, description="--burstiness (1: Poisson arrivals)")
    input_len: int = Field(ge=1, description="random prompt length, tokens")
    output_len: int = Field(ge=1, description="output length, tokens (ignore_eos)")
    random_range_ratio: float = Field(
        0.0, ge=0, lt=1, description="length spread r: each length drawn in [(1-r)·L, (1+r)·L]; 0: fixed lengths"
    )
    num_prompts: int = Field(ge=1, description="requests in the measured run")
    num_warmup_prompts: int = Field(ge=0, description="requests run before, not counted")
    # results
    duration_s: float = Field(gt=0, description="measured run's wall time")
    completed: int = Field(ge=0, description="requests completed")
    failed: int = Field(ge=0, description="requests failed")
    request_throughput_rps: float = Field(ge=0, description="completed requests per second")
    output_tok_s: float = Field(ge=0, description="output tokens per second")
    total_tok_s: float = Field(ge=0, description="input plus output tokens per second")
    ttft_mean_ms: float = Field(ge=0, description="time to first token, mean")
    ttft_p50_ms: float = Field(ge=0, description="time to first token, median")
    ttft_p90_ms: float = Field(ge=0, description="time to first token, 90th percentile")
    ttft_p99_ms: float = Field(ge=0, description="time to first token, 99th percentile")
    tpot_mean_ms: float = Field(ge=0, description="time per output token after the first, mean")
    tpot_p50_ms: float = Field(ge=0, description="time per output token, median")
    tpot_p90_ms: float = Field(ge=0, description="time per output token, 90th percentile")
    tpot_p99_ms: float = Field(ge=0, description="time per output token, 99th percentile")
    itl_mean_ms: float = Field(ge=0, description="gap between streamed chunks, mean (a chunk may hold several tokens)")
    itl_p50_ms: float = Field(ge=0, description="gap between streamed chunks, median")
    itl_p90_ms: float = Field(ge=0, description="gap between streamed chunks, 90th percentile")
    itl_p99_ms: float = Field(ge=0, description="gap between streamed chunks, 99th percentile")
    e2el_mean_ms: float = Field(ge=0, description="end-to-end request latency, mean")
    e2el_p50_ms: float = Field(ge=0, description="end-to-end request latency, median")
    e2el_p90_ms: float = Field(ge=0, description="end-to-end request latency, 90th percentile")
    e2el_p99_ms: float = Field(ge=0, description="end-to-end request latency, 99th percentile")
    acceptance_rate: float | None = Field(None, ge=0, le=1, description="accepted / drafted tokens (from /metrics)")
    mean_acceptance_length: float | None = Field(
        None, ge=1, description="1 + accepted / drafts: tokens emitted per verify step (from /metrics)"
    )
    per_position_acceptance: str | None = Field(
        None, description="JSON list: accepted at position i / drafts (from /metrics)"
    )
    num_drafts: int | None = Field(None, ge=0, description="drafts during the measured run")
    num_draft_tokens: int | None = Field(None, ge=0, description="draft tokens during the measured run")
    num_accepted_tokens: int | None = Field(None, ge=0, description="accepted draft tokens during the measured run")
    num_preemptions: int | None = Field(None, ge=0, description="preemptions during the measured run")
    # provenance
    gpu_name: str = Field(min_length=1, description="accelerator model as the driver names it ('cpu' without one)")
    gpu_count: int = Field(ge=0, description="accelerators visible to the server")
    driver_version: str = Field(min_length=1, description="NVIDIA driver version ('none' on CPU)")
    vllm_version: str = Field(min_length=1, description="vLLM version that served")
    torch_version: str = Field(min_length=1, description="torch version beside it")
    host_cpu: str | None = Field(None, description="the host's CPU model (None: recorded before hosts were)")
    host_cpu_count: int | None = Field(None, ge=1, description="logical CPUs of the host the server ran on")
    measured_at: str = Field(min_length=1, description="UTC time the measured run ended (ISO 8601)")
    git_sha: str = Field(min_length=1, description="commit of this repository that ran it ('unknown' outside git)")
    raw_path: str = Field(min_length=1, description="the raw point folder, relative to data/")

    @field_validator("*", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        """CSV cells that are empty or NaN mean 'no value'."""
        if isinstance(value, float) and math.isnan(value):
            return None
        if isinstance(value, str) and value == "":
            return None
        return value

    @model_validator(mode="after")
    def _spec_columns_agree(self) -> RunRow:
        if self.spec_method == "none" and self.num_speculative_tokens != 0:
            raise ValueError("spec_method 'none' needs num_speculative_tokens 0")
        if self.spec_method != "none" and self.num_speculative_tokens < 1:
            raise ValueError(f"spec_method {self.spec_method!r} needs num_speculative_tokens >= 1")
        if self.concurrency is None and self.request_rate_qps is None:
            raise ValueError("a load point needs a concurrency, a request rate, or both")
        return self


#: The tidy table's columns, in order.
RUN_COLUMNS: list[str] = list(RunRow.model_fields)

#: Provenance columns: a row without every one of these is refused.
PROVENANCE_COLUMNS: tuple[str, ...] = (
    "hardware",
    "gpu_name",
    "gpu_count",
    "driver_version",
    "vllm_version",
    "torch_version",
    "model_shape",
    "load_format",
    "measured_at",
    "config_id",
    "git_sha",
    "raw_path",
)

LATENCY_COLUMNS: tuple[str, ...] = tuple(f"{m}_{s}_ms" for m in _LATENCY_METRICS for s in _LATENCY_STATS)


class ReferenceRow(_Frozen):
    """One published number, with where it was published and whether only a secondary source states it."""

    case: str = Field(min_length=1, description="the case folder the number belongs to (config.case_file)")
    claim_id: str = Field(min_length=1, description="slug, unique within the case")
    quantity: str = Field(min_length=1, description="what was measured, with its unit suffix")
    setting: str = Field(min_length=1, description="the condition, in words")
    value: float = Field(description="the number as published")
    unit: str = Field(min_length=1, description="unit of value")
    source_url: str = Field(pattern=r"^https?://", description="where the number is stated")
    source_title: str = Field(min_length=1, description="title of the source")
    source_date: str = Field(pattern=r"^\d{4}-\d{2}(-\d{2})?$", description="YYYY-MM or YYYY-MM-DD")
    secondary_only: bool = Field(description="true when no primary source that states it could be read")
    note: str | None = Field(None, description="short context or quotation")

    @field_validator("note", mode="before")
    @classmethod
    def _empty_note(cls, value: object) -> object:
        if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
            return None
        return value


REFERENCE_COLUMNS: list[str] = list(ReferenceRow.model_fields)
#: The columns of a case folder's ``published.csv``: its case is the folder's.
PUBLISHED_COLUMNS: list[str] = [c for c in REFERENCE_COLUMNS if c != "case"]
