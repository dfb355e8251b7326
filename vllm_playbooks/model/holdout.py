"""Out-of-sample checks of the step-time model: leave one case out with every parameter refitted, the prediction
interval those errors give, and calibrating the GPU-specific parameters on a few measured points of another GPU.

Every function takes its rows as arguments; none reads recorded data."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from vllm_playbooks.hardware import REFERENCE_DATASHEET, Gpu, as_gpu
from vllm_playbooks.model.calibration import (
    EFFICIENCY_BOUNDS,
    MOE_LAYER_OVERHEAD_BOUNDS_S,
    OVERHEAD_BOUNDS_S,
    EfficiencyFit,
    _is_speculative,
    fit_efficiency,
    fit_parameters,
    tpot_ms_of,
)
from vllm_playbooks.model.prediction import predict_tpot_ms
from vllm_playbooks.model.steps import _row_terms, median_points

#: The share of held-out points the stated interval is meant to hold.
INTERVAL_QUANTILE = 0.8

_EFFICIENCIES = ("bandwidth_efficiency", "quantized_bandwidth_efficiency", "compute_efficiency")


def _fit_without(points: list[dict[str, Any]], case: str, gpu: Gpu) -> EfficiencyFit:
    train = [p for p in points if p["case"] != case]
    return fit_efficiency(train, gpu, draft_overhead=any(_is_speculative(p) for p in train))


def _record(point: dict[str, Any], fit: EfficiencyFit, gpu: Gpu, held_out: str) -> dict[str, Any]:
    measured = float(point["tpot_mean_ms"])
    predicted = predict_tpot_ms(point, fit, gpu)
    return {
        "held_out": held_out,
        "case": point["case"],
        "model_shape": point["model_shape"],
        "draft_model": point.get("draft_model"),
        "k": int(point.get("num_speculative_tokens") or 0),
        "imposed_alpha": point.get("imposed_alpha"),
        "concurrency": int(point["concurrency"]),
        "tpot_ms_measured": measured,
        "tpot_ms_predicted": predicted,
        "tpot_rel_error": predicted / measured - 1,
        "log_error": math.log(predicted / measured),
        "bandwidth_efficiency": fit.bandwidth_efficiency,
        "quantized_bandwidth_efficiency": fit.quantized_bandwidth_efficiency,
        "compute_efficiency": fit.compute_efficiency,
        "overhead_ms": 1000 * fit.overhead_s,
        "draft_overhead_ms": 1000 * fit.draft_overhead_s,
        "at_bound": ", ".join(fit.at_bound),
    }


def _with_intervals(table: pd.DataFrame, quantile: float) -> pd.DataFrame:
    """Each line's interval from the other cases' errors only: the ``quantile`` of their |log(predicted / measured)|
    is the half-width ``interval_log`` around the prediction; ``inside``: whether the measured TPOT falls in it."""
    widths = {
        case: float(np.quantile(table.loc[table.case != case, "log_error"].abs(), quantile))
        for case in table.case.unique()
    }
    table = table.assign(interval_log=table.case.map(widths))
    return table.assign(
        tpot_ms_low=table.tpot_ms_predicted * np.exp(-table.interval_log),
        tpot_ms_high=table.tpot_ms_predicted * np.exp(table.interval_log),
        inside=(table.log_error.abs() <= table.interval_log),
    )


def leave_one_case_out(
    rows: Iterable[Any], gpu: Gpu | str = REFERENCE_DATASHEET, quantile: float = INTERVAL_QUANTILE
) -> pd.DataFrame:
    """Every case predicted by a model fitted without it: all four roofline parameters and the draft overhead t_d
    refitted on the other cases' rows (``fit_efficiency(..., draft_overhead=True)``), repeats as medians
    (``calibration.median_points``).

    One line per held-out point: what it is, measured and predicted TPOT, the relative error (predicted / measured −
    1) and its log, the fold's parameters (and which sat on a bound), and the interval of ``_with_intervals``: its
    half-width comes from the other cases' held-out errors (their ``quantile``), never the case's own, so
    ``inside`` is an out-of-sample coverage check. Needs points of at least two cases."""
    device = as_gpu(gpu)
    points = median_points(rows)
    cases = list(dict.fromkeys(str(p["case"]) for p in points))
    if len(cases) < 2:
        raise ValueError(f"leaving one case out needs points of at least 2 cases, got {cases}")
    records = []
    for case in cases:
        fit = _fit_without(points, case, device)
        records += [_record(p, fit, device, case) for p in points if p["case"] == case]
    return _with_intervals(pd.DataFrame(records), quantile)


def holdout_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per held-out case and over all (``case == "all"``): points, median and worst |TPOT error|, the share of
    points inside their interval, and the range of each fitted parameter over the folds (``…_min``, ``…_max``).
    ``table`` is ``leave_one_case_out``'s or ``calibration_holdout``'s."""

    def line(name: str, part: pd.DataFrame) -> dict[str, Any]:
        errors = part.tpot_rel_error.abs()
        ranges = {
            f"{c}_{f}": getattr(part[c], f)()
            for c in (*_EFFICIENCIES, "overhead_ms", "draft_overhead_ms")
            for f in ("min", "max")
        }
        return {
            "case": name,
            "points": len(part),
            "median_abs_tpot_error": float(errors.median()),
            "max_abs_tpot_error": float(errors.max()),
            "coverage": float(part.inside.mean()),
            "folds_at_bound": int((part.groupby("held_out").at_bound.first() != "").sum()),
            **ranges,
        }

    return pd.DataFrame([*(line(c, g) for c, g in table.groupby("case", sort=False)), line("all", table)])


