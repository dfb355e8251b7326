"""Input that cannot break the rules: no spelling of a reserved flag, no case name that leaves data/runs, no
boolean, NaN or negative number, no load listed twice."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from vllm_playbooks.config.engine import EngineConfig, reserved_flag
from vllm_playbooks.errors import ConfigError, SchemaError
from vllm_playbooks.results.store import case_dir
from vllm_playbooks.run.plan import plan_from_dict

ENGINE = {"label": "off", "model": "llama-3.1-8b", "max_model_len": 2048}


def _case(**changes: Any) -> dict[str, Any]:
    loads = {"input_len": 8, "output_len": 8, "concurrency": [1, 4], **changes.pop("loads", {})}
    return {"case": "t", "engines": [{**ENGINE, **changes.pop("engine", {})}], "loads": loads, **changes}


@pytest.mark.parametrize(
    "arg",
    [
        "--host",
        "--host=0.0.0.0",
        "--hos",
        "--ho",
        "--port=8001",
        "--po",
        "--model",
        "--model=/other",
        "--mod",
        "--uds",
        "--config",
        "--speculative_config",
        "--speculative-config={}",
        "--speculative-model",
    ],
)
def test_every_spelling_of_a_reserved_flag_is_refused(arg: str) -> None:
    assert reserved_flag(arg) is not None
    with pytest.raises(ValueError, match="extra_args may not set --"):
        EngineConfig(**ENGINE, extra_args=(arg, "x"))


@pytest.mark.parametrize(
    "arg",
    [
        "--max-num-seqs",
        "--model-impl",
        "--enforce-eager",
        "-O3",
        "--async-scheduling",
        "--compilation-config",
        "0.0.0.0",
    ],
)
def test_other_flags_pass(arg: str) -> None:
    assert reserved_flag(arg) is None


@pytest.mark.parametrize("name", ["../../escaped", "/abs/path", "a/b", "..", ".hidden", "", "x y"])
def test_a_case_name_is_a_plain_folder_name(name: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="case name"):
        plan_from_dict(_case(case=name))
    if name and ("/" in name or name.startswith(".")):
        with pytest.raises(SchemaError, match="not a folder name"):
            case_dir(name, tmp_path)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"loads": {"concurrency": [1, True, 4]}}, "bad load"),
        ({"loads": {"concurrency": [1, 1, 4]}}, "the load in8-out8-rr0.5-c1 is listed more than once"),
        ({"loads": {"concurrency": [1, -4]}}, "bad load"),
        ({"loads": {"concurrency": [1.5]}}, "bad load"),
        ({"loads": {"request_rate_qps": [math.nan]}}, "bad load"),
        ({"loads": {"request_rate_qps": [math.inf]}}, "bad load"),
        ({"loads": {"random_range_ratio": [0.5, 0.5]}}, "the load in8-out8-rr0.5-c1 is listed more than once"),
        ({"repeats": True}, "repeats must be a whole number"),
        ({"repeats": 0}, "repeats must be a whole number"),
        ({"repeats": 2.5}, "repeats must be a whole number"),
        ({"min_duration_s": math.nan}, "min_duration_s must be a number > 0"),
        ({"min_duration_s": -1}, "min_duration_s must be a number > 0"),
        ({"gpu_memory_gib": math.nan}, "gpu_memory_gib must be a number > 0"),
        ({"gpu_memory_gib": False}, "gpu_memory_gib must be a number > 0"),
    ],
)
def test_bad_numbers_and_duplicate_loads_are_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        plan_from_dict(_case(**changes))


def test_the_same_case_with_good_numbers_passes() -> None:
    plan = plan_from_dict(_case(repeats=2, min_duration_s=30, gpu_memory_gib=139.8))
    # a closed loop that names no length spread draws lengths within ±50 %
    assert [load.slug() for load in plan.loads] == ["in8-out8-rr0.5-c1", "in8-out8-rr0.5-c4"] and plan.repeats == 2
