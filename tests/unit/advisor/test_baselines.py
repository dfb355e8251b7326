"""The baselines (the searches tuners run today) on synthetic grids whose answer is known: which points each pays
for, in which order, at what price, what it answers, and where the budget stops it."""

from __future__ import annotations

import math

import pandas as pd

from tests.unit.advisor.grids import frame, row, startups
from vllm_playbooks.advisor.baselines import (
    BASELINES,
    GUIDELLM_SWEEP_SIZE,
    auto_tune,
    exhaustive_sweep,
    guidellm_sweep,
)
from vllm_playbooks.advisor.goodput import Slo
from vllm_playbooks.advisor.oracle import RecordedOracle
from vllm_playbooks.advisor.search import Step

LOADS = (1, 4, 16, 64)
SLO = Slo(tpot_p99_ms=7.0)


def _two_configs() -> pd.DataFrame:
    """a meets 7 ms up to 16 clients (18 req/s there, the grid best), b up to 4 (4 req/s): 40 GPU-s a run."""
    a = [row("a", c, t, r) for c, t, r in zip(LOADS, (5.0, 5.2, 6.6, 12.0), (1.5, 5.8, 18.0, 39.0), strict=True)]
    b = [row("b", c, t, r) for c, t, r in zip(LOADS, (5.0, 5.3, 9.0, 20.0), (1.2, 4.0, 10.0, 25.0), strict=True)]
    return frame(a + b)


def _oracle(rows: pd.DataFrame, budget_gpu_s: float = 10_000.0) -> RecordedOracle:
    return RecordedOracle(rows, startups(rows), budget_gpu_s=budget_gpu_s)


def _paid(advice_steps: list[Step]) -> list[str]:
    return [step.point for step in advice_steps]


def test_the_exhaustive_sweep_pays_every_point_once_and_answers_the_grid_best() -> None:
    rows = _two_configs()
    oracle = _oracle(rows)
    advice = exhaustive_sweep(oracle, SLO)
    assert _paid(advice.steps) == [f"{c} @ c{n}" for c in "ab" for n in LOADS]
    assert advice.chosen is not None and advice.chosen["point"] == "a @ c16" and advice.chosen["goodput_rps"] == 18.0
    assert advice.runner_up is not None and advice.runner_up["point"] == "b @ c4"
    assert advice.spent_gpu_s == 8 * 40.0 + 2 * 100.0 and advice.stop_reason == "done"
    # one run each: 18 req/s over 4 is a lead far beyond the 5 % floor of the noise band
    assert advice.sure == "lead beyond noise" and advice.lead_pct == 350.0 and advice.band_pct == 5.0


def test_the_exhaustive_sweep_stops_at_the_first_point_its_budget_cannot_pay() -> None:
    rows = _two_configs()
    advice = exhaustive_sweep(_oracle(rows, budget_gpu_s=300.0), SLO)  # a's start-up and four runs: 260 GPU-s
    assert _paid(advice.steps) == [f"a @ c{n}" for n in LOADS] and advice.stop_reason == "budget"
    assert advice.chosen is not None and advice.chosen["point"] == "a @ c16" and advice.runner_up is None
    assert advice.sure == "not compared" and math.isnan(advice.lead_pct)


def test_auto_tune_steps_each_config_down_from_its_highest_load_to_the_first_that_meets_the_slo() -> None:
    rows = _two_configs()
    oracle = _oracle(rows)
    advice = auto_tune(oracle, SLO)
    assert _paid(advice.steps) == ["a @ c64", "a @ c16", "b @ c64", "b @ c16", "b @ c4"]
    assert advice.chosen is not None and advice.chosen["point"] == "a @ c16"
    assert advice.runner_up is not None and advice.runner_up["point"] == "b @ c4"
    assert advice.spent_gpu_s == 5 * 40.0 + 2 * 100.0 == oracle.spent_gpu_s


def test_auto_tune_answers_nothing_where_no_load_meets_the_slo() -> None:
    advice = auto_tune(_oracle(_two_configs()), Slo(tpot_p99_ms=4.0))
    assert len(advice.steps) == 8 and advice.chosen is None and advice.sure == "nothing measured meets the SLO"


def _one_config_eight_loads(last_met: int) -> pd.DataFrame:
    """One config at 1 … 128 clients, its throughput the concurrency (req/s), meeting 7 ms up to ``last_met``."""
    loads = (1, 2, 4, 8, 16, 32, 64, 128)
    return frame([row("a", c, 6.0 if c <= last_met else 9.0, float(c)) for c in loads])


def test_the_guidellm_sweep_measures_both_ends_then_the_loads_nearest_evenly_spaced_rates() -> None:
    # rates evenly spaced between 1 and 128 req/s: 16.9, 32.8, 48.6, 64.5, 80.4, 96.3, 112.1, 128 land on 16, 32,
    # 64, 64, 64, 128, 128 and 128 clients; 2, 4 and 8 clients lie between synchronous and the first rate
    rows = _one_config_eight_loads(last_met=16)
    advice = guidellm_sweep(_oracle(rows), SLO)
    assert _paid(advice.steps) == ["a @ c1", "a @ c128", "a @ c16", "a @ c32", "a @ c64"]
    assert advice.chosen is not None and advice.chosen["point"] == "a @ c16"
    assert GUIDELLM_SWEEP_SIZE == 10 and advice.steps[2].why == "guidellm sweep: constant 16.88 req/s"


def test_the_guidellm_sweep_misses_a_best_load_between_its_rates() -> None:
    rows = _one_config_eight_loads(last_met=8)  # the grid best is 8 clients, which the sweep never measures
    advice = guidellm_sweep(_oracle(rows), SLO)
    assert "a @ c8" not in _paid(advice.steps)
    assert advice.chosen is not None and advice.chosen["point"] == "a @ c1" and advice.chosen["goodput_rps"] == 1.0


def test_the_guidellm_sweep_lands_request_rates_on_the_nearest_recorded_rate() -> None:
    rates = (1.0, 2.0, 4.0, 8.0)
    rows = frame(
        [
            {
                **row("a", 1, 6.0, min(r, 6.0)),
                "concurrency": float("nan"),
                "request_rate_qps": r,
                "measured_at": f"2026-12-01T00:00:{i:02d}+00:00",
            }
            for i, r in enumerate(rates)
        ]
    )
    advice = guidellm_sweep(_oracle(rows), Slo(tpot_p99_ms=7.0))
    # throughputs 1 and 6 req/s at the ends: rates 1.6 … 6 land on 2, 4 and 8 req/s; every rate is measured
    assert _paid(advice.steps) == ["a @ 1 req/s", "a @ 8 req/s", "a @ 2 req/s", "a @ 4 req/s"]
    assert advice.chosen is not None and advice.chosen["point"] == "a @ 8 req/s"


def test_every_baseline_pays_through_the_oracle_at_its_prices() -> None:
    rows = _two_configs()
    for name, policy in BASELINES.items():
        oracle = _oracle(rows)
        advice = policy(oracle, SLO)
        assert advice.spent_gpu_s == oracle.spent_gpu_s == sum(s.gpu_s for s in advice.steps), name
        assert len(oracle.payments) == len(advice.steps) == len(set(_paid(advice.steps))), name