def calibrate_on_gpu(fit: EfficiencyFit, rows: Iterable[Any], gpu: Gpu | str) -> EfficiencyFit:
    """``fit`` recalibrated on 1-3 measured points without speculation from ``gpu`` (its host included): the
    GPU-specific parameters are refitted, the architecture terms (what each forward reads and computes, the 4-bit
    to dense efficiency ratio, t_d's role) kept.

    One point fits one scale s on all three efficiencies (the GPU reaches s times the fraction of its peaks that
    ``fit``'s GPU did), two or three fit s and the fixed time per forward t0 too (least squares on the relative TPOT
    error). s keeps every efficiency within ``EFFICIENCY_BOUNDS`` and t0 stays within ``OVERHEAD_BOUNDS_S``; the
    draft overhead t_d is carried over unchanged. ``provenance`` says which parameters were measured here and which
    carried; ``at_bound`` names a refitted parameter that ends on its bound."""
    device = as_gpu(gpu)
    points = [p for p in median_points(rows) if not _is_speculative(p)]
    if not 1 <= len(points) <= 3:
        raise ValueError(f"calibrating on a GPU takes 1 to 3 points without speculation, got {len(points)}")
    measured = np.array([float(p["tpot_mean_ms"]) for p in points])
    efficiencies = np.array([getattr(fit, n) for n in _EFFICIENCIES])
    low = max(EFFICIENCY_BOUNDS[n][0] / e for n, e in zip(_EFFICIENCIES, efficiencies, strict=True))
    high = min(EFFICIENCY_BOUNDS[n][1] / e for n, e in zip(_EFFICIENCIES, efficiencies, strict=True))
    free_t0 = len(points) > 1

    def candidate(scale: float, t0: float) -> EfficiencyFit:
        scaled = dict(zip(_EFFICIENCIES, (float(v) for v in efficiencies * scale), strict=True))
        return replace(fit, gpu=device.name, overhead_s=t0, **scaled)

    terms = [_row_terms(p) for p in points]

    def loss(scale: float, t0: float) -> float:
        params = fit_parameters(candidate(scale, t0))
        predicted = np.array([tpot_ms_of(t, device, params) for t in terms])
        return float(np.mean((predicted / measured - 1) ** 2))

    t0_grid = np.linspace(*OVERHEAD_BOUNDS_S, 21) if free_t0 else np.array([fit.overhead_s])
    scales = np.geomspace(low, high, 31)
    scale, t0 = min(((s, t) for s in scales for t in t0_grid), key=lambda p: loss(*p))
    steps = [math.log(high / low) / 30, (t0_grid[1] - t0_grid[0]) if free_t0 else 0.0]
    while steps[0] > 1e-6:
        moves = [(scale * math.exp(d * steps[0]), t0) for d in (1, -1)]
        moves += [(scale, t0 + d * steps[1]) for d in (1, -1)] if free_t0 else []
        moves = [(min(max(s, low), high), min(max(t, OVERHEAD_BOUNDS_S[0]), OVERHEAD_BOUNDS_S[1])) for s, t in moves]
        best = min(moves, key=lambda p: loss(*p))
        if loss(*best) < loss(scale, t0):
            scale, t0 = best
        else:
            steps = [s / 2 for s in steps]
    at_bound = tuple(
        n
        for n, e in zip(_EFFICIENCIES, efficiencies * scale, strict=True)
        if min(abs(e - b) for b in EFFICIENCY_BOUNDS[n]) <= 1e-4
    ) + (("overhead_s",) if free_t0 and min(abs(t0 - b) for b in OVERHEAD_BOUNDS_S) <= 1e-7 else ())
    measured_here = "the efficiencies' scale and t0" if free_t0 else "the efficiencies' scale"
    carried = "t_d" if free_t0 else "t0 and t_d"
    provenance = (
        f"{measured_here} fitted on {len(points)} {device.name} point{'s' * (len(points) > 1)}; the "
        f"architecture terms and {carried} carried from {fit.gpu} ({fit.provenance})"
    )
    calibrated = candidate(float(scale), float(t0))
    return replace(
        calibrated,
        rows_used=len(points),
        rms_relative_error=math.sqrt(loss(scale, t0)),
        at_bound=at_bound,
        provenance=provenance,
    )


