"""Rules of thumb the ledger checks across cases: acceptance bands, the compute-bound batch, temperature, KV fit, vLLM's
batching defaults."""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from vllm_playbooks.analysis.noise import MIN_CLEAN_REPEATS
from vllm_playbooks.analysis.schedule import scheduled_off
from vllm_playbooks.claims.claim import CheckResult, Claim, Evidence, check, model_error, percent_change, speedup_pairs
from vllm_playbooks.claims.loading import is_missing
from vllm_playbooks.claims.verdict import LOAD_FACTOR, Effect, Verdict, combine, effect
from vllm_playbooks.config.capacity import GIB, batch_defaults, check_fits
from vllm_playbooks.hardware import REFERENCE_DATASHEET, get_gpu
from vllm_playbooks.model.roofline import compute_bound_batch
from vllm_playbooks.model.speculative import acceptance_rate_of_alpha, break_even_alpha, draft_cost_from_tpot
from vllm_playbooks.results.stalls import describe_load
from vllm_playbooks.shapes import resolve_model
from vllm_playbooks.text import value_range


def _break_even_by_config(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """Per recorded speculative config, its draft cost c from the TPOTs at its lowest paired concurrency
    (``model.speculative.draft_cost_from_tpot``), the break-even α (``model.speculative.break_even_alpha``) and vLLM's
    acceptance rate at that α (``model.speculative.acceptance_rate_of_alpha``, which equals c)."""

    extra = ["mean_acceptance_length", "model_shape", "draft_model", "spec_method"]
    pairs = speedup_pairs(rows, "tpot_mean_ms", extra=extra)
    pairs = pairs[pairs["mean_acceptance_length"].notna() & pairs["concurrency"].notna()]
    out = []
    for (case, label), group in pairs.groupby(["case", "engine_label"], sort=True):
        first = group.sort_values("concurrency").iloc[0]
        k = int(first["k"])
        c = draft_cost_from_tpot(first["speculative"], first["baseline"], float(first["mean_acceptance_length"]), k)
        alpha = break_even_alpha(k, c)
        rate = acceptance_rate_of_alpha(alpha, k) if alpha is not None else None
        out.append(
            {
                "case": case,
                "engine_label": label,
                "target": first["model_shape"],
                "draft": _draft_name(first),
                "k": k,
                "concurrency": int(first["concurrency"]),
                "c": c,
                "alpha": alpha,
                "rate": rate,
            }
        )
    return out


def _draft_name(pair: pd.Series) -> str:
    """The draft of a speculative config: its model, or its method where there is no separate draft model (MTP)."""
    return str(pair["spec_method"]) if is_missing(pair["draft_model"]) else str(pair["draft_model"])


def _describe_break_even(configs: list[dict[str, Any]]) -> str:
    parts = []
    for cfg in configs:
        where = f"{cfg['target']} + {cfg['draft']}, k={cfg['k']}"
        if cfg["rate"] is None:
            parts.append(f"{where}: c={cfg['c']:.2f}, never breaks even")
        else:
            parts.append(
                f"{where}: c={cfg['c']:.2f}, break-even acceptance rate {cfg['rate']:.2f} (α {cfg['alpha']:.2f})"
            )
    return "; ".join(parts)


def _as_float(value: Any) -> float | None:
    """A cell as a float, None when missing (or the '—' placeholder of a grouping key)."""
    if is_missing(value) or value == "—":
        return None
    return float(value)


def re_measured_pairs(pairs: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The pairs of ``speedup_pairs`` a rule is judged on, and how many were set aside: those with at least
    ``MIN_CLEAN_REPEATS`` runs of each side where there are any (single runs are anecdotes once repeats exist), else
    every pair, none set aside."""
    repeated = pairs[pairs[["baseline_runs", "speculative_runs"]].min(axis=1) >= MIN_CLEAN_REPEATS]
    if repeated.empty:
        return pairs, 0
    return repeated, len(pairs) - len(repeated)


@check("acceptance_bands")
def acceptance_bands(claim: Claim, ev: Evidence) -> CheckResult:
    """Rule of thumb: vLLM's draft acceptance rate below 0.5 is a net loss, 0.5–0.65 breaks even, 0.65 or more helps.

    Measured: every recorded speculative point of every case with its baseline at the same load; its measured
    acceptance rate (accepted / drafted, the metric the rule names) puts it in a band, and its speed-up must have that
    band's effect (``effect``, within the point's noise band): output throughput in a closed loop, mean TPOT at a
    request rate (an open loop's throughput is set by the arrivals). Where some points rest on ``MIN_CLEAN_REPEATS``
    clean runs of each side, the rule is judged on those alone (``re_measured_pairs``) and the text says how many
    single-run points were set aside and which acceptance rates the judged ones span; where none do, on every point,
    whose runs a side (fewer than ``MIN_CLEAN_REPEATS``) the ledger states. Model: per recorded config, the break-even
    acceptance rate from the draft cost c the TPOTs imply (``_break_even_by_config``); the bands hold if every one falls
    in the break-even band.
    """
    loss_below = ev.value(claim, "acceptance-net-loss-below")
    even_low, even_high = ev.value(claim, "acceptance-break-even-low"), ev.value(claim, "acceptance-break-even-high")
    helps_from = ev.value(claim, "acceptance-helps-from")
    published = (
        f"acceptance rate below {loss_below:g}: a net loss; {even_low:g}–{even_high:g}: break-even; "
        f"{helps_from:g} or more: helps"
    )

    rows = ev.all_rows()
    drafting = rows[~scheduled_off(rows)]  # a schedule's k = 0 points drafted too little to judge
    # A closed loop's speed-up shows in its output throughput; an open loop's throughput is what its arrival rate
    # offers, so there the speed-up is the baseline's mean TPOT over the speculative one at the same request rate.
    open_loop = drafting["request_rate_qps"].notna()
    pairs = pd.concat(
        [
            speedup_pairs(drafting[~open_loop], "output_tok_s", extra=["acceptance_rate"]),
            speedup_pairs(drafting[open_loop], "tpot_mean_ms", extra=["acceptance_rate"]),
        ],
        ignore_index=True,
    )
    every = pairs[pairs["acceptance_rate"].notna()]
    expected = [
        Effect.LOSS if rate < loss_below else Effect.GAIN if rate >= helps_from else Effect.NONE
        for rate in every["acceptance_rate"].astype(float)
    ]
    agrees = pd.Series(
        [
            effect(float(gain), float(band)) is want
            for gain, band, want in zip(every["speedup"], every["band_pct"], expected, strict=True)
        ],
        index=every.index,
        dtype=bool,
    )
    pairs, set_aside = re_measured_pairs(every)
    verdicts, notes, tally = [], [], {want: [0, 0] for want in (Effect.LOSS, Effect.NONE, Effect.GAIN)}
    for (i, r), wanted in zip(every.iterrows(), expected, strict=True):
        if i not in pairs.index:
            continue
        verdicts.append(Verdict.REPRODUCED if agrees[i] else Verdict.NOT_REPRODUCED)
        tally[wanted][0] += int(agrees[i])
        tally[wanted][1] += 1
        if not agrees[i]:
            load = describe_load(r["request_rate_qps"], r["concurrency"])
            if float(r["random_range_ratio"] or 0) > 0:
                load += f" with lengths ±{100 * float(r['random_range_ratio']):.0f} %"
            notes.append(
                f"{r['case']} on {r['gpu_name']} at {load}: acceptance {float(r['acceptance_rate']):.2f} "
                f"(expects {wanted}) gave {percent_change(float(r['speedup']))}"
            )
    if verdicts:
        against = f"; against it: {'; '.join(notes)}" if notes else ""
        judged = "paired rows"
        if set_aside:
            rates = pairs["acceptance_rate"].astype(float)
            judged = (
                f"re-measured points (at least {MIN_CLEAN_REPEATS} clean runs a side; acceptance "
                f"{rates.min():.2f}–{rates.max():.2f})"
            )
            aside = agrees.drop(pairs.index)
            against += (
                f"; set aside: {set_aside} points with fewer clean runs, {int(aside.sum())} of which behave "
                f"as their band says"
            )
        by_band = ", ".join(f"{want} {n_agree} of {n}" for want, (n_agree, n) in tally.items() if n)
        measured = (
            f"{len(verdicts) - len(notes)} of {len(verdicts)} {judged} behave as their band says (by the "
            f"effect their band expects: {by_band}){against}"
        )
    else:
        measured = "no recorded speculative row with a measured acceptance rate yet"
    configs = _break_even_by_config(rows)
    model_verdict = None
    if configs:
        inside = all(cfg["rate"] is not None and even_low <= cfg["rate"] <= even_high for cfg in configs)
        model_verdict = Verdict.REPRODUCED if inside else Verdict.NOT_REPRODUCED
    model_says = _describe_break_even(configs) if configs else ""
    return CheckResult(
        published,
        measured,
        combine(verdicts),
        len(verdicts),
        model_says,
        model_verdict,
        pairs=pairs if verdicts else None,
    )


@check("compute_bound_batch")
def compute_bound_batch_check(claim: Claim, ev: Evidence) -> CheckResult:
    """Rule of thumb: from about 64 sequences per step, plain decoding nears the roofline's ridge (compute-bound).

    Model only: for every recorded (target shape, KV dtype, mean context) the batch at which a plain decode step turns
    compute-bound on the reference GPU (``hardware.REFERENCE_DATASHEET``; ``model.roofline.compute_bound_batch``), and
    for speculative configs the verify step's (k + 1 query tokens). The rule holds if every plain-decode batch lies
    within ``LOAD_FACTOR`` of the claimed one.
    """

    claimed = ev.value(claim, "compute-bound-batch-size")
    published = f"compute-bound from about {claimed:g} sequences per step (no GPU or model stated)"
    rows = ev.all_rows()
    configs: dict[tuple[str, str, float], set[int]] = {}
    for _, r in rows.iterrows():
        context = float(r["input_len"]) + float(r["output_len"]) / 2
        configs.setdefault((str(r["model_shape"]), str(r["kv_cache_dtype"]), context), set()).add(
            int(r["num_speculative_tokens"])
        )
    notes, agree = [], []
    for (shape_name, kv, context), ks in sorted(configs.items()):
        error = model_error(
            lambda n=shape_name, kv=kv, ctx=context: compute_bound_batch(resolve_model(n), REFERENCE_DATASHEET, ctx, kv)
        )
        if error:
            notes.append(f"{shape_name}: not modelled ({error})")
            continue
        shape = resolve_model(shape_name)
        plain = compute_bound_batch(shape, REFERENCE_DATASHEET, context, kv)
        agree.append(plain is not None and claimed / LOAD_FACTOR <= plain <= claimed * LOAD_FACTOR)
        words = f"{plain:,}" if plain is not None else "never (KV reads grow as fast as the FLOPs)"
        verify = "".join(
            f", verify k={k}: {compute_bound_batch(shape, REFERENCE_DATASHEET, context, kv, q=k + 1)}"
            for k in sorted(ks)
            if k
        )
        notes.append(f"{shape_name} ({kv} KV, {context:g} tokens of context): decode {words}{verify}")
    on = f"batch at which a step turns compute-bound on {REFERENCE_DATASHEET}: "
    model_says = on + "; ".join(notes) if notes else ""
    if agree:
        model_verdict = Verdict.REPRODUCED if all(agree) else Verdict.NOT_REPRODUCED
    else:
        model_verdict = Verdict.NOT_REPRODUCED if notes else None
    if model_verdict is None:
        return CheckResult(published, "", Verdict.NOT_MEASURED, 0, "no recorded shape to model yet", None)
    measured = "no run measures where a step turns compute-bound; the roofline computes it for the recorded shapes"
    return CheckResult(published, measured, Verdict.MODEL_ONLY, 0, model_says, model_verdict)


@check("temperature_rule")
def temperature_rule(claim: Claim, ev: Evidence) -> CheckResult:
    """Rule of thumb: a (median) sampling temperature above 0.7 makes drafts rejected often enough that speculation
    is not recommended.

    Not measurable on rows with imposed acceptance: the synthetic sampler accepts drafts at the imposed rates whatever
    the temperature, and the row schema does not record a temperature. The check counts the speculative rows whose
    acceptance was earned (real weights, nothing imposed) so the page says what exists. Model: theory has no
    temperature term; temperature acts through α only, against the break-even α of each recorded config.
    """
    threshold = ev.value(claim, "temperature-discourages-above")
    published = f"speculation not recommended above a median temperature of {threshold:g}"
    rows = ev.all_rows()
    earned = rows[(rows["spec_method"] != "none") & rows["imposed_acceptance_rates"].isna()]
    measured = (
        f"{len(earned)} recorded speculative row(s) with earned acceptance; every other one imposes its "
        "acceptance, and no row records a temperature"
    )
    configs = _break_even_by_config(rows)
    model_says = ""
    if configs:
        model_says = (
            "no temperature term: temperature matters only through α, and speculation pays while α stays "
            "above the break-even: " + _describe_break_even(configs)
        )
    return CheckResult(published, measured, Verdict.NOT_MEASURED, 0, model_says, None)


@check("kv_product_fits")
def kv_product_fits(claim: Claim, ev: Evidence) -> CheckResult:
    """Rule of thumb: max_num_seqs × max_model_len must fit the KV-cache budget, else OOM or preemption.

    Measured: every recorded vLLM start-up, with the KV-cache tokens vLLM itself logged. A start-up whose product
    exceeds the cache tests the rule: it agrees if its measured rows saw preemptions, and goes against it if the
    server started and served its rows without any. Model: the capacity calculator's reading of vLLM 0.26
    (``config.capacity.check_fits``), which refuses only a cache smaller than one max_model_len sequence.
    """

    minimum = ev.value(claim, "kv-fit-min-ratio")
    published = f"KV-cache tokens ≥ {minimum:g} × max_num_seqs × max_model_len"
    starts = ev.startups
    if starts is None or starts.empty:
        return CheckResult(published, "no recorded start-up yet", Verdict.NOT_MEASURED, 0, "", None)
    product = starts["max_num_seqs"].astype(int) * starts["max_model_len"].astype(int)
    starts = starts.assign(ratio=starts["kv_cache_tokens"].astype(int) / product)
    tests = starts[(starts["ratio"] < minimum) & (starts["measured_rows"].astype(int) > 0)]
    verdicts = [Verdict.REPRODUCED if int(n) > 0 else Verdict.NOT_REPRODUCED for n in tests["preemptions"]]
    notes, model_notes = [], []
    for (case, label, gpu), group in tests.groupby(["case", "engine_label", "gpu_name"], sort=True, dropna=False):
        where = f"{case} {label} on {gpu}"
        seqs, length = int(group["max_num_seqs"].iloc[0]), int(group["max_model_len"].iloc[0])
        tokens = value_range(group["kv_cache_tokens"].tolist(), "{:,.0f}")
        ratios = value_range(group["ratio"].tolist(), "{:.2f}")
        notes.append(
            f"{where}: {tokens} KV tokens for {seqs} × {length} = {seqs * length:,} ({ratios}×); "
            f"{len(group)} start-up(s), {int(group['measured_rows'].sum())} measured row(s), "
            f"{int(group['preemptions'].sum())} preemptions"
        )
        held = [check_fits(s["engine"], float(s["total_memory_gib"])).max_concurrency for _, s in group.iterrows()]
        model_notes.append(
            f"{where}: holds {value_range(held, '{:.1f}')} sequences of {length} < max_num_seqs {seqs}, "
            "and check_fits lets it start"
        )
    if verdicts:
        measured = "; ".join(notes)
    else:
        measured = f"all {len(starts)} recorded start-ups fit the product, so none tests the rule"
    model_says = (
        (
            "vLLM 0.26 (capacity.check_fits) refuses only a cache smaller than one max_model_len sequence; "
            + "; ".join(model_notes)
        )
        if model_notes
        else ""
    )
    model_verdict = Verdict.NOT_REPRODUCED if model_notes else None
    return CheckResult(published, measured, combine(verdicts), len(verdicts), model_says, model_verdict)


_DEFAULTS = re.compile(r"^defaults-(max-num-seqs|max-num-batched-tokens)-(large|small)-(offline|server)$")


#: GPUs of ``data/reference/hardware.csv`` standing for the table's 'large-memory GPU' and 'other GPU' rows.
DEFAULT_TABLE_GPUS = {"large": ("H100-SXM", "MI300X"), "small": ("A100-80GB",)}


@check("batching_defaults_table")
def batching_defaults_table(claim: Claim, ev: Evidence) -> CheckResult:
    """The blog's table of vLLM's ``max_num_seqs`` / ``max_num_batched_tokens`` defaults and the throughput-mode
    doubling, against ``config.capacity.batch_defaults`` (vLLM 0.26's engine/arg_utils.py) for the GPUs of
    ``DEFAULT_TABLE_GPUS``. Model only: every recorded run sets both values itself."""

    sources = ev.sources(claim)
    mismatches, cells, table = [], 0, 0
    for _, r in sources.iterrows():
        match = _DEFAULTS.match(r["claim_id"])
        if not match:
            continue
        table += 1
        knob, size, context = match.groups()
        for name in DEFAULT_TABLE_GPUS[size]:
            gpu = get_gpu(name)
            tokens, seqs = batch_defaults(gpu.memory_gb * 1e9 / GIB, name, context)  # type: ignore[arg-type]
            ours = seqs if knob == "max-num-seqs" else tokens
            cells += 1
            if ours != r["value"]:
                mismatches.append(f"{r['claim_id']} on {name}: table {r['value']:g}, vLLM 0.26 {ours}")
    factor = ev.value(claim, "defaults-throughput-mode-factor")
    for size, names in DEFAULT_TABLE_GPUS.items():
        for name in names:
            gib = get_gpu(name).memory_gb * 1e9 / GIB
            for context in ("offline", "server"):
                base = batch_defaults(gib, name, context)  # type: ignore[arg-type]
                doubled = batch_defaults(gib, name, context, "throughput")  # type: ignore[arg-type]
                cells += 1
                if any(d != factor * b for d, b in zip(doubled, base, strict=True)):
                    mismatches.append(f"throughput mode on {name} ({context}): {base} → {doubled}")
    published = (
        f"{table} defaults (large-memory and other GPUs × offline and server) and ×{factor:g} in throughput mode"
    )
    model_says = (
        f"capacity.batch_defaults (vLLM 0.26) for {', '.join(n for ns in DEFAULT_TABLE_GPUS.values() for n in ns)}: "
        + (
            f"{cells - len(mismatches)} of {cells} values agree; " + "; ".join(mismatches)
            if mismatches
            else f"all {cells} values agree"
        )
    )
    model_verdict = Verdict.NOT_REPRODUCED if mismatches else Verdict.REPRODUCED
    measured = "every recorded run sets max_num_seqs and max_num_batched_tokens itself, so no run shows a default"
    return CheckResult(published, measured, Verdict.MODEL_ONLY, 0, model_says, model_verdict)
