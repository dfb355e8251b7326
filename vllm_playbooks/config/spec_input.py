"""A ``speculative_config`` as a user writes it, before pydantic validates its fields: the common mistakes refused
with their fix, ``acceptance_alpha`` turned into per-position rates, and the method and k that vLLM 0.26 fills in."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal, get_args

from vllm_playbooks.config.spec_detection import inferred_method
from vllm_playbooks.errors import ConfigError

SpecMethod = Literal[
    "draft_model", "ngram", "ngram_gpu", "suffix", "eagle", "eagle3", "medusa", "mlp_speculator", "mtp"
]


SPEC_METHODS: tuple[str, ...] = get_args(SpecMethod)


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


#: vLLM 0.26's default ``suffix_decoding_max_tree_depth``, which is also suffix decoding's default k.
SUFFIX_DEFAULT_TREE_DEPTH = 24


def default_num_speculative_tokens(data: Mapping[str, Any]) -> int:
    """The k vLLM 0.26 fills in when ``num_speculative_tokens`` is omitted from ``data`` (a mapping whose method is
    resolved): ``suffix_decoding_max_tree_depth`` for suffix (24 by default). Raises ``ValueError`` with vLLM's
    reason for every other method: mtp too, which vLLM 0.26 means to default to the checkpoint's MTP layers but, as
    recorded in the cross-check, refuses (without a model: k must be provided; with one: a TypeError comparing
    None with an int while it builds the draft config)."""
    method = data.get("method")
    if method == "suffix":
        depth = data.get("suffix_decoding_max_tree_depth", SUFFIX_DEFAULT_TREE_DEPTH)
        return depth if isinstance(depth, int) and not isinstance(depth, bool) else SUFFIX_DEFAULT_TREE_DEPTH
    reason = ""
    if method == "mtp" and data.get("model"):
        reason = "; with an MTP model, vLLM 0.26 stops with a TypeError (None compared with an int)"
    raise ValueError(
        "num_speculative_tokens must be provided with speculative model unless the draft model config contains an "
        f"n_predict parameter (vLLM 0.26 fills it only for suffix; method {method!r}{reason})"
    )


def checked_input(data: Any) -> Any:
    """A ``speculative_config`` as written, before its fields are validated: the mistakes users make most often
    refused with their fix (sampling keys, misnamed fields, a boolean k), ``acceptance_alpha`` turned into
    ``synthetic_acceptance_rates``, and the method and k vLLM 0.26 would fill in filled in. ``ValueError`` says
    what is wrong; anything but a dict is returned as it is."""
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
    if isinstance(data.get("num_speculative_tokens"), bool):
        raise ValueError(
            f"num_speculative_tokens must be an integer, got the boolean {data['num_speculative_tokens']!r}"
        )
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
    if data.get("num_speculative_tokens") is None:
        data["num_speculative_tokens"] = default_num_speculative_tokens(data)
    return data
