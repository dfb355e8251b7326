"""The duration rule and load validation."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from vllm_playbooks.config.load import LoadPoint


def test_closed_loop_takes_the_larger_of_the_two_rules() -> None:
    load = LoadPoint(input_len=512, output_len=128, concurrency=64)
    assert load.measured_prompts(calibrated_rps=1.0) == 640  # 10 × concurrency beats 1.1 × 1 × 30 = 33
    assert load.measured_prompts(calibrated_rps=40.0) == 1320  # 1.1 × 40 × 30 beats 640
    assert load.measured_prompts(calibrated_rps=None) == 640


def test_open_loop_runs_rate_times_duration() -> None:
    assert LoadPoint(input_len=8, output_len=8, request_rate_qps=2.0).measured_prompts(None) == 60
    assert LoadPoint(input_len=8, output_len=8, request_rate_qps=1.0, concurrency=8).measured_prompts(None) == 80


def test_warmup_is_two_per_slot_at_least_eight() -> None:
    assert LoadPoint(input_len=8, output_len=8, concurrency=1).warmup_prompts() == 8
    assert LoadPoint(input_len=8, output_len=8, concurrency=64).warmup_prompts() == 128


@pytest.mark.parametrize(
    "kwargs",
    [
        {"input_len": 8, "output_len": 8},  # no load at all
        {"input_len": 8, "output_len": 8, "concurrency": 0},
        {"input_len": 8, "output_len": 8, "concurrency": -4},
        {"input_len": 0, "output_len": 8, "concurrency": 1},
        {"input_len": 8, "output_len": 8, "request_rate_qps": 0},
        {"input_len": 8, "output_len": 8, "concurrency": 1, "burstiness": 0},
        {"input_len": 8, "output_len": 8, "concurrency": 1, "temperature": -1},
    ],
)
def test_bad_load_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        LoadPoint(**kwargs)


def test_slug_names_every_load_dimension() -> None:
    assert LoadPoint(input_len=512, output_len=128, concurrency=16, random_range_ratio=0.0).slug() == "in512-out128-c16"
    assert LoadPoint(input_len=8, output_len=8, request_rate_qps=2, burstiness=0.5).slug() == "in8-out8-qps2-b0.5"
    assert LoadPoint(input_len=8, output_len=8, concurrency=4, temperature=0).slug() == "in8-out8-rr0.5-c4-t0"
    assert LoadPoint(input_len=512, output_len=128, concurrency=16, random_range_ratio=0.5).slug() == (
        "in512-out128-rr0.5-c16"
    )


@pytest.mark.parametrize("ratio", [-0.1, 1.0])
def test_a_length_spread_outside_zero_to_one_is_refused(ratio: float) -> None:
    with pytest.raises(ValidationError):
        LoadPoint(input_len=8, output_len=8, concurrency=1, random_range_ratio=ratio)


def test_the_length_spread_reaches_bench_serve() -> None:
    from pathlib import Path

    from vllm_playbooks.load.bench import bench_argv

    def ratio_of(load: LoadPoint) -> str:
        argv = bench_argv(
            load,
            base_url="http://x",
            model="m",
            tokenizer="t",
            num_prompts=1,
            result_dir=Path("."),
            result_filename="r.json",
        )
        return argv[argv.index("--random-range-ratio") + 1]

    assert ratio_of(LoadPoint(input_len=8, output_len=8, concurrency=1, random_range_ratio=0.0)) == "0.0"
    assert ratio_of(LoadPoint(input_len=8, output_len=8, concurrency=1, random_range_ratio=0.25)) == "0.25"


def test_a_list_of_length_spreads_measures_each_level_under_each() -> None:
    from vllm_playbooks.run.plan import plan_from_dict

    spec = {
        "case": "t",
        "engines": [{"label": "off", "model": "llama-3.1-8b", "max_model_len": 2048}],
        "loads": {"input_len": 512, "output_len": 128, "concurrency": [1, 16], "random_range_ratio": [0.0, 0.5]},
    }
    slugs = [load.slug() for load in plan_from_dict(spec).loads]
    assert slugs == ["in512-out128-c1", "in512-out128-rr0.5-c1", "in512-out128-c16", "in512-out128-rr0.5-c16"]
    fixed = plan_from_dict(spec, random_range_ratio=0.0).loads
    assert [load.slug() for load in fixed] == ["in512-out128-c1", "in512-out128-c16"]


def test_a_closed_loop_draws_its_lengths_unless_told_and_an_open_loop_keeps_them_fixed() -> None:
    from vllm_playbooks.config.load import CLOSED_LOOP_RANGE_RATIO

    closed = LoadPoint(input_len=512, output_len=128, concurrency=16)
    assert closed.random_range_ratio == CLOSED_LOOP_RANGE_RATIO == 0.5 and closed.slug() == "in512-out128-rr0.5-c16"
    assert LoadPoint(input_len=512, output_len=128, concurrency=16, random_range_ratio=0.0).slug() == "in512-out128-c16"
    assert LoadPoint(input_len=8, output_len=8, request_rate_qps=2.0).random_range_ratio == 0.0
    assert LoadPoint(input_len=8, output_len=8, request_rate_qps=2.0, concurrency=4).random_range_ratio == 0.0


def test_the_longest_request_is_the_top_of_both_spreads() -> None:
    assert LoadPoint(input_len=512, output_len=128, concurrency=1, random_range_ratio=0.0).longest_request() == 640
    assert LoadPoint(input_len=512, output_len=128, concurrency=1, random_range_ratio=0.5).longest_request() == 960
    assert LoadPoint(input_len=5, output_len=3, concurrency=1, random_range_ratio=0.5).longest_request() == 8 + 5


def test_a_plan_refuses_a_spread_whose_longest_request_does_not_fit() -> None:
    from vllm_playbooks.errors import ConfigError
    from vllm_playbooks.run.plan import plan_from_dict

    spec = {
        "case": "t",
        "engines": [{"label": "off", "model": "llama-3.1-8b", "max_model_len": 2048}],
        "loads": {"input_len": 1240, "output_len": 128, "concurrency": [1]},
    }
    with pytest.raises(ConfigError, match=r"longest request's input \+ output = 2052 \(lengths within ±50 %\) exceeds"):
        plan_from_dict(spec)
    assert plan_from_dict({**spec, "loads": {**spec["loads"], "random_range_ratio": 0.0}}).loads[0].slug() == (
        "in1240-out128-c1"
    )


def test_every_packaged_case_keeps_the_fixed_lengths_its_rows_were_measured_with() -> None:
    from vllm_playbooks.config.case_file import grid_names
    from vllm_playbooks.run.plan import load_plan

    for case in grid_names():
        ratios = {point.load.random_range_ratio for point in load_plan(case).points()}
        assert 0.0 in ratios, case
        assert ratios <= {0.0} or case == "load-desync", (case, ratios)
