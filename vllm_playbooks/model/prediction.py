"""What a fitted step-time model (``model.calibration``) predicts: forward-pass times, TPOT and throughput of rows,
configs and what-if curves, and the checks that a predicted config loads at all.

Every function takes its rows and fit as arguments; none reads recorded data."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from vllm_playbooks.config.capacity import GIB, check_fits
from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.config.speculative import SpeculativeConfig
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.hardware import REFERENCE_DATASHEET, Gpu, as_gpu
from vllm_playbooks.model.calibration import EfficiencyFit, fit_parameters, forward_pass_s, tpot_ms_of
from vllm_playbooks.model.roofline import ForwardCost, forward_cost
from vllm_playbooks.model.speculative import tokens_per_step_from_rates
from vllm_playbooks.model.steps import _Forward, _forward, _get, _row_terms, moe_layers_run
from vllm_playbooks.shapes import resolve_model


def forward_time_s(
    fit: EfficiencyFit,
    model: str,
    batch: float,
    context_len: float,
    prefill_tokens: float = 0.0,
    kv_cache_dtype: str = "auto",
    gpu: Gpu | str | None = None,
    shards: int = 1,
) -> float:
    """Fitted-roofline time (s) of one forward pass: ``batch`` sequences decode one token each over ``context_len``
    tokens of KV, beside ``prefill_tokens`` prompt tokens, with bytes and FLOPs split evenly over ``shards`` GPUs
    (tensor-parallel ranks or pipeline stages) and the fixed overhead paid once. Communication is not modelled."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    device = as_gpu(gpu if gpu is not None else fit.gpu)
    whole = _forward(resolve_model(model), batch, 1, context_len, kv_cache_dtype, prefill_tokens)
    part = _Forward(whole.dense_bytes / shards, whole.quant_bytes / shards, whole.flops / shards, whole.moe_layers)
    return forward_pass_s(part, device, *fit_parameters(fit))


def predict_tpot_ms(
    row_like: Any, fit: EfficiencyFit, gpu: Gpu | str | None = None, alpha: float | None = None
) -> float:
    """Predicted mean TPOT (ms) of a closed-loop row, with or without speculation, on ``gpu`` (default: the fit's).

    With speculation: (T_target(B, k+1) + k · (T_draft(B, 1) + t_d) + t_v) / τ, each forward from the same fitted
    roofline, t_d and t_v the fit's speculation overheads (``EfficiencyFit.speculation``; 0 when it has none). On
    another GPU than ``fit.gpu`` every fitted parameter (efficiencies, t0, the MoE-layer time, t_d) is carried over
    as it is; ``model.holdout.calibrate_on_gpu`` refits the GPU's own from a few measured points.
    """
    device = as_gpu(gpu if gpu is not None else fit.gpu)
    return tpot_ms_of(
        _row_terms(row_like, alpha), device, fit_parameters(fit), fit.draft_overhead_s, fit.verify_overhead_s
    )


def prediction_table(rows: Iterable[Any], fit: EfficiencyFit, gpu: Gpu | str | None = None) -> pd.DataFrame:
    """Measured vs predicted TPOT and output tok/s, one line per row, with relative errors (predicted / measured − 1).

    Predicted output tok/s = concurrency × 1000 / TPOT: a closed loop with every slot always decoding. It ignores the
    time each request waits for its first token, so it overstates throughput where TTFT is a large share of a
    request (``output_tok_s_from_measured_tpot`` shows that approximation applied to the measured TPOT).
    """
    records = []
    for row in rows:
        tpot = predict_tpot_ms(row, fit, gpu)
        measured_tpot = float(_get(row, "tpot_mean_ms"))
        batch = int(_get(row, "concurrency"))
        measured_tok = float(_get(row, "output_tok_s"))
        records.append(
            {
                "case": _get(row, "case"),
                "model_shape": _get(row, "model_shape"),
                "spec_method": _get(row, "spec_method"),
                "k": int(_get(row, "num_speculative_tokens") or 0),
                "concurrency": batch,
                "tpot_ms_measured": measured_tpot,
                "tpot_ms_predicted": tpot,
                "tpot_rel_error": tpot / measured_tpot - 1,
                "output_tok_s_measured": measured_tok,
                "output_tok_s_predicted": batch * 1000 / tpot,
                "output_tok_s_from_measured_tpot": batch * 1000 / measured_tpot,
                "output_tok_s_rel_error": batch * 1000 / tpot / measured_tok - 1,
            }
        )
    return pd.DataFrame(records)


