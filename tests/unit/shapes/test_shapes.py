"""Shapes and the packaged tokenizer: every shape loads and names its source, lookups fail with clear messages."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from vllm_playbooks.errors import ConfigError
from vllm_playbooks.shapes import SHAPES_DIR, TOKENIZER_DIR, ModelShape, get_shape, list_shapes, resolve_model

EXPECTED_SHAPES = {
    "llama-3.1-8b",
    "llama-3.2-1b",
    "llama-3.2-3b",
    "llama-3.3-70b",
    "llama-3.3-70b-awq",
    "llama-3.2-3b-awq",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "gpt-oss-120b-eagle3",
    "gpt-oss-120b-eagle3-131k",
    "deepseek-v3",
    "deepseek-v3-reduced",
    "deepseek-v3-fit80",
    "deepseek-v3-v2lite-scale",
    "mimo-7b",
    "tiny-llama",
}
DEEPSEEK = ["deepseek-v3", "deepseek-v3-reduced", "deepseek-v3-fit80", "deepseek-v3-v2lite-scale"]
URL = re.compile(r"https://\S+")


def tokenizer_max_id() -> int:
    """Highest id in the packaged tokenizer.json, read with the stdlib only (no ``tokenizers`` here)."""
    spec = json.loads((TOKENIZER_DIR / "tokenizer.json").read_text(encoding="utf-8"))
    ids = list(spec["model"]["vocab"].values()) + [tok["id"] for tok in spec["added_tokens"]]
    return max(ids)


def test_list_shapes_is_the_documented_set() -> None:
    assert set(list_shapes()) == EXPECTED_SHAPES
    assert list_shapes() == sorted(list_shapes())


@pytest.mark.parametrize("name", sorted(EXPECTED_SHAPES))
def test_every_shape_loads(name: str) -> None:
    shape = get_shape(name)
    config = shape.config()
    assert isinstance(shape, ModelShape)
    assert shape.name == name
    assert shape.path == SHAPES_DIR / name
    for key in ("architectures", "model_type", "torch_dtype", "vocab_size"):
        assert key in config, f"{name}/config.json lacks {key}"
    assert shape.architecture == config["architectures"][0]
    assert shape.model_type == config["model_type"]
    assert shape.torch_dtype == config["torch_dtype"]
    assert shape.torch_dtype in {"bfloat16", "float16", "float32"}
    assert shape.vocab_size == config["vocab_size"]
    assert shape.num_hidden_layers == config["num_hidden_layers"] >= 1
    assert shape.hidden_size == config["hidden_size"] >= 1


@pytest.mark.parametrize("name", sorted(EXPECTED_SHAPES))
def test_every_shape_has_a_source_that_names_a_url(name: str) -> None:
    text = (SHAPES_DIR / name / "SOURCE.md").read_text(encoding="utf-8")
    assert URL.search(text), f"{name}/SOURCE.md names no URL"
    shape = get_shape(name)
    assert shape.source and not shape.source.startswith("#")
    assert shape.source == text.splitlines()[0].lstrip("#").strip()


def test_config_returns_a_fresh_copy() -> None:
    shape = get_shape("tiny-llama")
    shape.config()["vocab_size"] = 1
    assert shape.config()["vocab_size"] == 32000


def test_unknown_shape_lists_the_known_names() -> None:
    with pytest.raises(ConfigError) as info:
        get_shape("llama-70b")
    message = str(info.value)
    assert message.startswith("Unknown shape 'llama-70b'. Known: ")
    assert message.endswith("Shapes live in vllm_playbooks/shapes/.")
    for name in EXPECTED_SHAPES:
        assert name in message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("name", ["", ".", "..", "llama-3.1-8b/", "../shapes/llama-3.1-8b", "__pycache__", "tokenizer"])
def test_a_name_that_is_no_listed_shape_is_not_a_shape(name: str) -> None:
    assert name not in list_shapes()
    with pytest.raises(ConfigError, match="Unknown shape"):
        get_shape(name)


def test_resolve_model_takes_a_shape_name() -> None:
    assert resolve_model("llama-3.2-1b") == get_shape("llama-3.2-1b")


def test_resolve_model_takes_a_user_model_directory(tmp_path: Path) -> None:
    folder = tmp_path / "my-model"
    folder.mkdir()
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "torch_dtype": "bfloat16",
        "vocab_size": 151936,
        "num_hidden_layers": 28,
        "hidden_size": 1536,
        "quantization_config": {"quant_method": "gptq", "bits": 4},
    }
    (folder / "config.json").write_text(json.dumps(config))
    for arg in (str(folder), folder):
        shape = resolve_model(arg)
        assert shape.name == "my-model"
        assert shape.path == folder.resolve()
        assert shape.architecture == "Qwen2ForCausalLM"
        assert shape.vocab_size == 151936
        assert shape.num_hidden_layers == 28
        assert shape.quantization == "gptq"
        assert shape.num_mtp_layers == 0
        assert shape.source == str(folder.resolve())
        assert shape.config() == config


def test_resolve_model_reads_nested_text_config_and_dtype_alias(tmp_path: Path) -> None:
    config = {
        "architectures": ["SomeVLMForConditionalGeneration"],
        "model_type": "some_vlm",
        "dtype": "bfloat16",
        "text_config": {"vocab_size": 262144, "num_hidden_layers": 34, "hidden_size": 2560},
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    shape = resolve_model(tmp_path)
    assert (shape.vocab_size, shape.num_hidden_layers, shape.hidden_size) == (262144, 34, 2560)
    assert shape.torch_dtype == "bfloat16"
    assert shape.quantization is None


def test_resolve_model_refuses_a_missing_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(ConfigError, match="neither a known shape nor an existing directory") as info:
        resolve_model(str(missing))
    assert "tiny-llama" in str(info.value)


def test_resolve_model_refuses_a_file(tmp_path: Path) -> None:
    file = tmp_path / "config.json"
    file.write_text("{}")
    with pytest.raises(ConfigError, match="is a file, not a model directory"):
        resolve_model(str(file))


def test_resolve_model_refuses_a_directory_without_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="without a config.json"):
        resolve_model(str(tmp_path))


LLAMA_BITS = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
SIZES = {"vocab_size": 10, "num_hidden_layers": 1, "hidden_size": 8}


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        (json.dumps({"model_type": "llama", **SIZES}), "architectures"),
        (json.dumps({"architectures": ["LlamaForCausalLM"], **SIZES}), "model_type"),
        (json.dumps({**LLAMA_BITS, "num_hidden_layers": 1, "hidden_size": 8}), "vocab_size"),
        (json.dumps({**LLAMA_BITS, **SIZES, "num_nextn_predict_layers": -1}), "num_nextn_predict_layers"),
    ],
)
def test_resolve_model_refuses_a_broken_config(tmp_path: Path, content: str, match: str) -> None:
    (tmp_path / "config.json").write_text(content)
    with pytest.raises(ConfigError, match=match):
        resolve_model(str(tmp_path))


def test_tokenizer_fits_every_shape() -> None:
    max_id = tokenizer_max_id()
    assert max_id == 3071
    for name in list_shapes():
        assert max_id < get_shape(name).vocab_size, name


def test_tokenizer_files_name_special_tokens_that_exist() -> None:
    spec = json.loads((TOKENIZER_DIR / "tokenizer.json").read_text(encoding="utf-8"))
    config = json.loads((TOKENIZER_DIR / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    vocab = spec["model"]["vocab"]
    for key in ("bos_token", "eos_token", "unk_token"):
        assert config[key] in vocab, key
    assert spec["model"]["type"] == "BPE"
    assert spec["pre_tokenizer"]["type"] == "ByteLevel"
    assert spec["decoder"]["type"] == "ByteLevel"
    assert (TOKENIZER_DIR / "README.md").is_file()


@pytest.mark.parametrize("name", DEEPSEEK)
def test_deepseek_shapes_have_one_mtp_layer(name: str) -> None:
    shape = get_shape(name)
    assert shape.num_mtp_layers == 1
    assert shape.model_type == "deepseek_v3"
    assert shape.architecture == "DeepseekV3ForCausalLM"


@pytest.mark.parametrize("name", DEEPSEEK)
def test_deepseek_routing_groups_stay_valid(name: str) -> None:
    config = get_shape(name).config()
    experts, groups = config["n_routed_experts"], config["n_group"]
    assert experts > groups and experts % groups == 0
    per_group = experts // groups
    assert config["topk_group"] * per_group >= config["num_experts_per_tok"]


def test_deepseek_reduced_differs_from_deepseek_v3_only_in_routed_experts() -> None:
    full = get_shape("deepseek-v3").config()
    reduced = get_shape("deepseek-v3-reduced").config()
    assert full["n_routed_experts"] == 256 and reduced["n_routed_experts"] == 32
    assert {k for k in full.keys() | reduced.keys() if full.get(k) != reduced.get(k)} == {"n_routed_experts"}
    assert full["num_hidden_layers"] == 61 and full["hidden_size"] == 7168
    assert full["quantization_config"]["weight_block_size"] == [128, 128]
    assert get_shape("deepseek-v3-reduced").quantization == "fp8"


def test_deepseek_fit80_differs_from_deepseek_v3_only_in_routed_experts() -> None:
    """The 80 GB shape keeps every dimension of one token's step (8 routed + 1 shared expert of width 2048, MLA,
    61 layers + MTP) and has 16 routed experts, the fewest its 8 routing groups allow."""
    full = get_shape("deepseek-v3").config()
    fit = get_shape("deepseek-v3-fit80").config()
    assert fit["n_routed_experts"] == 16 == 2 * fit["n_group"]
    assert {k for k in full.keys() | fit.keys() if full.get(k) != fit.get(k)} == {"n_routed_experts"}


def test_deepseek_v2lite_scale_is_bf16_at_v2_lite_size() -> None:
    shape = get_shape("deepseek-v3-v2lite-scale")
    config = shape.config()
    assert shape.quantization is None and shape.torch_dtype == "bfloat16"
    assert (shape.num_hidden_layers, shape.hidden_size, config["n_routed_experts"]) == (27, 2048, 64)
    assert config["q_lora_rank"] is None and config["kv_lora_rank"] == 512


def test_mimo_has_its_mtp_layer() -> None:
    shape = get_shape("mimo-7b")
    assert shape.architecture == "MiMoForCausalLM"
    assert shape.num_mtp_layers == 1


@pytest.mark.parametrize("name", ["llama-3.3-70b-awq", "llama-3.2-3b-awq"])
def test_awq_shapes(name: str) -> None:
    shape = get_shape(name)
    quant = shape.config()["quantization_config"]
    assert shape.quantization == "awq"
    assert (quant["bits"], quant["group_size"]) == (4, 128)
    assert shape.torch_dtype == "float16"


@pytest.mark.parametrize("name", ["gpt-oss-20b", "gpt-oss-120b"])
def test_gpt_oss_shapes_are_mxfp4(name: str) -> None:
    shape = get_shape(name)
    assert shape.quantization == "mxfp4"
    assert shape.architecture == "GptOssForCausalLM"
    assert shape.vocab_size == 201088


def test_gpt_oss_sizes() -> None:
    small, large = get_shape("gpt-oss-20b").config(), get_shape("gpt-oss-120b").config()
    assert (small["num_hidden_layers"], small["num_local_experts"]) == (24, 32)
    assert (large["num_hidden_layers"], large["num_local_experts"]) == (36, 128)
    for config in (small, large):
        assert len(config["layer_types"]) == config["num_hidden_layers"]
    types = get_shape("gpt-oss-120b").attention_types()
    assert types[:2] == ["sliding_attention", "full_attention"] and types.count("sliding_attention") == 18
    assert set(get_shape("llama-3.1-8b").attention_types()) == {"full_attention"}  # no layer_types: all full


def test_eagle3_head_matches_its_target() -> None:
    head, target = get_shape("gpt-oss-120b-eagle3"), get_shape("gpt-oss-120b")
    config = head.config()
    assert head.architecture == "LlamaForCausalLMEagle3"
    assert head.num_hidden_layers == 1
    assert head.hidden_size == target.hidden_size
    assert head.vocab_size == target.vocab_size
    layer_ids = config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert all(0 <= i < target.num_hidden_layers for i in layer_ids)


def test_draft_llama_shares_the_target_vocabulary() -> None:
    assert get_shape("llama-3.2-1b").vocab_size == get_shape("llama-3.1-8b").vocab_size == 128256


def test_tiny_llama_is_the_documented_toy() -> None:
    config = get_shape("tiny-llama").config()
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["num_hidden_layers"], config["hidden_size"], config["intermediate_size"]) == (2, 128, 512)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (4, 2)
    assert (config["vocab_size"], config["max_position_embeddings"]) == (32000, 2048)
    assert "made up for tests" in get_shape("tiny-llama").source


def test_llama_70b_bf16_is_the_awq_shape_unquantized() -> None:
    bf16, awq = get_shape("llama-3.3-70b"), get_shape("llama-3.3-70b-awq")
    assert bf16.quantization is None and bf16.torch_dtype == "bfloat16"
    a, b = bf16.config(), awq.config()
    changed = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    assert changed == {"quantization_config", "torch_dtype", "use_cache"}


def test_llama_70b_bf16_does_not_fit_one_h200() -> None:
    from vllm_playbooks.config.capacity import GIB
    from vllm_playbooks.config.sizes import weight_bytes

    # 70.55 B parameters × 2 bytes = 131.4 GiB: above the 139.8 GiB × 0.9 one H200 gives vLLM
    assert weight_bytes(get_shape("llama-3.3-70b")) == 2 * 70_553_706_496
    assert weight_bytes(get_shape("llama-3.3-70b")) / GIB > 0.9 * 139.8


def test_vllm_gets_a_path_that_names_only_the_shape(tmp_path: Path) -> None:
    from vllm_playbooks.shapes import VLLM_NAME_MARKERS, vllm_path

    shape = get_shape("deepseek-v3-reduced")
    served = vllm_path(shape, create=True)
    assert served.name == "deepseek-v3-reduced" and served.is_symlink()
    assert served.resolve() == shape.path.resolve()
    assert not any(marker in str(served).lower() for marker in VLLM_NAME_MARKERS)
    assert vllm_path(shape, create=True) == served  # idempotent
    own = tmp_path / "my-eagle3-model"
    own.mkdir()
    (own / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "vocab_size": 10,
                "num_hidden_layers": 1,
                "hidden_size": 8,
            }
        )
    )
    assert vllm_path(resolve_model(str(own))) == own.resolve()  # a user's folder is passed as it is


def test_a_stale_link_is_replaced(tmp_path: Path) -> None:
    from vllm_playbooks.shapes import vllm_path

    shape = get_shape("tiny-llama")
    served = vllm_path(shape)
    served.parent.mkdir(parents=True, exist_ok=True)
    if served.is_symlink():
        served.unlink()
    served.symlink_to(tmp_path, target_is_directory=True)
    assert vllm_path(shape, create=True).resolve() == shape.path.resolve()


def test_the_long_context_eagle3_head_differs_only_in_its_positions() -> None:
    short = get_shape("gpt-oss-120b-eagle3").config()
    long = get_shape("gpt-oss-120b-eagle3-131k").config()
    assert {k for k in short if short[k] != long[k]} == {"max_position_embeddings"}
    assert (short["max_position_embeddings"], long["max_position_embeddings"]) == (4096, 131072)