def _spread(points: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``n`` points without speculation spread over the concurrencies measured: lowest, highest, then the middle."""
    ordered = sorted((p for p in points if not _is_speculative(p)), key=lambda p: int(p["concurrency"]))
    picks = sorted({round(i) for i in np.linspace(0, len(ordered) - 1, n)}) if ordered else []
    return [ordered[i] for i in picks]


def calibration_holdout(
    rows: Iterable[Any],
    gpu: Gpu | str = REFERENCE_DATASHEET,
    calibration_points: Sequence[int] = (1, 2, 3),
    quantile: float = INTERVAL_QUANTILE,
) -> pd.DataFrame:
    """The check of ``calibrate_on_gpu``: each case in turn plays a GPU the model has not seen. The model is fitted
    without the case (``leave_one_case_out``'s fold), recalibrated on ``n`` of the case's points without speculation
    (spread over its concurrencies) for each ``n`` in ``calibration_points``, and predicts the case's other points,
    speculative ones included. One line per predicted point and ``n`` (``calibrated_on``), in
    ``leave_one_case_out``'s columns; the interval's half-width for a case comes from the other cases' errors at the
    same ``n``. Cases with no point left to predict are skipped."""
    device = as_gpu(gpu)
    points = median_points(rows)
    tables = []
    for n in calibration_points:
        records = []
        for case in dict.fromkeys(str(p["case"]) for p in points):
            own = [p for p in points if p["case"] == case]
            chosen = _spread(own, n)
            rest = [p for p in own if p not in chosen]
            if len(chosen) < n or not rest:
                continue
            fit = calibrate_on_gpu(_fit_without(points, case, device), chosen, device)
            records += [{**_record(p, fit, device, case), "calibrated_on": n} for p in rest]
        tables.append(_with_intervals(pd.DataFrame(records), quantile))
    return pd.concat(tables, ignore_index=True)


def other_gpu_check(fit: EfficiencyFit, rows: Iterable[Any], gpu: Gpu | str) -> pd.DataFrame:
    """``fit`` (of another GPU) predicting the recorded points of ``gpu``: every point of ``rows`` (rows measured on
    ``gpu``, repeats as medians) with ``fit``'s parameters carried over unchanged (``parameters`` 'carried'), then
    with the GPU's own calibrated on up to three of its points without speculation, spread over the concurrencies
    (``calibrate_on_gpu``), predicting the points it was not calibrated on (``parameters`` 'calibrated'). One line
    per predicted point, in ``leave_one_case_out``'s columns (``held_out``: the GPU's name)."""
    device = as_gpu(gpu)
    points = median_points(rows)
    chosen = _spread(points, min(3, sum(not _is_speculative(p) for p in points)))
    if not chosen:
        raise ValueError(f"no point without speculation to calibrate {device.name} on")
    calibrated = calibrate_on_gpu(fit, chosen, device)
    records = [{**_record(p, fit, device, device.name), "parameters": "carried"} for p in points]
    records += [
        {**_record(p, calibrated, device, device.name), "parameters": "calibrated"} for p in points if p not in chosen
    ]
    return pd.DataFrame(records)


#: Each parameter of ``parameter_table`` in words (its ``name`` column).
PARAMETER_WORDS = {
    "bandwidth_efficiency": "HBM bandwidth efficiency, 16-bit weights",
    "quantized_bandwidth_efficiency": "HBM bandwidth efficiency, 4-bit weights",
    "compute_efficiency": "tensor-core efficiency",
    "overhead_ms": "fixed time per forward t0 (ms)",
    "moe_layer_overhead_ms": "fixed time per MoE layer (ms)",
    "draft_overhead_ms": "draft's fixed time per step t_d (ms)",
}
#: The columns a page shows of ``parameter_table``, ``holdout_summary`` and ``leave_one_case_out`` (or
#: ``calibration_holdout``) and of a summary per number of calibration points, with their headers in words
#: (``book.tables.in_words``); ``SUMMARY_SHARES`` are shares (fractions) a page shows in percent.
PARAMETER_COLUMNS = {
    "name": "parameter",
    "value": "fitted value",
    "low": "lower bound",
    "high": "upper bound",
    "at_bound": "on a bound",
    "provenance": "fitted on",
}
SUMMARY_COLUMNS = {
    "case": "case",
    "points": "points",
    "median_abs_tpot_error": "median |TPOT error| (%)",
    "max_abs_tpot_error": "worst |TPOT error| (%)",
    "coverage": "inside the interval (%)",
    "folds_at_bound": "folds with a parameter on a bound",
}
POINT_COLUMNS = {
    "held_out": "case held out",
    "model_shape": "model",
    "draft_model": "draft",
    "k": "k",
    "imposed_alpha": "acceptance α",
    "concurrency": "concurrency",
    "tpot_ms_measured": "measured TPOT (ms)",
    "tpot_ms_predicted": "predicted TPOT (ms)",
    "tpot_rel_error": "error (%)",
    "tpot_ms_low": "interval low (ms)",
    "tpot_ms_high": "interval high (ms)",
    "inside": "inside the interval",
}
CALIBRATION_COLUMNS = {
    "points": "points predicted",
    "median_abs_tpot_error": "median |TPOT error| (%)",
    "max_abs_tpot_error": "worst |TPOT error| (%)",
    "coverage": "inside the interval (%)",
}
#: The columns a page shows of ``other_gpu_check``, with their headers in words.
OTHER_GPU_COLUMNS = {
    "parameters": "parameters",
    "case": "case",
    "model_shape": "model",
    "draft_model": "draft",
    "k": "k",
    "concurrency": "concurrency",
    "tpot_ms_measured": "measured TPOT (ms)",
    "tpot_ms_predicted": "predicted TPOT (ms)",
    "tpot_rel_error": "error (%)",
}
SUMMARY_SHARES = ("median_abs_tpot_error", "max_abs_tpot_error", "coverage")


def parameter_table(fit: EfficiencyFit) -> pd.DataFrame:
    """The fit's parameters, one line each: ``parameter`` (its key), ``name`` (in words), ``value`` (efficiencies as
    fractions of the GPU's peak, times in ms), the ``low`` and ``high`` bounds it was fitted within, ``at_bound`` and
    ``provenance`` (where it comes from, the same for every line but t_d's, which is fitted on the speculation-on
    rows)."""
    bounds = {**EFFICIENCY_BOUNDS, "overhead_s": OVERHEAD_BOUNDS_S, "moe_layer_overhead_s": MOE_LAYER_OVERHEAD_BOUNDS_S}
    records = []
    for name, (low, high) in bounds.items():
        scale = 1000.0 if name.endswith("_s") else 1.0
        key = name.removesuffix("_s") + ("_ms" if scale > 1 else "")
        records.append(
            {
                "parameter": key,
                "name": PARAMETER_WORDS[key],
                "value": scale * getattr(fit, name),
                "low": scale * low,
                "high": scale * high,
                "at_bound": name in fit.at_bound,
                "provenance": fit.provenance,
            }
        )
    if fit.speculation is not None:
        records.append(
            {
                "parameter": "draft_overhead_ms",
                "name": PARAMETER_WORDS["draft_overhead_ms"],
                "value": 1000.0 * fit.draft_overhead_s,
                "low": 0.0,
                "high": math.inf,
                "at_bound": fit.draft_overhead_s == 0.0,
                "provenance": f"fitted on {fit.speculation.rows_used} speculation-on points "
                f"({', '.join(fit.speculation.groups)}), the rest held fixed",
            }
        )
    return pd.DataFrame(records)