#: The columns of ``whatif_curve`` with their headers in words (``book.tables.in_words``).
CURVE_COLUMNS = {
    "engine_label": "configuration",
    "concurrency": "concurrency",
    "tpot_mean_ms": "TPOT (ms)",
    "tpot_ms_low": "TPOT low (ms)",
    "tpot_ms_high": "TPOT high (ms)",
    "output_tok_s": "output tok/s",
    "output_tok_s_low": "output tok/s low",
    "output_tok_s_high": "output tok/s high",
}


def whatif_curve(
    fit: EfficiencyFit,
    gpu: Gpu | str,
    model: str,
    concurrencies: Iterable[int],
    input_len: int,
    output_len: int,
    kv_cache_dtype: str = "auto",
    draft_model: str | None = None,
    k: int = 0,
    alpha: float | None = None,
    interval_log: float | None = None,
) -> pd.DataFrame:
    """Predicted mean TPOT and closed-loop output tok/s against concurrency, without and (if a draft is given) with
    speculation, on ``gpu`` with the efficiencies fitted on the H200 (see ``EfficiencyFit``; the speculative curve
    includes the fit's draft overhead t_d when it has one).

    Refuses (``ConfigError``) a draft without its acceptance ``alpha``, and (``CapacityError``, the KV calculator's
    ``check_fits``) a config whose weights, or one sequence of input + output tokens, cannot fit one such GPU.
    ``interval_log`` (a half-width in log TPOT, e.g. ``model.holdout``'s from held-out errors) adds the interval's
    bounds: ``tpot_ms_low``/``tpot_ms_high`` and the output tok/s they give."""
    concurrencies = list(concurrencies)
    check_loadable(gpu, model, input_len + output_len, draft_model if k else None, k, kv_cache_dtype)
    if draft_model and k and alpha is None:
        raise ConfigError(f"a what-if curve with draft {draft_model!r} and k={k} needs its acceptance alpha (0 to 1)")

    base = {
        "model_shape": model,
        "kv_cache_dtype": kv_cache_dtype,
        "input_len": input_len,
        "output_len": output_len,
        "num_speculative_tokens": 0,
    }
    variants = [("spec off", base)]
    if draft_model and k:
        variants.append(
            (
                f"draft k={k} α={alpha:g}",
                {**base, "num_speculative_tokens": k, "draft_model": draft_model, "imposed_alpha": alpha},
            )
        )
    records = []
    for label, spec in variants:
        for concurrency in concurrencies:
            tpot = predict_tpot_ms({**spec, "concurrency": concurrency}, fit, gpu)
            record = {
                "engine_label": label,
                "concurrency": concurrency,
                "tpot_mean_ms": tpot,
                "output_tok_s": concurrency * 1000 / tpot,
            }
            if interval_log is not None:
                low, high = tpot * math.exp(-interval_log), tpot * math.exp(interval_log)
                record.update(
                    tpot_ms_low=low,
                    tpot_ms_high=high,
                    output_tok_s_low=concurrency * 1000 / high,
                    output_tok_s_high=concurrency * 1000 / low,
                )
            records.append(record)
    return pd.DataFrame(records)


def check_loadable(
    gpu: Gpu | str,
    model: str,
    max_model_len: int,
    draft_model: str | None = None,
    k: int = 0,
    kv_cache_dtype: str = "auto",
) -> None:
    """Raise ``CapacityError`` where ``model`` (with ``draft_model`` at ``k``) cannot load on one ``gpu`` at vLLM's
    default memory share, or holds less than one sequence of ``max_model_len`` tokens: the calculator's
    ``check_fits``, on the GPU's memory as its datasheet gives it (decimal GB)."""
    device = as_gpu(gpu)
    spec = None
    if draft_model and k:
        spec = SpeculativeConfig.model_validate(  # quiet: the advisories are vLLM's start-up notes, not this check's
            {"method": "draft_model", "model": draft_model, "num_speculative_tokens": k}, context={"advisories": False}
        )
    engine = EngineConfig(
        label="what-if", model=model, max_model_len=max_model_len, kv_cache_dtype=kv_cache_dtype, speculative=spec
    )
    check_fits(engine, round(device.memory_gb * 1e9 / GIB, 1), device.name)


