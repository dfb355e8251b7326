"""The inputs the speculative-config cross-check puts to this package and to vLLM 0.26 (``run.crosscheck``).

Each case is what a user would type: a target model, ``--tensor-parallel-size``, a ``--speculative-config`` mapping in
vLLM's own field names and, where the case probes them, the batch and memory flags.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class CrossCheckCase(BaseModel):
    """One user input: the target, its tensor parallelism and the ``--speculative-config`` mapping."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    target: str = Field(description="shape name of the target model")
    speculative: dict[str, Any] = Field(description="the --speculative-config mapping, vLLM field names")
    tensor_parallel_size: int = Field(1, ge=1)
    max_model_len: int = Field(2048, ge=16)
    engine: dict[str, Any] = Field(
        default_factory=dict,
        description="further server arguments, vLLM's names: max_num_seqs, max_num_batched_tokens, "
        "gpu_memory_utilization",
    )
    why: str = Field(description="what the case probes")


def _case(label: str, target: str, spec: dict[str, Any], why: str, tp: int = 1, **engine: Any) -> CrossCheckCase:
    return CrossCheckCase(label=label, target=target, speculative=spec, tensor_parallel_size=tp, why=why, engine=engine)


DRAFT = {"method": "draft_model", "model": "llama-3.2-1b", "num_speculative_tokens": 4}

