"""Case: the Red Hat gpt-oss EAGLE-3 sweep — gains up to a high concurrency, a best draft length (its checks and page
functions; the published numbers are in ``its folder's published.csv``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from vllm_playbooks.analysis.compare import is_baseline
from vllm_playbooks.analysis.kbest import best_ks
from vllm_playbooks.analysis.noise import MIN_BAND_PCT, band_pct, spread_of
from vllm_playbooks.analysis.profiles import gain_table, with_profile
from vllm_playbooks.cases.stall_words import stalled_words
from vllm_playbooks.claims.claim import CheckResult, Claim, Evidence, check, model_error, percent_change, speedup_pairs
from vllm_playbooks.claims.finding import Finding, gpu_names, published_or_none, split_stalled
from vllm_playbooks.claims.reference import published_value, published_values
from vllm_playbooks.claims.verdict import LOAD_FACTOR, Effect, Verdict, best, combine, effect, judge
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.hardware import REFERENCE_DATASHEET, Gpu
from vllm_playbooks.model.calibration import EfficiencyFit
from vllm_playbooks.model.prediction import cost_time_s, speculation_prediction
from vllm_playbooks.model.roofline import decode_step_flops, forward_cost
from vllm_playbooks.model.speculative import fit_iid_alpha, speedup
from vllm_playbooks.model.steps import moe_layers_run
from vllm_playbooks.run.plan import load_plan
from vllm_playbooks.shapes import get_shape, resolve_model

#: The target and EAGLE-3 head shapes whose layer counts give the head's draft cost c ≈ head layers / target layers.
EAGLE3_SHAPES = ("gpt-oss-120b", "gpt-oss-120b-eagle3")


#: Acceptances the draft-token model sweeps: the speculator card's acceptance table could not be read.
ALPHA_SWEEP = (0.6, 0.7, 0.8)


#: The draft lengths the draft-token model tries.
MODEL_K_RANGE = tuple(range(1, 11))


def _with_length_profile(case: str, rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with a ``profile`` column (``analysis.profiles.with_profile`` after the case file's length profiles),
    naming a row of no profile of the case ``"<input_len> in / <output_len> out"``."""

    try:
        profiles = {name: (i, o) for name, i, o in load_plan(case).profiles}
    except ConfigError:
        profiles = {}
    out = with_profile(rows, profiles)
    unnamed = out["profile"].isna()
    out.loc[unnamed, "profile"] = [
        f"{int(i)} in / {int(o)} out"
        for i, o in zip(out.loc[unnamed, "input_len"], out.loc[unnamed, "output_len"], strict=True)
    ]
    return out


@check("gain_up_to_concurrency")
def gain_up_to_concurrency(claim: Claim, ev: Evidence) -> CheckResult:
    """Red Hat, gpt-oss-120B + EAGLE3: output-throughput gains held up to the concurrency the article names.

    Measured: the recorded ``eagle3`` rows up to the claimed concurrency among the points the case's deciding part
    measures (``Evidence.deciding_rows``: k=3 on the chat profile at the claimed concurrency), judged against the
    published gain range. Each EAGLE3 config on each length profile is judged over its loads, and only where some row
    is within ``LOAD_FACTOR`` of the claimed concurrency (a profile measured only at low load says nothing on where
    the gain ends); the best such verdict stands (the source chose its own config). Model: the roofline models dense
    decoders only.
    """

    top = ev.value(claim, "max-concurrency-with-gain")
    low = 1 + ev.value(claim, "output-throughput-gain-low") / 100
    high = 1 + ev.value(claim, "output-throughput-gain-high") / 100
    published = (
        f"gains up to {top:g} concurrent requests; output throughput {percent_change(low)} to {percent_change(high)}"
    )
    pairs = speedup_pairs(ev.deciding_rows(claim), "output_tok_s")
    pairs = pairs[(pairs["spec_method"] == "eagle3") & pairs["concurrency"].notna() & (pairs["concurrency"] <= top)]
    if pairs.empty or pairs["concurrency"].max() < top / LOAD_FACTOR:
        so_far = f" (highest so far: {pairs['concurrency'].max():g})" if not pairs.empty else ""
        measured, verdict, rows = f"no EAGLE3 row near {top:g} concurrent requests yet{so_far}", Verdict.NOT_MEASURED, 0
        judged = None
    else:
        pairs = _with_length_profile(claim.case, pairs)
        groups = list(pairs.groupby(["engine_label", "profile"]))
        reaching = [g for _, g in groups if g["concurrency"].max() >= top / LOAD_FACTOR]
        verdict = best(
            combine(judge(float(s), low, high, band_pct=b) for s, b in zip(g["speedup"], g["band_pct"], strict=True))
            for g in reaching
        )
        rows = sum(len(g) for g in reaching)
        judged = pd.concat(reaching)
        several_profiles = pairs["profile"].nunique() > 1
        names = [f"{label} ({profile})" if several_profiles else label for (label, profile), _ in groups]
        measured = "; ".join(
            f"{name}: "
            + ", ".join(f"{percent_change(s)} at {int(c)}" for c, s in zip(g["concurrency"], g["speedup"], strict=True))
            for name, (_, g) in zip(names, groups, strict=True)
        )
    error = model_error(lambda: decode_step_flops(get_shape(EAGLE3_SHAPES[0]), 1))
    model_says = f"no roofline answer: {error}" if error else ""
    return CheckResult(published, measured, verdict, rows, model_says, None, pairs=judged)


