"""Build and validate vLLM 0.26's ``--speculative-config`` before a GPU is rented.

The checks mirror vLLM's own (``vllm/config/speculative.py``) plus the mistakes users make most often, so that a
bad config fails here with one clear message rather than minutes into an engine start.

* ``method`` may be left out: it is then inferred as vLLM 0.26 infers it (``inferred_method``), and the model
  carries the resolved method. An MTP model-type name given as the method (``deepseek_mtp``…) is rewritten to
  ``mtp`` with a warning, as vLLM does.
* Consequences vLLM only logs at start-up (async scheduling switched off, a smaller scheduler token budget, CUDA
  graphs downgraded…) are raised here as ``SpeculativeConfigWarning`` and listed by ``advisories()``.
* ``to_cli_json`` / ``to_yaml`` / ``to_python`` emit the config; ``from_cli_json`` / ``from_yaml`` /
  ``from_python`` validate it back into an equal object.
* ``check_against_target`` runs the checks that need the target model's config and its tensor parallelism.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from vllm_playbooks.errors import ConfigError

if TYPE_CHECKING:
    from vllm_playbooks.shapes import ModelShape

SpecMethod = Literal[
    "draft_model", "ngram", "ngram_gpu", "suffix", "eagle", "eagle3", "medusa", "mlp_speculator", "mtp"
]
SPEC_METHODS: tuple[str, ...] = get_args(SpecMethod)
#: Methods that need a separate draft checkpoint (or head) in ``model``.
METHODS_WITH_DRAFT_MODEL = frozenset({"draft_model", "eagle", "eagle3", "medusa", "mlp_speculator"})
#: Methods that draft from the prompt and take no model.
MODEL_FREE_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})

#: vLLM 0.26's ``MTPModelTypes`` (config/speculative.py): as a method each is rewritten to ``mtp``; as a draft's
#: ``model_type`` (after vLLM's ``hf_config_override``) each makes the inferred method ``mtp``.
MTP_MODEL_TYPES: tuple[str, ...] = (
    "deepseek_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp", "glm_ocr_mtp", "ernie_mtp",
    "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp", "qwen3_5_mtp", "longcat_flash_mtp",
    "minimax_m3_mtp", "bailing_hybrid_mtp", "mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "hy_v3_mtp", "gemma4_mtp",
    "inkling_mtp",
)  # fmt: skip
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
    "awq", "auto_awq", "fp8", "fbgemm_fp8", "fp_quant", "modelopt", "modelopt_fp4", "modelopt_mxfp8",
    "modelopt_mixed", "auto_gptq", "gptq", "gptq_marlin", "awq_marlin", "humming", "compressed-tensors",
    "bitsandbytes", "experts_int8", "quark", "moe_wna16", "torchao", "inc", "mxfp4", "gpt_oss_mxfp4",
    "deepseek_v4_fp8", "online", "fp8_per_tensor", "fp8_per_block", "fp8_per_channel",
    "int8_per_channel_weight_only", "nvfp4_per_token", "mxfp8",
)  # fmt: skip
DraftSampleMethod = Literal["greedy", "probabilistic"]

_SAMPLING_KEYS = frozenset({"temperature", "top_p", "top_k", "min_p", "repetition_penalty", "seed"})
_MISNAMED_KEYS = {
    "tensor_parallel_size": "draft_tensor_parallel_size",
    "speculative_model": "model",
    "num_spec_tokens": "num_speculative_tokens",
    "k": "num_speculative_tokens",
    "disable_by_batch_size": "num_speculative_tokens_per_batch_size",
    "speculative_disable_by_batch_size": "num_speculative_tokens_per_batch_size",
    "synthetic_acceptance_rate": "synthetic_acceptance_rates",
}
_DSPARK_ARCHITECTURES = frozenset({"Qwen3DSparkModel", "Gemma4DSparkModel"})
_YAML_KEYS = ("speculative_config", "speculative-config")


class SpeculativeConfigWarning(UserWarning):
    """A valid speculative config with a consequence vLLM 0.26 only logs at start-up (or not at all)."""


def geometric_rates(alpha: float, k: int) -> list[float]:
    """Unconditional per-position acceptance for an i.i.d. per-token acceptance ``alpha``: [α, α², …, α^k].

    vLLM's ``synthetic_acceptance_rates`` are unconditional: p_i is the chance that the first i drafts are all
    accepted, so an i.i.d. chain gives α^i.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"acceptance alpha must lie in [0, 1], got {alpha}")
    if k < 1:
        raise ConfigError(f"k must be >= 1, got {k}")
    return [alpha**i for i in range(1, k + 1)]


