"""Case: Discussion #13834 — speculative decoding slower for Llama-3.3-70B-AWQ with a 3B draft (its claim check and page
numbers)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from vllm_playbooks.analysis.schedule import scheduled_off
from vllm_playbooks.claims.claim import CheckResult, Claim, Evidence, check, percent_change, speedup_pairs
from vllm_playbooks.claims.reference import published_value
from vllm_playbooks.claims.verdict import LOAD_FACTOR, Verdict, judge
from vllm_playbooks.hardware import get_gpu
from vllm_playbooks.model.calibration import EfficiencyFit
from vllm_playbooks.model.holdout import calibrate_on_gpu
from vllm_playbooks.model.prediction import predict_tpot_ms
from vllm_playbooks.model.speculative import acceptance_rate_of_alpha
from vllm_playbooks.results.store import load_reference


@check("spec_slower_at_reported_load")
def spec_slower_at_reported_load(claim: Claim, ev: Evidence) -> CheckResult:
    """Discussion #13834: speculation lowered output throughput.

    The report's load is what its own numbers imply by Little's law (``cases.discussion_13834.implied_13834``: streams
    in flight = output tok/s × ITL). The check takes the recorded pair with the report's k and acceptance whose
    concurrency is nearest that load, within ``LOAD_FACTOR``, among the points the case's deciding part measures
    (``Evidence.deciding_rows``), and judges its output-throughput ratio against the reported one. The
    model: the H200-fitted roofline moved to the A100's peaks (``cases.discussion_13834.predict_13834_a100``) at that
    load.
    """

    off, on = ev.value(claim, "output-tok-s-spec-off"), ev.value(claim, "output-tok-s-spec-on")
    k, alpha = int(ev.value(claim, "num-speculative-tokens")), ev.value(claim, "acceptance-rate-author-quoted")
    streams = float(implied_13834(ev.sources(claim))["streams_in_flight_spec_off"])
    claimed = on / off
    published = (
        f"{off:g} → {on:g} output tok/s ({percent_change(claimed)}), k={k}, acceptance {alpha:g}, "
        f"≈{streams:.0f} streams"
    )
    pairs = speedup_pairs(ev.deciding_rows(claim), "output_tok_s")
    pairs = pairs[(pairs["k"] == k) & (pairs["imposed_alpha"].astype(float).sub(alpha).abs() < 1e-9)]
    pairs = pairs[pairs["concurrency"].notna()]
    near = pairs[(pairs["concurrency"] >= streams / LOAD_FACTOR) & (pairs["concurrency"] <= streams * LOAD_FACTOR)]
    if near.empty:
        elsewhere = "; ".join(
            f"{percent_change(s)} at concurrency {int(c)}"
            for c, s in zip(pairs["concurrency"], pairs["speedup"], strict=True)
        )
        measured = (
            f"not yet near {streams:.0f} streams; measured so far: {elsewhere}" if elsewhere else "no paired row yet"
        )
        verdict, rows, point, judged = Verdict.NOT_MEASURED, 0, {}, None
    else:
        nearest = (near["concurrency"].astype(float).map(math.log) - math.log(streams)).abs().idxmin()
        row, judged = near.loc[nearest], near.loc[[nearest]]
        measured = (
            f"concurrency {int(row['concurrency'])}: {row['baseline']:.1f} → {row['speculative']:.1f} output tok/s "
            f"({percent_change(row['speedup'])})"
        )
        verdict, rows = judge(float(row["speedup"]), claimed, band_pct=float(row["band_pct"])), 1
        point = {
            "engine_label": str(row["engine_label"]),
            "concurrency": int(row["concurrency"]),
            "k": k,
            "alpha": alpha,
        }
    model_says, model_verdict = "", None
    if ev.fit is not None:
        load = round(streams)
        a100 = predict_13834_a100(ev.fit, concurrency=load, alpha=alpha, k=k)
        predicted = a100["output_tok_s_on"] / a100["output_tok_s_off"]
        model_says = (
            f"H200-fitted roofline on the A100's peaks at {load} streams: {a100['output_tok_s_off']:.0f} → "
            f"{a100['output_tok_s_on']:.0f} output tok/s ({percent_change(predicted)})"
        )
        model_verdict = judge(predicted, claimed)
    return CheckResult(published, measured, verdict, rows, model_says, model_verdict, point, judged)


def implied_13834(published: pd.DataFrame) -> pd.Series:
    """Ratios implied by Discussion #13834's numbers (spec off → on).

    - input tokens per output token = (total − output) / output, with speculation off;
    - streams decoding at once (Little's law) = output tok/s × ITL in seconds;
    - the relative change of output throughput and of ITL when speculation is switched on;
    - the TPOT ratio a closed loop would show (output throughput off / on), and the ITL ratio divided by it: the
      tokens each streamed chunk would carry if the rest of the ITL rise were chunking (``analysis.itl_artifact``).
    """
    out_off, out_on = (
        published_value(published, "output-tok-s-spec-off"),
        published_value(published, "output-tok-s-spec-on"),
    )
    tot_off = published_value(published, "total-tok-s-spec-off")
    itl_off, itl_on = published_value(published, "itl-ms-spec-off"), published_value(published, "itl-ms-spec-on")
    return pd.Series(
        {
            "input_tokens_per_output_token": (tot_off - out_off) / out_off,
            "streams_in_flight_spec_off": out_off * itl_off / 1000.0,
            "output_throughput_change_pct": 100.0 * (out_on / out_off - 1.0),
            "itl_ratio_on_over_off": itl_on / itl_off,
            # a closed loop's TPOT moves inversely to its output throughput; the rest of the ITL rise is chunking
            "tpot_ratio_if_closed_loop": out_off / out_on,
            "itl_chunking_implied": (itl_on / itl_off) * (out_on / out_off),
        },
        name="implied",
    )


def report_acceptance(rows: pd.DataFrame, published: pd.DataFrame) -> dict[str, float | int | None]:
    """The report's acceptance in both of vLLM's vocabularies, so the page and the rules of thumb speak of one thing.

    The report quotes V0's "acceptance rate", which counts every drafted position that matched; for the i.i.d. chain
    our servers impose, that is the per-token acceptance α itself. vLLM 0.26 prints accepted / drafted instead (the
    metric the claims ledger's acceptance bands name), which for the same chain is (τ(α, k) − 1) / k
    (``model.speculative.acceptance_rate_of_alpha``). Returns ``alpha`` and ``k`` (the report's), ``rate_expected``
    (that formula) and ``rate_measured``: the median acceptance rate of the recorded rows of that k and α that drafted
    (a batch-size schedule's points with k = 0 left out), None without such rows; ``rows``: how many.
    """
    alpha = published_value(published, "acceptance-rate-author-quoted")
    k = int(published_value(published, "num-speculative-tokens"))
    drafting = rows[~scheduled_off(rows)] if not rows.empty else rows
    same = drafting[
        (drafting["num_speculative_tokens"] == k)
        & (drafting["imposed_alpha"].astype(float).sub(alpha).abs() < 1e-9)
        & drafting["acceptance_rate"].notna()
    ]
    measured = float(same["acceptance_rate"].astype(float).median()) if len(same) else None
    return {
        "alpha": alpha,
        "k": k,
        "rate_expected": acceptance_rate_of_alpha(alpha, k),
        "rate_measured": measured,
        "rows": len(same),
    }


def a100_table(carried: Mapping[str, float], calibrated: Mapping[str, float]) -> pd.DataFrame:
    """``predict_13834_a100``'s two predictions (H200 parameters carried; calibrated on the report's spec-off point)
    and the report's numbers, one line each, with headers in words: output tok/s off and on, its change, TPOT off
    and on, and the bandwidth efficiency and fixed time per forward the prediction used (blank for the report)."""

    def line(label: str, off: float, on: float, values: Mapping[str, float] | None) -> dict[str, Any]:
        return {
            "A100, Discussion #13834's setup": label,
            "output tok/s, speculation off": off,
            "output tok/s, speculation on": on,
            "change (%)": 100.0 * (on / off - 1.0),
            "TPOT off (ms)": values["tpot_ms_off"] if values else None,
            "TPOT on (ms)": values["tpot_ms_on"] if values else None,
            "HBM bandwidth efficiency": values["bandwidth_efficiency"] if values else None,
            "fixed time per forward t0 (ms)": values["overhead_ms"] if values else None,
        }

    return pd.DataFrame(
        [
            line(
                "predicted, H200 parameters carried", carried["output_tok_s_off"], carried["output_tok_s_on"], carried
            ),
            line(
                "predicted, calibrated on the report's spec-off point",
                calibrated["output_tok_s_off"],
                calibrated["output_tok_s_on"],
                calibrated,
            ),
            line("reported", carried["reported_output_tok_s_off"], carried["reported_output_tok_s_on"], None),
        ]
    )


def predict_13834_a100(
    fit: EfficiencyFit, concurrency: int = 32, alpha: float | None = None, k: int | None = None, calibrate: bool = False
) -> dict[str, float]:
    """Out-of-sample: the H200 fit's efficiencies on the A100-80GB peaks, for Discussion #13834's setup.

    Llama-3.3-70B AWQ target, Llama-3.2-3B AWQ draft, the report's k and acceptance (read from
    ``the case's published.csv`` where not given), fp8 KV, 1240 in / 128 out, ≈ ``concurrency`` streams. Returns
    predicted TPOT and output tok/s (closed loop, concurrency × 1000 / TPOT) off and on, beside the reported output
    tok/s read from ``the case's published.csv``. The speculative prediction includes the fit's per-draft-forward
    overhead when it has one (``fit_efficiency(..., draft_overhead=True)``).

    ``calibrate=False`` carries the H200's efficiencies and fixed times to the A100 unchanged; ``True`` first
    recalibrates them on the report's one spec-off point (``model.holdout.calibrate_on_gpu``: its ITL as TPOT at the
    streams its numbers imply), so only the speculative prediction is out of sample. ``bandwidth_efficiency`` and
    ``overhead_ms`` say which parameters were used.
    """

    ref = load_reference("discussion-13834").set_index("claim_id")["value"].astype(float)
    alpha = float(ref["acceptance-rate-author-quoted"]) if alpha is None else alpha
    k = int(ref["num-speculative-tokens"]) if k is None else k
    base = {
        "model_shape": "llama-3.3-70b-awq",
        "kv_cache_dtype": "fp8",
        "concurrency": concurrency,
        "input_len": 1240,
        "output_len": 128,
        "num_speculative_tokens": 0,
    }
    spec = {**base, "num_speculative_tokens": k, "draft_model": "llama-3.2-3b-awq", "imposed_alpha": alpha}
    a100 = get_gpu("A100-80GB")
    if calibrate:
        streams = round(float(ref["output-tok-s-spec-off"]) * float(ref["itl-ms-spec-off"]) / 1000.0)
        point = {
            **base,
            "case": "discussion-13834 (A100 report)",
            "concurrency": streams,
            "tpot_mean_ms": float(ref["itl-ms-spec-off"]),
        }
        fit = calibrate_on_gpu(fit, [point], a100)
    off_ms = predict_tpot_ms(base, fit, a100)
    on_ms = predict_tpot_ms(spec, fit, a100)
    return {
        "tpot_ms_off": off_ms,
        "tpot_ms_on": on_ms,
        "output_tok_s_off": concurrency * 1000 / off_ms,
        "output_tok_s_on": concurrency * 1000 / on_ms,
        "reported_output_tok_s_off": float(ref["output-tok-s-spec-off"]),
        "reported_output_tok_s_on": float(ref["output-tok-s-spec-on"]),
        "bandwidth_efficiency": fit.bandwidth_efficiency,
        "overhead_ms": 1000 * fit.overhead_s,
    }
