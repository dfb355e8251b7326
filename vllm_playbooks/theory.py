"""Closed-form speculative-decoding relations (Leviathan, Kalman & Matias 2023, arXiv 2211.17192)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from vllm_playbooks.config.capacity import dtype_bytes, kv_bytes_per_token, parameter_count, weight_bytes
from vllm_playbooks.hardware import Gpu, get_gpu
from vllm_playbooks.shapes import ModelShape, resolve_model

if TYPE_CHECKING:
    import pandas as pd

    from vllm_playbooks.config.engine import EngineConfig


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """τ(α, k) = (1 − α^(k+1)) / (1 − α): tokens one verify step emits per sequence, bonus token included.

    With i.i.d. per-token acceptance α this equals vLLM's mean acceptance length. τ(0, k) = 1 and
    τ(1, k) = k + 1 (the limit of the formula).
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if math.isclose(alpha, 1.0):
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def tokens_per_step_from_rates(rates: list[float]) -> float:
    """Mean acceptance length for unconditional per-position rates p_i: 1 + Σ p_i (any chain, not only i.i.d.)."""
    return 1.0 + float(sum(rates))


# --------------------------------------------------------------------------------------------------------------------
# Leviathan et al. 2023: wall-time speedup, break-even acceptance, acceptance length → α
# --------------------------------------------------------------------------------------------------------------------


def speedup(alpha: float, k: int, c: float) -> float:
    """S = (1 − α^(k+1)) / ((1 − α)(k·c + 1)) = τ(α, k) / (k·c + 1).

    ``c`` is the cost of one draft forward over one target forward. The model assumes the target's verify step costs
    the same as one decode step whatever k is (true only well below the roofline's ridge; see ``step_time_s``).
    """
    if c < 0:
        raise ValueError(f"c must be >= 0, got {c}")
    return expected_tokens_per_step(alpha, k) / (k * c + 1.0)


def break_even_alpha(k: int, c: float, tol: float = 1e-12) -> float | None:
    """Smallest α in [0, 1] with S(α, k, c) ≥ 1, by bisection (S grows with α); None when even α = 1 falls short.

    k = 0 is never a speedup over itself (S = 1 for every α), and returns 0.0.
    """
    if k == 0:
        return 0.0
    if speedup(1.0, k, c) < 1.0:
        return None
    if speedup(0.0, k, c) >= 1.0:
        return 0.0
    low, high = 0.0, 1.0
    while high - low > tol:
        mid = (low + high) / 2
        if speedup(mid, k, c) >= 1.0:
            high = mid
        else:
            low = mid
    return high


def acceptance_rate_of_alpha(alpha: float, k: int) -> float:
    """vLLM's draft acceptance rate (accepted / drafted tokens) for an i.i.d. per-token α: (τ(α, k) − 1) / k.

    It is the mean of the unconditional per-position rates α, α², …, α^k, so it is lower than α for k > 1.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1 for an acceptance rate, got {k}")
    return (expected_tokens_per_step(alpha, k) - 1.0) / k


def draft_cost_from_tpot(tpot_spec: float, tpot_off: float, tau: float, k: int) -> float:
    """The draft cost ratio c that a measured pair implies: c = (TPOT_spec · τ / TPOT_off − 1) / k.

    It inverts ``speculative_tpot_s`` with the target's verify step costing one plain decode step (``TPOT_off``), which
    holds at low batch, well below the roofline's ridge. Everything speculation adds beyond the verify, the k draft
    passes and their fixed per-forward costs, ends up in c. With that c the break-even acceptance rate
    (``acceptance_rate_of_alpha`` at ``break_even_alpha(k, c)``) equals c itself, since S = 1 needs τ = 1 + k·c.
    """
    if min(tpot_spec, tpot_off) <= 0 or tau < 1 or k < 1:
        raise ValueError("TPOTs must be > 0, tau >= 1 and k >= 1")
    return (tpot_spec * tau / tpot_off - 1.0) / k


def alpha_from_acceptance_length(length: float, k: int, tol: float = 1e-12) -> float:
    """The i.i.d. α whose τ(α, k) equals a measured mean acceptance length ``length`` (in [1, k + 1]), by bisection."""
    if k < 1:
        raise ValueError(f"k must be >= 1 to invert tau, got {k}")
    if not 1.0 <= length <= k + 1:
        raise ValueError(f"acceptance length must lie in [1, {k + 1}] for k={k}, got {length}")
    low, high = 0.0, 1.0
    while high - low > tol:
        mid = (low + high) / 2
        if expected_tokens_per_step(mid, k) < length:
            low = mid
        else:
            high = mid
    return (low + high) / 2


# --------------------------------------------------------------------------------------------------------------------
# Batch roofline for one decode / verify step
# --------------------------------------------------------------------------------------------------------------------


def step_time_s(
    bytes_moved: float, flops: float, bandwidth_bytes_s: float, flops_per_s: float, overhead_s: float = 0.0
) -> float:
    """Roofline time of one forward pass: max(bytes / bandwidth, flops / peak) + overhead.

    Memory-bound while flops / bytes is below the ridge point ``flops_per_s / bandwidth_bytes_s``, compute-bound above.
    """
    if min(bytes_moved, flops, overhead_s) < 0 or min(bandwidth_bytes_s, flops_per_s) <= 0:
        raise ValueError("bytes, flops and overhead must be >= 0; bandwidth and peak must be > 0")
    return max(bytes_moved / bandwidth_bytes_s, flops / flops_per_s) + overhead_s


def decode_step_bytes(shape: ModelShape, batch: float, context_len: float, kv_cache_dtype: str = "auto") -> float:
    """Bytes one decode step reads: every weight once, plus each sequence's KV cache (``context_len`` tokens)."""
    return float(weight_bytes(shape) + batch * context_len * kv_bytes_per_token(shape, kv_cache_dtype))


def decode_step_flops(shape: ModelShape, batch: float, q: int = 1) -> float:
    """Matmul FLOPs of one step: 2 × parameters × batch × q (q query tokens per sequence; k + 1 when verifying).

    Attention-score FLOPs (∝ context) are left out: below ~10 % of the total at the contexts modelled here.
    """
    return 2.0 * parameter_count(shape) * batch * q