@check("best_draft_tokens")
def best_draft_tokens(claim: Claim, ev: Evidence) -> CheckResult:
    """Red Hat (via summaries): 2–3 draft tokens are best for gpt-oss + EAGLE3; 4 adds overhead (−8 %, the blog).

    Measured: at each load (length profile, concurrency, imposed α) of the points the case's deciding part measures
    (``Evidence.deciding_rows``: k = 2 to 5 on the chat profile at concurrency 1 and 200) with recorded ``eagle3``
    rows at k = 4 and at least one other k, the best k by output throughput must be in the claimed range and k = 4 a
    loss against it, of about the claimed size. Model: the k maximising ``model.speculative.speedup`` for α in
    ``ALPHA_SWEEP`` with c = head layers / target layers.
    """

    k_low, k_high = int(ev.value(claim, "draft-tokens-best-low")), int(ev.value(claim, "draft-tokens-best-high"))
    four = 1 + ev.value(claim, "output-throughput-change-4-tokens") / 100
    published = f"best at {k_low}–{k_high} draft tokens; 4 tokens {percent_change(four)} against the best"
    rows = ev.deciding_rows(claim)
    spec = rows[(rows["spec_method"] == "eagle3") & rows["concurrency"].notna()].copy()
    verdicts, notes, judged = [], [], []
    if not spec.empty:
        spec = _with_length_profile(claim.case, spec)
        spec["alpha_key"] = spec["imposed_alpha"].astype(float).fillna(-1.0)
        several_profiles = spec["profile"].nunique() > 1
        for (profile, conc, alpha), group in spec.groupby(["profile", "concurrency", "alpha_key"]):
            by_k = {int(k): spread_of(g["output_tok_s"]) for k, g in group.groupby("num_speculative_tokens")}
            if 4 not in by_k or len(by_k) < 2:
                continue
            tied = best_ks({k: s.median for k, s in by_k.items()}, {k: s.spread_pct for k, s in by_k.items()})
            best = tied[0]
            ratio = by_k[4].median / by_k[best].median
            band = band_pct(by_k[4].spread_pct, by_k[best].spread_pct)
            if any(k_low <= k <= k_high for k in tied):  # a tie cannot tell which of its ks is best
                loses = effect(ratio, band) is Effect.LOSS
                verdicts.append(judge(ratio, four, band_pct=band) if loses else Verdict.NOT_REPRODUCED)
            else:
                verdicts.append(Verdict.NOT_REPRODUCED)
            judged.append(
                {
                    "gpu_name": ", ".join(sorted(set(group["gpu_name"].astype(str)))),
                    "baseline_runs": by_k[best].runs,
                    "speculative_runs": by_k[4].runs,
                    "baseline_spread_pct": by_k[best].spread_pct,
                    "speculative_spread_pct": by_k[4].spread_pct,
                    "band_pct": band,
                }
            )
            alpha_words = f", α {alpha:g}" if alpha >= 0 else ""
            profile_words = f"{profile}, " if several_profiles else ""
            ties = f" (tied within noise with k={', '.join(str(k) for k in tied[1:])})" if len(tied) > 1 else ""
            four_words = "" if best == 4 else f", k=4 {percent_change(ratio)}"  # against itself it says nothing
            notes.append(f"{profile_words}concurrency {int(conc)}{alpha_words}: best k={best}{ties}{four_words}")
    measured = "; ".join(notes) if notes else "no recorded EAGLE3 sweep over k yet"
    target, head = (get_shape(n) for n in EAGLE3_SHAPES)
    c = head.num_hidden_layers / target.num_hidden_layers
    best_k = {a: max(MODEL_K_RANGE, key=lambda k, a=a: speedup(a, k, c)) for a in ALPHA_SWEEP}
    model_says = (
        f"model.speculative.speedup with c={head.num_hidden_layers}/{target.num_hidden_layers} (head layers / target "
        f"layers), verify cost flat in k, k from {MODEL_K_RANGE[0]} to {MODEL_K_RANGE[-1]}: best k "
        + ", ".join(
            f"{k}{' (the largest tried)' if k == MODEL_K_RANGE[-1] else ''} at α {a:g}" for a, k in best_k.items()
        )
    )
    model_verdict = Verdict.REPRODUCED if all(k_low <= k <= k_high for k in best_k.values()) else Verdict.NOT_REPRODUCED
    compared = pd.DataFrame(judged) if judged else None  # k = 4 against the best k: their runs, spreads and band
    return CheckResult(published, measured, combine(verdicts), len(verdicts), model_says, model_verdict, pairs=compared)