CASES: tuple[CrossCheckCase, ...] = (
    _case("draft-ok", "llama-3.1-8b", DRAFT, "a plain draft model"),
    _case(
        "draft-tp-key",
        "llama-3.1-8b",
        {**DRAFT, "tensor_parallel_size": 1},
        "tensor_parallel_size instead of draft_tensor_parallel_size",
    ),
    _case("draft-temperature", "llama-3.1-8b", {**DRAFT, "temperature": 0.7}, "a sampling parameter in the config"),
    _case("draft-top-p", "llama-3.1-8b", {**DRAFT, "top_p": 0.9}, "a sampling parameter in the config"),
    _case(
        "draft-tp2-on-tp1", "llama-3.1-8b", {**DRAFT, "draft_tensor_parallel_size": 2}, "draft TP above the target's"
    ),
    _case(
        "draft-tp1-on-tp2",
        "llama-3.1-8b",
        {**DRAFT, "draft_tensor_parallel_size": 1},
        "draft TP 1 under a TP=2 target",
        tp=2,
    ),
    _case(
        "draft-tp2-on-tp2",
        "llama-3.1-8b",
        {**DRAFT, "draft_tensor_parallel_size": 2},
        "draft TP equal to the target's",
        tp=2,
    ),
    _case("draft-k0", "llama-3.1-8b", {**DRAFT, "num_speculative_tokens": 0}, "k = 0"),
    _case(
        "draft-no-model",
        "llama-3.1-8b",
        {"method": "draft_model", "num_speculative_tokens": 4},
        "draft_model without a model",
    ),
    _case(
        "draft-no-k",
        "llama-3.1-8b",
        {"method": "draft_model", "model": "llama-3.2-1b"},
        "num_speculative_tokens omitted",
    ),
    _case("draft-bad-quant", "llama-3.1-8b", {**DRAFT, "quantization": "int3"}, "an unknown quantization"),
    _case(
        "draft-bad-sample", "llama-3.1-8b", {**DRAFT, "draft_sample_method": "top_k"}, "an unknown draft_sample_method"
    ),
    _case("draft-eager", "llama-3.1-8b", {**DRAFT, "enforce_eager": True}, "an eager drafter"),
    _case(
        "draft-long-len",
        "llama-3.1-8b",
        {**DRAFT, "max_model_len": 4096},
        "draft max_model_len above the target's 2048",
    ),
    _case("draft-unknown-method", "llama-3.1-8b", {**DRAFT, "method": "medusa2"}, "a misspelt method"),
    _case(
        "draft-schedule",
        "llama-3.1-8b",
        {**DRAFT, "num_speculative_tokens_per_batch_size": [[1, 16, 4], [17, 256, 0]]},
        "speculation off above 16 requests",
    ),
    _case(
        "draft-schedule-k-too-big",
        "llama-3.1-8b",
        {**DRAFT, "num_speculative_tokens_per_batch_size": [[1, 16, 6]]},
        "a schedule asking more than k",
    ),
    _case(
        "draft-synthetic",
        "llama-3.1-8b",
        {**DRAFT, "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.8, 0.64, 0.51, 0.41]},
        "imposed acceptance, k rates",
    ),
    _case(
        "draft-synthetic-short",
        "llama-3.1-8b",
        {**DRAFT, "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.8, 0.64]},
        "imposed acceptance with fewer rates than k",
    ),
    _case(
        "draft-synthetic-above-1",
        "llama-3.1-8b",
        {**DRAFT, "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [1.2, 0.64, 0.51, 0.41]},
        "a rate above 1",
    ),
    _case(
        "draft-synthetic-length",
        "llama-3.1-8b",
        {**DRAFT, "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 3.0},
        "imposed mean acceptance length",
    ),
    _case(
        "draft-rates-without-synthetic",
        "llama-3.1-8b",
        {**DRAFT, "synthetic_acceptance_rates": [0.8, 0.64, 0.51, 0.41]},
        "rates without rejection_sample_method synthetic",
    ),
    _case(
        "ngram-ok",
        "llama-3.1-8b",
        {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4},
        "n-gram lookup",
    ),
    _case(
        "ngram-min-above-max",
        "llama-3.1-8b",
        {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 5, "prompt_lookup_max": 2},
        "prompt_lookup_min above prompt_lookup_max",
    ),
    _case(
        "ngram-as-model",
        "llama-3.1-8b",
        {"model": "[ngram]", "num_speculative_tokens": 3},
        "the old model='[ngram]' spelling",
    ),
    _case(
        "ngram-suffix-field",
        "llama-3.1-8b",
        {"method": "ngram", "num_speculative_tokens": 3, "suffix_decoding_min_token_prob": 0.2},
        "a suffix-only field on ngram",
    ),
    _case("suffix-ok", "llama-3.1-8b", {"method": "suffix", "num_speculative_tokens": 8}, "suffix decoding"),
    _case(
        "suffix-bad-prob",
        "llama-3.1-8b",
        {"method": "suffix", "num_speculative_tokens": 8, "suffix_decoding_min_token_prob": 1.5},
        "a probability above 1",
    ),
    _case(
        "eagle3-ok",
        "gpt-oss-120b",
        {"method": "eagle3", "model": "gpt-oss-120b-eagle3", "num_speculative_tokens": 3},
        "an EAGLE3 head",
    ),
    _case(
        "eagle3-inferred",
        "gpt-oss-120b",
        {"model": "gpt-oss-120b-eagle3", "num_speculative_tokens": 3},
        "method omitted: inferred from 'eagle3' in the path",
    ),
    _case(
        "eagle3-parallel-drafting",
        "gpt-oss-120b",
        {"method": "eagle3", "model": "gpt-oss-120b-eagle3", "num_speculative_tokens": 3, "parallel_drafting": True},
        "parallel drafting with EAGLE3",
    ),
    _case("mtp-k1", "deepseek-v3", {"method": "mtp", "num_speculative_tokens": 1}, "DeepSeek MTP, the start"),
    _case("mtp-k2", "deepseek-v3", {"method": "mtp", "num_speculative_tokens": 2}, "k = 2 reruns the one MTP layer"),
    _case(
        "mtp-parallel-drafting",
        "deepseek-v3",
        {"method": "mtp", "num_speculative_tokens": 1, "parallel_drafting": True},
        "parallel drafting with MTP",
    ),
    _case(
        "mtp-on-llama",
        "llama-3.1-8b",
        {"method": "mtp", "num_speculative_tokens": 1},
        "MTP on a model without MTP layers",
    ),
    _case("mtp-mimo", "mimo-7b", {"method": "mtp", "num_speculative_tokens": 1}, "MiMo's MTP layer"),
    _case(
        "mtp-inferred",
        "deepseek-v3",
        {"model": "deepseek-v3", "num_speculative_tokens": 1},
        "method omitted, the target itself as model",
    ),
    _case("empty", "llama-3.1-8b", {}, "an empty mapping"),
    _case("k-only", "llama-3.1-8b", {"num_speculative_tokens": 3}, "neither method nor model"),
    # The inputs of issue 43: configs vLLM 0.26 accepts that this package used to refuse, and one it let through.
    _case(
        "suffix-k32",
        "llama-3.1-8b",
        {"method": "suffix", "num_speculative_tokens": 32},
        "suffix decoding's documented k=32 (above 16)",
    ),
    _case("suffix-no-k", "llama-3.1-8b", {"method": "suffix"}, "suffix without k: vLLM takes the tree depth"),
    _case("mtp-no-k", "deepseek-v3", {"method": "mtp"}, "mtp without k and without a model"),
    _case(
        "mtp-no-k-model",
        "deepseek-v3",
        {"method": "mtp", "model": "deepseek-v3"},
        "mtp without k, the target as model: k from its MTP layers",
    ),
    _case("draft-k17", "llama-3.1-8b", {**DRAFT, "num_speculative_tokens": 17}, "k = 17, above 16"),
    _case("gpu-mem-1", "llama-3.1-8b", DRAFT, "gpu_memory_utilization 1.0", gpu_memory_utilization=1.0),
    _case(
        "draft-slots-use-budget",
        "llama-3.1-8b",
        DRAFT,
        "draft slots use up the token budget (256 tokens, 256 sequences)",
        max_num_seqs=256,
        max_num_batched_tokens=256,
    ),
    _case("draft-k-true", "llama-3.1-8b", {**DRAFT, "num_speculative_tokens": True}, "k given as a boolean"),
    # Edge cases around the same rules.
    _case(
        "draft-slots-one-left",
        "llama-3.1-8b",
        DRAFT,
        "one token left after the draft slots (257 for 256)",
        max_num_seqs=256,
        max_num_batched_tokens=257,
    ),
    _case(
        "eagle3-slots-equal-budget",
        "gpt-oss-120b",
        {"method": "eagle3", "model": "gpt-oss-120b-eagle3", "num_speculative_tokens": 3},
        "EAGLE3 takes no draft slot: 256 tokens for 256 sequences",
        max_num_seqs=256,
        max_num_batched_tokens=256,
    ),
    _case(
        "ngram-k20",
        "llama-3.1-8b",
        {"method": "ngram", "num_speculative_tokens": 20, "prompt_lookup_max": 4},
        "n-gram lookup with k = 20",
    ),
    _case(
        "eagle3-k24",
        "gpt-oss-120b",
        {"method": "eagle3", "model": "gpt-oss-120b-eagle3", "num_speculative_tokens": 24},
        "EAGLE3 with k = 24",
    ),
    _case(
        "suffix-no-k-depth8",
        "llama-3.1-8b",
        {"method": "suffix", "suffix_decoding_max_tree_depth": 8},
        "suffix without k, tree depth 8",
    ),
    _case(
        "mtp-k3-model",
        "deepseek-v3",
        {"method": "mtp", "model": "deepseek-v3", "num_speculative_tokens": 3},
        "mtp k = 3 with the target as model",
    ),
    _case("draft-k-string", "llama-3.1-8b", {**DRAFT, "num_speculative_tokens": "4"}, "k given as the string '4'"),
    _case("draft-k-float", "llama-3.1-8b", {**DRAFT, "num_speculative_tokens": 2.5}, "k given as 2.5"),
    _case("draft-k-negative", "llama-3.1-8b", {**DRAFT, "num_speculative_tokens": -1}, "k = -1"),
    _case("gpu-mem-above-1", "llama-3.1-8b", DRAFT, "gpu_memory_utilization 1.01", gpu_memory_utilization=1.01),
    _case("gpu-mem-tiny", "llama-3.1-8b", DRAFT, "gpu_memory_utilization 0.05", gpu_memory_utilization=0.05),
    _case(
        "tokens-below-seqs",
        "llama-3.1-8b",
        DRAFT,
        "a token budget below max_num_seqs (128 for 256)",
        max_num_seqs=256,
        max_num_batched_tokens=128,
    ),
    _case(
        "suffix-synthetic-no-k",
        "llama-3.1-8b",
        {"method": "suffix", "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 3.0},
        "imposed acceptance length on suffix without k",
    ),
)
