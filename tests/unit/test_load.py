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
    assert LoadPoint(input_len=512, output_len=128, concurrency=16).slug() == "in512-out128-c16"
    assert LoadPoint(input_len=8, output_len=8, request_rate_qps=2, burstiness=0.5).slug() == "in8-out8-qps2-b0.5"
    assert LoadPoint(input_len=8, output_len=8, concurrency=4, temperature=0).slug() == "in8-out8-c4-t0"
