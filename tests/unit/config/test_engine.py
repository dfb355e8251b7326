"""``max_model_len`` above what vLLM 0.26 derives from the model's config (``max_position_embeddings``, scaled by a
RoPE factor for the RoPE types vLLM scales) is refused before any GPU time, unless the engine's env sets
``VLLM_ALLOW_LONG_MAX_MODEL_LEN``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vllm_playbooks.config.case_file import grid_names
from vllm_playbooks.config.engine import (
    ROUTING_SIMULATION_ENV,
    EngineConfig,
    check_engine_against_shapes,
    lacks_routing_simulation,
)
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.run.plan import load_plan, plan_from_dict
from vllm_playbooks.shapes import get_shape, resolve_model

LOADS = {"input_len": 8, "output_len": 8, "concurrency": [1]}


def _case(max_model_len: int, **engine: Any) -> dict[str, Any]:
    return {
        "case": "t",
        "engines": [{"label": "base", "model": "tiny-llama", "max_model_len": max_model_len, **engine}],
        "loads": LOADS,
    }


def test_max_model_len_above_the_shapes_maximum_is_refused() -> None:
    assert get_shape("tiny-llama").config()["max_position_embeddings"] == 2048
    with pytest.raises(ConfigError):
        plan_from_dict(_case(4096))
    with pytest.raises(ConfigError):
        check_engine_against_shapes(EngineConfig(label="base", model="tiny-llama", max_model_len=2049))


def test_the_shapes_maximum_itself_passes() -> None:
    assert plan_from_dict(_case(2048)).engines[0].max_model_len == 2048


@pytest.mark.parametrize("value", ["1", "true", "True"])
def test_vllms_allow_long_variable_lets_it_through(value: str) -> None:
    plan = plan_from_dict(_case(4096, env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": value}))
    assert plan.engines[0].max_model_len == 4096


def test_the_variable_set_to_0_refuses() -> None:
    with pytest.raises(ConfigError):
        plan_from_dict(_case(4096, env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "0"}))


def _folder(tmp_path: Path, **changes: Any) -> Path:
    config = {**get_shape("tiny-llama").config(), **changes}
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    ("changes", "limit"),
    [
        ({"max_position_embeddings": 1024}, 1024),
        ({"rope_scaling": {"rope_type": "linear", "factor": 4.0}}, 8192),  # vLLM scales by the factor
        ({"rope_scaling": {"type": "yarn", "factor": 8.0, "original_max_position_embeddings": 512}}, 4096),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 512}}, 2048),
        ({"n_positions": 1024}, 1024),  # the smallest of the keys vLLM reads
    ],
)
def test_the_derived_maximum_follows_vllm(changes: dict[str, Any], limit: int, tmp_path: Path) -> None:
    folder = _folder(tmp_path, **changes)
    assert resolve_model(str(folder)).max_model_len() == limit
    check_engine_against_shapes(EngineConfig(label="base", model=str(folder), max_model_len=limit))
    with pytest.raises(ConfigError):
        check_engine_against_shapes(EngineConfig(label="base", model=str(folder), max_model_len=limit + 1))


def test_a_config_without_any_length_key_is_not_limited(tmp_path: Path) -> None:
    config = {k: v for k, v in get_shape("tiny-llama").config().items() if k != "max_position_embeddings"}
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert resolve_model(str(tmp_path)).max_model_len() is None


@pytest.mark.parametrize("case", grid_names())
def test_every_packaged_case_still_loads(case: str) -> None:
    assert load_plan(case).engines


def test_only_a_dummy_moe_engine_without_routing_simulation_lacks_it() -> None:
    moe = {"label": "x", "model": "deepseek-v3-reduced", "max_model_len": 2048}
    assert lacks_routing_simulation(EngineConfig(**moe))
    assert not lacks_routing_simulation(EngineConfig(**moe, env={ROUTING_SIMULATION_ENV: "uniform_random"}))
    assert not lacks_routing_simulation(EngineConfig(**moe, load_format="auto"))
    assert not lacks_routing_simulation(EngineConfig(label="d", model="llama-3.1-8b", max_model_len=2048))