def alpha_of_rates(rates: list[float] | None) -> float | None:
    """The i.i.d. α behind ``rates`` when they are exactly α, α², …; ``None`` otherwise."""
    if not rates:
        return None
    alpha = rates[0]
    if all(math.isclose(r, alpha ** (i + 1), rel_tol=1e-9, abs_tol=1e-12) for i, r in enumerate(rates)):
        return alpha
    return None


# --------------------------------------------------------------------------------------------------------------
# Method inference, as vLLM 0.26's SpeculativeConfig.__post_init__ does it
# --------------------------------------------------------------------------------------------------------------


def _is_custom_proposer_path(model: str) -> bool:
    """vLLM's ``_is_custom_proposer_path``: a dotted import path such as ``pkg.MyProposer``."""
    if model.startswith(("http://", "https://", "file://")) or "/" in model:
        return False
    parts = model.split(".")
    return len(parts) >= 2 and all(part.isidentifier() for part in parts)


def _local_model(model: str) -> ModelShape | None:
    """The shape or model folder ``model`` names, or ``None`` for anything else (a Hugging Face id, say).

    A folder that exists but holds no usable ``config.json`` raises ``ConfigError`` from ``resolve_model``.
    """
    from vllm_playbooks.shapes import list_shapes, resolve_model

    if not model.strip():
        return None
    if model in list_shapes() or Path(model).expanduser().exists():
        return resolve_model(model)
    return None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def draft_type_after_override(config: Mapping[str, Any]) -> tuple[str, int | None]:
    """``(model_type, n_predict)`` of a draft config after vLLM 0.26's ``hf_config_override``.

    That override turns a target checkpoint with MTP layers into its MTP drafter: ``deepseek_v3`` becomes
    ``deepseek_mtp``, ``MiMoForCausalLM`` becomes ``mimo_mtp``, and so on; ``n_predict`` is the MTP layer count
    vLLM divides k by (``None`` when vLLM sets none). Configs the override leaves alone come back unchanged.
    """
    cfg: Mapping[str, Any] = config
    model_type = str(cfg.get("model_type") or "")
    archs = [a for a in (cfg.get("architectures") or []) if isinstance(a, str)]
    arch = archs[0] if archs else ""
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), Mapping) else {}

    def layers(source: Mapping[str, Any], key: str = "num_nextn_predict_layers", default: int | None = None):
        value = _int_or_none(source.get(key))
        return default if value is None else value

    if model_type in ("deepseek_v3", "deepseek_v32", "glm_moe_dsa", "deepseek_v4", "deepseek_mtp"):
        return "deepseek_mtp", layers(cfg)
    if model_type in ("pangu_ultra_moe", "pangu_ultra_moe_mtp"):
        return "pangu_ultra_moe_mtp", layers(cfg)
    if arch == "MiMoForCausalLM":
        return "mimo_mtp", layers(cfg)
    if arch in ("MiMoV2ForCausalLM", "MiMoV2OmniForCausalLM", "MiMoV2FlashForCausalLM"):
        return "mimo_v2_mtp", 1  # vLLM 0.26 uses only the first MiMo-V2 MTP layer
    if arch == "Glm4MoeForCausalLM":
        return "glm4_moe_mtp", layers(cfg)
    if arch == "Glm4MoeLiteForCausalLM":
        return "glm4_moe_lite_mtp", layers(cfg)
    if arch == "GlmOcrForConditionalGeneration":
        return "glm_ocr_mtp", layers(cfg)
    if model_type in ("ernie4_5_moe", "ernie_mtp"):
        return "ernie_mtp", layers(cfg)
    nemotron = text if arch == "NemotronH_Super_Omni_Reasoning_V3" and text else cfg
    nemotron_type = str(nemotron.get("model_type") or "")
    if (nemotron_type in ("nemotron_h", "nemotron_h_puzzle") and (layers(nemotron) or 0) > 0) or (
        nemotron_type == "nemotron_h_mtp"
    ):
        return "nemotron_h_mtp", layers(nemotron, default=1)
    if model_type in ("qwen3_next", "qwen3_next_mtp"):
        return "qwen3_next_mtp", layers(cfg)
    if model_type in ("bailing_hybrid", "bailing_hybrid_mtp") or "BailingMoeV2_5ForCausalLM" in archs:
        return "bailing_hybrid_mtp", layers(cfg)
    if model_type in ("exaone_moe", "exaone_moe_mtp"):
        return "exaone_moe_mtp", layers(cfg)
    if "exaone4_5" in model_type:
        return "exaone4_5_mtp", layers(cfg)
    if model_type in ("qwen3_5", "qwen3_5_moe", "intern_s2_preview", "qwen3_5_mtp"):
        key = "mtp_num_hidden_layers"
        return "qwen3_5_mtp", layers(cfg, key) if key in cfg else layers(text, key)
    if model_type in ("longcat_flash", "longcat_flash_ngram", "longcat_flash_mtp"):
        return "longcat_flash_mtp", layers(cfg, default=1)
    if model_type in ("step3p5", "step3p7", "step3p5_mtp") or arch in (
        "Step3p5ForCausalLM", "Step3p7ForConditionalGeneration"
    ):  # fmt: skip
        return "step3p5_mtp", layers(text or cfg, default=1)
    if model_type in ("hy_v3", "hy_v3_mtp"):
        return "hy_v3_mtp", layers(cfg)
    if model_type in ("inkling_mm_model", "inkling_model", "inkling_mtp"):
        mtp = cfg.get("mtp_config") if isinstance(cfg.get("mtp_config"), Mapping) else {}
        return "inkling_mtp", 1 if (layers(mtp, default=0) or 0) >= 1 else 0
    if model_type in ("gemma4_assistant", "gemma4_unified_assistant", "gemma4_mtp"):
        return "gemma4_mtp", 1
    if model_type in ("minimax_m3_vl", "minimax_m3_mtp") or arch in (
        "MiniMaxM3SparseForConditionalGeneration", "MiniMaxM3MTP"
    ):  # fmt: skip
        source = text if model_type == "minimax_m3_vl" and text else cfg
        return "minimax_m3_mtp", layers(source, "num_mtp_modules", default=1)
    return model_type, layers(cfg, "n_predict")


