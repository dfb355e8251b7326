"""The advisor's search: propose with the model, pay for the point that can still win, refit, stop.

Each round the model (``advisor.predict``) predicts every point not paid for, with a relative uncertainty u (the log
error of its p99s and requests/s taken as normal, 1 + u as two standard deviations). The best so far is the paid point
of highest measured goodput (medians of its paid repeats); its *bar* is its goodput raised by the noise band
(``analysis.noise.band_pct`` of the best's and the runner-up's spreads, at least ``MIN_BAND_PCT``). A point *can win*
while the model gives it at least ``PLAUSIBLE_CHANCE`` of meeting the SLO with more goodput than the bar; its
*expected gain* is its expected goodput beyond the bar. Configs the KV calculator says cannot fit are never offered.

- What a config's paid loads rule out (``advisor.loads``): by monotonicity in load, the loads at or above a miss and
  below a load that met the SLO, except above a miss by a transient (at a request rate the server kept up with, a p99
  beyond the model's band around what it predicts from every other paid point), whose next load up is left to the
  measurement, as is a started config's next load below its misses while it has met the SLO nowhere: such a point can
  win whenever its predicted throughput could beat the bar, whatever latency the model gives it.
- Only what the budget left affords is offered; the rules below choose among those.
- The baseline first: until a speculative config is paid for, configs without speculation are offered alone while
  one of their points can win and the budget left pays for ``PLAN_MARGIN`` times the plan (the baseline's offer, then
  the best speculative offer, start-ups included). Every speculative config is judged against the baseline, and the
  prior models the speculative methods' overheads worst (it ranks a draft model too well, for one). On a shorter
  budget every config is offered, and the one of most expected gain per GPU-second goes first.
  ``baseline_first_gpu_s`` gives the least budget for the baseline first before anything is paid (the live command
  refuses less).
- Started configs before new ones: while a config already started has a point that can win, only started configs
  are offered. Their points cost no start-up, and settling them raises the bar that rules out long shots before a
  start-up is paid.
- Each config offers one point: a started config its point nearest the SLO's edge (predicted p99 closest to the
  bound: the loads that bracket the SLO), a new config its point at the best point's load when that one can win (the
  same load on both sides: the comparison the model is least sure of), else, while the model is as unsure of all its
  loads as the prior is (``PRIOR_UNCERTAINTY`` or more: the prior alone, another method's ratios, or its own method's
  measured far off), the middle of its loads that can win: under a factor-2.5 uncertainty the edge it predicts is a
  guess (on the recorded grids often the highest load), and the middle load halves the bracket in one run; else its
  point nearest the edge. Among the offers the advisor pays for the config of most expected gain per GPU-second (its
  start-up included) that the budget affords.
- When no point can win, it confirms: while the best point has fewer than ``MIN_CLEAN_REPEATS`` runs and its p99
  is within the noise band of the SLO's bound (a repeat could move its median over the bound) it pays for another
  repeat of it, and when the best config's lead over the runner-up config (measured) is inside the band, a
  repeat of whichever of the two has fewer runs, while repeats exist (a recorded grid has the repeats it has; a live
  run can always measure one more).
- When nothing paid for meets the SLO and no point can, it pays for the point the model finds likeliest to meet it
  (lowest predicted p99 over its bound), once: if that one misses too, no point will.
- While nothing paid for meets the SLO and every point that can win costs more than the budget has left, it pays for
  the point the model finds likeliest to meet the SLO among those the budget affords: an answer from what it measured,
  never none while the budget pays for one point (``min_answer_gpu_s``: the least budget that does).
- It stops when the lead over the runner-up config is outside the band (``lead beyond noise``), when the model
  leaves no other point that can win and no other config met the SLO (``nothing else can win``: no measured lead,
  the model's word), when no repeat is left to separate two configs within noise (``within noise``), when the next
  point costs more than the budget has left (``budget``), or when no point can meet the SLO (``no point meets the
  SLO``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from statistics import median
from typing import Any

import pandas as pd

from vllm_playbooks.advisor.goodput import Slo, given, goodput_rps, point_name
from vllm_playbooks.advisor.loads import above_transients, below_misses, dominated, transients
from vllm_playbooks.advisor.oracle import Oracle, PointKey, point_key
from vllm_playbooks.advisor.outlook import goodput_scores, log_error_sigma, normal_cdf, outlook, slo_margin
from vllm_playbooks.advisor.predict import (
    BASELINE_FAMILY,
    DISTANCE_UNCERTAINTY,
    PRIOR_UNCERTAINTY,
    RATIOS,
    Fit,
    engine_of,
    priced_catalog,
    refit,
)
from vllm_playbooks.analysis.noise import MIN_CLEAN_REPEATS, band_pct, spread_of
from vllm_playbooks.hardware import Gpu

#: A point can win while the model gives it at least this chance of beating the best by more than the noise band: one
#: in ten. Lower, and the search pays for long shots; higher, and it quits while a point it has not measured could
#: still win (what ±50 % does to the evaluation: ``vllm-playbooks advise --sensitivity``, on the advisor page).
PLAUSIBLE_CHANCE = 0.1


#: The baseline goes first while the budget left pays for this many times its plan: the baseline's offer and then the
#: speculative offer of most expected gain per GPU-second, each with its start-up; the half on top pays for the winner's
#: next point. A shorter budget is spent where the expected gain per GPU-second is highest. Lower, and a quarter of a
#: grid still goes to the baseline and misses the winner more often; higher, and more budgets count as too short for
#: the baseline first (what ±50 % does: ``vllm-playbooks advise --sensitivity``, on the advisor page).
PLAN_MARGIN = 1.5


#: What the answer says when it chose a speculative point without speculation off measured.
BASELINE_UNMEASURED = (
    "speculation off was never measured, so nothing measured stands beside this recommendation; "
    "a budget that pays for the baseline first (a larger --budget-gpu-min) settles it"
)


#: How sure an answer is (``certainty``): the chosen config's measured lead over the runner-up config is beyond the
#: noise band or within it, no other config met the SLO to compare with, or no point measured met the SLO.
SURENESS = ("lead beyond noise", "within noise", "not compared", "nothing measured meets the SLO")


#: Why the search stopped.
STOP_REASONS = ("lead beyond noise", "nothing else can win", "within noise", "budget", "no point meets the SLO")


@dataclass(frozen=True)
class Knobs:
    """The search's tunable constants (the module's defaults; ``advisor.evaluate.SENSITIVITY`` moves them)."""

    plausible_chance: float = PLAUSIBLE_CHANCE
    plan_margin: float = PLAN_MARGIN
    distance_uncertainty: float = DISTANCE_UNCERTAINTY


@dataclass(frozen=True)
class Step:
    """One payment of the search: which point, which repeat, why, what the model expected and what it cost."""

    number: int
    point: str
    repeat: int
    why: str
    expected_goodput_rps: float
    optimistic_goodput_rps: float
    measured_goodput_rps: float
    gpu_s: float
    spent_gpu_s: float


@dataclass
class Advice:
    """The search's answer: the chosen point and the runner-up config's best point (measured medians), the trace."""

    slo: Slo
    chosen: dict[str, Any] | None
    runner_up: dict[str, Any] | None
    stop_reason: str
    steps: list[Step] = field(default_factory=list)
    spent_gpu_s: float = 0.0
    budget_gpu_s: float = 0.0
    pruned: dict[str, str] = field(default_factory=dict)
    #: a speculative point was chosen while speculation off, in the grid, was never paid for: the recommendation has
    #: no measured baseline beside it (a budget short of the baseline-first plan)
    baseline_unmeasured: bool = False
    #: how sure the answer is (one of ``SURENESS``), the chosen's measured goodput lead over the runner-up in % and
    #: the noise band it is judged against in % (both NaN when not compared): ``certainty``
    sure: str = ""
    lead_pct: float = math.nan
    band_pct: float = math.nan

    def trace(self) -> pd.DataFrame:
        """The steps as a table."""
        return pd.DataFrame([vars(s) for s in self.steps])


def _medians(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {m: float(median(float(r[m]) for r in rows)) for m in RATIOS}


def point_summary(line: dict[str, Any], rows: list[dict[str, Any]], slo: Slo) -> dict[str, Any]:
    """What an answer says of one paid point (``line``, a catalog line) from its paid ``rows``: its name, speculative
    method, k and ``--max-num-seqs``, runs, the medians of its metrics, its goodput under ``slo`` and the spread of its
    requests/s (``spread_pct``: 0 for one run)."""
    values = _medians(rows)
    engine = engine_of(line)
    concurrency = line["concurrency"]
    closed = given(concurrency)
    return {
        "config_id": line["config_id"],
        "engine_label": line["engine_label"],
        "point": point_name(line["engine_label"], concurrency, line["request_rate_qps"]),
        "speculative": engine.speculative.method if engine.speculative else "none",
        "k": int(engine.speculative.num_speculative_tokens or 0) if engine.speculative else 0,
        "max_num_seqs": int(min(concurrency, engine.max_num_seqs)) if closed else engine.max_num_seqs,
        "runs": len(rows),
        **values,
        "goodput_rps": goodput_rps(slo, values["tpot_p99_ms"], values["ttft_p99_ms"], values["request_throughput_rps"]),
        "spread_pct": spread_of(float(r["request_throughput_rps"]) for r in rows).spread_pct,
    }


def certainty(chosen: dict[str, Any] | None, runner_up: dict[str, Any] | None) -> tuple[str, float, float]:
    """How sure an answer of ``chosen`` beside ``runner_up`` (``point_summary``s, or None) is: one of ``SURENESS``,
    the chosen's goodput lead over the runner-up's in % and the noise band (``band_pct`` of both spreads), NaN for
    both when there is nothing to compare."""
    if chosen is None or chosen["goodput_rps"] <= 0:
        return SURENESS[3], math.nan, math.nan
    if runner_up is None or runner_up["goodput_rps"] <= 0:
        return SURENESS[2], math.nan, math.nan
    lead = 100.0 * (chosen["goodput_rps"] / runner_up["goodput_rps"] - 1.0)
    band = band_pct(chosen["spread_pct"], runner_up["spread_pct"])
    return (SURENESS[0] if lead > band else SURENESS[1]), lead, band


@dataclass(frozen=True)
class _Offer:
    """A point that can still win: its expected gain over the bar, its distance to the SLO's edge (|log| of its
    predicted p99 over the bound), and whether anything measured places it (False while its prediction rests on the
    prior alone or on another method's ratios: an uncertainty of ``PRIOR_UNCERTAINTY`` or more)."""

    key: PointKey
    gain: float
    edge: float
    placed: bool = True


def _started(config: str, paid: set[PointKey]) -> bool:
    """Whether a point of ``config`` was paid for (its server was started)."""
    return any(key[0] == config for key in paid)


def _ranked_offers(
    offers: dict[str, list[_Offer]],
    lines: dict[PointKey, dict[str, Any]],
    paid: set[PointKey],
    best_key: PointKey | None,
    price: Callable[[PointKey], float],
    left_gpu_s: float,
) -> list[tuple[float, PointKey, str]]:
    """(expected gain per GPU-second, point, why) of the point each config with points that can still win
    (``offers``, by config id) puts forward, best first, among those the ``left_gpu_s`` GPU-seconds afford (see the
    module's docstring for which point a config offers)."""
    ranked = []
    for config, offer in offers.items():
        edge = min(offer, key=lambda o: o.edge).key
        at_best = [o.key for o in offer if best_key is not None and o.key[1:] == best_key[1:]]
        if _started(config, paid):
            point, why = edge, "a started config: its point nearest the SLO's edge"
        elif at_best:
            point, why = at_best[0], "a new config, at the best point's load"
        elif not any(o.placed for o in offer):
            ordered = sorted(offer, key=lambda o: lines[o.key]["load"])
            point, why = ordered[len(ordered) // 2].key, "a new config: its middle load (only the prior places it)"
        else:
            point, why = edge, "a new config: its point nearest the SLO's edge"
        if price(point) <= left_gpu_s:
            ranked.append((max(o.gain for o in offer) / max(price(point), 1e-9), point, why))
    ranked.sort(key=lambda r: r[0], reverse=True)
    return ranked


def _baseline_phase(lines: dict[PointKey, dict[str, Any]], paid: set[PointKey]) -> bool:
    """Whether the grid has speculative points and none of them was paid for yet."""
    return any(line["family"] != BASELINE_FAMILY for line in lines.values()) and not any(
        lines[k]["family"] != BASELINE_FAMILY for k in paid
    )


def _baseline_plan_gpu_s(
    ranked: list[tuple[float, PointKey, str]], lines: dict[PointKey, dict[str, Any]], price: Callable[[PointKey], float]
) -> float | None:
    """The price of the baseline-first plan: the first baseline offer of ``ranked``, then its first speculative one,
    start-ups included. None while one side offers nothing."""
    baseline = [point for _, point, _ in ranked if lines[point]["family"] == BASELINE_FAMILY]
    speculative = [point for _, point, _ in ranked if lines[point]["family"] != BASELINE_FAMILY]
    return price(baseline[0]) + price(speculative[0]) if baseline and speculative else None


def _challengers(
    offers: dict[str, list[_Offer]],
    lines: dict[PointKey, dict[str, Any]],
    paid: set[PointKey],
    best_key: PointKey | None,
    price: Callable[[PointKey], float],
    left_gpu_s: float,
    plan_margin: float = PLAN_MARGIN,
) -> list[tuple[PointKey, str]]:
    """The point each config with points that can still win (``offers``, by config id) puts forward, with why, best
    first, among those the ``left_gpu_s`` GPU-seconds afford: the baseline before speculation while the budget can pay
    for the baseline-first plan, started configs before new ones, and the most expected gain per GPU-second (see the
    module's docstring)."""
    ranked = _ranked_offers(offers, lines, paid, best_key, price, left_gpu_s)
    if _baseline_phase(lines, paid):
        baseline = [r for r in ranked if lines[r[1]]["family"] == BASELINE_FAMILY]
        plan = _baseline_plan_gpu_s(ranked, lines, price)
        if plan is not None and plan * plan_margin > left_gpu_s:  # a speculative point may now come first: say why
            ranked = [
                (
                    score,
                    point,
                    why
                    if lines[point]["family"] == BASELINE_FAMILY
                    else f"the budget is short of the baseline-first plan; {why}",
                )
                for score, point, why in ranked
            ]
        elif baseline:
            ranked = [(score, point, f"the baseline first; {why}") for score, point, why in baseline]
    ranked = [r for r in ranked if _started(r[1][0], paid)] or ranked
    return [(point, why) for _, point, why in ranked]


def _decisive(slo: Slo) -> tuple[str, ...]:
    """The metrics whose predictions decide a point under ``slo``: the p99s it bounds, and requests/s."""
    bounds = (("tpot_p99_ms", slo.tpot_p99_ms), ("ttft_p99_ms", slo.ttft_p99_ms))
    return (*(m for m, bound in bounds if bound is not None), "request_throughput_rps")


def _offers(
    lines: dict[PointKey, dict[str, Any]],
    paid: dict[PointKey, dict[str, Any]],
    fit: Fit,
    slo: Slo,
    bar: float,
    knobs: Knobs,
    first_scores: dict[PointKey, tuple[float, float]],
    transient: set[PointKey] = frozenset(),
) -> tuple[dict[str, list[_Offer]], list[tuple[float, PointKey]]]:
    """One round's offers, by config id: the points not paid for that can still win against ``bar`` (requests/s)
    under ``fit``'s predictions, and (predicted margin to the SLO's bound, point) of every point neither pruned nor
    dominated (``transient``: the paid misses by a transient, ``advisor.loads``). Records each unpaid point's (expected,
    optimistic) goodput in ``first_scores``."""
    margins, offers = [], {}
    decisive = _decisive(slo)
    ruled_out = dominated(lines, paid, transient)
    walked = below_misses(lines, paid, ruled_out) | above_transients(lines, paid, ruled_out, transient)
    for key, line in lines.items():
        if line["pruned"] or key in ruled_out:
            continue
        base = {m: line[f"prior_{m}"] for m in RATIOS}
        predicted, u = fit.predict(line["config_id"], line["load"], base, line["family"], decisive)
        margins.append((slo_margin(predicted, slo), key))
        if key in paid:
            continue
        first_scores[key] = goodput_scores(predicted, u, slo)
        chance, gain = outlook(predicted, u, slo, bar)
        if key in walked:  # its latency is left to the measurement; its throughput must still beat the bar
            rps = predicted["request_throughput_rps"]
            chance = max(chance, normal_cdf(math.log(rps / bar) / log_error_sigma(u)) if bar > 0 else 1.0)
        if chance >= knobs.plausible_chance:
            offers.setdefault(key[0], []).append(
                _Offer(key, gain, abs(math.log(slo_margin(predicted, slo))), placed=u < PRIOR_UNCERTAINTY)
            )
    return offers, margins


def _expected_without(
    key: PointKey,
    lines: dict[PointKey, dict[str, Any]],
    paid: dict[PointKey, dict[str, Any]],
    gpu: Gpu,
    slo: Slo,
    knobs: Knobs,
) -> tuple[dict[str, float], float]:
    """The model's prediction of the paid point ``key`` and its uncertainty u, refitted on every other paid point."""
    others = [(lines[k], {m: s[m] for m in RATIOS}) for k, s in paid.items() if k != key]
    line = lines[key]
    base = {m: line[f"prior_{m}"] for m in RATIOS}
    fit = refit(others, gpu, knobs.distance_uncertainty)
    return fit.predict(line["config_id"], line["load"], base, line["family"], _decisive(slo))


def baseline_first_gpu_s(oracle: Oracle, slo: Slo, gpu: Gpu, knobs: Knobs = Knobs()) -> float | None:
    """The least budget with which ``advise`` starts ``oracle``'s grid with speculation off, in GPU-seconds:
    ``knobs.plan_margin`` times the price of the plan its first round makes (speculation off's offer, then the
    speculative offer of most expected gain per GPU-second, start-ups included), with no budget in the way. On less,
    the search starts with the speculative point of most expected gain per GPU-second, and may end with no baseline
    measured. None where the grid has no speculation off or no speculative config, or the prior gives one of them no
    point that can win. Reads only ``oracle``'s catalog and prices: nothing is paid."""
    lines = {point_key(line): line for line in priced_catalog(oracle.catalog(), gpu).to_dict("records")}
    offers, _ = _offers(lines, {}, refit([], gpu, knobs.distance_uncertainty), slo, 0.0, knobs, {})
    ranked = _ranked_offers(offers, lines, set(), None, oracle.price, math.inf)
    plan = _baseline_plan_gpu_s(ranked, lines, oracle.price)  # nothing paid: the baseline phase, if any
    return None if plan is None else plan * knobs.plan_margin


def min_answer_gpu_s(oracle: Oracle, gpu: Gpu) -> float:
    """The least budget with which ``advise`` measures a point of ``oracle``'s grid (its cheapest point of a config
    that fits ``gpu``, start-up included), in GPU-seconds; infinite when no config fits. On that budget or more it
    always pays for one point. Reads only the catalog and prices: nothing is paid."""
    lines = priced_catalog(oracle.catalog(), gpu).to_dict("records")
    return min((oracle.price(point_key(line)) for line in lines if not line["pruned"]), default=math.inf)


def advise(oracle: Oracle, slo: Slo, gpu: Gpu, max_repeats: int = MIN_CLEAN_REPEATS, knobs: Knobs = Knobs()) -> Advice:
    """Search ``oracle``'s catalog for the point of highest goodput under ``slo``, paying only through ``oracle``
    and within its budget (see the module's docstring), with ``knobs``' constants."""
    catalog = priced_catalog(oracle.catalog(), gpu)
    lines = {point_key(line): line for line in catalog.to_dict("records")}
    pruned = {line["config_id"]: line["pruned"] for line in lines.values() if line["pruned"]}
    advice = Advice(
        slo=slo, chosen=None, runner_up=None, stop_reason="", budget_gpu_s=oracle.budget_gpu_s, pruned=pruned
    )
    first_scores: dict[PointKey, tuple[float, float]] = {}
    while True:
        paid = {key: point_summary(lines[key], oracle.rows(key), slo) for key in oracle.paid_keys()}
        fit = refit(
            [(lines[key], {m: s[m] for m in RATIOS}) for key, s in paid.items()], gpu, knobs.distance_uncertainty
        )
        best_key = max(paid, key=lambda k: paid[k]["goodput_rps"], default=None)
        best = paid[best_key] if best_key is not None and paid[best_key]["goodput_rps"] > 0 else None
        rivals = [k for k in paid if best is not None and k[0] != best_key[0] and paid[k]["goodput_rps"] > 0]
        rival_key = max(rivals, key=lambda k: paid[k]["goodput_rps"], default=None)
        rival = paid[rival_key] if rival_key is not None else None
        band = band_pct(*(s["spread_pct"] for s in (best, rival) if s is not None))
        bar = best["goodput_rps"] * (1 + band / 100.0) if best is not None else 0.0
        transient = transients(
            paid, slo, partial(_expected_without, lines=lines, paid=paid, gpu=gpu, slo=slo, knobs=knobs)
        )
        offers, margins = _offers(lines, paid, fit, slo, bar, knobs, first_scores, transient)
        challengers = _challengers(
            offers, lines, set(paid), best_key, oracle.price, oracle.left_gpu_s(), knobs.plan_margin
        )
        likeliest = min(margins, default=(0.0, None))[1]
        affordable = [(m, k) for m, k in margins if k not in paid and oracle.price(k) <= oracle.left_gpu_s()]
        advice.chosen, advice.runner_up = best, rival
        why, key = "", None
        if challengers:
            key, why = challengers[0]
        elif best is None and offers and affordable:  # never an empty answer while the budget pays for a point
            key, why = min(affordable)[1], "the likeliest point to meet the SLO that the budget affords"
        elif offers:
            advice.stop_reason = "budget"
        elif best is None and likeliest is not None and likeliest not in paid:
            if oracle.price(likeliest) <= oracle.left_gpu_s():
                key, why = likeliest, "the likeliest point to meet the SLO"
            elif affordable:
                key, why = min(affordable)[1], "the likeliest point to meet the SLO that the budget affords"
            else:
                advice.stop_reason = "budget"
        elif best is None:
            advice.stop_reason = "no point meets the SLO"
        else:
            decided = rival is None or best["goodput_rps"] > rival["goodput_rps"] * (1 + band / 100.0)
            near_edge = slo_margin(best, slo) > 1.0 / (1.0 + band / 100.0)
            sides = (
                ([best_key] if near_edge else []) if decided else sorted((best_key, rival_key), key=oracle.runs_seen)
            )
            wanted = [k for k in sides if oracle.runs_seen(k) < max_repeats and oracle.repeats_left(k) > 0]
            if wanted and oracle.price(wanted[0]) <= oracle.left_gpu_s():
                key = wanted[0]
                why = "repeat: confirm the best" if decided else "repeat: the lead is within the noise band"
            elif wanted:
                advice.stop_reason = "budget"
            else:
                lead = "lead beyond noise" if rival is not None else "nothing else can win"
                advice.stop_reason = lead if decided else "within noise"
        if key is None:
            break
        cost = oracle.price(key)
        row = oracle.pay(key)
        expected, optimistic = (float("nan"), float("nan")) if why.startswith("repeat") else first_scores[key]
        advice.steps.append(
            Step(
                number=len(advice.steps) + 1,
                point=point_name(lines[key]["engine_label"], lines[key]["concurrency"], lines[key]["request_rate_qps"]),
                repeat=oracle.runs_seen(key) - 1,
                why=why,
                expected_goodput_rps=expected,
                optimistic_goodput_rps=optimistic,
                measured_goodput_rps=goodput_rps(
                    slo, float(row["tpot_p99_ms"]), float(row["ttft_p99_ms"]), float(row["request_throughput_rps"])
                ),
                gpu_s=cost,
                spent_gpu_s=oracle.spent_gpu_s,
            )
        )
    advice.spent_gpu_s = oracle.spent_gpu_s
    advice.sure, advice.lead_pct, advice.band_pct = certainty(advice.chosen, advice.runner_up)
    paid_families = {lines[key]["family"] for key in oracle.paid_keys()}
    has_baseline = any(line["family"] == BASELINE_FAMILY and not line["pruned"] for line in lines.values())
    advice.baseline_unmeasured = (
        has_baseline
        and BASELINE_FAMILY not in paid_families
        and advice.chosen is not None
        and advice.chosen["speculative"] != "none"
    )
    return advice
