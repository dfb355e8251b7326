"""The advisor's model: a theory prior for every point of a grid, refitted on the points paid for, and the KV
calculator's pruning.

*Prior* (no measurement): the batch roofline (``model.roofline.forward_cost``) with fixed textbook efficiencies
(``THEORY``; deliberately not fitted on the recorded rows, which the offline evaluation must not see for free). A
decode step of B = min(concurrency, max_num_seqs) sequences takes T_target(B, k + 1) + k · T_draft(B, 1) (the draft
model or head, the target's MTP module, nothing for ngram/suffix), and yields τ tokens (τ from the imposed
acceptance: ``model.speculative``); TPOT = step / τ. TTFT is one prefill of the prompt plus a step. A closed loop of
c clients completes c / (TTFT + (output_len − 1) · TPOT) requests/s; at a request rate the server carries the
batch rate × latency (solved by fixed-point iteration) and completes the rate, up to its capacity.

*Refit*: each measured point gives the ratios measured / prior of TPOT p99, TTFT p99 and requests/s. An unmeasured
point of a config with measured points takes its config's ratios interpolated in log load between its measured loads
(flat beyond them, but moved there by its family's trend over load: the median change, between its nearest measured
load and this one, of the ratios of the family's other configs measured at several loads); a config not measured yet
takes the median over the measured configs of its *family* (its speculative method) of their ratios at the same load;
when none of its family is measured, a speculative config takes them from the measured configs without speculation
(what the GPU and the engine do for every config), and otherwise keeps its prior: one method's own overheads never
carry over to another method, nor to the baseline (a slow draft model's ratios once ruled out the baseline itself).
Each prediction carries an *uncertainty* u (the truth is taken to lie within a factor 1 + u of it):
``PRIOR_UNCERTAINTY`` before any config of its family was measured; for a measured config ``NEAR_UNCERTAINTY`` plus
``DISTANCE_UNCERTAINTY`` per unit of |log load| to its nearest measured load; for a config whose family was measured,
the spread of the family's ratios (of the metrics the SLO bounds, and requests/s) plus ``OTHER_CONFIG_UNCERTAINTY``
(at least ``PRIOR_UNCERTAINTY`` / (1 + configs measured in the family)), plus the same distance term.

*Pruning* by the calculator: a config whose weights, or one sequence of its max_model_len, do not fit the GPU
(``config.capacity.check_fits``) is never proposed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from vllm_playbooks.advisor.goodput import given
from vllm_playbooks.config.capacity import GIB, check_fits
from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.errors import CapacityError
from vllm_playbooks.hardware import Gpu
from vllm_playbooks.model.roofline import forward_cost
from vllm_playbooks.model.speculative import expected_tokens_per_step, tokens_per_step_from_rates

#: Textbook efficiencies of the prior (share of HBM bandwidth, of BF16 peak, fixed cost per forward in s).
THEORY = {"bandwidth": 0.7, "compute": 0.5, "overhead_s": 0.0005}
#: Uncertainty of a prediction before anything of its family was measured: within a factor 2.5 (the prior's
#: constants are textbook values and it does not model vLLM's scheduling overheads).
PRIOR_UNCERTAINTY = 1.5
#: The smallest relative uncertainty of a refitted prediction of a measured config (at a load next to a measured one).
NEAR_UNCERTAINTY = 0.05
#: Added per unit of |log load distance| to the nearest measured load of the same config. The prior's shape over
#: the load is rough: carried 4× in load, a config's measured / prior TPOT ratio was off by a factor 1.6 or more in
#: one case of five on the recorded grids, hence 0.5 (0.15 before, which let one far point rule a config out).
DISTANCE_UNCERTAINTY = 0.5
#: The smallest uncertainty of a config not measured yet whose family was, on top of the spread of its family's ratios.
OTHER_CONFIG_UNCERTAINTY = 0.15
#: Which metric each ratio refits.
RATIOS = ("tpot_p99_ms", "ttft_p99_ms", "request_throughput_rps")


def engine_of(line: Any) -> EngineConfig:
    """The engine config of a catalog line or row."""
    text = line["engine_config_json"] if isinstance(line, dict) else line.engine_config_json
    return EngineConfig.model_validate(json.loads(text))


def _tau(engine: EngineConfig, imposed_alpha: float | None) -> tuple[int, float]:
    spec = engine.speculative
    if spec is None:
        return 0, 1.0
    k = int(spec.num_speculative_tokens or 0)
    if spec.synthetic_acceptance_rates:
        return k, tokens_per_step_from_rates(list(spec.synthetic_acceptance_rates))
    if spec.synthetic_acceptance_length:
        return k, float(spec.synthetic_acceptance_length)
    return k, expected_tokens_per_step(imposed_alpha if imposed_alpha is not None else 0.7, k)


def _forward_s(shape: str, batch: float, q: int, context: float, kv: str, role: str, gpu: Gpu, shards: int) -> float:
    cost = forward_cost(shape, max(1, round(batch)), q, context, kv, role)
    memory = cost.bytes / (shards * THEORY["bandwidth"] * gpu.bandwidth_bytes_s)
    compute = cost.flops / (shards * THEORY["compute"] * gpu.bf16_flops_s)
    return max(memory, compute) + THEORY["overhead_s"]


def step_tpot_ms(engine: EngineConfig, batch: float, input_len: int, output_len: int, gpu: Gpu) -> float:
    """The prior's mean TPOT (ms) of ``engine`` decoding ``batch`` sequences (see the module's docstring)."""
    k, tau = _tau(engine, None)
    context = input_len + output_len / 2
    tp = engine.tensor_parallel_size
    step = _forward_s(engine.model, batch, k + 1, context, engine.kv_cache_dtype, "target", gpu, tp)
    spec = engine.speculative
    if spec is not None and k:
        if spec.method == "mtp":
            step += k * _forward_s(engine.model, batch, 1, context, engine.kv_cache_dtype, "mtp", gpu, tp)
        elif spec.model:
            step += k * _forward_s(spec.model, batch, 1, context, engine.kv_cache_dtype, "draft", gpu, tp)
    return 1000.0 * step / tau


def prior(line: Any, gpu: Gpu) -> dict[str, float]:
    """The prior's TPOT p99 (ms), TTFT p99 (ms) and requests/s at one catalog line (its engine config and load)."""
    get = line.get if isinstance(line, dict) else (lambda name: getattr(line, name))
    engine = engine_of(line)
    n_in, n_out = int(get("input_len")), int(get("output_len"))
    ttft = 1000.0 * _forward_s(
        engine.model, 1, n_in, n_in / 2, engine.kv_cache_dtype, "target", gpu, engine.tensor_parallel_size
    )
    cap = engine.max_num_seqs
    rate = get("request_rate_qps")
    if given(rate):
        batch = 1.0
        for _ in range(30):  # the batch a rate keeps busy: rate × latency, a fixed point
            tpot = step_tpot_ms(engine, batch, n_in, n_out, gpu)
            batch = min(cap, max(1.0, rate * (ttft + (n_out - 1) * tpot) / 1000.0))
        tpot = step_tpot_ms(engine, batch, n_in, n_out, gpu)
        capacity = batch * 1000.0 / (ttft + (n_out - 1) * tpot)
        rps = min(float(rate), capacity)
    else:
        batch = min(float(get("concurrency")), cap)
        tpot = step_tpot_ms(engine, batch, n_in, n_out, gpu)
        ttft += tpot  # a joining request waits for the step under way
        rps = batch * 1000.0 / (ttft + (n_out - 1) * tpot)
    return {"tpot_p99_ms": tpot, "ttft_p99_ms": ttft, "request_throughput_rps": rps}


