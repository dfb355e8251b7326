"""Build and validate vLLM 0.26's ``--speculative-config`` before a GPU is rented.

The checks mirror vLLM's own (``vllm/config/speculative.py``) plus the mistakes users make most often, so that a
bad config fails here with one clear message rather than minutes into an engine start.

* ``method`` may be left out: it is then inferred as vLLM 0.26 infers it (``inferred_method``,
  ``config.spec_input``), and the model carries the resolved method. An MTP model-type name given as the method
  (``deepseek_mtp``…) is rewritten to ``mtp`` with a warning, as vLLM does.
* Consequences vLLM only logs at start-up (async scheduling switched off, a smaller scheduler token budget, CUDA
  graphs downgraded…) are raised here as ``SpeculativeConfigWarning`` and listed by ``advisories()``.
* ``to_cli_json`` / ``to_yaml`` / ``to_python`` emit the config; ``from_cli_json`` / ``from_yaml`` /
  ``from_python`` validate it back into an equal object.
* ``check_against_target`` runs the checks that need the target model's config and its tensor parallelism.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from vllm_playbooks.config.spec_detection import SpeculativeConfigWarning
from vllm_playbooks.config.spec_input import (
    SpecMethod,
    alpha_of_rates,
    checked_input,
)
from vllm_playbooks.config.yaml_limits import bounded_yaml
from vllm_playbooks.errors import ConfigError

#: Methods that need a separate draft checkpoint (or head) in ``model``.
METHODS_WITH_DRAFT_MODEL = frozenset({"draft_model", "eagle", "eagle3", "medusa", "mlp_speculator"})


#: Methods that draft from the prompt and take no model.
MODEL_FREE_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})


#: Methods with which vLLM 0.26 keeps async scheduling on by default (``EagleModelTypes`` and ``ngram_gpu``).
ASYNC_SCHEDULING_METHODS = frozenset({"eagle", "eagle3", "mtp", "ngram_gpu"})


#: Drafters whose CUDA graphs ``enforce_eager`` switches off (V1 model runner).
EAGER_AWARE_METHODS = frozenset({"eagle", "eagle3", "mtp", "draft_model"})


#: Methods that vLLM 0.26 documents ``parallel_drafting`` for.
PARALLEL_DRAFTING_METHODS = frozenset({"eagle", "eagle3", "draft_model"})


#: The ``suffix_decoding_*`` fields: they apply to method ``suffix`` only.
SUFFIX_FIELDS: tuple[str, ...] = (
    "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob",
)


#: vLLM 0.26's ``QuantizationMethods`` (model_executor/layers/quantization/__init__.py).
QUANTIZATION_METHODS: tuple[str, ...] = (
    "awq",
    "auto_awq",
    "fp8",
    "fbgemm_fp8",
    "fp_quant",
    "modelopt",
    "modelopt_fp4",
    "modelopt_mxfp8",
    "modelopt_mixed",
    "auto_gptq",
    "gptq",
    "gptq_marlin",
    "awq_marlin",
    "humming",
    "compressed-tensors",
    "bitsandbytes",
    "experts_int8",
    "quark",
    "moe_wna16",
    "torchao",
    "inc",
    "mxfp4",
    "gpt_oss_mxfp4",
    "deepseek_v4_fp8",
    "online",
    "fp8_per_tensor",
    "fp8_per_block",
    "fp8_per_channel",
    "int8_per_channel_weight_only",
    "nvfp4_per_token",
    "mxfp8",
)


DraftSampleMethod = Literal["greedy", "probabilistic"]


_YAML_KEYS = ("speculative_config", "speculative-config")


class SpeculativeConfig(BaseModel):
    """The fields of vLLM 0.26's SpeculativeConfig that a user sets, with their types and ranges.

    ``acceptance_alpha`` is a shorthand of this package: it expands to geometric ``synthetic_acceptance_rates``
    and sets ``rejection_sample_method: synthetic`` (used with dummy weights, whose own drafts are meaningless).
    ``method`` may be omitted on input; the object always carries the method vLLM 0.26 resolves.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: SpecMethod = Field(
        description="the drafter; inferred as vLLM 0.26 does when omitted (see inferred_method), and an MTP "
        "model-type name such as deepseek_mtp is rewritten to mtp"
    )
    num_speculative_tokens: int = Field(
        ge=1,
        description="k, the tokens drafted per step (vLLM: > 0, no upper bound; a boolean is refused); when "
        "omitted, vLLM's default: suffix_decoding_max_tree_depth for suffix (default_num_speculative_tokens)",
    )
    model: str | None = Field(
        None,
        description="draft model, EAGLE head or MTP checkpoint: a shape name (vllm_playbooks/shapes), a model "
        "folder or a hub id; none for ngram/ngram_gpu/suffix, optional for mtp (the target's own layers)",
    )
    draft_tensor_parallel_size: int | None = Field(
        None, ge=1, description="draft TP: 1 or the target's tensor_parallel_size; default: the target's"
    )
    prompt_lookup_min: int | None = Field(
        None, ge=1, description="ngram only: smallest n-gram matched (vLLM default 5, or prompt_lookup_max)"
    )
    prompt_lookup_max: int | None = Field(
        None, ge=1, description="ngram only: largest n-gram matched (vLLM default 5, or prompt_lookup_min)"
    )
    rejection_sample_method: Literal["standard", "synthetic"] = Field(
        "standard",
        description="standard: real rejection sampling; synthetic: accept drafts at imposed per-position rates "
        "(vLLM 0.26 also has 'block', which this package does not model)",
    )
    synthetic_acceptance_rates: tuple[float, ...] | None = Field(
        None,
        description="synthetic only: k unconditional rates p_i = P(first i drafts accepted), in [0, 1], non-increasing",
    )
    synthetic_acceptance_length: float | None = Field(
        None, description="synthetic only: mean acceptance length in [1, k+1] (vLLM turns it into a step schedule)"
    )
    num_speculative_tokens_per_batch_size: tuple[tuple[int, int, int], ...] | None = Field(
        None,
        description="dynamic k: inclusive (batch_start, batch_end, k) ranges starting at batch size 1, "
        "non-overlapping, each k in [0, num_speculative_tokens]",
    )
    enforce_eager: bool | None = Field(
        None,
        description="True: run the drafter without CUDA graphs (V1 model runner, eagle/eagle3/mtp/draft_model "
        "drafters only); None: vLLM's default (graphs); the target is not affected",
    )
    max_model_len: int | None = Field(
        None,
        ge=1,
        description="the draft's maximum length (vLLM: at most the draft's and the target's own); default: the "
        "smaller of the two; not for ngram/ngram_gpu/suffix",
    )
    quantization: str | None = Field(
        None,
        description="quantization method of the draft weights, one of vLLM 0.26's QuantizationMethods; default: "
        "unquantized (mtp without a model: the target's); not for ngram/ngram_gpu/suffix",
    )
    draft_sample_method: DraftSampleMethod = Field(
        "greedy",
        description="greedy: the draft takes the argmax and counts as one-hot in rejection sampling; "
        "probabilistic: the draft samples and its full distribution enters the ratio test (more GPU memory)",
    )
    parallel_drafting: bool = Field(
        False,
        description="draft all k tokens in one pass (needs a draft trained for it, with pard_token, ptd_token_id "
        "or dflash_config.mask_token_id in its config); eagle, eagle3 and draft_model only",
    )
    suffix_decoding_max_tree_depth: int = Field(
        24, ge=1, description="suffix only: depth of the suffix trees, bounding prefix match + speculation length"
    )
    suffix_decoding_max_cached_requests: int = Field(
        10000, ge=0, description="suffix only: requests cached in the global suffix tree (FIFO); 0 disables it"
    )
    suffix_decoding_max_spec_factor: float = Field(
        1.0, ge=0, description="suffix only: max speculated tokens = factor × prefix match length"
    )
    suffix_decoding_min_token_prob: float = Field(
        0.1, ge=0, le=1, description="suffix only: speculate only tokens with estimated probability >= this"
    )

    @model_validator(mode="before")
    @classmethod
    def _catch_common_mistakes(cls, data: Any) -> Any:
        return checked_input(data)

    @field_validator("quantization")
    @classmethod
    def _known_quantization(cls, value: str | None) -> str | None:
        if value is not None and value not in QUANTIZATION_METHODS:
            raise ValueError(
                f"quantization {value!r} is not one of vLLM 0.26's quantization methods: "
                f"{', '.join(QUANTIZATION_METHODS)}"
            )
        return value

    @model_validator(mode="after")
    def _check_consistency(self) -> SpeculativeConfig:
        k = self.num_speculative_tokens
        if self.method in METHODS_WITH_DRAFT_MODEL and not self.model:
            raise ValueError(f"method {self.method!r} needs a draft 'model' (a shape name or a checkpoint path)")
        if self.method in MODEL_FREE_METHODS and self.model:
            raise ValueError(f"method {self.method!r} drafts from the prompt and takes no 'model'")
        if self.method not in {"ngram", "ngram_gpu"} and (
            self.prompt_lookup_min is not None or self.prompt_lookup_max is not None
        ):
            raise ValueError("prompt_lookup_min/max apply to ngram only")
        if (
            self.prompt_lookup_min is not None
            and self.prompt_lookup_max is not None
            and self.prompt_lookup_min > self.prompt_lookup_max
        ):
            raise ValueError(
                f"prompt_lookup_min ({self.prompt_lookup_min}) > prompt_lookup_max ({self.prompt_lookup_max})"
            )
        # A stored config carries every field with its default (``resolved()``): only a changed value is a mistake.
        suffix_set = [
            name
            for name in SUFFIX_FIELDS
            if name in self.model_fields_set and getattr(self, name) != type(self).model_fields[name].default
        ]
        if suffix_set and self.method != "suffix":
            raise ValueError(f"{', '.join(suffix_set)} apply to method 'suffix' only, not {self.method!r}")
        if self.method in MODEL_FREE_METHODS:
            for name in ("max_model_len", "quantization"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name} applies to a draft model, and method {self.method!r} has none (vLLM ignores it)"
                    )
        if self.parallel_drafting and self.method not in PARALLEL_DRAFTING_METHODS:
            raise ValueError(f"parallel_drafting works with eagle, eagle3 and draft_model only, not {self.method!r}")
        rates, length = self.synthetic_acceptance_rates, self.synthetic_acceptance_length
        if self.rejection_sample_method == "synthetic":
            if (rates is None) == (length is None):
                raise ValueError("synthetic sampling needs exactly one of synthetic_acceptance_rates or _length")
        elif rates is not None or length is not None:
            raise ValueError("synthetic_acceptance_* needs rejection_sample_method: synthetic")
        if rates is not None:
            if len(rates) != k:
                raise ValueError(f"synthetic_acceptance_rates has {len(rates)} entries; k={k} needs {k}")
            if any(not 0.0 <= r <= 1.0 for r in rates):
                raise ValueError(f"synthetic_acceptance_rates must lie in [0, 1]: {list(rates)}")
            if any(b > a for a, b in zip(rates, rates[1:], strict=False)):
                raise ValueError(
                    f"synthetic_acceptance_rates must be non-increasing (they are unconditional: p_i = P(first i "
                    f"drafts accepted)): {list(rates)}"
                )
        if length is not None and not 1.0 <= length <= k + 1:
            raise ValueError(f"synthetic_acceptance_length must lie in [1, k+1] = [1, {k + 1}], got {length}")
        schedule = self.num_speculative_tokens_per_batch_size
        if schedule is not None:
            _check_schedule(schedule, k)
        return self

    @model_validator(mode="wrap")
    @classmethod
    def _warn_advisories(cls, data: Any, handler: Any, info: ValidationInfo) -> SpeculativeConfig:
        """Warn with ``advisories()`` once per new, valid config validated on its own.

        Defined last, so it wraps the checks above and never warns for a config they refuse. It stays quiet for
        an existing object handed to another model (``EngineConfig(speculative=spec)``: it has warned already),
        for a config validated as a field of another model (``EngineConfig.model_validate(stored_dict)``, which
        re-reads recorded configs; call ``advisories()`` there), and under ``context={"advisories": False}``.
        """
        if isinstance(data, SpeculativeConfig):
            return handler(data)
        spec = handler(data)
        quiet = info.field_name is not None or (info.context or {}).get("advisories") is False
        if not quiet:
            for advisory in spec.advisories():
                warnings.warn(advisory, SpeculativeConfigWarning, stacklevel=2)
        return spec

    # ----------------------------------------------------------------------------------------------------------
    # What vLLM 0.26 does with this config
    # ----------------------------------------------------------------------------------------------------------

    @property
    def draft_slots_per_sequence(self) -> int:
        """vLLM's ``max_num_new_slots_for_drafting``: 1 for draft_model, k−1 more with parallel drafting."""
        slots = self.num_speculative_tokens - 1 if self.parallel_drafting else 0
        return slots + (1 if self.method == "draft_model" else 0)

    @property
    def keeps_full_cudagraphs(self) -> bool:
        """False where vLLM 0.26's V1 model runner downgrades FULL CUDA graphs to PIECEWISE: a batch-size schedule
        (``num_speculative_tokens_per_batch_size``), whose decode batches then run without a full graph."""
        return self.num_speculative_tokens_per_batch_size is None

    def k_at_batch_size(self, batch_size: int) -> int:
        """The draft length vLLM 0.26 uses when ``batch_size`` requests are scheduled in a step: the schedule's k for
        the range holding it (a gap or the tail carries the previous range's k), or ``num_speculative_tokens``
        without a schedule."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        k = self.num_speculative_tokens
        for start, _end, k_here in self.num_speculative_tokens_per_batch_size or ():
            if start > batch_size:
                break
            k = k_here
        return k

    def max_num_scheduled_tokens(self, max_num_batched_tokens: int, max_num_seqs: int) -> int:
        """The scheduler's per-step token budget vLLM 0.26 derives: batched tokens − slots × max_num_seqs.

        Raises ``ConfigError`` where vLLM refuses to start because nothing could be scheduled.
        """
        budget = max_num_batched_tokens - self.draft_slots_per_sequence * max_num_seqs
        if budget <= 0:
            raise ConfigError(
                f"max_num_scheduled_tokens would be {budget} (max_num_batched_tokens={max_num_batched_tokens} - "
                f"{self.draft_slots_per_sequence} x max_num_seqs={max_num_seqs}): vLLM 0.26 refuses to start; raise "
                "max_num_batched_tokens or lower max_num_seqs"
            )
        return budget

    def advisories(self) -> list[str]:
        """One sentence per consequence of this config that vLLM 0.26 only logs at start-up, or never says.

        The same sentences are raised as ``SpeculativeConfigWarning`` when the config is validated.
        """
        k, method = self.num_speculative_tokens, self.method
        out: list[str] = []
        if method == "mtp" and k > 1:
            out.append(
                f"method 'mtp' with num_speculative_tokens={k} > 1 runs the same MTP layer k times per step when "
                "the checkpoint has one MTP layer (step i uses layer i mod num_nextn_predict_layers), so acceptance "
                "may drop at later positions."
            )
        if method == "draft_model":
            out.append(
                "method 'draft_model' turns vLLM 0.26's async scheduling off by default; pass --async-scheduling "
                "to keep it on, which vLLM allows for draft_model."
            )
        elif method == "ngram":
            out.append(
                "method 'ngram' (the CPU n-gram drafter) turns vLLM 0.26's async scheduling off and refuses an "
                "explicit --async-scheduling; method 'ngram_gpu' keeps it on."
            )
        elif method not in ASYNC_SCHEDULING_METHODS:
            out.append(
                f"method {method!r} turns vLLM 0.26's async scheduling off and refuses an explicit --async-scheduling."
            )
        slots = self.draft_slots_per_sequence
        if slots:
            why = f"method {method!r}" + (" with parallel_drafting" if self.parallel_drafting else "")
            out.append(
                f"{why} reserves {slots} token slot(s) per sequence for drafting, so vLLM 0.26 lowers the "
                f"scheduler's token budget to max_num_batched_tokens - {slots} x max_num_seqs and warns when that "
                "falls below 8192."
            )
        if self.num_speculative_tokens_per_batch_size is not None:
            out.append(
                "num_speculative_tokens_per_batch_size forces PIECEWISE CUDA graphs on vLLM 0.26's V1 model runner "
                "(a FULL cudagraph_mode is downgraded; Model Runner V2 keeps full graphs), and vLLM drops the "
                "schedule when data_parallel_size > 1."
            )
        if self.enforce_eager:
            if method in EAGER_AWARE_METHODS:
                out.append(
                    f"enforce_eager=True runs the {method} drafter without CUDA graphs on vLLM 0.26's V1 model "
                    "runner (the target keeps its graphs, and Model Runner V2 ignores the field), so every draft "
                    "step pays full kernel-launch overhead."
                )
            else:
                out.append(
                    f"enforce_eager has no effect with method {method!r}: vLLM 0.26 reads it only for eagle, "
                    "eagle3, mtp and draft_model drafters."
                )
        if self.draft_sample_method == "probabilistic" and self.rejection_sample_method == "synthetic":
            out.append(
                "draft_sample_method 'probabilistic' does not change acceptance under rejection_sample_method "
                "'synthetic', where the imposed rates decide; the V1 drafter then samples greedily."
            )
        if method == "suffix":
            out.append(
                "method 'suffix' needs the arctic-inference package in the server's environment; without it vLLM "
                "0.26 stops at start-up with an ImportError."
            )
        return out

    def acceptance_alpha(self) -> float | None:
        """The imposed i.i.d. α, when the imposed rates are geometric."""
        return alpha_of_rates(list(self.synthetic_acceptance_rates or ()))

    # ----------------------------------------------------------------------------------------------------------
    # Emitters and their inverses
    # ----------------------------------------------------------------------------------------------------------

    def to_vllm_dict(self, resolve_model: Any = None) -> dict[str, Any]:
        """The dict vLLM takes, with only the fields that are set; ``resolve_model`` maps a shape name to a path.

        Fields left at vLLM's defaults (``rejection_sample_method: standard``, ``draft_sample_method: greedy``,
        the suffix defaults…) are omitted; the method is always the resolved one.
        """
        out = self.model_dump(exclude_none=True, exclude_defaults=True)
        if "synthetic_acceptance_rates" in out:
            out["synthetic_acceptance_rates"] = list(out["synthetic_acceptance_rates"])
        if "num_speculative_tokens_per_batch_size" in out:
            out["num_speculative_tokens_per_batch_size"] = [
                list(t) for t in out["num_speculative_tokens_per_batch_size"]
            ]
        if self.model and resolve_model is not None:
            out["model"] = str(resolve_model(self.model))
        return out

    def to_python(self, resolve_model: Any = None) -> dict[str, Any]:
        """The config as a plain dict (``speculative_config=`` of ``vllm.LLM``); same content as ``to_cli_json``."""
        return self.to_vllm_dict(resolve_model)

    def to_cli_json(self, resolve_model: Any = None) -> str:
        """The JSON string for ``--speculative-config``."""
        return json.dumps(self.to_vllm_dict(resolve_model), separators=(",", ":"), sort_keys=True)

    def to_yaml(self, resolve_model: Any = None, *, under_key: bool = True) -> str:
        """YAML for a ``vllm serve --config`` file: ``speculative_config:`` and its mapping, keys sorted.

        ``under_key=False`` gives the bare mapping, to paste under an existing ``speculative_config:`` key.
        """
        body = self.to_vllm_dict(resolve_model)
        document = {"speculative_config": body} if under_key else body
        return yaml.safe_dump(document, sort_keys=True, default_flow_style=False)

    @classmethod
    def from_python(cls, data: Mapping[str, Any]) -> SpeculativeConfig:
        """Validate a dict (as ``to_python`` gives it); raises ``ConfigError``."""
        spec = build_speculative_config(dict(data) if isinstance(data, Mapping) else data)
        if spec is None:
            raise ConfigError("speculative_config is empty (null)")
        return spec

    @classmethod
    def from_cli_json(cls, text: str) -> SpeculativeConfig:
        """Validate the JSON of ``--speculative-config``; raises ``ConfigError``."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"--speculative-config is not valid JSON: {error}") from None
        return cls.from_python(data)

    @classmethod
    def from_yaml(cls, text: str) -> SpeculativeConfig:
        """Validate YAML: a ``speculative_config:`` (or ``speculative-config:``) key, or the bare mapping."""
        data = bounded_yaml(text, "speculative_config")
        if isinstance(data, dict) and len(data) == 1 and next(iter(data)) in _YAML_KEYS:
            data = next(iter(data.values()))
        return cls.from_python(data)


