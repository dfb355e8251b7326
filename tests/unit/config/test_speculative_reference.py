"""speculative_config against vLLM 0.26's rules: field ranges, method inference, advisories, emitters, target checks.

Each expectation comes from vLLM 0.26's ``config/speculative.py`` and ``config/vllm.py``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from vllm_playbooks.config.engine import EngineConfig, check_engine_against_shapes
from vllm_playbooks.config.spec_detection import (
    MTP_MODEL_TYPES,
    SpeculativeConfigWarning,
    draft_type_after_override,
    inferred_method,
)
from vllm_playbooks.config.spec_target import check_against_target, target_advisories
from vllm_playbooks.config.speculative import SpeculativeConfig, build_speculative_config
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.shapes import SHAPES_DIR, get_shape, resolve_model

DRAFT = {"method": "draft_model", "model": "llama-3.2-1b", "num_speculative_tokens": 4}
NGRAM = {"method": "ngram", "num_speculative_tokens": 3}
SUFFIX = {"method": "suffix", "num_speculative_tokens": 8}
EAGLE3 = {"method": "eagle3", "model": "gpt-oss-120b-eagle3", "num_speculative_tokens": 3}
MTP = {"method": "mtp", "num_speculative_tokens": 1}


def _quiet(spec: dict[str, Any]) -> SpeculativeConfig:
    """Build without letting advisories reach the test output."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpeculativeConfigWarning)
        built = build_speculative_config(spec)
    assert built is not None
    return built