def compute_bound_batch(
    shape: ModelShape, gpu: Gpu | str, context_len: float, kv_cache_dtype: str = "auto", q: int = 1
) -> int | None:
    """Smallest batch at which one step turns compute-bound: FLOPs per byte reach the GPU's BF16 ridge point.

    With W weight bytes, P parameters, L tokens of context and b KV bytes per token, a step over B sequences of q query
    tokens (q = k + 1 when verifying k drafts) does 2·P·q·B FLOPs on W + B·L·b bytes. That intensity rises with B
    towards 2·P·q / (L·b); the answer is ⌈ridge · W / (2·P·q − ridge · L·b)⌉, or None when the limit stays at or below
    the ridge (the KV reads keep the step memory-bound at any batch).
    """
    if q < 1 or context_len < 0:
        raise ValueError(f"q must be >= 1 and context_len >= 0, got q={q}, context_len={context_len}")
    ridge = _as_gpu(gpu).ridge_point_bf16
    weights = decode_step_bytes(shape, 0, context_len, kv_cache_dtype)
    per_sequence_bytes = decode_step_bytes(shape, 1, context_len, kv_cache_dtype) - weights
    per_sequence_flops = decode_step_flops(shape, 1, q)
    margin = per_sequence_flops - ridge * per_sequence_bytes
    if margin <= 0:
        return None
    batch = max(1, math.ceil(ridge * weights / margin))
    while batch > 1 and decode_step_flops(shape, batch - 1, q) >= ridge * decode_step_bytes(shape, batch - 1, context_len, kv_cache_dtype):
        batch -= 1  # float rounding in the closed form
    while decode_step_flops(shape, batch, q) < ridge * decode_step_bytes(shape, batch, context_len, kv_cache_dtype):
        batch += 1
    return batch


def speculative_tpot_s(
    target_verify_s: float, draft_step_s: float, alpha: float, k: int, draft_overhead_s: float = 0.0,
    verify_overhead_s: float = 0.0,
) -> float:
    """Time per output token with speculation: (T_target(B, k+1) + k · (T_draft(B, 1) + t_d) + t_v) / τ(α, k).

    ``draft_overhead_s`` (t_d) is a fixed cost per draft forward and ``verify_overhead_s`` (t_v) one per speculative
    step, beyond the roofline times of the forwards (see ``DraftOverheadFit``); both default to 0, Leviathan's model.
    """
    if min(draft_overhead_s, verify_overhead_s) < 0:
        raise ValueError("draft_overhead_s and verify_overhead_s must be >= 0")
    step = target_verify_s + k * (draft_step_s + draft_overhead_s) + verify_overhead_s
    return step / expected_tokens_per_step(alpha, k)


