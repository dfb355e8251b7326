"""What the model's prediction of a point says of its chances (``advisor.search``): the chance that it meets the
SLO, the chance and expected gain of beating the best point's bar, and its goodput for the trace. The log errors of
its p99s and requests/s are taken as normal, with 1 + u as two standard deviations."""

from __future__ import annotations

import math

from vllm_playbooks.advisor.goodput import Slo, goodput_rps


def log_error_sigma(u: float) -> float:
    """The standard deviation of a prediction's log error: the factor 1 + u taken as two of them."""
    return max(math.log(1.0 + u) / 2.0, 1e-6)


def normal_cdf(z: float) -> float:
    """The standard normal distribution's cumulative probability at ``z``."""
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def chance_met(predicted: dict[str, float], u: float, slo: Slo) -> float:
    """The chance that a point predicted at ``predicted`` with uncertainty u meets every bound of ``slo``."""
    chance = 1.0
    for value, bound in ((predicted["tpot_p99_ms"], slo.tpot_p99_ms), (predicted["ttft_p99_ms"], slo.ttft_p99_ms)):
        if bound is not None:
            chance *= normal_cdf(math.log(bound / value) / log_error_sigma(u))
    return chance


def outlook(predicted: dict[str, float], u: float, slo: Slo, bar: float) -> tuple[float, float]:
    """(chance, expected gain) of one prediction with uncertainty u against ``bar`` (requests/s): the chance that it
    meets ``slo`` with more goodput than ``bar``, and the expected goodput beyond ``bar`` (0 when it misses the SLO),
    taking the log errors of its p99s and its requests/s as normal and independent (see the module's docstring)."""
    met = chance_met(predicted, u, slo)
    rps, sigma = predicted["request_throughput_rps"], log_error_sigma(u)
    if bar <= 0:
        return met, met * rps * math.exp(sigma**2 / 2)
    z = math.log(rps / bar) / sigma
    beyond = rps * math.exp(sigma**2 / 2) * normal_cdf(z + sigma) - bar * normal_cdf(z)
    return met * normal_cdf(z), met * max(beyond, 0.0)


def goodput_scores(predicted: dict[str, float], u: float, slo: Slo) -> tuple[float, float]:
    """(expected, optimistic) goodput of one prediction with uncertainty u, for the trace: the prediction's requests/s
    if its p99s meet ``slo``, and requests/s × (1 + u) if its p99s / (1 + u) do (else 0)."""
    expected = goodput_rps(slo, predicted["tpot_p99_ms"], predicted["ttft_p99_ms"], predicted["request_throughput_rps"])
    optimistic = goodput_rps(
        slo,
        predicted["tpot_p99_ms"] / (1.0 + u),
        predicted["ttft_p99_ms"] / (1.0 + u),
        predicted["request_throughput_rps"] * (1.0 + u),
    )
    return expected, optimistic


def slo_margin(predicted: dict[str, float], slo: Slo) -> float:
    """How far a prediction lies from the SLO's edge: its largest p99 over its bound (below 1: within the SLO)."""
    bounds = [(predicted["tpot_p99_ms"], slo.tpot_p99_ms), (predicted["ttft_p99_ms"], slo.ttft_p99_ms)]
    return max(value / bound for value, bound in bounds if bound is not None)