def _check_schedule(schedule: tuple[tuple[int, int, int], ...], k: int) -> None:
    """Ranges are inclusive, start at batch size 1, do not overlap, and each k lies in [0, num_speculative_tokens]."""
    if not schedule:
        raise ValueError("num_speculative_tokens_per_batch_size must not be empty (leave it out for a fixed k)")
    previous_end = 0
    for index, (start, end, k_here) in enumerate(schedule):
        if index == 0 and start != 1:
            raise ValueError("num_speculative_tokens_per_batch_size must start at batch size 1")
        if start <= previous_end:
            raise ValueError(f"num_speculative_tokens_per_batch_size ranges overlap at ({start}, {end}, {k_here})")
        if end < start:
            raise ValueError(f"num_speculative_tokens_per_batch_size range ({start}, {end}) ends before it starts")
        if not 0 <= k_here <= k:
            raise ValueError(f"num_speculative_tokens_per_batch_size k={k_here} must lie in [0, {k}]")
        previous_end = end


def build_speculative_config(spec: dict[str, Any] | SpeculativeConfig | None) -> SpeculativeConfig | None:
    """Validate a speculative config given as a dict (YAML, JSON, papermill parameter); ``None`` means off.

    Raises ``ConfigError`` with every problem in one message.
    """
    if spec is None or isinstance(spec, SpeculativeConfig):
        return spec
    if not isinstance(spec, dict):
        raise ConfigError(f"speculative_config must be a mapping, got {type(spec).__name__}: {spec!r}")
    try:
        return SpeculativeConfig.model_validate(spec)
    except ValidationError as error:
        problems = "; ".join(
            (".".join(str(p) for p in e["loc"]) + ": " if e["loc"] else "") + e["msg"].removeprefix("Value error, ")
            for e in error.errors()
        )
        raise ConfigError(f"Bad speculative_config {json.dumps(spec, default=str)}: {problems}") from None