def chat_profile(published: pd.DataFrame) -> tuple[int, int]:
    """(input, output) tokens of the ShareGPT-like profile: vLLM PR #18566's ShareGPT totals over its 1,000 prompts."""
    prompts = published_value(published, "sharegpt-prompts")
    return (
        round(published_value(published, "sharegpt-total-input-tokens") / prompts),
        round(published_value(published, "sharegpt-total-output-tokens") / prompts),
    )


def long_profile(published: pd.DataFrame) -> tuple[int, int]:
    """(input, output) tokens of the SWE-bench-like profile: the SWE-bench authors' 13K BM25 prompt budget, and the
    chat profile's output, so that the two profiles differ in context length only."""
    return round(published_value(published, "swebench-bm25-prompt-budget")), chat_profile(published)[1]


def eagle3_rates(published: pd.DataFrame) -> list[float]:
    """Per-position acceptance published for RedHatAI/gpt-oss-20b-speculator.eagle3 (vLLM's regression test, k=3)."""
    return published_values(published, "vllm-test-gptoss20b-speculator-p")


def eagle3_best_draft_tokens(published: pd.DataFrame) -> tuple[int, int]:
    """The draft-token range Red Hat's gpt-oss sweep found best (2-3, via a summary of the article): (low, high)."""
    return int(published_value(published, "draft-tokens-best-low")), int(
        published_value(published, "draft-tokens-best-high")
    )


def eagle3_alpha(published: pd.DataFrame) -> float:
    """The i.i.d. α the EAGLE-3 case imposes: the least-squares fit to ``eagle3_rates``, to two decimals."""

    return round(fit_iid_alpha(eagle3_rates(published)), 2)


def routing_signature(
    measured: pd.DataFrame,
    model_shape: str,
    fit: EfficiencyFit,
    gpu: Gpu | str = REFERENCE_DATASHEET,
    low: int = 1,
    high: int = 16,
    input_len: int | None = None,
) -> pd.DataFrame:
    """How spec-off TPOT grows from concurrency ``low`` to ``high``, measured and as predicted under uniform and under
    fixed routing. Uniform routing makes a batch touch many more experts than one sequence does; a measured growth
    near the 'fixed' prediction says the dummy router sent every token to the same experts (what a kernel that ignores
    the routing simulation would do with a degenerate router)."""
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
            times = [
                cost_time_s(
                    forward_cost(model_shape, b, 1, context, routing=routing),
                    gpu,
                    fit,
                    moe_layers=moe_layers_run(resolve_model(model_shape)),
                )
                for b in (low, high)
            ]
            predicted[routing] = times[1] / times[0]
        records.append(
            {
                "input_len": int(in_len),
                "output_len": int(out_len),
                "measured_growth": tpot[high] / tpot[low],
                "predicted_uniform": predicted["uniform"],
                "predicted_fixed": predicted["fixed"],
            }
        )
    return pd.DataFrame(
        records, columns=["input_len", "output_len", "measured_growth", "predicted_uniform", "predicted_fixed"]
    )


def eagle3_predictions(
    target: str,
    draft: str,
    alphas: Iterable[float],
    ks: Iterable[int],
    batches: Iterable[int] | Mapping[str, Iterable[int]],
    profiles: Mapping[str, tuple[int, int]],
    fit: EfficiencyFit,
    gpu: Gpu | str = REFERENCE_DATASHEET,
) -> pd.DataFrame:
    """``speculation_prediction`` for a draft head at i.i.d. acceptance α (rates α, α², …) over k, batch and length
    profile, in the measured tables' columns: profile, k, imposed_alpha, concurrency (= batch), speedup and
    ``gain_pct`` = 100 · (speedup − 1), the output-throughput gain of a closed loop whose slots always decode.
    ``batches`` is one list for every profile or a list per profile name."""
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
                    records.append(
                        {
                            "profile": profile,
                            "engine_label": f"k={k} α={alpha:g}",
                            "k": k,
                            "imposed_alpha": alpha,
                            "concurrency": batch,
                            **result,
                            "gain_pct": 100.0 * (result["speedup"] - 1.0),
                        }
                    )
    return pd.DataFrame(records)