def vllm_detected_method(name: str, config: Mapping[str, Any] | None, method: str = "draft_model") -> str | None:
    """The method vLLM 0.26 ends up with once it has loaded the draft, or ``None`` where it raises.

    ``name`` is the model string vLLM sees (a path or a hub id), ``config`` the draft's ``config.json`` (``None``
    when it cannot be read here), ``method`` the method going in. vLLM keeps eagle/eagle3/dflash/dspark; otherwise
    it switches to eagle when the name holds ``eagle-``, eagle3 for ``eagle3`` (then dflash, dspark), to medusa,
    mlp_speculator or mtp by the draft's ``model_type``, and keeps draft_model; any other method that matched
    nothing raises ``NotImplementedError('Unsupported speculative method')``.
    """
    if method in ("eagle", "eagle3", "dflash", "dspark"):
        return method
    lowered = name.lower()
    archs = set((config or {}).get("architectures") or [])
    if "eagle-" in lowered:
        return "eagle"
    if "eagle3" in lowered:
        return "eagle3"
    if "dflash" in lowered:
        return "dflash"
    if "dspark" in lowered or archs & _DSPARK_ARCHITECTURES:
        return "dspark"
    if method == "medusa":
        model_type = "medusa"  # vLLM forces model_type=medusa for old Medusa checkpoints
    else:
        model_type = draft_type_after_override(config)[0] if config is not None else ""
    if model_type in ("medusa", "mlp_speculator"):
        return model_type
    if model_type in MTP_MODEL_TYPES:
        return "mtp"
    return "draft_model" if method == "draft_model" else None


