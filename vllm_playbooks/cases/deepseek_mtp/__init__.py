"""Case: DeepSeek MTP — the DeepSeek-V3 report's tokens-per-second gain and vLLM PR #12755's TPOT gain by request rate
(its checks and page functions; the published numbers are in ``its folder's published.csv``)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

import pandas as pd

from vllm_playbooks.analysis.compare import is_baseline, versus_baseline
from vllm_playbooks.analysis.noise import MIN_BAND_PCT
from vllm_playbooks.cases.load_words import with_load_labels
from vllm_playbooks.cases.stall_words import stalled_words
from vllm_playbooks.claims.claim import CheckResult, Claim, Evidence, check, speedup_pairs
from vllm_playbooks.claims.finding import Finding, gpu_names, published_or_none, split_stalled, stalled_loads
from vllm_playbooks.claims.reference import published_value
from vllm_playbooks.claims.verdict import Effect, Verdict, combine, effect, judge
from vllm_playbooks.errors import SchemaError
from vllm_playbooks.model import speculative
from vllm_playbooks.model.speculative import (
    fit_later_conditional,
    implied_draft_cost_ratio,
    speedup,
)
from vllm_playbooks.shapes import get_shape

#: The shape whose MTP layers and target layers give the MTP draft cost c ≈ MTP layers / target layers.
MTP_SHAPE = "deepseek-v3"


def _mtp_cost() -> tuple[float, str]:

    shape = get_shape(MTP_SHAPE)
    return shape.num_mtp_layers / shape.num_hidden_layers, f"{shape.num_mtp_layers}/{shape.num_hidden_layers}"


def _at_mtp_scale(pairs: pd.DataFrame) -> pd.DataFrame:
    """The pairs whose target has ``MTP_SHAPE``'s architecture, width and depth (DeepSeek-V3's; the number of routed
    experts may differ): the published MTP numbers are that model's, so MTP rows of another model (MiMo-7B) or of the
    same layout at another scale (V2-Lite's) are shown on the case page, not judged against them."""

    wanted = get_shape(MTP_SHAPE)

    def same(name: object) -> bool:
        shape = get_shape(str(name))
        return (shape.architecture, shape.hidden_size, shape.num_hidden_layers) == (
            wanted.architecture,
            wanted.hidden_size,
            wanted.num_hidden_layers,
        )

    return pairs[pairs["model_shape"].map(same).astype(bool)]


@check("mtp_speedup_at_acceptance")
def mtp_speedup_at_acceptance(claim: Claim, ev: Evidence) -> CheckResult:
    """DeepSeek-V3: a tokens-per-second gain with one MTP token at the report's second-token acceptance.

    Measured: the recorded ``mtp`` rows at DeepSeek-V3's width and depth with k = 1 whose imposed acceptance lies in
    the reported range, among the points the case's deciding part measures (``Evidence.deciding_rows``: concurrency
    1), at their lowest concurrency; the speed-up is the baseline's mean TPOT over the speculative one (tokens per
    second per request). The imposed acceptance selects them, not the measured one, which scatters around it from run
    to run; the measured one is shown.
    Model: ``model.speculative.speedup(α, 1, c)`` at both ends of the range, with c = MTP layers / target layers of the
    DeepSeek-V3 shape (the output head and embeddings left out; the verify step costing one decode step).
    """

    low = ev.value(claim, "v3-second-token-acceptance-low") / 100
    high = ev.value(claim, "v3-second-token-acceptance-high") / 100
    claimed = ev.value(claim, "v3-tps-speedup")
    published = (
        f"{claimed:g}× tokens per second at {100 * low:g}–{100 * high:g} % second-token acceptance (one MTP token)"
    )
    pairs = _at_mtp_scale(speedup_pairs(ev.deciding_rows(claim), "tpot_mean_ms", extra=["acceptance_rate"]))
    pairs = pairs[(pairs["spec_method"] == "mtp") & (pairs["k"] == 1) & pairs["concurrency"].notna()]
    pairs = pairs[pairs["imposed_alpha"].astype(float).between(low - 1e-9, high + 1e-9)]
    lowest = pairs[pairs["concurrency"] == pairs["concurrency"].min()]
    if pairs.empty:
        measured, verdict, rows = "no recorded MTP row at that acceptance yet", Verdict.NOT_MEASURED, 0
    else:
        measured = "; ".join(
            f"concurrency {int(r['concurrency'])}, acceptance {float(r['imposed_alpha']):.2f} imposed "
            f"({r['acceptance_rate']:.2f} measured): {r['speedup']:.2f}× ({r['engine_label']})"
            for _, r in lowest.iterrows()
        )
        verdict = combine(
            judge(float(s), claimed, band_pct=b) for s, b in zip(lowest["speedup"], lowest["band_pct"], strict=True)
        )
        rows = len(lowest)
    c, layers = _mtp_cost()
    ends = [speedup(a, 1, c) for a in (low, high)]
    model_says = (
        f"model.speculative.speedup with k=1, c={layers} (MTP layers / target layers): {ends[0]:.2f}–{ends[1]:.2f}×"
    )
    model_verdict = combine(judge(s, claimed) for s in ends)
    return CheckResult(published, measured, verdict, rows, model_says, model_verdict, pairs=lowest if rows else None)


_QPS = re.compile(r"-qps(\d+)$")


def fade_by_bound(rows: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """Has one MTP token's TPOT gain faded by the request rate from which vLLM PR #12755 saw none
    (``pr12755-qps-bound-for-gain``: 8 QPS)? The one rule the ledger's check (``mtp_gain_falls_with_qps``) and the
    case page use.

    ``rows``: clean runs (``analysis.runs.usable_runs``). Among the k = 1 ``mtp`` pairs against speculation off at
    DeepSeek-V3's width and depth under Poisson arrivals at or above the bound, it keeps at each rate those whose
    imposed acceptance α lies nearest the PR's range (``pr12755-acceptance-low``–``-high``; ``acceptance_gap`` 0
    inside it), and only where 1 + α, the acceptance length Leviathan's model scales the speed-up by, lies within the
    floor band (``MIN_BAND_PCT``) of the PR's: such an acceptance moves the expected speed-up by less than a
    difference must exceed to count, so it is at the claim's conditions. ``effect`` is the pair's
    (``effect_of_speedup`` within its band): the gain has faded at a rate where it is not ``gain``. Empty where no
    such pair is recorded.
    """
    bound = published_value(published, "pr12755-qps-bound-for-gain")
    low, high = (published_value(published, f"pr12755-acceptance-{end}") / 100 for end in ("low", "high"))
    pairs = _at_mtp_scale(speedup_pairs(rows, "tpot_mean_ms")) if not rows.empty else rows.iloc[0:0]
    if pairs.empty:
        return pairs.assign(acceptance_gap=[], effect=[])
    pairs = pairs[
        (pairs["spec_method"] == "mtp")
        & (pairs["k"] == 1)
        & pairs["concurrency"].isna()
        & (pairs["request_rate_qps"].astype(float) >= bound)
        & pairs["imposed_alpha"].notna()
    ]
    alpha = pairs["imposed_alpha"].astype(float)
    near = ((1 + alpha) / (1 + alpha.clip(low, high)) - 1).abs() <= MIN_BAND_PCT / 100
    pairs = pairs[near].assign(acceptance_gap=(alpha - alpha.clip(low, high)).abs()[near])
    nearest = pairs.groupby("request_rate_qps")["acceptance_gap"].transform("min")
    pairs = pairs[pairs["acceptance_gap"] <= nearest + 1e-9]
    effects = [str(effect(float(s), float(b))) for s, b in zip(pairs["speedup"], pairs["band_pct"], strict=True)]
    return pairs.assign(effect=effects).sort_values(["request_rate_qps", "engine_label"])


@check("mtp_gain_falls_with_qps")
def mtp_gain_falls_with_qps(claim: Claim, ev: Evidence) -> CheckResult:
    """vLLM PR #12755: one MTP token gave a TPOT speed-up at the low request rates it measured and none at its highest
    (its speed-ups by rate: ``published.csv``).

    Measured: below the PR's bound (8 QPS), recorded ``mtp`` k = 1 rows at DeepSeek-V3's width and depth at the
    published request rates among the points the case's deciding part measures (``Evidence.deciding_rows``: the PR's
    acceptance at 1 QPS), judged rate by rate against the published speed-up. At and above the bound, the pairs
    ``fade_by_bound`` keeps (the clean ones nearest the PR's acceptance, whichever part measured them): each must show
    no gain (judged against the published speed-up where the PR gives one). Model: the Leviathan bound for k = 1 at
    the PR's acceptance, and the draft cost the QPS 1 speed-up implies; the model has no load term.
    """
    sources = ev.sources(claim)
    claimed = {
        int(_QPS.search(r["claim_id"]).group(1)): ev.value(claim, r["claim_id"])  # type: ignore[union-attr]
        for _, r in sources.iterrows()
        if _QPS.search(r["claim_id"]) and r["quantity"] == "speedup"
    }
    bound = ev.value(claim, "pr12755-qps-bound-for-gain")
    low = ev.value(claim, "pr12755-acceptance-low") / 100
    high = ev.value(claim, "pr12755-acceptance-high") / 100
    published = (
        ", ".join(f"{s:g}× at QPS {q}" for q, s in sorted(claimed.items()))
        + f"; a gain only below QPS {bound:g} (k=1, acceptance {100 * low:g}–{100 * high:g} %)"
    )
    below = _at_mtp_scale(speedup_pairs(ev.deciding_rows(claim), "tpot_mean_ms"))
    below = below[
        (below["spec_method"] == "mtp")
        & (below["k"] == 1)
        & below["request_rate_qps"].notna()
        & (below["request_rate_qps"].astype(float) < bound)
    ]
    at_bound = fade_by_bound(ev.rows(claim.case), ev.published)
    pairs = pd.concat([f for f in (below, at_bound) if not f.empty] or [below], ignore_index=True)
    verdicts, notes, judged = [], [], []
    for index, r in pairs.sort_values(["request_rate_qps", "engine_label"]).iterrows():
        qps, speedup, band = float(r["request_rate_qps"]), float(r["speedup"]), float(r["band_pct"])
        if qps in claimed:
            verdicts.append(judge(speedup, claimed[qps], band_pct=band))
        elif qps >= bound:
            verdicts.append(Verdict.NOT_REPRODUCED if effect(speedup, band) is Effect.GAIN else Verdict.REPRODUCED)
        else:
            continue
        judged.append(index)
        gap = float(r.get("acceptance_gap", math.nan))  # NaN below the bound: the deciding part's own acceptance
        nearest = (
            f", acceptance {float(r['imposed_alpha']):.2f}: the nearest to the PR's run clean here" if gap > 0 else ""
        )
        notes.append(f"{speedup:.2f}× at QPS {qps:g} ({r['engine_label']}{nearest})")
    if notes and at_bound.empty:
        notes.append(f"no clean run at QPS {bound:g} or above at the PR's acceptance yet, where the PR saw no gain")
    measured = "; ".join(notes) if notes else "no recorded MTP row at the PR's request rates yet"
    c_model, layers = _mtp_cost()
    tops = [speculative.speedup(a, 1, c_model) for a in (low, high)]
    implied = [(1 + a) / claimed[min(claimed)] - 1 for a in (low, high)]
    model_says = (
        f"model.speculative.speedup with k=1, c={layers}: at most {tops[0]:.2f}–{tops[1]:.2f}× at any load; "
        f"{claimed[min(claimed)]:g}× at QPS {min(claimed)} implies c={implied[0]:.2f}–{implied[1]:.2f}. "
        "The model has no load term, so it cannot say where the gain ends"
    )
    return CheckResult(
        published,
        measured,
        combine(verdicts),
        len(verdicts),
        model_says,
        None,
        pairs=pairs.loc[judged] if judged else None,
    )


def mtp_later_conditional(published: pd.DataFrame, first: float = 0.85, k: int = 7) -> float:
    """The conditional acceptance of MTP drafts 2..k that, with ``first`` at draft 1, reproduces the acceptance
    length Nebius measured for DeepSeek-V3's original MTP module reused for 7 drafts (temperature 0)."""

    return fit_later_conditional(first, k, published_value(published, "nebius-original-mtp-acceptance-length-t0"))


def implied_mtp(published: pd.DataFrame) -> pd.DataFrame:
    """The draft cost ratio c that each published MTP speed-up implies at k = 1 (Leviathan: c = (τ/S − 1)/k, with
    τ = 1 + the published second-token acceptance), one line per end of each published range."""
    records = []
    for source, low, high, speedup_id in (
        (
            "DeepSeek-V3 report §5.4.3",
            "v3-second-token-acceptance-low",
            "v3-second-token-acceptance-high",
            "v3-tps-speedup",
        ),
        ("vLLM PR #12755, QPS 1", "pr12755-acceptance-low", "pr12755-acceptance-high", "pr12755-speedup-qps1"),
    ):
        speedup = published_value(published, speedup_id)
        for claim in (low, high):
            acceptance = published_value(published, claim) / 100.0
            records.append(
                {
                    "source": source,
                    "acceptance": acceptance,
                    "tau": 1.0 + acceptance,
                    "speedup": speedup,
                    "implied_c": implied_draft_cost_ratio(1.0 + acceptance, 1, speedup),
                }
            )
    return pd.DataFrame(records)


def mtp_beside_pr(
    published: pd.DataFrame,
    measured: pd.DataFrame,
    engine: str = "mtp-k1-a0.85",
    model_shape: str = "deepseek-v3-reduced",
) -> pd.DataFrame:
    """vLLM PR #12755's TPOT table (DeepSeek-R1, TP 8, k = 1) beside ours at the same Poisson request rates: the
    PR's mean TPOT without and with MTP and its speed-up, then ours for ``engine`` against speculation off on
    ``model_shape`` with the measured acceptance rate (accepted / drafted, %). ``measured`` should hold the rows a
    verdict may use (``results.stalls.unstalled``): ours are empty where a rate is not measured or only stalled."""
    prefix = "pr12755-tpot-ms-qps"
    rates = sorted(
        {float(cid.removeprefix(prefix).split("-")[0]) for cid in published["claim_id"] if cid.startswith(prefix)}
    )
    if not rates:
        raise SchemaError(f"reference table: no rows {prefix}<rate>-baseline")
    poisson = measured[(measured["model_shape"] == model_shape) & measured["request_rate_qps"].notna()]
    poisson = poisson[poisson["concurrency"].isna()]
    off = poisson[is_baseline(poisson)].groupby("request_rate_qps")["tpot_mean_ms"].mean()
    mtp = poisson[poisson["engine_label"] == engine]
    on = mtp.groupby("request_rate_qps")[["tpot_mean_ms", "acceptance_rate"]].mean()
    records = []
    for rate in rates:
        pr_off, pr_on = (published_value(published, f"{prefix}{rate:g}-{kind}") for kind in ("baseline", "mtp"))
        ours_off = off.get(rate, math.nan)
        ours_on = on["tpot_mean_ms"].get(rate, math.nan)
        records.append(
            {
                "request_rate_qps": rate,
                "pr_tpot_off_ms": pr_off,
                "pr_tpot_mtp_ms": pr_on,
                "pr_speedup": published_value(published, f"pr12755-speedup-qps{rate:g}"),
                "ours_tpot_off_ms": ours_off,
                "ours_tpot_mtp_ms": ours_on,
                "ours_speedup": ours_off / ours_on,
                "ours_acceptance_pct": 100.0 * on["acceptance_rate"].get(rate, math.nan),
            }
        )
    return pd.DataFrame(records)


def tpot_speedups(df: pd.DataFrame, metric: str = "tpot_mean_ms") -> pd.DataFrame:
    """Every speculative point against its baseline at the same load (its label in ``load``): ``speedup`` = baseline
    TPOT / speculative TPOT (above 1: speculation is faster per token), plus the imposed acceptance and the measured
    acceptance length."""
    comparison = with_load_labels(
        versus_baseline(df, metric, extra=[c for c in ("mean_acceptance_length",) if c in df.columns])
    )
    comparison["speedup"] = comparison["baseline"] / comparison["speculative"]
    return comparison


#: The fewest request rates measured without stalls on which ``mtp_verdict`` judges how the gain moves with load.
MIN_RATES_JUDGED = 3


def mtp_verdict(
    df: pd.DataFrame,
    published: pd.DataFrame | None = None,
    engine: str = "mtp-k1-a0.85",
    rates: Iterable[float] = (1, 2, 4, 8),
    tolerance: float = MIN_BAND_PCT / 100,
) -> Finding:
    """Does MTP at k = 1 lower TPOT at low request rates, and does the gain shrink as the rate grows, as vLLM PR
    #12755 reported (``published.csv``)? Rests on ``engine`` against speculation off, Poisson loads.
    Stalled rows are left out; a rate measured only in stalled runs is judged without once ``MIN_RATES_JUDGED``
    clean rates remain (the sentence names it), and keeps the verdict 'incomplete' before."""
    wanted = sorted(float(r) for r in rates)
    df, stalled = split_stalled(df)
    stalled_rates = stalled_loads(
        stalled[stalled["concurrency"].isna()] if not stalled.empty else stalled, "request_rate_qps", wanted
    )
    table = tpot_speedups(df) if not df.empty else None
    if table is not None:
        table = table[
            (table["engine_label"] == engine) & table["request_rate_qps"].notna() & table["concurrency"].isna()
        ]
        table = table[table["request_rate_qps"].isin(wanted)].sort_values("request_rate_qps").reset_index(drop=True)
    if table is None or table.empty:
        return Finding(
            "not measured",
            f"Not measured yet: no pair of speculation off and {engine} at {', '.join(f'{r:g}' for r in wanted)} QPS "
            "is recorded, so this page gives no verdict." + stalled_words(stalled_rates, "QPS"),
            pd.DataFrame(),
        )
    first, last = table.iloc[0], table.iloc[-1]
    steps = ", ".join(
        f"{s:.2f}× at {r:g} QPS" for r, s in zip(table["request_rate_qps"], table["speedup"], strict=True)
    )
    reported = ""
    q1, q8 = published_or_none(published, "pr12755-speedup-qps1"), published_or_none(published, "pr12755-speedup-qps8")
    if q1 is not None and q8 is not None:
        reported = f" PR #12755 reported {q1:.2f}× at 1 QPS and {q8:.2f}× at 8 QPS (DeepSeek-R1, 8 GPUs)."
    measured = f"On {gpu_names(df)}, {engine} changed mean TPOT against speculation off by {steps}."
    missing = [r for r in wanted if r not in set(table["request_rate_qps"])]
    unmeasured = [r for r in missing if r not in stalled_rates]
    left_out = [r for r in missing if r in stalled_rates]
    if first["speedup"] <= 1.0 + tolerance:
        status, tail = (
            "no gain at low load",
            (
                f" At the lowest rate measured, {first['request_rate_qps']:g} QPS, MTP did not lower TPOT by more than "
                f"{100 * tolerance:.0f} %."
            ),
        )
    elif unmeasured or len(table) < MIN_RATES_JUDGED:
        not_yet = f" Not yet measured at {', '.join(f'{r:g}' for r in unmeasured)} QPS." if unmeasured else ""
        status, tail = "incomplete", not_yet + stalled_words(left_out, "QPS")
    else:
        # every wanted rate measured; those that only stalled are left out while enough clean rates remain
        without = stalled_words(left_out, "QPS", "the trend is judged without them")
        if last["speedup"] < first["speedup"] - tolerance:
            status, tail = (
                "gain that shrinks with load",
                (
                    f" The gain shrinks from {first['speedup']:.2f}× to {last['speedup']:.2f}× as the rate grows: the "
                    "direction PR #12755 reported." + without
                ),
            )
        else:
            status, tail = (
                "gain that holds with load",
                (
                    f" The gain does not shrink by more than {100 * tolerance:.0f} % up to "
                    f"{last['request_rate_qps']:g} QPS, unlike PR #12755's." + without
                ),
            )
    return Finding(status, measured + tail + reported, table)