def cost_time_s(
    cost: ForwardCost, gpu: Gpu | str, fit: EfficiencyFit, tensor_parallel: int = 1, moe_layers: int = 0
) -> float:
    """Roofline time of a forward with the fitted H200 efficiencies (BF16 bandwidth efficiency for every byte,
    BF16 compute efficiency for every FLOP, the fitted per-forward overhead and, for ``moe_layers`` MoE layers, the
    fitted time per MoE layer), its work split over ``tensor_parallel`` GPUs. Communication between those GPUs is not
    modelled."""
    device = as_gpu(gpu)
    memory = cost.bytes / (tensor_parallel * fit.bandwidth_efficiency * device.bandwidth_bytes_s)
    compute = cost.flops / (tensor_parallel * fit.compute_efficiency * device.bf16_flops_s)
    return max(memory, compute) + fit.overhead_s + moe_layers * fit.moe_layer_overhead_s


def speculation_prediction(
    target: str,
    rates: Iterable[float],
    batch: int,
    context_len: float,
    fit: EfficiencyFit,
    gpu: Gpu | str,
    draft: str | None = None,
    tensor_parallel: int = 1,
    kv_cache_dtype: str = "auto",
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
        cost = forward_cost(shape, batch, q, context_len, kv_cache_dtype, role)
        return cost_time_s(cost, gpu, fit, tensor_parallel, moe_layers_run(resolve_model(shape), role))

    if draft_fixed_cost_s is not None and draft_fixed_cost_s < 0:
        raise ValueError(f"draft_fixed_cost_s must be >= 0, got {draft_fixed_cost_s}")
    fixed = fit.overhead_s if draft_fixed_cost_s is None else draft_fixed_cost_s
    decode = time(target, 1, "target")
    verify = time(target, k + 1, "target")
    draft_step = (time(draft, 1, "draft") if draft else time(target, 1, "mtp")) - fit.overhead_s + fixed
    step = verify + k * draft_step
    return {
        "batch": batch,
        "k": k,
        "tau": tau,
        "c": draft_step / decode,
        "decode_ms": 1000 * decode,
        "verify_ms": 1000 * verify,
        "draft_ms": 1000 * draft_step,
        "draft_fixed_cost_ms": 1000 * fixed,
        "verify_over_decode": verify / decode,
        "speedup": tau * decode / step,
        "tpot_off_ms": 1000 * decode,
        "tpot_on_ms": 1000 * step / tau,
    }


def engine_prediction_configs(
    engines: Iterable[EngineConfig],
    context_len: float,
    *,
    model: str | None = None,
    first_rate: float | None = None,
    rates: Iterable[float] | None = None,
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
        if (
            (model is not None and engine.model != model)
            or (first_rate is not None and imposed[0] != first_rate)
            or (wanted is not None and imposed != wanted)
        ):
            continue
        configs[engine.label] = {
            "target": engine.model,
            "rates": imposed,
            "context_len": context_len,
            "draft": spec.model if spec.method != "mtp" else None,
            "tensor_parallel": engine.tensor_parallel_size,
        }
    return configs


def prediction_frame(
    configs: Mapping[str, Mapping[str, Any]],
    batches: Iterable[int],
    fit: EfficiencyFit,
    gpu: Gpu | str = REFERENCE_DATASHEET,
    draft_fixed_cost_s: float | None = None,
) -> pd.DataFrame:
    """``speculation_prediction`` for each named config (its keyword arguments) at each batch, as one table;
    ``draft_fixed_cost_s`` applies to every config that does not set its own."""
    records = []
    for label, kwargs in configs.items():
        options = {"draft_fixed_cost_s": draft_fixed_cost_s, **kwargs}
        for batch in batches:
            records.append({"config": label, **speculation_prediction(batch=batch, fit=fit, gpu=gpu, **options)})
    return pd.DataFrame(records)