def inferred_method(spec: Mapping[str, Any]) -> str:
    """The method vLLM 0.26 uses for the speculative config ``spec`` (a dict as a user writes it).

    * ``method`` given: that method, except that an MTP model-type name (``deepseek_mtp``…) becomes ``mtp`` with a
      ``SpeculativeConfigWarning``.
    * neither ``method`` nor ``model``: ``draft_model`` (vLLM then refuses the config: there is no draft).
    * ``model`` is ``ngram`` or ``[ngram]``: ``ngram``; a dotted import path (``pkg.MyProposer``): ``custom_class``.
    * otherwise the draft decides, as in ``vllm_detected_method``: a shape name or a model folder is resolved with
      ``vllm_playbooks.shapes.resolve_model`` and both its path and its ``config.json`` are read; any other string
      (a Hugging Face id) is judged by its name alone: ``draft_model`` unless it names eagle, eagle3, dflash or
      dspark.

    May return a method this package does not run (``dflash``, ``dspark``, ``custom_class``); ``SpeculativeConfig``
    refuses those with a clear message.
    """
    method = spec.get("method")
    if method is not None:
        if isinstance(method, str) and method in MTP_MODEL_TYPES and method != "mtp":
            warnings.warn(
                f"method {method!r} is deprecated in vLLM 0.26, which rewrites it to 'mtp'; write method: mtp.",
                SpeculativeConfigWarning,
                stacklevel=2,
            )
            return "mtp"
        return method
    model = spec.get("model")
    if model is None:
        return "draft_model"
    text = str(model)
    if text in ("ngram", "[ngram]"):
        return "ngram"
    local = _local_model(text)
    if local is None:
        if _is_custom_proposer_path(text):
            return "custom_class"
        return vllm_detected_method(text, None) or "draft_model"
    from vllm_playbooks.shapes import vllm_path

    return vllm_detected_method(str(vllm_path(local)), local.config()) or "draft_model"


# --------------------------------------------------------------------------------------------------------------
# The config
# --------------------------------------------------------------------------------------------------------------


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
        ge=1, le=16, description="k, the tokens drafted per step (vLLM: > 0; this package also caps it at 16)"
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
        description="synthetic only: k unconditional rates p_i = P(first i drafts accepted), in [0, 1], "
        "non-increasing",
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
        if not isinstance(data, dict):
            return data
        data = dict(data)
        sampling = sorted(_SAMPLING_KEYS & data.keys())
        if sampling:
            raise ValueError(
                f"sampling parameters {sampling} do not belong in speculative_config: set them per request "
                "(or with `vllm bench serve --temperature …`); the draft follows the request's sampling."
            )
        for wrong, right in _MISNAMED_KEYS.items():
            if wrong in data:
                raise ValueError(f"'{wrong}' is not a speculative_config field; use '{right}'.")
        alpha = data.pop("acceptance_alpha", None)
        if alpha is not None:
            if data.get("synthetic_acceptance_rates") is not None or data.get("synthetic_acceptance_length"):
                raise ValueError("give acceptance_alpha or synthetic_acceptance_rates/length, not both")
            k = data.get("num_speculative_tokens")
            if not isinstance(k, int) or k < 1:
                raise ValueError("acceptance_alpha needs num_speculative_tokens (an int >= 1)")
            data["synthetic_acceptance_rates"] = geometric_rates(float(alpha), k)
            data.setdefault("rejection_sample_method", "synthetic")
        if data.get("method") is None:
            model = data.get("model")
            if model is None:
                raise ValueError(
                    "give a 'method' or a draft 'model': with neither, vLLM 0.26 assumes method 'draft_model' and "
                    "refuses ('num_speculative_tokens was provided but without speculative model')"
                )
            method = inferred_method(data)
            if method == "custom_class":
                raise ValueError(
                    f"vLLM 0.26 loads model {model!r} (a dotted import path) as a custom proposer class "
                    "(method 'custom_class'), which this package does not run; give a shape name, a model folder "
                    "or a hub id"
                )
            if method not in SPEC_METHODS:
                raise ValueError(
                    f"vLLM 0.26 runs model {model!r} as method {method!r} (it detects that from the name or the "
                    f"config, whatever 'method' says unless it is eagle or eagle3), which this package does not run"
                )
            data["method"] = method
            if method == "ngram" and str(model) in ("ngram", "[ngram]"):
                del data["model"]
        else:
            data["method"] = inferred_method(data)
        return data

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
            name for name in SUFFIX_FIELDS
            if name in self.model_fields_set and getattr(self, name) != type(self).model_fields[name].default
        ]  # fmt: skip
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
                f"method {method!r} turns vLLM 0.26's async scheduling off and refuses an explicit "
                "--async-scheduling."
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
            out["num_speculative_tokens_per_batch_size"] = [list(t) for t in out["num_speculative_tokens_per_batch_size"]]
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
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ConfigError(f"speculative_config YAML does not parse: {error}") from None
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


