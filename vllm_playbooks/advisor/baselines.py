"""The searches tuners run today, as search policies beside the advisor's, paying through the same oracle.

Each policy sees rows only through an ``advisor.oracle.Oracle``, at the same prices as the advisor (a run's GPU time,
and a server start-up the first time a config is touched), and answers as the advisor does (``search.Advice``): the
paid point of most goodput under the SLO, the best point of the runner-up config, and how sure the answer is
(``search.certainty``). None of them repeats a point: each pays for one run per point. Each stops where its tool
stops, or at the first point the budget left cannot pay for (a tool run under a time limit stops there, stop reason
``budget``). A grid holds only its recorded loads, so where a tool picks a load of its own (a request rate), it gets
the grid's load nearest to it. The tools' own code is not used: these are their strategies, from their documentation
and source, replayed on the recorded grids.

- ``exhaustive_sweep``: every config × load, one run each, config after config and each config's loads upwards: what
  ``vllm bench sweep`` runs over a grid of serve and bench parameters.
- ``auto_tune``: vLLM's ``benchmarks/auto_tune/auto_tune.sh``: per config a server, first at its highest load (the
  script's request rate ``inf``), then, while the latency SLO is missed, one step down (the script lowers the request
  rate by 1 req/s from the throughput it measured; here, the next grid load down). A config's answer is the first load
  that meets the SLO; the answer is the config of most throughput there. The script bounds the E2E latency p99; here
  the SLO's bounds.
- ``guidellm_sweep``: GuideLLM's ``sweep`` profile per config: synchronous (one request at a time: the config's lowest
  load), throughput (as many at once as it takes: its highest load), then constant rates evenly spaced between the two
  throughputs measured (``GUIDELLM_SWEEP_SIZE`` benchmarks in all, GuideLLM's default; the last rate is the throughput
  itself). Each rate gets the grid's nearest request rate, or, under a closed loop, the concurrency whose throughput,
  drawn as a line over concurrency between the two measured ends, comes nearest.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from vllm_playbooks.advisor.goodput import Slo, goodput_rps, point_name
from vllm_playbooks.advisor.oracle import Oracle, PointKey, point_key
from vllm_playbooks.advisor.predict import load_of
from vllm_playbooks.advisor.search import Advice, Step, certainty, point_summary

#: GuideLLM's default number of benchmarks in a sweep (``settings.default_sweep_number``): synchronous, throughput and
#: eight constant rates.
GUIDELLM_SWEEP_SIZE = 10
#: Why a baseline stopped: it ran what its tool runs, or the budget left could not pay for its next point.
BASELINE_STOPS = ("done", "budget")


class _Run:
    """One baseline's search: the grid's points by config, what it paid, and its answer."""

    def __init__(self, oracle: Oracle, slo: Slo) -> None:
        self.oracle, self.slo = oracle, slo
        self.lines = {point_key(line): {**line, "load": load_of(line)} for line in oracle.catalog().to_dict("records")}
        self.configs: dict[str, list[PointKey]] = {}
        for key in self.lines:
            self.configs.setdefault(key[0], []).append(key)
        for keys in self.configs.values():
            keys.sort(key=lambda k: self.lines[k]["load"])
        self.advice = Advice(
            slo=slo, chosen=None, runner_up=None, stop_reason=BASELINE_STOPS[0], budget_gpu_s=oracle.budget_gpu_s
        )

    def pay(self, key: PointKey, why: str) -> dict[str, Any] | None:
        """Pay for one run of ``key`` (its first; a point paid for already is not paid again) and return its row;
        None when the budget left cannot pay for it (the search is over: ``stopped``)."""
        if self.oracle.runs_seen(key):
            return self.oracle.rows(key)[0]
        cost = self.oracle.price(key)
        if cost > self.oracle.left_gpu_s() + 1e-9:
            self.advice.stop_reason = BASELINE_STOPS[1]
            return None
        row = self.oracle.pay(key)
        line = self.lines[key]
        self.advice.steps.append(
            Step(
                number=len(self.advice.steps) + 1,
                point=point_name(line["engine_label"], line["concurrency"], line["request_rate_qps"]),
                repeat=0,
                why=why,
                expected_goodput_rps=math.nan,
                optimistic_goodput_rps=math.nan,
                measured_goodput_rps=goodput_rps(
                    self.slo, float(row["tpot_p99_ms"]), float(row["ttft_p99_ms"]), float(row["request_throughput_rps"])
                ),
                gpu_s=cost,
                spent_gpu_s=self.oracle.spent_gpu_s,
            )
        )
        return row

    @property
    def stopped(self) -> bool:
        """Whether the budget ended the search."""
        return self.advice.stop_reason == BASELINE_STOPS[1]

    def answer(self) -> Advice:
        """The advice from what was paid for: the point of most measured goodput, the runner-up config's best."""
        paid = {key: point_summary(self.lines[key], self.oracle.rows(key), self.slo) for key in self.oracle.paid_keys()}
        met = sorted((s for s in paid.values() if s["goodput_rps"] > 0), key=lambda s: s["goodput_rps"], reverse=True)
        chosen = met[0] if met else None
        rivals = [s for s in met if chosen is not None and s["config_id"] != chosen["config_id"]]
        advice = self.advice
        advice.chosen, advice.runner_up = chosen, (rivals[0] if rivals else None)
        advice.spent_gpu_s = self.oracle.spent_gpu_s
        advice.sure, advice.lead_pct, advice.band_pct = certainty(advice.chosen, advice.runner_up)
        return advice


