"""Step-time models fitted to measured rows: bandwidth and compute efficiencies, the draft's fixed cost, predictions.

Every function takes its rows as arguments; none reads recorded data."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from vllm_playbooks.config.capacity import GIB, check_fits
from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.config.speculative import SpeculativeConfig
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.config.sizes import dtype_bytes, parameter_count, weight_bytes
from vllm_playbooks.hardware import Gpu, as_gpu
from vllm_playbooks.model.roofline import ForwardCost, decode_step_bytes, decode_step_flops, forward_cost
from vllm_playbooks.model.speculative import expected_tokens_per_step, tokens_per_step_from_rates
from vllm_playbooks.shapes import ModelShape, resolve_model

if TYPE_CHECKING:
    import pandas as pd


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
    device = as_gpu(gpu)
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
    device = as_gpu(gpu if gpu is not None else fit.gpu)
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
    device = as_gpu(gpu if gpu is not None else fit.gpu)
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
    device = as_gpu(gpu if gpu is not None else fit.gpu)
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
    device = as_gpu(gpu if gpu is not None else fit.gpu)
    whole = _forward(resolve_model(model), batch, 1, context_len, kv_cache_dtype, prefill_tokens)
    part = _Forward(whole.dense_bytes / shards, whole.quant_bytes / shards, whole.flops / shards)
    return _time(part, device, *_params(fit))


def predict_tpot_ms(row_like: Any, fit: EfficiencyFit, gpu: Gpu | str | None = None, alpha: float | None = None) -> float:
    """Predicted mean TPOT (ms) of a closed-loop row, with or without speculation, on ``gpu`` (default: the fit's).

    With speculation: (T_target(B, k+1) + k · (T_draft(B, 1) + t_d) + t_v) / τ, each forward from the same fitted
    roofline, t_d and t_v the fit's speculation overheads (``EfficiencyFit.speculation``; 0 when it has none). On
    another GPU they are carried over unchanged, as the per-forward overhead t0 is.
    """
    device = as_gpu(gpu if gpu is not None else fit.gpu)
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


def whatif_curve(
    fit: EfficiencyFit, gpu: Gpu | str, model: str, concurrencies: Iterable[int], input_len: int, output_len: int,
    kv_cache_dtype: str = "auto", draft_model: str | None = None, k: int = 0, alpha: float | None = None,
) -> pd.DataFrame:
    """Predicted mean TPOT and closed-loop output tok/s against concurrency, without and (if a draft is given) with
    speculation, on ``gpu`` with the efficiencies fitted on the H200 (see ``EfficiencyFit``; the speculative curve
    includes the fit's draft overhead t_d when it has one).

    Refuses (``ConfigError``) a draft without its acceptance ``alpha``, and (``CapacityError``, the KV calculator's
    ``check_fits``) a config whose weights, or one sequence of input + output tokens, cannot fit one such GPU."""
    import pandas as pd

    concurrencies = list(concurrencies)
    check_loadable(gpu, model, input_len + output_len, draft_model if k else None, k, kv_cache_dtype)
    if draft_model and k and alpha is None:
        raise ConfigError(f"a what-if curve with draft {draft_model!r} and k={k} needs its acceptance alpha (0 to 1)")

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


def check_loadable(gpu: Gpu | str, model: str, max_model_len: int, draft_model: str | None = None, k: int = 0,
                   kv_cache_dtype: str = "auto") -> None:  # fmt: skip
    """Raise ``CapacityError`` where ``model`` (with ``draft_model`` at ``k``) cannot load on one ``gpu`` at vLLM's
    default memory share, or holds less than one sequence of ``max_model_len`` tokens: the calculator's
    ``check_fits``, on the GPU's memory as its datasheet gives it (decimal GB)."""
    device = as_gpu(gpu)
    spec = None
    if draft_model and k:
        spec = SpeculativeConfig.model_validate(  # quiet: the advisories are vLLM's start-up notes, not this check's
            {"method": "draft_model", "model": draft_model, "num_speculative_tokens": k}, context={"advisories": False}
        )
    engine = EngineConfig(label="what-if", model=model, max_model_len=max_model_len, kv_cache_dtype=kv_cache_dtype,
                          speculative=spec)  # fmt: skip
    check_fits(engine, round(device.memory_gb * 1e9 / GIB, 1), device.name)


def cost_time_s(cost: ForwardCost, gpu: Gpu | str, fit: EfficiencyFit, tensor_parallel: int = 1) -> float:
    """Roofline time of a forward with the fitted H200 efficiencies (BF16 bandwidth efficiency for every byte,
    BF16 compute efficiency for every FLOP, the fitted per-forward overhead), its work split over ``tensor_parallel``
    GPUs. Communication between those GPUs is not modelled."""
    device = as_gpu(gpu)
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