# --------------------------------------------------------------------------------------------------------------
# Checks against the target model
# --------------------------------------------------------------------------------------------------------------


def _as_shape(model: ModelShape | str | Path) -> ModelShape:
    from vllm_playbooks.shapes import ModelShape, resolve_model

    return model if isinstance(model, ModelShape) else resolve_model(model)


def target_advisories(
    spec: SpeculativeConfig, target_shape: ModelShape | str | Path, target_tp: int, model_type: str | None = None
) -> list[str]:
    """The sentences ``check_against_target`` warns with: consequences that depend on the target."""
    target = _as_shape(target_shape)
    target_type = model_type or target.model_type
    out: list[str] = []
    if spec.method == "mtp" and spec.model is None and target_type == "deepseek_v32":
        out.append(
            "a deepseek_v32 target makes vLLM 0.26 force enforce_eager=True on its MTP drafter (CUDA graphs with "
            "V3.2 MTP are unsupported), so every draft step runs without CUDA graphs whatever enforce_eager says."
        )
    if spec.method == "mlp_speculator" and spec.draft_tensor_parallel_size is None and target_tp > 1:
        out.append(
            f"mlp_speculator cannot run with tensor parallelism in vLLM 0.26, so its draft runs with "
            f"draft_tensor_parallel_size=1 while the target uses {target_tp}."
        )
    return out


def draft_tp_problem(spec: SpeculativeConfig, target_tp: int) -> str | None:
    """vLLM's rule for every method: the draft runs at TP 1 or at the target's TP. The problem, or ``None``."""
    draft_tp = spec.draft_tensor_parallel_size
    if draft_tp is not None and draft_tp not in (1, target_tp):
        return f"draft_tensor_parallel_size={draft_tp} must be 1 or the target's tensor_parallel_size={target_tp}"
    return None