def load_of(line: Any) -> float:
    """A point's load on one axis: its concurrency, or its request rate."""
    get = line.get if isinstance(line, dict) else (lambda name: getattr(line, name))
    rate = get("request_rate_qps")
    value = rate if given(rate) else get("concurrency")
    return float(value)


def _interpolated(points: list[tuple[float, dict[str, float]]], load: float) -> tuple[dict[str, float], float]:
    """One config's log ratios interpolated linearly in log load between its measured loads (flat beyond them), and
    the |log load| distance to its nearest measured load."""
    ordered = sorted(points, key=lambda t: t[0])
    x = math.log(load)
    xs = [math.log(at) for at, _ in ordered]
    distance = min(abs(x - v) for v in xs)
    if x <= xs[0] or len(ordered) == 1:
        chosen = ordered[0][1] if x <= xs[0] else ordered[-1][1]
        return {m: math.log(chosen[m]) for m in RATIOS}, distance
    if x >= xs[-1]:
        return {m: math.log(ordered[-1][1][m]) for m in RATIOS}, distance
    i = next(i for i in range(1, len(xs)) if xs[i] >= x)
    w = (x - xs[i - 1]) / (xs[i] - xs[i - 1]) if xs[i] > xs[i - 1] else 0.0
    low, high = ordered[i - 1][1], ordered[i][1]
    return {m: (1 - w) * math.log(low[m]) + w * math.log(high[m]) for m in RATIOS}, distance


#: The family of the configs without speculation.
BASELINE_FAMILY = "none"


def family_of(engine: EngineConfig) -> str:
    """A config's family for the refit: its speculative method ('none' without speculation). Ratios carry over
    between configs of one family; vLLM runs each method with its own overheads the prior does not model."""
    return engine.speculative.method if engine.speculative is not None else BASELINE_FAMILY


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