def _no_warnings(spec: dict[str, Any]) -> SpeculativeConfig:
    """Build and fail on any SpeculativeConfigWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpeculativeConfigWarning)
        built = build_speculative_config(spec)
    assert built is not None
    return built


def _model_dir(root: Path, name: str, **config: Any) -> Path:
    """A model folder holding only a config.json with the fields resolve_model needs, plus ``config``."""
    folder = root / name
    folder.mkdir(parents=True)
    body = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": 128256,
        "num_hidden_layers": 2,
        "hidden_size": 256,
        **config,
    }
    (folder / "config.json").write_text(json.dumps(body))
    return folder


def _deepseek_dir(root: Path, name: str, **changes: Any) -> Path:
    config = json.loads((SHAPES_DIR / "deepseek-v3" / "config.json").read_text())
    config.update(changes)
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


# ----------------------------------------------------------------------------------------------------------------
# Field ranges and the fields' own rules
# ----------------------------------------------------------------------------------------------------------------

BAD_FIELDS: list[tuple[dict[str, Any], str]] = [
    ({**DRAFT, "max_model_len": 0}, "max_model_len: Input should be greater than or equal to 1"),
    ({**DRAFT, "quantization": "int3"}, "quantization 'int3' is not one of vLLM 0.26's quantization methods"),
    ({**DRAFT, "draft_sample_method": "top_k"}, "draft_sample_method: Input should be 'greedy' or 'probabilistic'"),
    ({**DRAFT, "parallel_drafting": "sometimes"}, "parallel_drafting: Input should be a valid boolean"),
    ({**DRAFT, "enforce_eager": "sometimes"}, "enforce_eager: Input should be a valid boolean"),
    (
        {**SUFFIX, "suffix_decoding_max_tree_depth": 0},
        "suffix_decoding_max_tree_depth: Input should be greater than or equal to 1",
    ),
    (
        {**SUFFIX, "suffix_decoding_max_cached_requests": -1},
        "suffix_decoding_max_cached_requests: Input should be greater than or equal to 0",
    ),
    (
        {**SUFFIX, "suffix_decoding_max_spec_factor": -0.5},
        "suffix_decoding_max_spec_factor: Input should be greater than or equal to 0",
    ),
    (
        {**SUFFIX, "suffix_decoding_min_token_prob": 1.5},
        "suffix_decoding_min_token_prob: Input should be less than or equal to 1",
    ),
    (
        {**SUFFIX, "suffix_decoding_min_token_prob": -0.1},
        "suffix_decoding_min_token_prob: Input should be greater than or equal to 0",
    ),
    (
        {**NGRAM, "suffix_decoding_min_token_prob": 0.2},
        "suffix_decoding_min_token_prob apply to method 'suffix' only, not 'ngram'",
    ),
    (
        {**DRAFT, "suffix_decoding_max_tree_depth": 12},
        "suffix_decoding_max_tree_depth apply to method 'suffix' only, not 'draft_model'",
    ),
    ({**NGRAM, "quantization": "fp8"}, "quantization applies to a draft model, and method 'ngram' has none"),
    ({**SUFFIX, "max_model_len": 1024}, "max_model_len applies to a draft model, and method 'suffix' has none"),
    ({**MTP, "parallel_drafting": True}, "parallel_drafting works with eagle, eagle3 and draft_model only, not 'mtp'"),
    (
        {**NGRAM, "parallel_drafting": True},
        "parallel_drafting works with eagle, eagle3 and draft_model only, not 'ngram'",
    ),
    ({**DRAFT, "num_speculative_tokens_per_batch_size": []}, "num_speculative_tokens_per_batch_size must not be empty"),
    ({"num_speculative_tokens": 3}, "give a 'method' or a draft 'model'"),
    (
        {"model": "z-lab/Qwen3-8B-DFlash-b16", "num_speculative_tokens": 3},
        "runs model 'z-lab/Qwen3-8B-DFlash-b16' as method 'dflash'",
    ),
    ({"model": "my_pkg.MyProposer", "num_speculative_tokens": 3}, "as a custom proposer class (method 'custom_class')"),
]


@pytest.mark.parametrize(("spec", "expected"), BAD_FIELDS, ids=[f"field{i}" for i in range(len(BAD_FIELDS))])
def test_bad_field_is_refused_with_its_message(spec: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as error, warnings.catch_warnings():
        warnings.simplefilter("ignore", SpeculativeConfigWarning)
        build_speculative_config(spec)
    assert str(error.value).startswith("Bad speculative_config")
    assert expected in str(error.value)


def test_new_fields_take_vllm_defaults() -> None:
    spec = _no_warnings({"method": "eagle3", "model": "gpt-oss-120b-eagle3", "num_speculative_tokens": 3})
    assert spec.max_model_len is None and spec.quantization is None and spec.enforce_eager is None
    assert spec.draft_sample_method == "greedy" and spec.parallel_drafting is False
    assert (spec.suffix_decoding_max_tree_depth, spec.suffix_decoding_max_cached_requests) == (24, 10000)
    assert (spec.suffix_decoding_max_spec_factor, spec.suffix_decoding_min_token_prob) == (1.0, 0.1)


def test_suffix_fields_and_range_edges_are_accepted_with_suffix() -> None:
    spec = _quiet(
        {
            **SUFFIX,
            "suffix_decoding_max_tree_depth": 1,
            "suffix_decoding_max_cached_requests": 0,
            "suffix_decoding_max_spec_factor": 0.0,
            "suffix_decoding_min_token_prob": 1.0,
        }
    )
    assert spec.suffix_decoding_max_cached_requests == 0 and spec.suffix_decoding_min_token_prob == 1.0


def test_every_field_is_documented() -> None:
    undocumented = [name for name, field in SpeculativeConfig.model_fields.items() if not field.description]
    assert undocumented == []


def test_quantization_accepts_vllm_names_for_a_draft() -> None:
    spec = _quiet({**DRAFT, "quantization": "fp8", "max_model_len": 2048})
    assert spec.quantization == "fp8" and spec.max_model_len == 2048


# ----------------------------------------------------------------------------------------------------------------
# Method inference
# ----------------------------------------------------------------------------------------------------------------

INFERRED: list[tuple[dict[str, Any], str]] = [
    ({"model": "gpt-oss-120b-eagle3"}, "eagle3"),  # the shape's path holds "eagle3"
    ({"model": "yuhuili/EAGLE-LLaMA3-Instruct-8B"}, "eagle"),  # vLLM looks for "eagle-"
    ({"model": "AngelSlim/Qwen3-8B_eagle3"}, "eagle3"),
    ({"model": "someone/llama_eagle_head"}, "draft_model"),  # "eagle" without the hyphen is not enough for vLLM
    ({"model": "deepseek-v3"}, "mtp"),  # deepseek_v3 becomes deepseek_mtp in hf_config_override
    ({"model": "mimo-7b"}, "mtp"),  # MiMoForCausalLM becomes mimo_mtp
    ({"model": "llama-3.2-1b"}, "draft_model"),
    ({"model": "meta-llama/Llama-3.2-1B"}, "draft_model"),  # a hub id: judged by its name only
    ({"model": "ngram"}, "ngram"),
    ({"model": "[ngram]"}, "ngram"),
    ({"model": "pkg.Proposer"}, "custom_class"),
    ({}, "draft_model"),  # neither method nor model: vLLM assumes draft_model, then refuses
    ({"method": "suffix"}, "suffix"),
]


@pytest.mark.parametrize(("spec", "expected"), INFERRED, ids=[f"infer{i}" for i in range(len(INFERRED))])
def test_method_is_inferred_as_vllm_does(spec: dict[str, Any], expected: str) -> None:
    assert inferred_method({**spec, "num_speculative_tokens": 1}) == expected


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"model_type": "medusa", "architectures": ["MedusaModel"]}, "medusa"),
        ({"model_type": "mlp_speculator", "architectures": ["MLPSpeculatorPreTrainedModel"]}, "mlp_speculator"),
        ({"model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"]}, "mtp"),
        ({"model_type": "deepseek_mtp", "architectures": ["DeepSeekMTPModel"]}, "mtp"),
        ({"model_type": "qwen2", "architectures": ["Glm4MoeForCausalLM"]}, "mtp"),
        ({"model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"], "num_nextn_predict_layers": 1}, "mtp"),
        ({"model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"]}, "draft_model"),
        ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, "draft_model"),
    ],
    ids=["medusa", "mlp", "qwen3next", "deepseekmtp", "glm4moe", "nemotron-mtp", "nemotron-plain", "llama"],
)
def test_method_is_inferred_from_a_folders_model_type(tmp_path: Path, config: dict[str, Any], expected: str) -> None:
    folder = _model_dir(tmp_path, "draft", **config)
    assert inferred_method({"model": str(folder), "num_speculative_tokens": 1}) == expected


def test_the_model_carries_the_inferred_method_and_emits_it() -> None:
    spec = _quiet({"model": "gpt-oss-120b-eagle3", "num_speculative_tokens": 3})
    assert spec.method == "eagle3"
    assert json.loads(spec.to_cli_json())["method"] == "eagle3"
    mtp = _quiet({"model": "deepseek-v3", "num_speculative_tokens": 1})
    assert (mtp.method, mtp.model) == ("mtp", "deepseek-v3")


def test_ngram_as_model_name_becomes_method_ngram_without_a_model() -> None:
    spec = _quiet({"model": "[ngram]", "num_speculative_tokens": 3, "prompt_lookup_max": 4})
    assert (spec.method, spec.model, spec.prompt_lookup_max) == ("ngram", None, 4)


def test_a_folder_with_a_broken_config_is_reported_not_guessed(tmp_path: Path) -> None:
    folder = tmp_path / "draft"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ConfigError, match="needs 'architectures'"):
        build_speculative_config({"model": str(folder), "num_speculative_tokens": 2})


@pytest.mark.parametrize("mtp_type", ["deepseek_mtp", "qwen3_next_mtp", "glm4_moe_mtp", "inkling_mtp"])
def test_an_mtp_model_type_as_method_is_rewritten_to_mtp(mtp_type: str) -> None:
    pattern = rf"method '{mtp_type}' is deprecated in vLLM 0.26, which rewrites it to 'mtp'"
    with pytest.warns(SpeculativeConfigWarning, match=pattern):
        spec = build_speculative_config({"method": mtp_type, "num_speculative_tokens": 1})
    assert spec is not None and spec.method == "mtp"
    assert json.loads(spec.to_cli_json()) == {"method": "mtp", "num_speculative_tokens": 1}


def test_mtp_itself_is_not_rewritten_and_the_list_matches_vllm() -> None:
    _no_warnings(MTP)
    assert len(MTP_MODEL_TYPES) == 21 and "mtp" in MTP_MODEL_TYPES and "deepseek_v3" not in MTP_MODEL_TYPES


def test_override_view_gives_the_mtp_layer_count() -> None:
    assert draft_type_after_override(get_shape("deepseek-v3").config()) == ("deepseek_mtp", 1)
    assert draft_type_after_override({"model_type": "qwen3_5", "mtp_num_hidden_layers": 2}) == ("qwen3_5_mtp", 2)
    mimo_v2 = {"model_type": "x", "architectures": ["MiMoV2FlashForCausalLM"]}
    assert draft_type_after_override(mimo_v2) == ("mimo_v2_mtp", 1)  # vLLM uses the first MiMo-V2 layer only
    assert draft_type_after_override({"model_type": "llama"}) == ("llama", None)


# ----------------------------------------------------------------------------------------------------------------
# Advisories: warnings and advisories() give the same sentences
# ----------------------------------------------------------------------------------------------------------------

ADVISED: list[tuple[dict[str, Any], str]] = [
    (
        {**MTP, "num_speculative_tokens": 3},
        r"method 'mtp' with num_speculative_tokens=3 > 1 runs the same MTP layer k times .* acceptance may drop",
    ),
    (DRAFT, r"method 'draft_model' turns vLLM 0.26's async scheduling off by default; pass --async-scheduling"),
    (
        NGRAM,
        r"method 'ngram' \(the CPU n-gram drafter\) turns vLLM 0.26's async scheduling off .* 'ngram_gpu' keeps it on",
    ),
    (
        {"method": "medusa", "model": "llama-3.2-1b", "num_speculative_tokens": 2},
        r"method 'medusa' turns vLLM 0.26's async scheduling off",
    ),
    (SUFFIX, r"method 'suffix' turns vLLM 0.26's async scheduling off"),
    (DRAFT, r"reserves 1 token slot\(s\) per sequence .* max_num_batched_tokens - 1 x max_num_seqs"),
    ({**EAGLE3, "parallel_drafting": True}, r"method 'eagle3' with parallel_drafting reserves 2 token slot\(s\)"),
    (
        {**DRAFT, "num_speculative_tokens_per_batch_size": [[1, 16, 4], [17, 256, 0]]},
        r"forces PIECEWISE CUDA graphs on vLLM 0.26's V1 model runner",
    ),
    (
        {**EAGLE3, "enforce_eager": True},
        r"enforce_eager=True runs the eagle3 drafter without CUDA graphs .*the target keeps its graphs",
    ),
    ({**NGRAM, "enforce_eager": True}, r"enforce_eager has no effect with method 'ngram'"),
    (
        {**DRAFT, "acceptance_alpha": 0.8, "draft_sample_method": "probabilistic"},
        r"'probabilistic' does not change acceptance under rejection_sample_method 'synthetic'",
    ),
    (SUFFIX, r"method 'suffix' needs the arctic-inference package"),
]


@pytest.mark.parametrize(("spec", "pattern"), ADVISED, ids=[f"advice{i}" for i in range(len(ADVISED))])
def test_each_advisory_is_warned_and_listed(spec: dict[str, Any], pattern: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpeculativeConfigWarning)  # the other advisories, re-emitted by pytest.warns
        with pytest.warns(SpeculativeConfigWarning, match=pattern) as record:
            built = build_speculative_config(spec)
    assert built is not None
    assert [str(w.message) for w in record if w.category is SpeculativeConfigWarning] == built.advisories()


@pytest.mark.parametrize(
    "spec",
    [MTP, EAGLE3, {"method": "ngram_gpu", "num_speculative_tokens": 3}, {**EAGLE3, "enforce_eager": False}],
    ids=["mtp-k1", "eagle3", "ngram_gpu", "eager-false"],
)
def test_quiet_configs_have_no_advisories(spec: dict[str, Any]) -> None:
    assert _no_warnings(spec).advisories() == []


def test_handing_a_built_config_to_an_engine_does_not_warn_again() -> None:
    spec = _quiet(DRAFT)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpeculativeConfigWarning)
        engine = EngineConfig(label="x", model="llama-3.1-8b", max_model_len=2048, speculative=spec)
    assert engine.speculative is spec


def test_a_config_read_back_inside_an_engine_or_with_the_context_flag_does_not_warn() -> None:
    stored = {"label": "x", "model": "llama-3.1-8b", "max_model_len": 2048, "speculative": DRAFT}
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpeculativeConfigWarning)
        engine = EngineConfig.model_validate(stored)  # how recorded configs are re-read
        quiet = SpeculativeConfig.model_validate(DRAFT, context={"advisories": False})
    assert engine.speculative == quiet
    assert quiet.advisories()[0].startswith("method 'draft_model' turns vLLM 0.26's async scheduling off")


def test_an_invalid_config_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpeculativeConfigWarning)
        with pytest.raises(ConfigError, match="prompt_lookup_min/max apply to ngram only"):
            build_speculative_config({**DRAFT, "prompt_lookup_max": 3})


def test_scheduler_budget_follows_the_draft_slots() -> None:
    assert _quiet(DRAFT).max_num_scheduled_tokens(8192, 256) == 8192 - 256
    assert _quiet({**DRAFT, "parallel_drafting": True}).draft_slots_per_sequence == 4  # (k-1) + 1
    assert _quiet(EAGLE3).max_num_scheduled_tokens(8192, 1024) == 8192
    with pytest.raises(ConfigError, match="max_num_scheduled_tokens would be 0"):
        _quiet(DRAFT).max_num_scheduled_tokens(256, 256)


# ----------------------------------------------------------------------------------------------------------------
# Emitters and round trips
# ----------------------------------------------------------------------------------------------------------------

ROUND_TRIP: list[dict[str, Any]] = [
    {**DRAFT, "acceptance_alpha": 0.8, "num_speculative_tokens_per_batch_size": [[1, 16, 4], [17, 1024, 0]]},
    {
        **EAGLE3,
        "parallel_drafting": True,
        "draft_sample_method": "probabilistic",
        "quantization": "fp8",
        "max_model_len": 4096,
        "enforce_eager": True,
        "draft_tensor_parallel_size": 1,
    },
    {
        **SUFFIX,
        "suffix_decoding_max_tree_depth": 32,
        "suffix_decoding_max_spec_factor": 2.5,
        "suffix_decoding_min_token_prob": 0.05,
        "suffix_decoding_max_cached_requests": 0,
    },
    {**NGRAM, "prompt_lookup_min": 2, "prompt_lookup_max": 5},
    {"model": "deepseek-v3", "num_speculative_tokens": 2},
    {**MTP, "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 1.5},
]


@pytest.mark.parametrize("spec", ROUND_TRIP, ids=["draft", "eagle3", "suffix", "ngram", "inferred-mtp", "mtp-length"])
def test_json_yaml_and_dict_round_trip_to_an_equal_config(spec: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpeculativeConfigWarning)
        original = SpeculativeConfig.from_python(spec)
        assert SpeculativeConfig.from_cli_json(original.to_cli_json()) == original
        assert SpeculativeConfig.from_yaml(original.to_yaml()) == original
        assert SpeculativeConfig.from_yaml(original.to_yaml(under_key=False)) == original
        assert SpeculativeConfig.from_python(original.to_python()) == original
    assert json.loads(original.to_cli_json()) == original.to_python()
    assert yaml.safe_load(original.to_yaml()) == {"speculative_config": original.to_python()}


def test_yaml_is_sorted_and_omits_vllm_defaults() -> None:
    spec = _quiet({**NGRAM, "prompt_lookup_max": 4, "draft_sample_method": "greedy"})
    assert spec.to_yaml() == (
        "speculative_config:\n  method: ngram\n  num_speculative_tokens: 3\n  prompt_lookup_max: 4\n"
    )
    assert spec.to_cli_json() == '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}'


def test_non_default_new_fields_are_emitted() -> None:
    spec = _quiet({**SUFFIX, "suffix_decoding_min_token_prob": 0.3})
    assert spec.to_python() == {"method": "suffix", "num_speculative_tokens": 8, "suffix_decoding_min_token_prob": 0.3}


def test_yaml_with_the_dashed_key_and_a_resolver() -> None:
    spec = _quiet(DRAFT)
    text = "speculative-config:\n  method: draft_model\n  model: llama-3.2-1b\n  num_speculative_tokens: 4\n"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpeculativeConfigWarning)
        assert SpeculativeConfig.from_yaml(text) == spec
    emitted = yaml.safe_load(spec.to_yaml(lambda name: f"/shapes/{name}"))
    assert emitted["speculative_config"]["model"] == "/shapes/llama-3.2-1b"


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda: SpeculativeConfig.from_cli_json("{method: ngram"), "--speculative-config is not valid JSON"),
        (lambda: SpeculativeConfig.from_cli_json("null"), "speculative_config is empty (null)"),
        (lambda: SpeculativeConfig.from_yaml("speculative_config: [1, 2]"), "must be a mapping, got list"),
        (lambda: SpeculativeConfig.from_yaml("method: ngram\nnum_speculative_tokens: 0\n"), "num_speculative_tokens"),
        (lambda: SpeculativeConfig.from_yaml("a: [b"), "speculative_config: cannot read 'a: [b' as YAML"),
    ],
    ids=["bad-json", "null", "list", "bad-k", "bad-yaml"],
)
def test_parsers_refuse_bad_text(call: Any, expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        call()
    assert expected in str(error.value)


# ----------------------------------------------------------------------------------------------------------------
# check_against_target
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "target", "tp", "expected"),
    [
        (
            {**DRAFT, "draft_tensor_parallel_size": 2},
            "llama-3.1-8b",
            4,
            "draft_tensor_parallel_size=2 must be 1 or the target's tensor_parallel_size=4",
        ),
        (
            {**DRAFT, "draft_tensor_parallel_size": 1},
            "llama-3.1-8b",
            2,
            "method 'draft_model' needs draft_tensor_parallel_size equal to the target's tensor_parallel_size=2",
        ),
        (
            MTP,
            "llama-3.1-8b",
            1,
            "method 'mtp' needs a target with MTP layers; llama-3.1-8b has num_nextn_predict_layers=0",
        ),
        (
            {**MTP, "model": "llama-3.2-1b"},
            "llama-3.1-8b",
            1,
            "method 'mtp' needs a draft with MTP layers; llama-3.2-1b",
        ),
        ({**DRAFT, "model": "gpt-oss-20b"}, "llama-3.1-8b", 1, "draft_model needs the target's vocabulary"),
        (
            {"method": "mlp_speculator", "model": "llama-3.2-1b", "num_speculative_tokens": 2},
            "llama-3.1-8b",
            1,
            "\"Unsupported speculative method: 'mlp_speculator'\"",
        ),
        (
            {**DRAFT, "parallel_drafting": True},
            "llama-3.1-8b",
            1,
            "parallel_drafting needs a draft trained for it: llama-3.2-1b's config.json has no pard_token",
        ),
        (
            {**DRAFT, "max_model_len": 4096},
            "llama-3.1-8b",
            1,
            "speculative max_model_len=4096 cannot be larger than the target's max_model_len=2048",
        ),
        (DRAFT, "llama-70b", 1, "'llama-70b' is neither a known shape"),
    ],
    ids=[
        "draft-tp",
        "draft-model-tp",
        "mtp-no-layers",
        "mtp-draft-no-layers",
        "vocab",
        "mlp-mismatch",
        "pard",
        "max-len",
        "unknown",
    ],
)
def test_check_against_target_refusals(spec: dict[str, Any], target: str, tp: int, expected: str) -> None:
    built = _quiet(spec)
    with pytest.raises(ConfigError) as error, warnings.catch_warnings():
        warnings.simplefilter("ignore", SpeculativeConfigWarning)
        check_against_target(built, target, tp, target_max_model_len=2048)
    assert expected in str(error.value)


def test_mtp_k_must_divide_the_layer_count_when_larger(tmp_path: Path) -> None:
    target = _deepseek_dir(tmp_path, "two-layer-target", num_nextn_predict_layers=2)
    for k in (1, 2, 4, 6):
        check_against_target(_quiet({**MTP, "num_speculative_tokens": k}), str(target), 1)
    with pytest.raises(ConfigError, match="num_speculative_tokens=3 must be divisible by the MTP layer count 2"):
        check_against_target(_quiet({**MTP, "num_speculative_tokens": 3}), str(target), 1)


def test_mtp_layers_of_a_separate_draft_are_used(tmp_path: Path) -> None:
    draft = _deepseek_dir(tmp_path, "mtp-draft", num_nextn_predict_layers=2)
    spec = _quiet({"method": "mtp", "model": str(draft), "num_speculative_tokens": 3})
    with pytest.raises(ConfigError, match="divisible by the MTP layer count 2 of mtp-draft"):
        check_against_target(spec, "llama-3.1-8b", 1)


def test_mtp_on_a_model_type_vllm_cannot_draft_for(tmp_path: Path) -> None:
    target = _model_dir(tmp_path, "llama-with-layers", num_nextn_predict_layers=1)
    with pytest.raises(ConfigError, match="vLLM 0.26 has no MTP drafter for llama-with-layers"):
        check_against_target(_quiet(MTP), str(target), 1)


def test_draft_path_that_vllm_reads_as_eagle_is_refused(tmp_path: Path) -> None:
    draft = _model_dir(tmp_path, "my-eagle-head")
    pattern = "would run draft my-eagle-head as method 'eagle', not 'draft_model'.*set method: eagle"
    with pytest.raises(ConfigError, match=pattern):
        check_against_target(_quiet({**DRAFT, "model": str(draft)}), "llama-3.1-8b", 1)


def test_parallel_drafting_passes_with_a_pard_token(tmp_path: Path) -> None:
    draft = _model_dir(tmp_path, "pard-draft", pard_token=128255)
    check_against_target(_quiet({**DRAFT, "model": str(draft), "parallel_drafting": True}), "llama-3.1-8b", 1)


def test_deepseek_v32_target_warns_that_the_drafter_runs_eager(tmp_path: Path) -> None:
    spec = _no_warnings(MTP)
    pattern = r"a deepseek_v32 target makes vLLM 0.26 force enforce_eager=True on its MTP drafter"
    with pytest.warns(SpeculativeConfigWarning, match=pattern):
        check_against_target(spec, "deepseek-v3", 1, model_type="deepseek_v32")
    target = _deepseek_dir(tmp_path, "v32", model_type="deepseek_v32")
    with pytest.warns(SpeculativeConfigWarning, match=pattern):
        check_against_target(spec, resolve_model(str(target)), 1)  # a ModelShape works too
    assert len(target_advisories(spec, str(target), 1)) == 1
    assert target_advisories(spec, "deepseek-v3", 1) == []  # a deepseek_v3 target keeps the drafter's graphs
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpeculativeConfigWarning)
        check_against_target(spec, "deepseek-v3", 1)


def test_mlp_speculator_with_a_tp_target_is_told_its_draft_runs_tp1(tmp_path: Path) -> None:
    draft = _model_dir(
        tmp_path, "speculator", model_type="mlp_speculator", architectures=["MLPSpeculatorPreTrainedModel"]
    )
    spec = _quiet({"model": str(draft), "num_speculative_tokens": 3})
    assert spec.method == "mlp_speculator"
    with pytest.warns(SpeculativeConfigWarning, match="mlp_speculator cannot run with tensor parallelism in vLLM 0.26"):
        check_against_target(spec, "llama-3.1-8b", 2)


def test_engine_check_delegates_to_check_against_target(tmp_path: Path) -> None:
    target = _deepseek_dir(tmp_path, "v32-engine", model_type="deepseek_v32")
    engine = EngineConfig(label="x", model=str(target), max_model_len=2048, speculative=_quiet(MTP))
    with pytest.warns(SpeculativeConfigWarning, match="force enforce_eager=True on its MTP drafter"):
        check_engine_against_shapes(engine)
    too_long = EngineConfig(
        label="x", model="llama-3.1-8b", max_model_len=2048, speculative=_quiet({**DRAFT, "max_model_len": 4096})
    )
    with pytest.raises(ConfigError, match="cannot be larger than the target's max_model_len=2048"):
        check_engine_against_shapes(too_long)


def test_a_stored_config_validates_again() -> None:
    """Rows store ``resolved()``, every field with its default: reading one back must not trip the field rules."""
    engine = EngineConfig(
        label="e", model="llama-3.1-8b", max_model_len=2048, speculative=_quiet({**DRAFT, "acceptance_alpha": 0.7})
    )
    again = EngineConfig.model_validate(json.loads(json.dumps(engine.resolved())))
    assert again.config_id() == engine.config_id()