def check_against_target(
    spec: SpeculativeConfig,
    target_shape: ModelShape | str | Path,
    target_tp: int,
    model_type: str | None = None,
    *,
    target_max_model_len: int | None = None,
) -> None:
    """The checks that need the target: draft TP, MTP layers and k, the draft's method and vocabulary.

    ``target_shape`` is a ``ModelShape``, a shape name or a model folder; ``model_type`` overrides the target's
    ``model_type`` (for a target whose real type the shape does not carry, e.g. ``deepseek_v32``);
    ``target_max_model_len`` is the engine's ``max_model_len``. Returns nothing; raises ``ConfigError`` (an unknown
    shape or a bad path raises it from the lookup) and warns, as ``SpeculativeConfigWarning``, with
    ``target_advisories``.
    """
    from vllm_playbooks.shapes import vllm_path

    target = _as_shape(target_shape)
    if isinstance(target_tp, bool) or not isinstance(target_tp, int) or target_tp < 1:
        raise ConfigError(f"target tensor_parallel_size must be an int >= 1, got {target_tp!r}")
    draft_tp = spec.draft_tensor_parallel_size
    problem = draft_tp_problem(spec, target_tp)
    if problem:
        raise ConfigError(problem)
    if spec.method == "draft_model" and draft_tp is not None and draft_tp != target_tp:
        raise ConfigError(
            f"method 'draft_model' needs draft_tensor_parallel_size equal to the target's tensor_parallel_size="
            f"{target_tp} in vLLM 0.26 (got {draft_tp}): its draft proposer refuses any other value"
        )
    if (
        spec.max_model_len is not None
        and target_max_model_len is not None
        and spec.max_model_len > target_max_model_len
    ):
        raise ConfigError(
            f"speculative max_model_len={spec.max_model_len} cannot be larger than the target's max_model_len="
            f"{target_max_model_len}"
        )

    target_config = target.config()
    if model_type:
        target_config["model_type"] = model_type
    if spec.method == "mtp":
        # Without a model, vLLM drafts with the target's own MTP layers.
        source, config = (_as_shape(spec.model), None) if spec.model else (target, target_config)
        config = config if config is not None else source.config()
        detected_type, n_predict = draft_type_after_override(config)
        layers = n_predict if n_predict is not None else source.num_mtp_layers
        if layers < 1:
            role = "a draft" if spec.model else "a target"
            raise ConfigError(
                f"method 'mtp' needs {role} with MTP layers; {source.name} has num_nextn_predict_layers=0. "
                "Use a model whose config has num_nextn_predict_layers >= 1 (e.g. deepseek-v3, mimo-7b)."
            )
        if vllm_detected_method(str(vllm_path(source)), config, "mtp") != "mtp":
            raise ConfigError(
                f"vLLM 0.26 has no MTP drafter for {source.name} (model_type {config.get('model_type')!r}, "
                f"architecture {(config.get('architectures') or ['?'])[0]!r}): it stops with "
                "\"Unsupported speculative method: 'mtp'\""
            )
        k = spec.num_speculative_tokens
        if k > layers and k % layers != 0:
            raise ConfigError(
                f"num_speculative_tokens={k} must be divisible by the MTP layer count {layers} of {source.name}"
            )
        if detected_type == "inkling_mtp" and k != 1:
            raise ConfigError(f"Inkling MTP in vLLM 0.26 supports exactly one speculative token, not {k}")
    elif spec.model:
        draft = _as_shape(spec.model)
        draft_config = draft.config()
        detected = vllm_detected_method(str(vllm_path(draft)), draft_config, spec.method)
        if detected is None:
            raise ConfigError(
                f"method {spec.method!r} does not fit draft {draft.name} (model_type {draft.model_type!r}): vLLM "
                f"0.26 stops with \"Unsupported speculative method: '{spec.method}'\""
            )
        if detected != spec.method:
            fix = f"set method: {detected}" if detected in SPEC_METHODS else "this package does not run that method"
            raise ConfigError(
                f"vLLM 0.26 would run draft {draft.name} as method {detected!r}, not {spec.method!r} (it re-detects "
                f"the method from the draft's path and model_type); {fix}"
            )
        if spec.method == "draft_model" and draft.vocab_size != target.vocab_size:
            raise ConfigError(
                f"draft_model needs the target's vocabulary: {draft.name} has {draft.vocab_size} tokens, "
                f"{target.name} has {target.vocab_size}"
            )
        if spec.parallel_drafting:
            dflash = draft_config.get("dflash_config")
            if not (
                "pard_token" in draft_config
                or "ptd_token_id" in draft_config
                or (isinstance(dflash, Mapping) and "mask_token_id" in dflash)
            ):
                raise ConfigError(
                    f"parallel_drafting needs a draft trained for it: {draft.name}'s config.json has no pard_token, "
                    "ptd_token_id or dflash_config.mask_token_id, and vLLM 0.26 stops at start-up without one"
                )
    for advisory in target_advisories(spec, target, target_tp, model_type):
        warnings.warn(advisory, SpeculativeConfigWarning, stacklevel=2)