@dataclass(frozen=True)
class Fit:
    """The measured / prior ratios, per config and load, that refit the prior, and each config's family."""

    ratios: dict[str, list[tuple[float, dict[str, float]]]]
    families: dict[str, str]
    distance_uncertainty: float = DISTANCE_UNCERTAINTY

    def predict(
        self,
        config_id: str,
        load: float,
        base: dict[str, float],
        family: str | None = None,
        decisive: tuple[str, ...] = RATIOS,
    ) -> tuple[dict[str, float], float]:
        """The refitted prediction at one point of config ``config_id`` (of ``family``) and its uncertainty u: the
        truth is taken to lie within a factor 1 + u of it. The spread of other configs' ratios counts over the
        ``decisive`` metrics only (those the SLO bounds and requests/s: a noisy TTFT p99 does not blur a TPOT SLO)."""
        own = self.ratios.get(config_id)
        kin = [c for c in self.ratios if c != config_id and family is not None and self.families.get(c) == family]
        if own:
            logs, distance = _interpolated(own, load)
            nearest = min((at for at, _ in own), key=lambda at: abs(math.log(load / at)))
            shaped = [c for c in kin if len(self.ratios[c]) > 1]
            outside = load < min(at for at, _ in own) or load > max(at for at, _ in own)
            if outside and shaped:  # the family's trend over load, from its configs measured at several loads
                for m in RATIOS:
                    logs[m] += _median(
                        [
                            _interpolated(self.ratios[c], load)[0][m] - _interpolated(self.ratios[c], nearest)[0][m]
                            for c in shaped
                        ]
                    )
            u = NEAR_UNCERTAINTY + self.distance_uncertainty * distance
            return {m: base[m] * math.exp(logs[m]) for m in RATIOS}, u
        baseline = [
            c for c in self.ratios if family not in (None, BASELINE_FAMILY) and self.families.get(c) == BASELINE_FAMILY
        ]
        if not (kin or baseline):
            return dict(base), PRIOR_UNCERTAINTY
        others = [_interpolated(self.ratios[c], load) for c in (kin or baseline)]
        ratio = {m: math.exp(_median([logs[m] for logs, _ in others])) for m in RATIOS}
        spread = max((math.exp(max(l[m] for l, _ in others) - min(l[m] for l, _ in others)) - 1) / 2 for m in decisive)
        distance = min(d for _, d in others)
        if kin:  # a few configs' ratios understate their spread
            u = max(OTHER_CONFIG_UNCERTAINTY + spread, PRIOR_UNCERTAINTY / (1 + len(kin)))
        else:
            u = PRIOR_UNCERTAINTY
        return {m: base[m] * ratio[m] for m in RATIOS}, u + self.distance_uncertainty * distance


def refit(
    measured: list[tuple[Any, dict[str, float]]], gpu: Gpu, distance_uncertainty: float = DISTANCE_UNCERTAINTY
) -> Fit:
    """A ``Fit`` from (catalog line, measured medians of ``RATIOS``) pairs, its uncertainty growing by
    ``distance_uncertainty`` per unit of |log load| away from what was measured."""
    ratios: dict[str, list[tuple[float, dict[str, float]]]] = {}
    families: dict[str, str] = {}
    for line, values in measured:
        base = prior(line, gpu)
        ratio = {m: max(values[m], 1e-9) / base[m] for m in RATIOS}
        config_id = str(line["config_id"] if isinstance(line, dict) else line.config_id)
        ratios.setdefault(config_id, []).append((load_of(line), ratio))
        families[config_id] = family_of(engine_of(line))
    return Fit(ratios, families, distance_uncertainty)


def fits_gpu(engine: EngineConfig, gpu: Gpu) -> str | None:
    """None when ``engine`` fits one server's GPUs of model ``gpu``, else the calculator's reason
    (``config.capacity.check_fits`` on the GPU's datasheet memory)."""
    try:
        check_fits(engine, round(gpu.memory_gb * 1e9 / GIB, 1), gpu.name)
    except CapacityError as error:
        return str(error)
    return None


def priced_catalog(catalog: pd.DataFrame, gpu: Gpu) -> pd.DataFrame:
    """``catalog`` with the prior's metrics (``prior_…``), ``load``, ``family`` and ``pruned`` (the calculator's
    reason, or '')."""
    records = []
    reasons: dict[str, str] = {}
    for line in catalog.to_dict("records"):
        if line["config_id"] not in reasons:
            reasons[line["config_id"]] = fits_gpu(engine_of(line), gpu) or ""
        base = prior(line, gpu)
        records.append(
            {
                **line,
                **{f"prior_{m}": v for m, v in base.items()},
                "load": load_of(line),
                "pruned": reasons[line["config_id"]],
                "family": family_of(engine_of(line)),
            }
        )

    return pd.DataFrame(records)