def _gains_at(gains: pd.DataFrame) -> str:
    """A ``gain_table``'s gains in words: '+36.0 % at 1, -4.8 % at 16' (concurrency)."""
    return ", ".join(f"{g:+.1f} % at {int(c)}" for c, g in zip(gains["concurrency"], gains["gain_pct"], strict=True))


def eagle3_verdict(
    df: pd.DataFrame,
    profiles: Mapping[str, tuple[int, int]],
    published: pd.DataFrame | None = None,
    engine: str = "eagle3-k3-a0.71",
    profile: str = "chat",
    top: int = 200,
    tolerance: float = MIN_BAND_PCT / 100,
    cite_report: bool = True,
) -> Finding:
    """Does EAGLE-3 at k = 3 raise output throughput over speculation off on ``profile``, and does the gain hold up
    to ``top`` concurrent requests, as the Red Hat article reported (``published.csv``)? The sentence ends with
    what Red Hat reported unless ``cite_report`` is off (a page that already cites it for another profile)."""
    df, stalled = split_stalled(df)
    stalled_at: list[float] = []
    if not stalled.empty:
        mine = with_profile(stalled, profiles)
        mine = mine[(mine["profile"] == profile) & (mine["engine_label"].isin([engine]) | is_baseline(mine))]
        stalled_at = sorted({float(c) for c in mine["concurrency"].dropna()})
    gains = gain_table(df, profiles) if not df.empty else pd.DataFrame()
    if not gains.empty:
        gains = gains[(gains["engine_label"] == engine) & (gains["profile"] == profile)].reset_index(drop=True)
    if gains.empty:
        return Finding(
            "not measured",
            f"Not measured yet: no pair of speculation off and {engine} on the {profile} profile is recorded, so this "
            "page gives no verdict." + stalled_words(stalled_at, "concurrency"),
            pd.DataFrame(),
        )
    lowest, highest = gains["gain_pct"].min(), gains["gain_pct"].max()
    loads = gains["concurrency"]
    measured = (
        f"On {gpu_names(df)}, {engine} changed output throughput against speculation off on the {profile} profile "
        f"by {lowest:+.1f} % to {highest:+.1f} % at {int(loads.min())}-{int(loads.max())} concurrent requests "
        f"({len(gains)} loads)."
    )
    measured += stalled_words([c for c in stalled_at if c not in set(gains["concurrency"])], "concurrency")
    low, high = (
        published_or_none(published, "output-throughput-gain-low"),
        published_or_none(published, "output-throughput-gain-high"),
    )
    held_to = published_or_none(published, "max-concurrency-with-gain")
    reported = (
        f" Red Hat's figures: +{low:g} to +{high:g} % output throughput up to {held_to:g} concurrent requests (the "
        "range only in a secondary summary), on H200 with real weights and ShareGPT, MLPerf and SWE-bench prompts."
        if low is not None and high is not None and held_to is not None and cite_report
        else ""
    )
    at_top = gains[gains["concurrency"] == top]
    wins = gains[gains["gain_pct"] > 100 * tolerance]
    if wins.empty:
        status, tail = "no gain", f" It never raised throughput by more than {100 * tolerance:.0f} %."
    elif at_top.empty:
        status, tail = "incomplete", "" if top in stalled_at else f" Not yet measured at {top} concurrent requests."
    elif float(at_top["gain_pct"].iloc[0]) > 100 * tolerance:
        held = float(at_top["gain_pct"].iloc[0])
        status, tail = f"gain holds to {top}", f" The gain held at {top} concurrent requests ({held:+.1f} %)."
        losses = gains[(gains["gain_pct"] < -100 * tolerance) & (gains["concurrency"] < top)]
        if not losses.empty:
            tail += f" It did not hold at every load below that: {_gains_at(losses)}."
    else:
        last = int(wins["concurrency"].max())
        status, tail = (
            "gain fades before the top",
            (
                f" The last gain above {100 * tolerance:.0f} % was at concurrency {last}; at {top} it was "
                f"{float(at_top['gain_pct'].iloc[0]):+.1f} %, unlike Red Hat's result."
            ),
        )
    losses = gains[(gains["gain_pct"] < -100 * tolerance) & (gains["concurrency"] < top)]
    if status == "incomplete" and not losses.empty:
        tail += f" It lost throughput at {_gains_at(losses)}."
    return Finding(status, measured + tail + reported, gains)
