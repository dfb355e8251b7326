"""speculative_config: every bad input refused with one clear message, good ones emitted as vLLM takes them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from vllm_playbooks.config.spec_input import alpha_of_rates, geometric_rates
from vllm_playbooks.config.speculative import build_speculative_config
from vllm_playbooks.errors import ConfigError

DRAFT = {"method": "draft_model", "model": "llama-3.2-1b", "num_speculative_tokens": 4}

BAD: list[tuple[dict[str, Any], str]] = [
    ({"method": "lookahead", "num_speculative_tokens": 2}, "method"),
    ({"method": "ngram"}, "num_speculative_tokens"),
    ({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens"),
    ({"method": "ngram", "num_speculative_tokens": -2}, "num_speculative_tokens"),
    ({**DRAFT, "tensor_parallel_size": 2}, "use 'draft_tensor_parallel_size'"),
    ({**DRAFT, "temperature": 0.7}, "sampling parameters ['temperature']"),
    ({**DRAFT, "top_p": 0.9, "top_k": 5}, "sampling parameters ['top_k', 'top_p']"),
    ({"method": "draft_model", "num_speculative_tokens": 4}, "needs a draft 'model'"),
    ({"method": "eagle3", "num_speculative_tokens": 3}, "needs a draft 'model'"),
    ({"method": "ngram", "model": "llama-3.2-1b", "num_speculative_tokens": 3}, "takes no 'model'"),
    ({**DRAFT, "prompt_lookup_max": 4}, "ngram only"),
    (
        {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 5, "prompt_lookup_max": 2},
        "prompt_lookup_min",
    ),
    ({**DRAFT, "rejection_sample_method": "synthetic"}, "exactly one of"),
    ({**DRAFT, "synthetic_acceptance_rates": [0.8, 0.6, 0.5, 0.4]}, "needs rejection_sample_method: synthetic"),
    ({**DRAFT, "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.8, 0.6]}, "k=4 needs 4"),
    (
        {**DRAFT, "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.5, 0.6, 0.4, 0.3]},
        "non-increasing",
    ),
    ({**DRAFT, "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [1.2, 0.6, 0.4, 0.3]}, "[0, 1]"),
    ({**DRAFT, "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 6.0}, "[1, 5]"),
    ({**DRAFT, "acceptance_alpha": 1.5}, "acceptance alpha must lie in [0, 1]"),
    ({**DRAFT, "acceptance_alpha": 0.8, "synthetic_acceptance_length": 2.0}, "not both"),
    ({**DRAFT, "num_speculative_tokens_per_batch_size": [[2, 16, 4]]}, "start at batch size 1"),
    ({**DRAFT, "num_speculative_tokens_per_batch_size": [[1, 16, 4], [8, 64, 2]]}, "overlap"),
    ({**DRAFT, "num_speculative_tokens_per_batch_size": [[1, 16, 6]]}, "must lie in [0, 4]"),
    ({**DRAFT, "speculative_disable_by_batch_size": 16}, "use 'num_speculative_tokens_per_batch_size'"),
    ({**DRAFT, "draft_tensor_parallel_size": 0}, "draft_tensor_parallel_size"),
    ({**DRAFT, "colour": "blue"}, "colour"),
]


@pytest.mark.parametrize(("spec", "expected"), BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_config_is_refused_with_a_clear_message(spec: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        build_speculative_config(spec)
    message = str(error.value)
    assert message.startswith("Bad speculative_config")
    assert expected in message


def test_not_a_mapping_is_refused() -> None:
    with pytest.raises(ConfigError, match="must be a mapping"):
        build_speculative_config("ngram")  # type: ignore[arg-type]


def test_alpha_expands_to_unconditional_geometric_rates() -> None:
    spec = build_speculative_config({**DRAFT, "acceptance_alpha": 0.5})
    assert spec is not None
    assert spec.rejection_sample_method == "synthetic"
    assert spec.synthetic_acceptance_rates == (0.5, 0.25, 0.125, 0.0625)
    assert spec.acceptance_alpha() == 0.5


def test_non_geometric_rates_have_no_alpha() -> None:
    assert alpha_of_rates([0.9, 0.7, 0.5]) is None
    assert alpha_of_rates(None) is None
    assert alpha_of_rates(geometric_rates(0.72, 5)) == 0.72


def test_cli_json_is_what_vllm_takes() -> None:
    spec = build_speculative_config(
        {**DRAFT, "acceptance_alpha": 0.8, "num_speculative_tokens_per_batch_size": [[1, 16, 4], [17, 1024, 0]]}
    )
    assert spec is not None
    emitted = json.loads(spec.to_cli_json(lambda name: f"/shapes/{name}"))
    assert emitted == {
        "method": "draft_model",
        "model": "/shapes/llama-3.2-1b",
        "num_speculative_tokens": 4,
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_rates": pytest.approx([0.8, 0.64, 0.512, 0.4096]),
        "num_speculative_tokens_per_batch_size": [[1, 16, 4], [17, 1024, 0]],
    }
    # the emitted dict is itself a valid config again (round trip)
    assert build_speculative_config(emitted) is not None


def test_off_is_none() -> None:
    assert build_speculative_config(None) is None


@pytest.mark.parametrize(("batch_size", "k"), [(1, 4), (8, 4), (9, 2), (20, 2), (33, 0), (500, 0)])
def test_k_at_batch_size_follows_the_schedule_and_gaps_carry_the_previous_k(batch_size: int, k: int) -> None:
    schedule = [[1, 8, 4], [9, 16, 2], [33, 64, 0]]
    spec = build_speculative_config({**DRAFT, "num_speculative_tokens_per_batch_size": schedule})
    assert spec is not None
    assert spec.k_at_batch_size(batch_size) == k


def test_k_at_batch_size_without_a_schedule_is_k() -> None:
    spec = build_speculative_config(DRAFT)
    assert spec is not None
    assert spec.k_at_batch_size(1000) == 4
    with pytest.raises(ValueError, match="at least 1"):
        spec.k_at_batch_size(0)
