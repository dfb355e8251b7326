"""What published numbers imply, computed from the reference table (never typed into a page)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from vllm_playbooks.analysis import is_baseline
from vllm_playbooks.errors import SchemaError

if TYPE_CHECKING:
    import pandas as pd

    from vllm_playbooks.claims import CheckResult


def _value(published: pd.DataFrame, claim_id: str) -> float:
    match = published.loc[published["claim_id"] == claim_id, "value"]
    if len(match) != 1:
        raise SchemaError(f"reference table: expected one row {claim_id!r}, found {len(match)}")
    return float(match.iloc[0])


def implied_13834(published: pd.DataFrame) -> pd.Series:
    """Ratios implied by Discussion #13834's numbers (spec off → on).

    - input tokens per output token = (total − output) / output, with speculation off;
    - streams decoding at once (Little's law) = output tok/s × ITL in seconds;
    - the relative change of output throughput and of ITL when speculation is switched on;
    - the TPOT ratio a closed loop would show (output throughput off / on), and the ITL ratio divided by it: the
      tokens each streamed chunk would carry if the rest of the ITL rise were chunking (``analysis.itl_artifact``).
    """
    import pandas as pd

    out_off, out_on = _value(published, "output-tok-s-spec-off"), _value(published, "output-tok-s-spec-on")
    tot_off = _value(published, "total-tok-s-spec-off")
    itl_off, itl_on = _value(published, "itl-ms-spec-off"), _value(published, "itl-ms-spec-on")
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


def measurement_status(measured: pd.DataFrame, case: str) -> str:
    """A sentence on what has been measured for ``case`` so far, from the rows themselves."""
    if measured.empty:
        return (
            f"No run of case {case!r} is recorded in data/runs/{case}/ yet: this page shows published numbers only, "
            "and gives no verdict until a measured run exists."
        )
    gpus = ", ".join(sorted(f"{n} ×{c}" for n, c in set(zip(measured.gpu_name, measured.gpu_count, strict=True))))
    return f"{len(measured)} measured point(s) of case {case!r} on {gpus}."


def _values(published: pd.DataFrame, prefix: str) -> list[float]:
    rows = published[published["claim_id"].str.match(rf"^{prefix}\d+$")]
    if rows.empty:
        raise SchemaError(f"reference table: no rows {prefix}1, {prefix}2, …")
    order = rows["claim_id"].str.removeprefix(prefix).astype(int).sort_values().index
    return [float(v) for v in rows.loc[order, "value"]]


def chat_profile(published: pd.DataFrame) -> tuple[int, int]:
    """(input, output) tokens of the ShareGPT-like profile: vLLM PR #18566's ShareGPT totals over its 1,000 prompts."""
    prompts = _value(published, "sharegpt-prompts")
    return (
        round(_value(published, "sharegpt-total-input-tokens") / prompts),
        round(_value(published, "sharegpt-total-output-tokens") / prompts),
    )


def long_profile(published: pd.DataFrame) -> tuple[int, int]:
    """(input, output) tokens of the SWE-bench-like profile: the SWE-bench authors' 13K BM25 prompt budget, and the
    chat profile's output, so that the two profiles differ in context length only."""
    return round(_value(published, "swebench-bm25-prompt-budget")), chat_profile(published)[1]


def eagle3_rates(published: pd.DataFrame) -> list[float]:
    """Per-position acceptance published for RedHatAI/gpt-oss-20b-speculator.eagle3 (vLLM's regression test, k=3)."""
    return _values(published, "vllm-test-gptoss20b-speculator-p")


def eagle3_best_draft_tokens(published: pd.DataFrame) -> tuple[int, int]:
    """The draft-token range Red Hat's gpt-oss sweep found best (2-3, via a summary of the article): (low, high)."""
    return int(_value(published, "draft-tokens-best-low")), int(_value(published, "draft-tokens-best-high"))


def eagle3_alpha(published: pd.DataFrame) -> float:
    """The i.i.d. α the EAGLE-3 case imposes: the least-squares fit to ``eagle3_rates``, to two decimals."""
    from vllm_playbooks.theory import fit_iid_alpha

    return round(fit_iid_alpha(eagle3_rates(published)), 2)


def mtp_later_conditional(published: pd.DataFrame, first: float = 0.85, k: int = 7) -> float:
    """The conditional acceptance of MTP drafts 2..k that, with ``first`` at draft 1, reproduces the acceptance
    length Nebius measured for DeepSeek-V3's original MTP module reused for 7 drafts (temperature 0)."""
    from vllm_playbooks.theory import fit_later_conditional

    return fit_later_conditional(first, k, _value(published, "nebius-original-mtp-acceptance-length-t0"))


def implied_mtp(published: pd.DataFrame) -> pd.DataFrame:
    """The draft cost ratio c that each published MTP speed-up implies at k = 1 (Leviathan: c = (τ/S − 1)/k, with
    τ = 1 + the published second-token acceptance), one line per end of each published range."""
    import pandas as pd

    from vllm_playbooks.theory import implied_draft_cost_ratio

    records = []
    for source, low, high, speedup_id in (
        ("DeepSeek-V3 report §5.4.3", "v3-second-token-acceptance-low", "v3-second-token-acceptance-high", "v3-tps-speedup"),
        ("vLLM PR #12755, QPS 1", "pr12755-acceptance-low", "pr12755-acceptance-high", "pr12755-speedup-qps1"),
    ):  # fmt: skip
        speedup = _value(published, speedup_id)
        for claim in (low, high):
            acceptance = _value(published, claim) / 100.0
            records.append({
                "source": source, "acceptance": acceptance, "tau": 1.0 + acceptance, "speedup": speedup,
                "implied_c": implied_draft_cost_ratio(1.0 + acceptance, 1, speedup),
            })  # fmt: skip
    return pd.DataFrame(records)


def claims_table(published: pd.DataFrame, prefixes: tuple[str, ...] = ()) -> pd.DataFrame:
    """The rows a page shows as 'what was reported': claim, setting, value, unit, secondary flag, source.

    ``prefixes`` leaves out rows whose claim_id starts with one of them (sources of imposed settings, shown apart).
    """
    keep = ~published["claim_id"].str.startswith(prefixes) if prefixes else published["claim_id"].notna()
    return published.loc[keep, ["claim_id", "setting", "value", "unit", "secondary_only", "source_url"]].reset_index(drop=True)


def published_row(published: pd.DataFrame, claim_id: str) -> str:
    """One published number in words: '<claim_id>: <value> <unit> (<setting>; <url>)'."""
    match = published[published["claim_id"] == claim_id]
    if len(match) != 1:
        raise SchemaError(f"reference table: expected one row {claim_id!r}, found {len(match)}")
    row = match.iloc[0]
    return f"{claim_id}: {row['value']:g} {row['unit']} ({row['setting']}; {row['source_url']})"



def verdict_13834(result: CheckResult, artifact: pd.DataFrame, implied: pd.Series) -> str:
    """The page's verdict on Discussion #13834 as Markdown: the ledger check's verdict and numbers
    (``claims.spec_slower_at_reported_load``), then the ITL reading (``analysis.itl_artifact``) at the point the
    check used, beside what the report's own ITL and throughput imply."""
    head = f"**Verdict: {result.verdict}.** Reported: {result.published}. Measured on the H200: {result.measured}."
    if result.model_says:
        head += f" Model: {result.model_says} ({result.model_verdict})."
    if not result.point:
        return head
    rows = artifact[(artifact["engine_label"] == result.point["engine_label"])
                    & (artifact["concurrency"] == result.point["concurrency"])]  # fmt: skip
    if rows.empty:
        return head
    row = rows.iloc[0]
    from vllm_playbooks.theory import expected_tokens_per_step

    k, alpha = int(result.point["k"]), float(result.point["alpha"])
    tau = expected_tokens_per_step(alpha, k)
    return (
        f"{head} At that point our ITL rose ×{row['itl_ratio']:.2f} while TPOT rose ×{row['tpot_ratio']:.2f}: each "
        f"streamed chunk carried {row['chunking']:.2f} tokens (mean acceptance length {row['mean_acceptance_length']:.2f}), "
        f"so chunking explains {100 * row['artifact_share']:.0f} % of the ITL rise (log scale). If the report's load "
        f"was a closed loop, its TPOT rose ×{implied['tpot_ratio_if_closed_loop']:.2f} beside its "
        f"×{implied['itl_ratio_on_over_off']:.2f} ITL: {implied['itl_chunking_implied']:.2f} tokens per chunk, so "
        f"chunking explains {100 * math.log(implied['itl_chunking_implied']) / math.log(implied['itl_ratio_on_over_off']):.0f} % "
        f"of its ITL rise too, and its chunks held more than the {tau:.2f} tokens an i.i.d. α = {alpha:g} gives at "
        f"k = {k} (V0 counted acceptance another way)."
    )


def mtp_beside_pr(
    published: pd.DataFrame, measured: pd.DataFrame, engine: str = "mtp-k1-a0.85",
    model_shape: str = "deepseek-v3-reduced",
) -> pd.DataFrame:
    """vLLM PR #12755's TPOT table (DeepSeek-R1, TP 8, k = 1) beside ours at the same Poisson request rates: the
    PR's mean TPOT without and with MTP and its speed-up, then ours for ``engine`` against speculation off on
    ``model_shape`` with the measured acceptance rate (accepted / drafted, %). ``measured`` should hold the rows a
    verdict may use (``results.stalls.unstalled``): ours are empty where a rate is not measured or only stalled."""
    import pandas as pd

    prefix = "pr12755-tpot-ms-qps"
    rates = sorted({float(cid.removeprefix(prefix).split("-")[0])
                    for cid in published["claim_id"] if cid.startswith(prefix)})  # fmt: skip
    if not rates:
        raise SchemaError(f"reference table: no rows {prefix}<rate>-baseline")
    poisson = measured[(measured["model_shape"] == model_shape) & measured["request_rate_qps"].notna()]
    poisson = poisson[poisson["concurrency"].isna()]
    off = poisson[is_baseline(poisson)].groupby("request_rate_qps")["tpot_mean_ms"].mean()
    mtp = poisson[poisson["engine_label"] == engine]
    on = mtp.groupby("request_rate_qps")[["tpot_mean_ms", "acceptance_rate"]].mean()
    records = []
    for rate in rates:
        pr_off, pr_on = (_value(published, f"{prefix}{rate:g}-{kind}") for kind in ("baseline", "mtp"))
        ours_off = off.get(rate, math.nan)
        ours_on = on["tpot_mean_ms"].get(rate, math.nan)
        records.append({
            "request_rate_qps": rate, "pr_tpot_off_ms": pr_off, "pr_tpot_mtp_ms": pr_on,
            "pr_speedup": _value(published, f"pr12755-speedup-qps{rate:g}"),
            "ours_tpot_off_ms": ours_off, "ours_tpot_mtp_ms": ours_on, "ours_speedup": ours_off / ours_on,
            "ours_acceptance_pct": 100.0 * on["acceptance_rate"].get(rate, math.nan),
        })  # fmt: skip
    return pd.DataFrame(records)
