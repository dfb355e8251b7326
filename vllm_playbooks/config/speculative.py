"""Build and validate vLLM 0.26's ``--speculative-config`` before a GPU is rented.

The checks mirror vLLM's own (``vllm/config/speculative.py``) plus the mistakes users make most often, so that a
bad config fails here with one clear message rather than minutes into an engine start.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from vllm_playbooks.errors import ConfigError

SpecMethod = Literal[
    "draft_model", "ngram", "ngram_gpu", "suffix", "eagle", "eagle3", "medusa", "mlp_speculator", "mtp"
]
#: Methods that need a separate draft checkpoint (or head) in ``model``.
METHODS_WITH_DRAFT_MODEL = frozenset({"draft_model", "eagle", "eagle3", "medusa", "mlp_speculator"})
#: Methods that draft from the prompt and take no model.
MODEL_FREE_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})

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


class SpeculativeConfig(BaseModel):
    """The fields of vLLM 0.26's SpeculativeConfig that a user sets, with their types and ranges.

    ``acceptance_alpha`` is a shorthand of this package: it expands to geometric ``synthetic_acceptance_rates``
    and sets ``rejection_sample_method: synthetic`` (used with dummy weights, whose own drafts are meaningless).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: SpecMethod
    num_speculative_tokens: int = Field(ge=1, le=16)
    model: str | None = None
    draft_tensor_parallel_size: int | None = Field(None, ge=1)
    prompt_lookup_min: int | None = Field(None, ge=1)
    prompt_lookup_max: int | None = Field(None, ge=1)
    rejection_sample_method: Literal["standard", "synthetic"] = "standard"
    synthetic_acceptance_rates: tuple[float, ...] | None = None
    synthetic_acceptance_length: float | None = None
    num_speculative_tokens_per_batch_size: tuple[tuple[int, int, int], ...] | None = None
    enforce_eager: bool | None = None

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
        return data

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

    def acceptance_alpha(self) -> float | None:
        """The imposed i.i.d. α, when the imposed rates are geometric."""
        return alpha_of_rates(list(self.synthetic_acceptance_rates or ()))

    def to_vllm_dict(self, resolve_model: Any = None) -> dict[str, Any]:
        """The dict vLLM takes, with only the fields that are set; ``resolve_model`` maps a shape name to a path."""
        out = self.model_dump(exclude_none=True)
        if out.get("rejection_sample_method") == "standard":
            del out["rejection_sample_method"]
        if "synthetic_acceptance_rates" in out:
            out["synthetic_acceptance_rates"] = list(out["synthetic_acceptance_rates"])
        if "num_speculative_tokens_per_batch_size" in out:
            out["num_speculative_tokens_per_batch_size"] = [list(t) for t in out["num_speculative_tokens_per_batch_size"]]
        if self.model and resolve_model is not None:
            out["model"] = str(resolve_model(self.model))
        return out

    def to_cli_json(self, resolve_model: Any = None) -> str:
        """The JSON string for ``--speculative-config``."""
        return json.dumps(self.to_vllm_dict(resolve_model), separators=(",", ":"), sort_keys=True)


def _check_schedule(schedule: tuple[tuple[int, int, int], ...], k: int) -> None:
    """Ranges are inclusive, start at batch size 1, do not overlap, and each k lies in [0, num_speculative_tokens]."""
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
