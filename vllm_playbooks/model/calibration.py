"""Step-time models fitted to measured rows: bandwidth and compute efficiencies, the draft's fixed cost, predictions.

Every function takes its rows as arguments; none reads recorded data."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from vllm_playbooks.hardware import Gpu, as_gpu
from vllm_playbooks.model.steps import _Forward, _get, _row_terms, median_points

#: Bounds of the fitted efficiencies (fractions of the datasheet peak). A streaming kernel sustains roughly nine
#: tenths of the HBM peak at best, and dense BF16 matmuls of LLM shapes about as much of the tensor peak, so nothing
#: above 0.9 is physical; the lower bounds only keep the search away from zero. A fitted value on a bound means the
#: model lacks a term (``EfficiencyFit.at_bound`` names it).
EFFICIENCY_BOUNDS: dict[str, tuple[float, float]] = {
    "bandwidth_efficiency": (0.3, 0.9),
    "quantized_bandwidth_efficiency": (0.05, 0.9),
    "compute_efficiency": (0.2, 0.9),
}


#: Bounds of the fixed time per forward pass t0 (s): launches, scheduling and the host's share of one engine step.
OVERHEAD_BOUNDS_S = (0.0, 0.01)


#: Bounds of the fixed time per MoE layer (s): routing, top-k, token permutation and the grouped expert kernels,
#: which take a few kernel latencies however few tokens they carry.
MOE_LAYER_OVERHEAD_BOUNDS_S = (0.0, 2e-4)


@dataclass(frozen=True)
class EfficiencyFit:
    """Fitted efficiencies of the batch roofline on one GPU and host.

    One forward pass over ``batch`` sequences takes
    ``max(dense_bytes / (bandwidth_efficiency·BW) + four_bit_bytes / (quantized_bandwidth_efficiency·BW),
    flops / (compute_efficiency·BF16 peak)) + overhead_s + moe_layers · moe_layer_overhead_s``. Dense bytes are 8- and
    16-bit weights plus the KV cache; four-bit bytes are the weights that 4-bit kernels dequantize in software on this
    GPU (AWQ linear layers, gpt-oss's MXFP4 experts), much slower per byte; flops include the prompt tokens of requests
    that join mid-run (chunked prefill shares steps with decodes). MoE layers read only the experts the step's tokens
    touch. ``speculation``, when fitted (``fit_efficiency(..., draft_overhead=True)``), adds the fixed costs of
    speculating with a draft model.

    The efficiencies and ``overhead_s`` (t0) belong to one GPU and host: ``provenance`` says where they come from
    (the rows fitted, or ``calibrate_on_gpu``'s measured points, or that they were carried from another GPU),
    ``groups`` the cases fitted, and ``at_bound`` names every parameter that landed on its bound
    (``EFFICIENCY_BOUNDS``, ``OVERHEAD_BOUNDS_S``): empty for a physical fit.
    """

    gpu: str
    bandwidth_efficiency: float
    quantized_bandwidth_efficiency: float
    compute_efficiency: float
    overhead_s: float
    rows_used: int
    rms_relative_error: float
    #: the fixed costs speculation adds per draft forward and per step (``fit_draft_overhead``); None: no such term,
    #: the speculative TPOT is the roofline of its forwards alone (the model before issue #8)
    speculation: DraftOverheadFit | None = None
    at_bound: tuple[str, ...] = ()
    provenance: str = ""
    groups: tuple[str, ...] = ()
    #: fixed time per MoE layer of a forward (s), on top of ``overhead_s`` (``MOE_LAYER_OVERHEAD_BOUNDS_S``)
    moe_layer_overhead_s: float = 0.0

    @property
    def draft_overhead_s(self) -> float:
        """t_d, the fixed cost of one draft forward beyond its roofline time (0 without a fitted term)."""
        return self.speculation.draft_overhead_s if self.speculation is not None else 0.0

    @property
    def verify_overhead_s(self) -> float:
        """t_v, the fixed cost of one speculative step beyond its forwards (0 without a fitted term)."""
        return self.speculation.verify_overhead_s if self.speculation is not None else 0.0

    def with_draft_overhead(self, speculation: DraftOverheadFit | None) -> EfficiencyFit:
        """The same efficiencies with ``speculation``'s overhead terms (None: without any)."""
        return replace(self, speculation=speculation)


@dataclass(frozen=True)
class DraftOverheadFit:
    """Fixed costs that speculation with a separate draft model adds beyond the roofline of its forwards.

    With them a speculative step costs T_target(B, k+1) + k · (T_draft(B, 1) + t_d) + t_v, where each T already holds
    the spec-off fit's per-forward overhead t0. ``draft_overhead_s`` (t_d) is paid once per draft forward and
    ``verify_overhead_s`` (t_v) once per step; both are fitted on speculation-on rows with the spec-off efficiencies
    held fixed (``fit_draft_overhead``). ``rows_used`` and ``groups`` (the cases those rows come from) say what the
    fit saw; ``rms_relative_error`` is its in-sample RMS relative TPOT error on them. ``draft_overhead_se_s`` is the
    least-squares standard error of t_d as if the residuals were independent; rows of one case share the case's
    errors, so it understates the uncertainty, and ``draft_overhead_holdout`` is the honest check.
    """

    draft_overhead_s: float
    verify_overhead_s: float = 0.0
    rows_used: int = 0
    groups: tuple[str, ...] = ()
    rms_relative_error: float = math.nan
    draft_overhead_se_s: float = math.nan


def forward_pass_s(f: _Forward, gpu: Gpu, eb: float, eq: float, ef: float, t0: float, tm: float = 0.0) -> float:
    """Seconds of one forward pass ``f`` on ``gpu`` under the fitted parameters (``fit_parameters``' order): the
    larger of its memory and compute times, plus the fixed overhead and the per-MoE-layer overhead."""
    memory = f.dense_bytes / (eb * gpu.bandwidth_bytes_s) + f.quant_bytes / (eq * gpu.bandwidth_bytes_s)
    return max(memory, f.flops / (ef * gpu.bf16_flops_s)) + t0 + f.moe_layers * tm


def tpot_ms_of(
    terms: tuple[_Forward, _Forward | None, int, float],
    gpu: Gpu,
    p: tuple[float, ...],
    draft_overhead_s: float = 0.0,
    verify_overhead_s: float = 0.0,
) -> float:
    """TPOT in ms of a row's ``terms`` (target pass, draft pass or None, k, tokens per step): the target's step, plus
    k draft passes with their overhead and the verification overhead, over the tokens each step yields."""
    target, draft, k, tau = terms
    step = forward_pass_s(target, gpu, *p)
    if draft is not None:
        step += k * (forward_pass_s(draft, gpu, *p) + draft_overhead_s) + verify_overhead_s
    return step / tau * 1000.0


def _off_arrays(terms: list[tuple[_Forward, _Forward | None, int, float]]) -> tuple[np.ndarray, ...]:
    return tuple(np.array([getattr(t[0], name) for t in terms]) for name in ("dense_bytes", "quant_bytes", "flops"))


def _bounded_lstsq(design: np.ndarray, target: np.ndarray, bounds: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares of two unknowns within box bounds: the free solution if inside, else the best of the solutions
    with one unknown held on a bound (its other refitted and clipped)."""

    def clipped(x: np.ndarray) -> np.ndarray:
        return np.array([min(max(v, lo), hi) for v, (lo, hi) in zip(x, bounds, strict=True)])

    candidates = [clipped(np.linalg.lstsq(design, target, rcond=None)[0])]
    for held in (0, 1):
        for value in bounds[held]:
            other = 1 - held
            rest = target - design[:, held] * value
            column = design[:, other]
            x = np.zeros(2)
            x[held], x[other] = value, float(column @ rest / (column @ column)) if column @ column > 0 else 0.0
            candidates.append(clipped(x))
    best = min(candidates, key=lambda x: float(np.sum((design @ x - target) ** 2)))
    return float(best[0]), float(best[1])


def fit_efficiency(rows: Iterable[Any], gpu: Gpu | str, draft_overhead: bool = False) -> EfficiencyFit:
    """Bounded least-squares fit (relative TPOT residuals) of the roofline's four parameters on the rows without
    speculation, their repeats reduced to medians (``median_points``).

    Parameters: HBM efficiency for dense bytes (8/16-bit weights and KV), HBM efficiency for 4-bit weights (only
    identifiable when a 4-bit row is present; otherwise it stays at the dense value), BF16 compute efficiency
    (identified by the prefill tokens that share steps at high concurrency), each within ``EFFICIENCY_BOUNDS``, and a
    fixed time per forward pass t0 within ``OVERHEAD_BOUNDS_S``. Given the efficiencies, t0 is the closed-form
    least-squares intercept (clipped to its bounds); the efficiencies are searched on a grid, then refined coordinate
    by coordinate with shrinking steps. ``at_bound`` names the parameters that end on a bound.

    ``draft_overhead=True`` then fits the per-draft-forward overhead t_d on the rows with speculation, these four
    parameters held fixed (``fit_draft_overhead``), and returns the fit with it; the rows with speculation never move
    the four parameters, so the two fits stay separable.
    """
    rows = list(rows)
    device = as_gpu(gpu)
    points = median_points(rows)
    off = [p for p in points if not _is_speculative(p)]
    if len(off) < 3:
        raise ValueError(f"need at least 3 points without speculation to fit, got {len(off)}")
    terms = [_row_terms(p) for p in off]
    dense, quant, flops = _off_arrays(terms)
    measured = np.array([float(p["tpot_mean_ms"]) for p in off]) / 1000.0
    layers = np.array([t[0].moe_layers for t in terms])
    has_quant, has_moe = bool(np.any(quant > 0)), bool(np.any(layers > 0))
    names = list(EFFICIENCY_BOUNDS)
    low = np.array([EFFICIENCY_BOUNDS[n][0] for n in names])
    high = np.array([EFFICIENCY_BOUNDS[n][1] for n in names])

    def solve(e: np.ndarray) -> tuple[tuple[float, float], float]:
        eb, eq, ef = e[0], (e[1] if has_quant else e[0]), e[2]
        roof = np.maximum(
            dense / (eb * device.bandwidth_bytes_s) + quant / (eq * device.bandwidth_bytes_s),
            flops / (ef * device.bf16_flops_s),
        )
        fixed = _bounded_lstsq(
            np.column_stack([1 / measured, layers / measured]),
            1 - roof / measured,
            [OVERHEAD_BOUNDS_S, MOE_LAYER_OVERHEAD_BOUNDS_S if has_moe else (0.0, 0.0)],
        )
        return fixed, float(np.mean(((roof + fixed[0] + layers * fixed[1]) / measured - 1) ** 2))

    grid = [np.array(p) for p in itertools.product(*(np.linspace(lo, hi, 8) for lo, hi in zip(low, high, strict=True)))]
    current = min(grid, key=lambda e: solve(e)[1])
    steps = (high - low) / 14
    while steps.max() > 1e-5:
        improved = False
        for i in range(len(names)):
            for sign in (1, -1):
                trial = current.copy()
                trial[i] = min(max(trial[i] + sign * steps[i], low[i]), high[i])
                if solve(trial)[1] < solve(current)[1]:
                    current, improved = trial, True
        if not improved:
            steps = steps / 2
    if not has_quant:
        current[1] = current[0]
    (t0, tm), loss = solve(current)
    values = {
        **dict(zip(names, (float(v) for v in current), strict=True)),
        "overhead_s": t0,
        "moe_layer_overhead_s": tm,
    }
    bounds = {**EFFICIENCY_BOUNDS, "overhead_s": OVERHEAD_BOUNDS_S, "moe_layer_overhead_s": MOE_LAYER_OVERHEAD_BOUNDS_S}
    unidentified = ({"quantized_bandwidth_efficiency"} if not has_quant else set()) | (
        {"moe_layer_overhead_s"} if not has_moe else set()
    )
    at_bound = tuple(
        n
        for n, v in values.items()
        if n not in unidentified and min(abs(v - b) for b in bounds[n]) <= 1e-4 * (bounds[n][1] - bounds[n][0])
    )
    groups = tuple(sorted({str(p["case"]) for p in off}))
    fit = EfficiencyFit(
        gpu=device.name,
        **values,
        rows_used=len(off),
        rms_relative_error=math.sqrt(loss),
        at_bound=at_bound,
        provenance=f"fitted on {len(off)} {device.name} points without speculation ({', '.join(groups)})",
        groups=groups,
    )
    if draft_overhead:
        fit = fit.with_draft_overhead(fit_draft_overhead(rows, fit, device))
    return fit


def _is_speculative(row: Any) -> bool:
    return int(_get(row, "num_speculative_tokens") or 0) > 0


def fit_draft_overhead(
    rows: Iterable[Any],
    fit: EfficiencyFit,
    gpu: Gpu | str | None = None,
    verify_term: bool = False,
    nonnegative: bool = True,
) -> DraftOverheadFit:
    """Fit the per-draft-forward overhead t_d (and, with ``verify_term``, a per-step t_v) on the speculation-on rows.

    The spec-off parameters of ``fit`` are held fixed (its own overhead terms, if any, are ignored), so each row's
    predicted TPOT (B_i + k_i·t_d + t_v) / τ_i is linear in the unknowns, B_i being the roofline step of its forwards.
    The loss is ``fit_efficiency``'s, the mean squared relative TPOT error, so the fit is a closed-form weighted linear
    least squares. With ``nonnegative`` (the default) a term the data would make negative, which has no physical
    meaning, is held at 0 and the other refitted. Rows without speculation are skipped, repeats are reduced to their
    medians (``median_points``; ``rows_used`` counts points). ``gpu`` defaults to the fit's: the rows must have been
    measured on it.
    """
    device = as_gpu(gpu if gpu is not None else fit.gpu)
    spec = [r for r in median_points(rows) if _is_speculative(r)]
    unknowns = 2 if verify_term else 1
    if len(spec) < unknowns:
        raise ValueError(f"need at least {unknowns} rows with speculation to fit, got {len(spec)}")
    params = fit_parameters(fit)
    x, z, y = [], [], []
    for row in spec:
        terms = _row_terms(row)
        k, tau = terms[2], terms[3]
        base_s = tpot_ms_of(terms, device, params) * tau / 1000.0
        scale = tau * float(_get(row, "tpot_mean_ms")) / 1000.0  # measured step time (s)
        x.append(k / scale)
        z.append(1.0 / scale)
        y.append(1.0 - base_s / scale)
    design = np.column_stack([x, z])[:, :unknowns]
    target = np.array(y)

    def solve(columns: list[int]) -> np.ndarray:
        out = np.zeros(unknowns)
        if columns:
            out[columns] = np.linalg.lstsq(design[:, columns], target, rcond=None)[0]
        return out

    def sse(columns: list[int]) -> float:
        return float(np.sum((design @ solve(columns) - target) ** 2))

    active = list(range(unknowns))
    if nonnegative and np.any(solve(active) < 0):
        subsets = [[0], [1], []] if unknowns == 2 else [[]]
        active = min((c for c in subsets if np.all(solve(c) >= 0)), key=sse)
    solution = solve(active)
    residuals = design @ solution - target
    se = math.nan
    if 0 in active and len(target) > len(active):
        sub = design[:, active]
        cov = sse(active) / (len(target) - len(active)) * np.linalg.inv(sub.T @ sub)
        se = math.sqrt(float(cov[active.index(0), active.index(0)]))
    groups = tuple(sorted({str(_get(r, "case")) for r in spec}))
    return DraftOverheadFit(
        draft_overhead_s=float(solution[0]),
        verify_overhead_s=float(solution[1]) if verify_term else 0.0,
        rows_used=len(spec),
        groups=groups,
        rms_relative_error=math.sqrt(float(np.mean(residuals**2))),
        draft_overhead_se_s=se,
    )


def fit_parameters(fit: EfficiencyFit) -> tuple[float, float, float, float, float]:
    """The fit's parameters in the order ``forward_pass_s`` takes them."""
    return (
        fit.bandwidth_efficiency,
        fit.quantized_bandwidth_efficiency,
        fit.compute_efficiency,
        fit.overhead_s,
        fit.moe_layer_overhead_s,
    )