# --------------------------------------------------------------------------------------------------------------------
# Calibrated roofline: fit efficiencies on measured spec-off TPOT, predict any row
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EfficiencyFit:
    """Fitted efficiencies of the batch roofline on one GPU.

    One forward pass over ``batch`` sequences takes
    ``max(dense_bytes / (bandwidth_efficiency·BW) + awq_bytes / (quantized_bandwidth_efficiency·BW),
    flops / (compute_efficiency·BF16 peak)) + overhead_s``, where dense bytes are BF16 weights plus KV cache, AWQ bytes
    the 4-bit linear weights (streamed by dequantizing kernels, much slower per byte) and flops include the prompt
    tokens of requests that join mid-run (chunked prefill shares steps with decodes). ``speculation``, when fitted
    (``fit_efficiency(..., draft_overhead=True)``), adds the fixed costs of speculating with a draft model.
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


@dataclass(frozen=True)
class _Forward:
    dense_bytes: float
    quant_bytes: float
    flops: float


def _get(row: Any, name: str, default: Any = None) -> Any:
    if isinstance(row, Mapping):
        return row.get(name, default)
    return getattr(row, name, default)


def _forward(shape: ModelShape, batch: float, q: int, context_len: float, kv_dtype: str, prefill_tokens: float) -> _Forward:
    total = decode_step_bytes(shape, batch, context_len, kv_dtype)
    quant = 0.0
    if shape.quantization:
        quant = float(weight_bytes(shape) - parameter_count(shape, "dense") * dtype_bytes("auto", shape))
    flops = decode_step_flops(shape, batch, q) + 2.0 * parameter_count(shape) * prefill_tokens
    return _Forward(dense_bytes=total - quant, quant_bytes=quant, flops=flops)


def _row_terms(row: Any, alpha: float | None = None) -> tuple[_Forward, _Forward | None, int, float]:
    """(target forward, draft forward or None, k, τ) for a measured or hypothetical row.

    τ is the row's measured mean acceptance length when it has one, else τ(α, k) from ``alpha`` or ``imposed_alpha``.
    Closed loop: ``concurrency`` sequences decode at once; each finished request is replaced, so on average
    batch · τ / output_len requests join per step, each bringing ``input_len`` prompt tokens. The mean context is
    input_len + output_len / 2.
    """
    batch = int(_get(row, "concurrency") or 0)
    if batch < 1:
        raise ValueError("the model needs a closed-loop row: concurrency >= 1")
    k = int(_get(row, "num_speculative_tokens") or 0)
    input_len, output_len = int(_get(row, "input_len")), int(_get(row, "output_len"))
    kv_dtype = _get(row, "kv_cache_dtype") or "auto"
    tau = 1.0
    if k:
        measured = _get(row, "mean_acceptance_length")
        a = alpha if alpha is not None else _get(row, "imposed_alpha")
        if alpha is None and measured:
            tau = float(measured)
        elif a is not None:
            tau = expected_tokens_per_step(float(a), k)
        else:
            raise ValueError("a speculative row needs mean_acceptance_length, imposed_alpha or alpha")
    context = input_len + output_len / 2
    prefill = batch * tau * input_len / output_len
    target = _forward(resolve_model(_get(row, "model_shape")), batch, k + 1, context, kv_dtype, prefill)
    draft = None
    if k:
        draft = _forward(resolve_model(_get(row, "draft_model")), batch, 1, context, kv_dtype, 0.0)
    return target, draft, k, tau


def _time(f: _Forward, gpu: Gpu, eb: float, eq: float, ef: float, t0: float) -> float:
    memory = f.dense_bytes / (eb * gpu.bandwidth_bytes_s) + f.quant_bytes / (eq * gpu.bandwidth_bytes_s)
    return max(memory, f.flops / (ef * gpu.bf16_flops_s)) + t0


def _tpot_ms(
    terms: tuple[_Forward, _Forward | None, int, float], gpu: Gpu, p: tuple[float, ...], draft_overhead_s: float = 0.0,
    verify_overhead_s: float = 0.0,
) -> float:
    target, draft, k, tau = terms
    step = _time(target, gpu, *p)
    if draft is not None:
        step += k * (_time(draft, gpu, *p) + draft_overhead_s) + verify_overhead_s
    return step / tau * 1000.0


def _as_gpu(gpu: Gpu | str) -> Gpu:
    return get_gpu(gpu) if isinstance(gpu, str) else gpu


def fit_efficiency(rows: Iterable[Any], gpu: Gpu | str, draft_overhead: bool = False) -> EfficiencyFit:
    """Least-squares fit (relative TPOT residuals) of the four roofline parameters on the rows without speculation.

    Parameters: HBM efficiency for BF16 weights and KV, HBM efficiency for AWQ 4-bit weights (only identifiable when
    an AWQ row is present; otherwise it stays at the BF16 value), BF16 compute efficiency (identified by the prefill
    tokens that share steps at high concurrency) and a fixed overhead per forward pass. Efficiencies are bounded to
    (0, 1]. Search: a coarse grid, then coordinate refinement with shrinking steps (numpy only, no scipy).

    ``draft_overhead=True`` then fits the per-draft-forward overhead t_d on the rows with speculation, these four
    parameters held fixed (``fit_draft_overhead``), and returns the fit with it; the rows with speculation never move
    the four parameters, so the two fits stay separable.
    """
    rows = list(rows)
    device = _as_gpu(gpu)
    off = [r for r in rows if int(_get(r, "num_speculative_tokens") or 0) == 0]
    if len(off) < 3:
        raise ValueError(f"need at least 3 rows without speculation to fit, got {len(off)}")
    terms = [_row_terms(r) for r in off]
    measured = np.array([float(_get(r, "tpot_mean_ms")) for r in off])
    has_quant = any(t[0].quant_bytes > 0 for t in terms)

    def loss(p: tuple[float, float, float, float]) -> float:
        predicted = np.array([_tpot_ms(t, device, p) for t in terms])
        return float(np.mean(((predicted - measured) / measured) ** 2))

    def clip(p: list[float]) -> tuple[float, float, float, float]:
        eb, eq, ef = (min(max(float(v), 0.02), 1.0) for v in p[:3])
        t0 = max(float(p[3]), 0.0)
        return (eb, eq if has_quant else eb, ef, t0)

    grid = itertools.product(
        np.linspace(0.3, 1.0, 8), np.linspace(0.1, 1.0, 10) if has_quant else [1.0], np.linspace(0.2, 1.0, 9),
        np.linspace(0.0, 3e-3, 13),
    )  # fmt: skip
    best = min((clip(list(p)) for p in grid), key=loss)
    steps = [0.05, 0.05, 0.05, 2.5e-4]
    current = list(best)
    for _ in range(60):
        improved = False
        for i in range(4):
            for sign in (1, -1):
                trial = list(current)
                trial[i] += sign * steps[i]
                if loss(clip(trial)) < loss(clip(current)):
                    current, improved = list(clip(trial)), True
        if not improved:
            steps = [s / 2 for s in steps]
            if steps[0] < 1e-4:
                break
    eb, eq, ef, t0 = clip(current)
    fit = EfficiencyFit(
        gpu=device.name, bandwidth_efficiency=eb, quantized_bandwidth_efficiency=eq, compute_efficiency=ef,
        overhead_s=t0, rows_used=len(off), rms_relative_error=math.sqrt(loss((eb, eq, ef, t0))),
    )  # fmt: skip
    if draft_overhead:
        fit = fit.with_draft_overhead(fit_draft_overhead(rows, fit, device))
    return fit


def _is_speculative(row: Any) -> bool:
    return int(_get(row, "num_speculative_tokens") or 0) > 0


def fit_draft_overhead(
    rows: Iterable[Any], fit: EfficiencyFit, gpu: Gpu | str | None = None, verify_term: bool = False,
    nonnegative: bool = True,
) -> DraftOverheadFit:
    """Fit the per-draft-forward overhead t_d (and, with ``verify_term``, a per-step t_v) on the speculation-on rows.

    The spec-off parameters of ``fit`` are held fixed (its own overhead terms, if any, are ignored), so each row's
    predicted TPOT (B_i + k_i·t_d + t_v) / τ_i is linear in the unknowns, B_i being the roofline step of its forwards.
    The loss is ``fit_efficiency``'s, the mean squared relative TPOT error, so the fit is a closed-form weighted linear
    least squares. With ``nonnegative`` (the default) a term the data would make negative, which has no physical
    meaning, is held at 0 and the other refitted. Rows without speculation are skipped. ``gpu`` defaults to the fit's:
    the rows must have been measured on it.
    """
    device = _as_gpu(gpu if gpu is not None else fit.gpu)
    spec = [r for r in rows if _is_speculative(r)]
    unknowns = 2 if verify_term else 1
    if len(spec) < unknowns:
        raise ValueError(f"need at least {unknowns} rows with speculation to fit, got {len(spec)}")
    params = _params(fit)
    x, z, y = [], [], []
    for row in spec:
        terms = _row_terms(row)
        k, tau = terms[2], terms[3]
        base_s = _tpot_ms(terms, device, params) * tau / 1000.0
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
        draft_overhead_s=float(solution[0]), verify_overhead_s=float(solution[1]) if verify_term else 0.0,
        rows_used=len(spec), groups=groups, rms_relative_error=math.sqrt(float(np.mean(residuals**2))),
        draft_overhead_se_s=se,
    )  # fmt: skip


#: How ``draft_overhead_holdout`` groups the speculation-on rows: by recorded case, by engine config, or row by row.
HOLDOUT_GROUPINGS = ("case", "config", "row")


def _holdout_group(row: Any, by: str, index: int) -> str:
    if by == "case":
        return str(_get(row, "case"))
    if by == "config":
        alpha = _get(row, "imposed_alpha")
        return (f"{_get(row, 'case')}: {_get(row, 'draft_model')} k={int(_get(row, 'num_speculative_tokens'))}"
                f" α={'earned' if alpha is None else f'{float(alpha):g}'}")  # fmt: skip
    if by == "row":
        return f"{_get(row, 'case')} #{index}"
    raise ValueError(f"by must be one of {HOLDOUT_GROUPINGS}, got {by!r}")


def draft_overhead_holdout(
    rows: Iterable[Any], fit: EfficiencyFit, by: str = "case", gpu: Gpu | str | None = None, verify_term: bool = False,
) -> pd.DataFrame:
    """Out-of-sample error of the draft overhead: each group of speculation-on rows predicted with a t_d (and t_v)
    fitted on the other groups' rows only.

    ``by``: ``"case"`` (leave one recorded case out: the 8B case's t_d predicts the 70B case and back), ``"config"``
    (leave one engine config out: case, draft model, k, imposed α) or ``"row"``. The spec-off efficiencies of ``fit``
    are held fixed in every fold, and they were fitted on the spec-off rows of every case, the held-out one's
    included (the AWQ bandwidth efficiency cannot be fitted without the 70B case's own rows): what is held out is the
    speculation-on rows, which are all the overhead fit sees. One line per speculation-on row, in input order:
    ``held_out`` (its group), what identifies it, the measured TPOT, the prediction without any overhead term
    (``tpot_ms_no_term``) and with the held-out t_d (``tpot_ms_held_out``), that t_d (``draft_overhead_ms``), how many
    rows it was fitted on (``rows_fitted``) and both relative errors (predicted / measured − 1).
    """
    import pandas as pd

    spec = [r for r in rows if _is_speculative(r)]
    device = _as_gpu(gpu if gpu is not None else fit.gpu)
    labels = [_holdout_group(r, by, i) for i, r in enumerate(spec)]
    if len(set(labels)) < 2:
        raise ValueError(f"a hold-out needs speculation-on rows from at least 2 groups (by={by!r}), got {set(labels)}")
    bare = fit.with_draft_overhead(None)
    folds = {}
    for label in dict.fromkeys(labels):
        train = [r for r, g in zip(spec, labels, strict=True) if g != label]
        folds[label] = (fit_draft_overhead(train, bare, device, verify_term=verify_term), len(train))
    records = []
    for row, label in zip(spec, labels, strict=True):
        overhead, fitted = folds[label]
        measured = float(_get(row, "tpot_mean_ms"))
        no_term = predict_tpot_ms(row, bare, device)
        held_out = predict_tpot_ms(row, bare.with_draft_overhead(overhead), device)
        records.append({
            "held_out": label, "case": _get(row, "case"), "draft_model": _get(row, "draft_model"),
            "k": int(_get(row, "num_speculative_tokens")), "imposed_alpha": _get(row, "imposed_alpha"),
            "concurrency": int(_get(row, "concurrency")), "tpot_ms_measured": measured, "tpot_ms_no_term": no_term,
            "tpot_ms_held_out": held_out, "draft_overhead_ms": 1000.0 * overhead.draft_overhead_s,
            "verify_overhead_ms": 1000.0 * overhead.verify_overhead_s, "rows_fitted": fitted,
            "tpot_rel_error_no_term": no_term / measured - 1, "tpot_rel_error_held_out": held_out / measured - 1,
        })  # fmt: skip
    return pd.DataFrame(records)


def draft_overhead_summary(rows: Iterable[Any], fit: EfficiencyFit, gpu: Gpu | str | None = None) -> pd.DataFrame:
    """The TPOT error of the calibrated roofline before and after the draft overhead, in-sample and out-of-sample.

    ``fit`` gives the spec-off efficiencies (its own overhead terms are ignored: t_d is refitted here on ``rows``).
    One line per evaluation: which rows (``subset``; ``n_rows``: how many), whether the number is ``in-sample`` (the
    rows were fitted on, so it flatters the model), ``out-of-sample`` (each row predicted with a t_d fitted without
    its case, or without its engine config: ``draft_overhead_holdout``) or ``no term``; the t_d used (its range over
    the folds for a hold-out), the median and the largest |TPOT error|. The spec-off rows are always in-sample: the
    efficiencies were fitted on them.
    """
    import pandas as pd

    rows = list(rows)
    device = _as_gpu(gpu if gpu is not None else fit.gpu)
    bare = fit.with_draft_overhead(None)
    overhead = fit_draft_overhead(rows, bare, device)
    with_term = bare.with_draft_overhead(overhead)
    off = [r for r in rows if not _is_speculative(r)]
    spec = [r for r in rows if _is_speculative(r)]

    def errors(subset: list[Any], model: EfficiencyFit) -> np.ndarray:
        return np.array([predict_tpot_ms(r, model, device) / float(_get(r, "tpot_mean_ms")) - 1 for r in subset])

    def line(what: str, sample: str, td: tuple[float, float], e: np.ndarray) -> dict[str, Any]:
        return {"subset": what, "n_rows": len(e), "sample": sample, "draft_overhead_ms_min": 1000 * td[0],
                "draft_overhead_ms_max": 1000 * td[1], "median_abs_tpot_error": float(np.median(np.abs(e))),
                "max_abs_tpot_error": float(np.max(np.abs(e)))}  # fmt: skip

    td = overhead.draft_overhead_s
    off_e, spec_before, spec_after = errors(off, bare), errors(spec, bare), errors(spec, with_term)
    records = [
        line("spec off", "in-sample", (0.0, 0.0), off_e),
        line("spec on", "no term", (0.0, 0.0), spec_before),
        line("spec on", "in-sample", (td, td), spec_after),
    ]
    for by in ("case", "config"):
        held = draft_overhead_holdout(rows, bare, by, device)
        span = (held.draft_overhead_ms.min() / 1000, held.draft_overhead_ms.max() / 1000)
        out_of_sample = held.tpot_rel_error_held_out.to_numpy()
        records.append(line(f"spec on, leave one {by} out", "out-of-sample", span, out_of_sample))
    records += [
        line("all", "no term", (0.0, 0.0), np.concatenate([off_e, spec_before])),
        line("all", "in-sample", (td, td), np.concatenate([off_e, spec_after])),
    ]
    return pd.DataFrame(records)


def _params(fit: EfficiencyFit) -> tuple[float, float, float, float]:
    return (fit.bandwidth_efficiency, fit.quantized_bandwidth_efficiency, fit.compute_efficiency, fit.overhead_s)


def forward_time_s(
    fit: EfficiencyFit, model: str, batch: float, context_len: float, prefill_tokens: float = 0.0,
    kv_cache_dtype: str = "auto", gpu: Gpu | str | None = None, shards: int = 1,
) -> float:
    """Fitted-roofline time (s) of one forward pass: ``batch`` sequences decode one token each over ``context_len``
    tokens of KV, beside ``prefill_tokens`` prompt tokens, with bytes and FLOPs split evenly over ``shards`` GPUs
    (tensor-parallel ranks or pipeline stages) and the fixed overhead paid once. Communication is not modelled."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    device = _as_gpu(gpu if gpu is not None else fit.gpu)
    whole = _forward(resolve_model(model), batch, 1, context_len, kv_cache_dtype, prefill_tokens)
    part = _Forward(whole.dense_bytes / shards, whole.quant_bytes / shards, whole.flops / shards)
    return _time(part, device, *_params(fit))


def predict_tpot_ms(row_like: Any, fit: EfficiencyFit, gpu: Gpu | str | None = None, alpha: float | None = None) -> float:
    """Predicted mean TPOT (ms) of a closed-loop row, with or without speculation, on ``gpu`` (default: the fit's).

    With speculation: (T_target(B, k+1) + k · (T_draft(B, 1) + t_d) + t_v) / τ, each forward from the same fitted
    roofline, t_d and t_v the fit's speculation overheads (``EfficiencyFit.speculation``; 0 when it has none). On
    another GPU they are carried over unchanged, as the per-forward overhead t0 is.
    """
    device = _as_gpu(gpu if gpu is not None else fit.gpu)
    return _tpot_ms(_row_terms(row_like, alpha), device, _params(fit), fit.draft_overhead_s, fit.verify_overhead_s)


def prediction_table(rows: Iterable[Any], fit: EfficiencyFit, gpu: Gpu | str | None = None) -> pd.DataFrame:
    """Measured vs predicted TPOT and output tok/s, one line per row, with relative errors (predicted / measured − 1).

    Predicted output tok/s = concurrency × 1000 / TPOT: a closed loop with every slot always decoding. It ignores the
    time each request waits for its first token, so it overstates throughput where TTFT is a large share of a
    request (``output_tok_s_from_measured_tpot`` shows that approximation applied to the measured TPOT).
    """
    import pandas as pd

    records = []
    for row in rows:
        tpot = predict_tpot_ms(row, fit, gpu)
        measured_tpot = float(_get(row, "tpot_mean_ms"))
        batch = int(_get(row, "concurrency"))
        measured_tok = float(_get(row, "output_tok_s"))
        records.append({
            "case": _get(row, "case"), "model_shape": _get(row, "model_shape"), "spec_method": _get(row, "spec_method"),
            "k": int(_get(row, "num_speculative_tokens") or 0), "concurrency": batch,
            "tpot_ms_measured": measured_tpot, "tpot_ms_predicted": tpot, "tpot_rel_error": tpot / measured_tpot - 1,
            "output_tok_s_measured": measured_tok, "output_tok_s_predicted": batch * 1000 / tpot,
            "output_tok_s_from_measured_tpot": batch * 1000 / measured_tpot,
            "output_tok_s_rel_error": batch * 1000 / tpot / measured_tok - 1,
        })  # fmt: skip
    return pd.DataFrame(records)


#: The recorded H200 cases the calibration is fitted and checked on.
CALIBRATION_CASES = ("llama-8b-draft-model", "discussion-13834")


def calibrates(row: Any) -> bool:
    """Whether a recorded row (a row object or a dict) may calibrate the model: False for configs with a batch-size
    schedule (the model takes k as fixed and the decode steps as full CUDA graphs, and a schedule changes both:
    vLLM 0.26 runs it with PIECEWISE graphs only) and for controls that force a model runner or a CUDA-graph mode
    (``analysis.is_control``): the model is of the servers as vLLM chooses to run them."""
    from vllm_playbooks.analysis import is_control, recorded_speculative

    config = _get(row, "engine_config_json")
    spec = recorded_speculative(config)
    scheduled = spec is not None and not spec.keeps_full_cudagraphs
    return not scheduled and not is_control(config)


def calibration_rows() -> list[Any]:
    """Every recorded H200 row (spec off and on) of ``CALIBRATION_CASES``, rebuilt from the raw files, that
    ``calibrates``."""
    from vllm_playbooks.runner import replay_rows

    return [row for case in CALIBRATION_CASES for row in replay_rows(case) if calibrates(row)]


def predict_13834_a100(fit: EfficiencyFit, concurrency: int = 32, alpha: float = 0.72, k: int = 5) -> dict[str, float]:
    """Out-of-sample: the H200 fit's efficiencies on the A100-80GB peaks, for Discussion #13834's setup.

    Llama-3.3-70B AWQ target, Llama-3.2-3B AWQ draft, k = 5, α = 0.72 (τ ≈ 3.07), fp8 KV, 1240 in / 128 out,
    ≈ ``concurrency`` streams. Returns predicted TPOT and output tok/s (closed loop, concurrency × 1000 / TPOT) off
    and on, beside the reported output tok/s read from ``data/reference/published.csv``. The speculative prediction
    includes the fit's per-draft-forward overhead when it has one (``fit_efficiency(..., draft_overhead=True)``).
    """
    from vllm_playbooks.results.store import load_reference

    base = {
        "model_shape": "llama-3.3-70b-awq", "kv_cache_dtype": "fp8", "concurrency": concurrency, "input_len": 1240,
        "output_len": 128, "num_speculative_tokens": 0,
    }  # fmt: skip
    spec = {**base, "num_speculative_tokens": k, "draft_model": "llama-3.2-3b-awq", "imposed_alpha": alpha}
    a100 = get_gpu("A100-80GB")
    off_ms = predict_tpot_ms(base, fit, a100)
    on_ms = predict_tpot_ms(spec, fit, a100)
    ref = load_reference("discussion-13834").set_index("claim_id")["value"].astype(float)
    return {
        "tpot_ms_off": off_ms, "tpot_ms_on": on_ms,
        "output_tok_s_off": concurrency * 1000 / off_ms, "output_tok_s_on": concurrency * 1000 / on_ms,
        "reported_output_tok_s_off": float(ref["output-tok-s-spec-off"]),
        "reported_output_tok_s_on": float(ref["output-tok-s-spec-on"]),
    }  # fmt: skip


def whatif_curve(
    fit: EfficiencyFit, gpu: Gpu | str, model: str, concurrencies: Iterable[int], input_len: int, output_len: int,
    kv_cache_dtype: str = "auto", draft_model: str | None = None, k: int = 0, alpha: float | None = None,
) -> pd.DataFrame:
    """Predicted mean TPOT and closed-loop output tok/s against concurrency, without and (if a draft is given) with
    speculation, on ``gpu`` with the efficiencies fitted on the H200 (see ``EfficiencyFit``; the speculative curve
    includes the fit's draft overhead t_d when it has one)."""
    import pandas as pd

    base = {"model_shape": model, "kv_cache_dtype": kv_cache_dtype, "input_len": input_len, "output_len": output_len,
            "num_speculative_tokens": 0}  # fmt: skip
    variants = [("spec off", base)]
    if draft_model and k:
        variants.append((f"draft k={k} α={alpha:g}", {**base, "num_speculative_tokens": k, "draft_model": draft_model,
                                                      "imposed_alpha": alpha}))  # fmt: skip
    records = []
    for label, spec in variants:
        for concurrency in concurrencies:
            tpot = predict_tpot_ms({**spec, "concurrency": concurrency}, fit, gpu)
            records.append({"engine_label": label, "concurrency": concurrency, "tpot_mean_ms": tpot,
                            "output_tok_s": concurrency * 1000 / tpot})  # fmt: skip
    return pd.DataFrame(records)


def measured_overlay(gpu: str, model: str, draft_model: str | None = None, k: int = 0) -> pd.DataFrame:
    """Recorded H200 rows of ``model`` (spec off, and with ``draft_model`` at ``k``) to draw beside a prediction;
    empty for any other GPU, since every recorded row is from the H200."""
    import pandas as pd

    from vllm_playbooks.results.schema import RUN_COLUMNS
    from vllm_playbooks.results.store import rows_to_frame

    if gpu != "H200-SXM":
        return pd.DataFrame(columns=RUN_COLUMNS)
    keep = [
        r for r in calibration_rows()
        if r.model_shape == model and (r.spec_method == "none" or (r.draft_model == draft_model and r.num_speculative_tokens == k))
    ]  # fmt: skip
    return rows_to_frame(keep, RUN_COLUMNS)


# --------------------------------------------------------------------------------------------------------------------
# Acceptance models for imposed rates: fits to published per-position figures
# --------------------------------------------------------------------------------------------------------------------


def fit_iid_alpha(rates: Iterable[float], resolution: float = 1e-5) -> float:
    """The i.i.d. α whose α, α², …, α^k is closest (least squares) to published unconditional per-position rates."""
    p = np.asarray(list(rates), dtype=float)
    if p.size == 0 or np.any((p < 0) | (p > 1)):
        raise ValueError(f"rates must be a non-empty list in [0, 1], got {p.tolist()}")
    grid = np.arange(0.0, 1.0 + resolution / 2, resolution)
    errors = ((grid[:, None] ** np.arange(1, p.size + 1) - p) ** 2).sum(axis=1)
    return float(grid[int(errors.argmin())])


def rates_first_then_constant(first: float, later: float, k: int) -> list[float]:
    """Unconditional per-position rates when draft 1 is accepted with probability ``first`` and every later draft,
    given the ones before it were accepted, with ``later``: [first, first·later, first·later², …] (k entries)."""
    if not (0.0 <= first <= 1.0 and 0.0 <= later <= 1.0) or k < 1:
        raise ValueError(f"need first and later in [0, 1] and k >= 1, got {first}, {later}, {k}")
    return [first * later**i for i in range(k)]


def fit_later_conditional(first: float, k: int, acceptance_length: float, tol: float = 1e-12) -> float:
    """The constant conditional rate of drafts 2..k that, with ``first`` at draft 1, gives a published mean
    acceptance length at ``k`` drafts: 1 + Σ rates_first_then_constant(first, later, k) = acceptance_length."""
    low_tau = tokens_per_step_from_rates(rates_first_then_constant(first, 0.0, k))
    high_tau = tokens_per_step_from_rates(rates_first_then_constant(first, 1.0, k))
    if not low_tau <= acceptance_length <= high_tau:
        raise ValueError(
            f"an acceptance length of {acceptance_length} at k={k} is out of reach with first={first}: "
            f"it lies in [{low_tau:.3f}, {high_tau:.3f}]"
        )
    low, high = 0.0, 1.0
    while high - low > tol:
        mid = (low + high) / 2
        if tokens_per_step_from_rates(rates_first_then_constant(first, mid, k)) < acceptance_length:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def implied_draft_cost_ratio(acceptance_length: float, k: int, speedup_factor: float) -> float:
    """The draft cost ratio c that Leviathan's S = τ / (k·c + 1) implies for a reported τ and speed-up: (τ/S − 1)/k."""
    if k < 1 or speedup_factor <= 0:
        raise ValueError(f"need k >= 1 and a positive speed-up, got k={k}, S={speedup_factor}")
    return (acceptance_length / speedup_factor - 1.0) / k


# --------------------------------------------------------------------------------------------------------------------
# Step model with experts: what one forward pass reads and computes, for MTP and EAGLE-3 drafters
# --------------------------------------------------------------------------------------------------------------------


def expected_distinct_experts(num_experts: int, top_k: int, tokens: float) -> float:
    """Experts that ``tokens`` tokens touch in one MoE layer under uniform random routing: E·(1 − (1 − k/E)^tokens).

    Each token picks ``top_k`` distinct experts of ``num_experts``, independently of the others; this is the routing
    ``VLLM_MOE_ROUTING_SIMULATION_STRATEGY=uniform_random`` imposes. Real routers concentrate on fewer experts.
    """
    if num_experts < 1 or not 0 <= top_k <= num_experts or tokens < 0:
        raise ValueError(f"need 0 <= top_k <= num_experts and tokens >= 0, got {num_experts}, {top_k}, {tokens}")
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)


def kv_read_bytes(shape: ModelShape | str, batch: int, context_len: float, kv_cache_dtype: str = "auto") -> float:
    """KV-cache bytes one forward reads for ``batch`` sequences of ``context_len`` tokens, every layer of the shape.

    Sliding-window layers (``layer_types`` marks them ``sliding_attention``, ``sliding_window`` sizes them, as in
    gpt-oss) read at most their window; every other layer reads the whole context.
    """
    shape = resolve_model(shape) if isinstance(shape, str) else shape
    config = shape.config()
    per_layer = kv_bytes_per_token(shape, kv_cache_dtype, layers=1)
    window = config.get("sliding_window")
    if window:
        tokens = sum(min(context_len, float(window)) if kind == "sliding_attention" else context_len
                     for kind in shape.attention_types())  # fmt: skip
    else:
        tokens = shape.num_hidden_layers * context_len
    return float(batch * per_layer * tokens)


@dataclass(frozen=True)
class ForwardCost:
    """Bytes one forward pass reads (weights touched + KV cache) and the matmul FLOPs it does."""

    bytes: float
    flops: float


def forward_cost(
    shape: ModelShape | str, batch: int, q: int, context_len: float, kv_cache_dtype: str = "auto",
    role: str = "target", routing: str = "uniform",
) -> ForwardCost:
    """One forward pass of ``batch`` sequences with ``q`` new tokens each (q = k + 1 when verifying).

    ``role``: ``target`` (the main model), ``mtp`` (one of the shape's MTP modules: vLLM runs one per draft step) or
    ``draft`` (the shape is a separate draft model or EAGLE-3 head). MoE layers read only the experts the step's
    tokens touch (``expected_distinct_experts`` under ``routing="uniform"``; ``routing="fixed"``: every token picks the
    same experts, the degenerate case of a router that does not depend on the token), the rest of the weights once;
    every sequence reads its KV cache of ``context_len`` tokens in the layers that run. The embedding lookup is not
    counted.
    """
    from vllm_playbooks.config.capacity import (
        HEAD_ARCHITECTURES, MOE_ARCHITECTURES, eagle3_head_parts, mtp_weight_bytes, moe_layout,
    )  # fmt: skip

    shape = resolve_model(shape) if isinstance(shape, str) else shape
    tokens = batch * q
    kv_layer = kv_bytes_per_token(shape, kv_cache_dtype, layers=1)
    if role not in ("target", "mtp", "draft"):
        raise ValueError(f"role must be target, mtp or draft, got {role!r}")
    if shape.architecture in MOE_ARCHITECTURES:
        m = moe_layout(shape)
        if routing not in ("uniform", "fixed"):
            raise ValueError(f"routing must be uniform or fixed, got {routing!r}")
        touched = m.experts_per_token if routing == "fixed" else expected_distinct_experts(
            m.routed_experts, m.experts_per_token, tokens
        )  # fmt: skip
        experts = touched * m.expert_bytes
        moe_fixed = m.attention_bytes + m.router_bytes + m.shared_experts * m.expert_bytes + m.absorbed_bytes_per_layer
        active_moe = m.attention_params + m.router_params + (m.experts_per_token + m.shared_experts) * m.expert_params
        if role == "mtp":
            if m.mtp_layers < 1:
                raise ValueError(f"{shape.name} has no MTP module")
            weights = moe_fixed + experts + m.mtp_extra_bytes + m.mtp_head_bytes
            return ForwardCost(weights + batch * context_len * kv_layer,
                               2.0 * tokens * (active_moe + m.mtp_extra_params + m.head_params))  # fmt: skip
        dense = m.dense_layers * (m.attention_bytes + m.dense_mlp_bytes + m.absorbed_bytes_per_layer)
        weights = dense + m.moe_layers * (moe_fixed + experts) + m.head_bytes
        return ForwardCost(weights + kv_read_bytes(shape, batch, context_len, kv_cache_dtype),
                           2.0 * tokens * m.active_params())  # fmt: skip
    if shape.architecture in HEAD_ARCHITECTURES:
        parts = eagle3_head_parts(shape)
        params = parts["layers"] + parts["fc"] + parts["head"] + parts["norm"]
        kv = batch * context_len * kv_bytes_per_token(shape, kv_cache_dtype)
        return ForwardCost(2.0 * params + kv, 2.0 * tokens * params)
    if role == "mtp":
        head = shape.vocab_size * shape.hidden_size * dtype_bytes("auto", shape)  # the target's head, read each step
        per_module = mtp_weight_bytes(shape) / shape.num_mtp_layers + head
        params = per_module / dtype_bytes("auto", shape)
        return ForwardCost(per_module + batch * context_len * kv_layer, 2.0 * tokens * params)
    return ForwardCost(
        decode_step_bytes(shape, batch, context_len, kv_cache_dtype), decode_step_flops(shape, batch, q)
    )


def cost_time_s(cost: ForwardCost, gpu: Gpu | str, fit: EfficiencyFit, tensor_parallel: int = 1) -> float:
    """Roofline time of a forward with the fitted H200 efficiencies (BF16 bandwidth efficiency for every byte,
    BF16 compute efficiency for every FLOP, the fitted per-forward overhead), its work split over ``tensor_parallel``
    GPUs. Communication between those GPUs is not modelled."""
    device = _as_gpu(gpu)
    memory = cost.bytes / (tensor_parallel * fit.bandwidth_efficiency * device.bandwidth_bytes_s)
    compute = cost.flops / (tensor_parallel * fit.compute_efficiency * device.bf16_flops_s)
    return max(memory, compute) + fit.overhead_s


def speculation_prediction(
    target: str, rates: Iterable[float], batch: int, context_len: float, fit: EfficiencyFit, gpu: Gpu | str,
    draft: str | None = None, tensor_parallel: int = 1, kv_cache_dtype: str = "auto",
    draft_fixed_cost_s: float | None = None,
) -> dict[str, float]:
    """Predicted decode-step times and speed-up of speculation with imposed unconditional ``rates`` (k = their count).

    ``draft=None`` drafts with the target's MTP modules, else with the draft model or head ``draft``. With
    T(B, q) the forward time over B sequences of q tokens: c = T_draft(B, 1) / T(B, 1) and
    S = τ · T(B, 1) / (T(B, k + 1) + k · T_draft(B, 1)), τ = 1 + Σ rates. The drafter's first pass really covers
    the accepted tokens of the last step (slightly more than B tokens); that is not modelled. ``fit``'s draft
    overhead t_d is not applied: it was fitted on separate draft models (vLLM's ``draft_model`` method, which runs
    without async scheduling), not on MTP modules or EAGLE heads.

    A draft forward is its roofline time plus ``draft_fixed_cost_s``; ``None`` charges it ``fit``'s per-forward
    overhead, the fixed cost of a whole engine step fitted on spec-off rows. ``draft_fixed_cost_ms`` in the result
    says which was used.
    """
    p = list(rates)
    k = len(p)
    if k < 1:
        raise ValueError("rates must hold one entry per draft position (k >= 1)")
    tau = tokens_per_step_from_rates(p)

    def time(shape: str, q: int, role: str) -> float:
        return cost_time_s(forward_cost(shape, batch, q, context_len, kv_cache_dtype, role), gpu, fit, tensor_parallel)

    if draft_fixed_cost_s is not None and draft_fixed_cost_s < 0:
        raise ValueError(f"draft_fixed_cost_s must be >= 0, got {draft_fixed_cost_s}")
    fixed = fit.overhead_s if draft_fixed_cost_s is None else draft_fixed_cost_s
    decode = time(target, 1, "target")
    verify = time(target, k + 1, "target")
    draft_step = (time(draft, 1, "draft") if draft else time(target, 1, "mtp")) - fit.overhead_s + fixed
    step = verify + k * draft_step
    return {
        "batch": batch, "k": k, "tau": tau, "c": draft_step / decode, "decode_ms": 1000 * decode,
        "verify_ms": 1000 * verify, "draft_ms": 1000 * draft_step, "draft_fixed_cost_ms": 1000 * fixed,
        "verify_over_decode": verify / decode, "speedup": tau * decode / step, "tpot_off_ms": 1000 * decode,
        "tpot_on_ms": 1000 * step / tau,
    }  # fmt: skip


def engine_prediction_configs(
    engines: Iterable[EngineConfig], context_len: float, *, model: str | None = None,
    first_rate: float | None = None, rates: Iterable[float] | None = None,
) -> dict[str, dict[str, Any]]:
    """``prediction_frame``'s configs for the speculative engines of a plan, by label: each one's target, drafter
    (none for MTP, which drafts with the target's own modules), imposed per-position acceptance, tensor parallelism
    and ``context_len``. ``model`` keeps one target's engines, ``first_rate`` those whose position-1 rate is that,
    ``rates`` those that impose exactly these rates."""
    wanted = None if rates is None else list(rates)
    configs = {}
    for engine in engines:
        spec = engine.speculative
        if spec is None or spec.synthetic_acceptance_rates is None:
            continue
        imposed = list(spec.synthetic_acceptance_rates)
        if ((model is not None and engine.model != model) or (first_rate is not None and imposed[0] != first_rate)
                or (wanted is not None and imposed != wanted)):
            continue
        configs[engine.label] = {
            "target": engine.model, "rates": imposed, "context_len": context_len,
            "draft": spec.model if spec.method != "mtp" else None, "tensor_parallel": engine.tensor_parallel_size,
        }  # fmt: skip
    return configs


def prediction_frame(
    configs: Mapping[str, Mapping[str, Any]], batches: Iterable[int], fit: EfficiencyFit, gpu: Gpu | str = "H200-SXM",
    draft_fixed_cost_s: float | None = None,
) -> pd.DataFrame:
    """``speculation_prediction`` for each named config (its keyword arguments) at each batch, as one table;
    ``draft_fixed_cost_s`` applies to every config that does not set its own."""
    import pandas as pd

    records = []
    for label, kwargs in configs.items():
        options = {"draft_fixed_cost_s": draft_fixed_cost_s, **kwargs}
        for batch in batches:
            records.append({"config": label, **speculation_prediction(batch=batch, fit=fit, gpu=gpu, **options)})
    return pd.DataFrame(records)


def routing_signature(
    measured: pd.DataFrame, model_shape: str, fit: EfficiencyFit, gpu: Gpu | str = "H200-SXM",
    low: int = 1, high: int = 16, input_len: int | None = None,
) -> pd.DataFrame:
    """How spec-off TPOT grows from concurrency ``low`` to ``high``, measured and as predicted under uniform and under
    fixed routing. Uniform routing makes a batch touch many more experts than one sequence does; a measured growth
    near the 'fixed' prediction says the dummy router sent every token to the same experts (what a kernel that ignores
    the routing simulation would do with a degenerate router)."""
    import pandas as pd

    from vllm_playbooks.analysis import is_baseline

    rows = measured[(measured["model_shape"] == model_shape) & is_baseline(measured)]
    rows = rows[rows["concurrency"].isin([low, high]) & rows["request_rate_qps"].isna()]
    if input_len is not None:
        rows = rows[rows["input_len"] == input_len]
    records = []
    for (in_len, out_len), group in rows.groupby(["input_len", "output_len"]):
        tpot = group.groupby("concurrency")["tpot_mean_ms"].median()
        if low not in tpot.index or high not in tpot.index:
            continue
        context = float(in_len) + float(out_len) / 2
        predicted = {}
        for routing in ("uniform", "fixed"):
            times = [cost_time_s(forward_cost(model_shape, b, 1, context, routing=routing), gpu, fit) for b in (low, high)]
            predicted[routing] = times[1] / times[0]
        records.append({
            "input_len": int(in_len), "output_len": int(out_len), "measured_growth": tpot[high] / tpot[low],
            "predicted_uniform": predicted["uniform"], "predicted_fixed": predicted["fixed"],
        })  # fmt: skip
    return pd.DataFrame(records, columns=["input_len", "output_len", "measured_growth", "predicted_uniform",
                                          "predicted_fixed"])  # fmt: skip


def eagle3_predictions(
    target: str, draft: str, alphas: Iterable[float], ks: Iterable[int],
    batches: Iterable[int] | Mapping[str, Iterable[int]], profiles: Mapping[str, tuple[int, int]], fit: EfficiencyFit,
    gpu: Gpu | str = "H200-SXM",
) -> pd.DataFrame:
    """``speculation_prediction`` for a draft head at i.i.d. acceptance α (rates α, α², …) over k, batch and length
    profile, in the measured tables' columns: profile, k, imposed_alpha, concurrency (= batch), speedup and
    ``gain_pct`` = 100 · (speedup − 1), the output-throughput gain of a closed loop whose slots always decode.
    ``batches`` is one list for every profile or a list per profile name."""
    import pandas as pd

    ks, alphas = list(ks), list(alphas)
    records = []
    for profile, (input_len, output_len) in profiles.items():
        context = input_len + output_len / 2
        levels = list(batches[profile]) if isinstance(batches, Mapping) else list(batches)
        for alpha in alphas:
            for k in ks:
                rates = [alpha**i for i in range(1, k + 1)]
                for batch in levels:
                    result = speculation_prediction(target, rates, batch, context, fit, gpu, draft=draft)
                    records.append({"profile": profile, "engine_label": f"k={k} α={alpha:g}", "k": k,
                                    "imposed_alpha": alpha, "concurrency": batch, **result,
                                    "gain_pct": 100.0 * (result["speedup"] - 1.0)})  # fmt: skip
    return pd.DataFrame(records)
