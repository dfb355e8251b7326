"""The advisor's model: a roofline prior, refitted on the points paid for, and the calculator's verdict."""

from __future__ import annotations

import json
import math

import pytest

from tests.unit.advisor.grids import engine_json, row
from vllm_playbooks.advisor.predict import (
    PRIOR_UNCERTAINTY,
    RATIOS,
    engine_of,
    fits_gpu,
    prior,
    refit,
)
from vllm_playbooks.hardware import datasheet_gpu

GPU = datasheet_gpu("nvidia-h200-x1-vllm0.26.0")


def _line(config: str, concurrency: float, engine: str | None = None, rate: float = math.nan) -> dict[str, object]:
    return {
        **row(config, 1 if math.isnan(concurrency) else int(concurrency), 1.0, 1.0, engine=engine),
        "concurrency": concurrency,
        "request_rate_qps": rate,
    }


def test_the_prior_slows_each_token_and_serves_more_requests_as_the_batch_grows() -> None:
    low, high = prior(_line("a", 1), GPU), prior(_line("a", 64), GPU)
    assert (
        high["tpot_p99_ms"] > low["tpot_p99_ms"] and high["request_throughput_rps"] > 10 * low["request_throughput_rps"]
    )


def test_the_prior_credits_speculation_at_batch_one_by_its_acceptance() -> None:
    off = prior(_line("off", 1), GPU)["tpot_p99_ms"]
    good = prior(_line("d", 1, engine_json("d", draft="llama-3.2-1b", k=4, alpha=0.9)), GPU)["tpot_p99_ms"]
    poor = prior(_line("d", 1, engine_json("d", draft="llama-3.2-1b", k=4, alpha=0.2)), GPU)["tpot_p99_ms"]
    assert good < off < poor


def test_at_a_request_rate_the_prior_serves_no_more_than_the_rate() -> None:
    assert prior(_line("a", math.nan, rate=2.0), GPU)["request_throughput_rps"] == pytest.approx(2.0)


def test_a_refitted_config_predicts_what_was_measured_and_interpolates_between_its_loads() -> None:
    lines = [_line("a", 1), _line("a", 16)]
    measured = [
        {"tpot_p99_ms": 5.0, "ttft_p99_ms": 30.0, "request_throughput_rps": 1.5},
        {"tpot_p99_ms": 8.0, "ttft_p99_ms": 60.0, "request_throughput_rps": 15.0},
    ]
    fit = refit(list(zip(lines, measured, strict=True)), GPU)
    at1, u1 = fit.predict("a-id", 1.0, prior(lines[0], GPU), "none")
    assert at1 == pytest.approx(measured[0]) and u1 < 0.1
    base4 = prior(_line("a", 4), GPU)
    at4, u4 = fit.predict("a-id", 4.0, base4, "none")
    ratios = [{m: v[m] / prior(line, GPU)[m] for m in RATIOS} for line, v in zip(lines, measured, strict=True)]
    for m in RATIOS:  # halfway in log load: the geometric mean of the two ratios
        assert at4[m] == pytest.approx(base4[m] * math.sqrt(ratios[0][m] * ratios[1][m]))
    assert u4 > u1


def test_an_unmeasured_config_borrows_its_family_else_keeps_the_prior_uncertainty() -> None:
    fit = refit([(_line("a", 4), {"tpot_p99_ms": 9.0, "ttft_p99_ms": 30.0, "request_throughput_rps": 5.0})], GPU)
    base = prior(_line("b", 4), GPU)
    kin, u_kin = fit.predict("b-id", 4.0, base, "none")
    assert kin["tpot_p99_ms"] == pytest.approx(base["tpot_p99_ms"] * 9.0 / prior(_line("a", 4), GPU)["tpot_p99_ms"])
    _, u_other = fit.predict("d-id", 4.0, base, "draft_model")
    assert u_kin < u_other == PRIOR_UNCERTAINTY
    assert refit([], GPU).predict("b-id", 4.0, base, "none") == (base, PRIOR_UNCERTAINTY)


def test_one_methods_overheads_carry_over_neither_to_the_baseline_nor_to_another_method() -> None:
    draft = _line("d", 4, engine_json("d", draft="llama-3.2-1b", k=4, alpha=0.8))
    slow = {m: v * factor for (m, v), factor in zip(prior(draft, GPU).items(), (3.0, 3.0, 1 / 3), strict=True)}
    fit = refit([(draft, slow)], GPU)
    base = prior(_line("off", 4), GPU)
    # the draft ran 3x slower than its prior; the baseline, unmeasured, keeps its own prior
    assert fit.predict("off-id", 4.0, base, "none") == (base, PRIOR_UNCERTAINTY)
    assert fit.predict("e-id", 4.0, base, "eagle3") == (base, PRIOR_UNCERTAINTY)
    # once the baseline is measured, a method with nothing of its own measured takes the baseline's ratios
    off = {m: v * 1.2 for m, v in base.items()}
    spec, _ = refit([(draft, slow), (_line("off", 4), off)], GPU).predict("e-id", 4.0, base, "eagle3")
    assert spec == pytest.approx(off)


def test_the_calculator_refuses_a_config_whose_weights_cannot_fit() -> None:
    big = engine_of({"engine_config_json": engine_json("big", model="llama-3.3-70b")})
    assert fits_gpu(big, GPU) is not None and "exceed" in fits_gpu(big, GPU)  # type: ignore[operator]
    assert fits_gpu(engine_of({"engine_config_json": engine_json("a")}), GPU) is None
    assert json.loads(engine_json("a"))["model"] == "llama-3.1-8b"


def test_a_noisy_ttft_of_other_configs_does_not_blur_a_tpot_prediction() -> None:
    measured = [
        (_line("a", 4), {"tpot_p99_ms": 9.0, "ttft_p99_ms": 30.0, "request_throughput_rps": 5.0}),
        (_line("b", 4), {"tpot_p99_ms": 9.5, "ttft_p99_ms": 900.0, "request_throughput_rps": 5.1}),
    ]
    fit = refit(measured, GPU)
    base = prior(_line("c", 4), GPU)
    _, every = fit.predict("c-id", 4.0, base, "none")
    _, decisive = fit.predict("c-id", 4.0, base, "none", ("tpot_p99_ms", "request_throughput_rps"))
    assert decisive < 1.0 < every  # the TTFT ratios differ 30×; the TPOT and requests/s ones by a few percent