def _met(row: dict[str, Any], slo: Slo) -> bool:
    return slo.met(float(row["tpot_p99_ms"]), float(row["ttft_p99_ms"]))


def exhaustive_sweep(oracle: Oracle, slo: Slo) -> Advice:
    """Every point of ``oracle``'s grid once, config after config, loads upwards (see the module's docstring)."""
    run = _Run(oracle, slo)
    for keys in run.configs.values():
        for key in keys:
            if run.pay(key, "the sweep: every config × load") is None:
                return run.answer()
    return run.answer()


def auto_tune(oracle: Oracle, slo: Slo) -> Advice:
    """vLLM's ``auto_tune.sh`` strategy on ``oracle``'s grid: per config, its highest load first, then down one load
    at a time until one meets ``slo`` (see the module's docstring)."""
    run = _Run(oracle, slo)
    for keys in run.configs.values():
        for step, key in enumerate(reversed(keys)):
            row = run.pay(key, "auto_tune: the highest load" if step == 0 else "auto_tune: one load down")
            if row is None:
                return run.answer()
            if _met(row, slo):
                break
    return run.answer()


def _nearest(run: _Run, keys: list[PointKey], rate: float, low: dict[str, Any], high: dict[str, Any]) -> PointKey:
    """The grid point of ``keys`` (one config's, loads upwards) that a GuideLLM constant ``rate`` lands on: the nearest
    request rate, or under a closed loop the concurrency whose throughput, on the line between the lowest (``low``)
    and highest (``high``) loads' measured rows, is nearest."""
    first, last = run.lines[keys[0]]["load"], run.lines[keys[-1]]["load"]
    low_rps, high_rps = float(low["request_throughput_rps"]), float(high["request_throughput_rps"])

    def throughput(key: PointKey) -> float:
        line = run.lines[key]
        if key[4] >= 0:  # a request rate: what the rate offers
            return float(line["request_rate_qps"])
        share = (line["load"] - first) / (last - first) if last > first else 0.0
        return low_rps + share * (high_rps - low_rps)

    return min(keys, key=lambda key: abs(throughput(key) - rate))


def guidellm_sweep(oracle: Oracle, slo: Slo, sweep_size: int = GUIDELLM_SWEEP_SIZE) -> Advice:
    """GuideLLM's ``sweep`` profile on ``oracle``'s grid, per config: its lowest load, its highest, then the loads
    nearest ``sweep_size`` − 2 rates evenly spaced between their throughputs (see the module's docstring)."""
    run = _Run(oracle, slo)
    for keys in run.configs.values():
        low = run.pay(keys[0], "guidellm sweep: synchronous (the lowest load)")
        high = run.pay(keys[-1], "guidellm sweep: throughput (the highest load)") if low is not None else None
        if low is None or high is None:
            return run.answer()
        low_rps, high_rps = float(low["request_throughput_rps"]), float(high["request_throughput_rps"])
        count = sweep_size - 1
        for step in range(1, count):
            rate = low_rps + (high_rps - low_rps) * step / (count - 1)
            if run.pay(_nearest(run, keys, rate, low, high), f"guidellm sweep: constant {rate:.2f} req/s") is None:
                return run.answer()
    return run.answer()


#: The baselines by the name the evaluation gives them.
BASELINES: dict[str, Callable[[Oracle, Slo], Advice]] = {
    "exhaustive sweep": exhaustive_sweep,
    "auto_tune.sh": auto_tune,
    "guidellm sweep": guidellm_sweep,
}
