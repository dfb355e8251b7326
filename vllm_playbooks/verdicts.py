"""Verdicts of the MTP (issue #5) and EAGLE-3 (issue #6) pages, computed from measured rows beside published ones.

Each verdict names the configuration pair it rests on, says "not measured" while that pair has no rows, and calls a
change a gain or a loss only beyond ``TOLERANCE``: smaller differences are reported as numbers, not as a direction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vllm_playbooks.analysis import is_baseline, versus_baseline

if TYPE_CHECKING:
    import pandas as pd

#: Relative change below which a difference is not called a gain or a loss (a choice: repeated runs of one point
#: have not been measured here; the first recorded sweeps re-measured short runs within a few per cent).
TOLERANCE = 0.03
#: Concurrency bands for "best k": low, middle and high load, as the EAGLE-3 page reports them.
BANDS: tuple[tuple[str, int, int], ...] = (("1-8", 1, 8), ("16-64", 16, 64), ("128-200", 128, 200))


@dataclass(frozen=True)
class Verdict:
    """What a page concludes: a short status, the sentence it prints, and the table of numbers behind it."""

    status: str
    sentence: str
    table: pd.DataFrame = field(repr=False)


def _published(published: pd.DataFrame | None, claim_id: str) -> float | None:
    if published is None:
        return None
    match = published.loc[published["claim_id"] == claim_id, "value"]
    return float(match.iloc[0]) if len(match) == 1 else None


def _gpus(df: pd.DataFrame) -> str:
    return ", ".join(sorted(set(df["gpu_name"].dropna().astype(str)))) or "the GPU recorded"


def _without_stalled(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(usable rows, stalled rows) by the ``stalled`` column (``results.stalls.mark_stalled``); all usable without it."""
    if df.empty or "stalled" not in df.columns:
        return df, df.iloc[0:0]
    flag = df["stalled"].astype(bool)
    return df[~flag], df[flag]


def _stalled_loads(stalled: pd.DataFrame, column: str, wanted: Iterable[float]) -> list[float]:
    """The loads of ``wanted`` (values of ``column``) at which some stalled row was recorded."""
    if stalled.empty:
        return []
    return sorted({float(v) for v in stalled[column].dropna()} & {float(w) for w in wanted})


def _stalled_words(loads: list[float], unit: str, outcome: str = "left out until measured again") -> str:
    """The sentence naming loads measured but left out as stalled ('' for none); ``unit`` 'QPS' or 'concurrency';
    ``outcome`` what the verdict does without them."""
    values = ", ".join(f"{v:g}" for v in loads)
    where = f"concurrency {values}" if unit == "concurrency" else f"{values} {unit}"
    return (f" Measured at {where} too, but runs there stalled (output-token gaps of seconds, see the stall "
            f"table): {outcome}.") if loads else ""  # fmt: skip


# --------------------------------------------------------------------------------------------------------------------
# Issue #5: MTP
# --------------------------------------------------------------------------------------------------------------------


def tpot_speedups(df: pd.DataFrame, metric: str = "tpot_mean_ms") -> pd.DataFrame:
    """Every speculative point against its baseline at the same load: ``speedup`` = baseline TPOT / speculative TPOT
    (above 1: speculation is faster per token), plus the imposed acceptance and the measured acceptance length."""
    comparison = versus_baseline(df, metric, extra=[c for c in ("mean_acceptance_length",) if c in df.columns])
    comparison["speedup"] = comparison["baseline"] / comparison["speculative"]
    return comparison


#: The fewest request rates measured without stalls on which ``mtp_verdict`` judges how the gain moves with load.
MIN_RATES_JUDGED = 3


def mtp_verdict(
    df: pd.DataFrame, published: pd.DataFrame | None = None, engine: str = "mtp-k1-a0.85",
    rates: Iterable[float] = (1, 2, 4, 8), tolerance: float = TOLERANCE,
) -> Verdict:
    """Does MTP at k = 1 lower TPOT at low request rates, and does the gain shrink as the rate grows, as vLLM PR
    #12755 reported (1.63× at 1 QPS, 1.00× at 8 QPS)? Rests on ``engine`` against speculation off, Poisson loads.
    Stalled rows are left out; a rate measured only in stalled runs is judged without once ``MIN_RATES_JUDGED``
    clean rates remain (the sentence names it), and keeps the verdict 'incomplete' before."""
    wanted = sorted(float(r) for r in rates)
    df, stalled = _without_stalled(df)
    stalled_rates = _stalled_loads(stalled[stalled["concurrency"].isna()] if not stalled.empty else stalled,
                                   "request_rate_qps", wanted)  # fmt: skip
    table = tpot_speedups(df) if not df.empty else None
    if table is not None:
        table = table[(table["engine_label"] == engine) & table["request_rate_qps"].notna() & table["concurrency"].isna()]
        table = table[table["request_rate_qps"].isin(wanted)].sort_values("request_rate_qps").reset_index(drop=True)
    if table is None or table.empty:
        import pandas as pd

        return Verdict(
            "not measured",
            f"Not measured yet: no pair of speculation off and {engine} at {', '.join(f'{r:g}' for r in wanted)} QPS "
            "is recorded, so this page gives no verdict." + _stalled_words(stalled_rates, "QPS"),
            pd.DataFrame(),
        )
    first, last = table.iloc[0], table.iloc[-1]
    steps = ", ".join(f"{s:.2f}× at {r:g} QPS" for r, s in zip(table["request_rate_qps"], table["speedup"], strict=True))
    reported = ""
    q1, q8 = _published(published, "pr12755-speedup-qps1"), _published(published, "pr12755-speedup-qps8")
    if q1 is not None and q8 is not None:
        reported = f" PR #12755 reported {q1:.2f}× at 1 QPS and {q8:.2f}× at 8 QPS (DeepSeek-R1, 8 GPUs)."
    measured = f"On {_gpus(df)}, {engine} changed mean TPOT against speculation off by {steps}."
    missing = [r for r in wanted if r not in set(table["request_rate_qps"])]
    unmeasured = [r for r in missing if r not in stalled_rates]
    left_out = [r for r in missing if r in stalled_rates]
    if first["speedup"] <= 1.0 + tolerance:
        status, tail = "no gain at low load", (
            f" At the lowest rate measured, {first['request_rate_qps']:g} QPS, MTP did not lower TPOT by more than "
            f"{100 * tolerance:.0f} %."
        )
    elif unmeasured or len(table) < MIN_RATES_JUDGED:
        not_yet = f" Not yet measured at {', '.join(f'{r:g}' for r in unmeasured)} QPS." if unmeasured else ""
        status, tail = "incomplete", not_yet + _stalled_words(left_out, "QPS")
    else:
        # every wanted rate measured; those that only stalled are left out while enough clean rates remain
        without = _stalled_words(left_out, "QPS", "the trend is judged without them")
        if last["speedup"] < first["speedup"] - tolerance:
            status, tail = "gain that shrinks with load", (
                f" The gain shrinks from {first['speedup']:.2f}× to {last['speedup']:.2f}× as the rate grows: the "
                "direction PR #12755 reported." + without
            )
        else:
            status, tail = "gain that holds with load", (
                f" The gain does not shrink by more than {100 * tolerance:.0f} % up to {last['request_rate_qps']:g} "
                "QPS, unlike PR #12755's." + without
            )
    return Verdict(status, measured + tail + reported, table)


def k_sweep(df: pd.DataFrame, model_shape: str, metric: str = "tpot_mean_ms") -> pd.DataFrame:
    """MTP configurations of one target by k: speedup against speculation off at each load, with the imposed rates
    and the measured acceptance length (for the k = 1, 2, 3 comparison at the same first-position acceptance)."""
    table = tpot_speedups(df, metric)
    return table[table["model_shape"] == model_shape].sort_values(["k", "request_rate_qps", "concurrency"])


def _position_1_rates(table: pd.DataFrame) -> list[float]:
    """The imposed acceptance of draft position 1 of each row (NaN where none was imposed)."""
    return [json.loads(rates)[0] if isinstance(rates, str) else float("nan")
            for rates in table["imposed_acceptance_rates"]]  # fmt: skip


def best_k_by_load(sweep: pd.DataFrame, first_rate: float = 0.85) -> pd.DataFrame:
    """For each load of a ``k_sweep`` table, among the configurations whose imposed acceptance at position 1 is
    ``first_rate``: the k with the largest speed-up (``best_k``, ``speedup``) and k = 1's speed-up (``k1_speedup``);
    ``first_rate`` is repeated in ``position_1_rate``."""
    import pandas as pd

    columns = ["load", "request_rate_qps", "concurrency", "best_k", "engine_label", "speedup", "k1_speedup",
               "position_1_rate"]  # fmt: skip
    same = sweep[[abs(first - first_rate) < 1e-9 for first in _position_1_rates(sweep)]]
    rows = []
    for load, group in same.groupby("load", sort=False):
        top = group.loc[group["speedup"].idxmax()]
        k1 = group.loc[group["k"] == 1, "speedup"]
        rows.append({"load": load, "request_rate_qps": top["request_rate_qps"], "concurrency": top["concurrency"],
                     "best_k": int(top["k"]), "engine_label": top["engine_label"], "speedup": top["speedup"],
                     "k1_speedup": k1.iloc[0] if len(k1) else float("nan"), "position_1_rate": first_rate})  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def describe_best_k(best: pd.DataFrame) -> str:
    """'k = 3 at 1, 2, 4 QPS and at concurrency 4, 16; k = 2 at concurrency 1, 64' from ``best_k_by_load`` ('' for
    an empty table)."""
    import pandas as pd

    parts = []
    for k, group in best.groupby("best_k", sort=True):
        rates = [f"{r:g}" for r in group["request_rate_qps"] if pd.notna(r)]
        streams = [f"{c:g}" for c in group["concurrency"] if pd.notna(c)]
        where = ([f"{', '.join(rates)} QPS"] if rates else []) + ([f"concurrency {', '.join(streams)}"] if streams else [])
        parts.append(f"k = {k} at {' and at '.join(where)}")
    return "; ".join(parts)


def acceptance_band(sweep: pd.DataFrame, k: int = 1) -> pd.DataFrame:
    """The configurations of one ``k`` in a ``k_sweep`` table that differ in their imposed i.i.d. acceptance
    (``imposed_alpha``): one row per load and α with the speed-up and the measured mean acceptance length, request
    rates first, then concurrencies, α ascending within a load."""
    columns = ["load", "request_rate_qps", "concurrency", "imposed_alpha", "engine_label", "speedup",
               "mean_acceptance_length"]  # fmt: skip
    rows = sweep[(sweep["k"] == k) & sweep["imposed_alpha"].notna()][columns].astype({"imposed_alpha": float})
    return rows.sort_values(["request_rate_qps", "concurrency", "imposed_alpha"], na_position="last").reset_index(
        drop=True)  # fmt: skip


def _percent_range(values: Iterable[float]) -> str:
    low, high = (f"{100 * v:.1f}" for v in (min(values), max(values)))
    return f"{low} %" if low == high else f"{low}-{high} %"


def describe_acceptance_band(band: pd.DataFrame, tolerance: float = 0.02) -> str:
    """One paragraph on an ``acceptance_band`` table: how much the speed-up and the measured acceptance length grew
    from the lowest to the highest α at the loads measured with both, and whether the speed-up grew in proportion to
    the acceptance length (within ``tolerance``), as S = τ / (1 + k·c) has it when the draft's cost c does not depend
    on what is accepted."""
    if band.empty:
        return "No configuration of this k with an imposed i.i.d. acceptance is measured yet."
    low, high = band["imposed_alpha"].min(), band["imposed_alpha"].max()
    pairs, one_end = [], []
    for load, group in band.groupby("load", sort=False):
        ends = group[group["imposed_alpha"].isin([low, high])].set_index("imposed_alpha")
        if low in ends.index and high in ends.index and low != high:
            pairs.append((load, ends.loc[low], ends.loc[high]))
        else:
            one_end.append(load)
    if not pairs:
        return f"No load is measured at both α = {low:.2f} and α = {high:.2f} yet."
    speedup = [b["speedup"] / a["speedup"] - 1 for _, a, b in pairs]
    length = [b["mean_acceptance_length"] / a["mean_acceptance_length"] - 1 for _, a, b in pairs]
    steps = "; ".join(f"{load}: {a['speedup']:.2f}× → {b['speedup']:.2f}×" for load, a, b in pairs)
    text = (f"From α = {low:.2f} to {high:.2f}, the TPOT speed-up rose by {_percent_range(speedup)} at the "
            f"{len(pairs)} loads measured with both ({steps}); the measured mean acceptance length rose by "
            f"{_percent_range(length)}.")  # fmt: skip
    apart = [load for (load, _, _), s, t in zip(pairs, speedup, length, strict=True)
             if abs((1 + s) / (1 + t) - 1) > tolerance]  # fmt: skip
    if apart:
        text += (f" The speed-up did not grow in proportion to the acceptance length (within {100 * tolerance:g} %) "
                 f"at {', '.join(apart)}.")  # fmt: skip
    else:
        text += (f" Within {100 * tolerance:g} %, the speed-up grew in proportion to the tokens each step emits: the "
                 "draft costs the same whatever is accepted, as S = τ / (1 + k·c) has it.")  # fmt: skip
    if one_end:
        text += f" Measured at one end of the band only: {', '.join(one_end)}."
    return text


def draft_cost_beside_model(sweep: pd.DataFrame, predicted: pd.DataFrame) -> pd.DataFrame:
    """The draft cost c that each closed-loop pair of a ``k_sweep`` table implies (``theory.draft_cost_from_tpot``
    with the measured mean acceptance length) beside the step model's c at the same batch (``predicted``: a
    ``theory.prediction_frame`` whose ``config`` names are engine labels).

    ``draft_ms_measured`` = c × the measured spec-off TPOT, the time of one draft forward if verifying k + 1 tokens
    costs one decode step; where it costs more (an MoE layer reads more experts for more tokens), that extra lands in
    c too. ``beyond_reads_ms`` is what the measurement leaves beyond the model's roofline time of the draft forward
    (its ``draft_ms`` less the ``draft_fixed_cost_ms`` it charged, repeated as ``model_fixed_cost_ms``), to set
    beside that fixed cost.
    """
    import pandas as pd

    from vllm_playbooks.theory import draft_cost_from_tpot

    rows = sweep[sweep["concurrency"].notna() & sweep["request_rate_qps"].isna()
                 & sweep["engine_label"].isin(set(predicted["config"]))]  # fmt: skip
    records = []
    for row in rows.itertuples():
        model = predicted[(predicted["config"] == row.engine_label) & (predicted["batch"] == row.concurrency)]
        if model.empty:
            continue
        c = draft_cost_from_tpot(row.speculative, row.baseline, float(row.mean_acceptance_length), int(row.k))
        draft_ms, fixed_ms = float(model["draft_ms"].iloc[0]), float(model["draft_fixed_cost_ms"].iloc[0])
        records.append({"engine_label": row.engine_label, "k": int(row.k), "concurrency": row.concurrency,
                        "tau_measured": float(row.mean_acceptance_length), "tpot_off_ms": row.baseline,
                        "c_measured": c, "c_model": float(model["c"].iloc[0]), "draft_ms_measured": c * row.baseline,
                        "draft_ms_model": draft_ms, "model_fixed_cost_ms": fixed_ms,
                        "beyond_reads_ms": c * row.baseline - (draft_ms - fixed_ms)})  # fmt: skip
    columns = ["engine_label", "k", "concurrency", "tau_measured", "tpot_off_ms", "c_measured", "c_model",
               "draft_ms_measured", "draft_ms_model", "model_fixed_cost_ms", "beyond_reads_ms"]  # fmt: skip
    return pd.DataFrame(records, columns=columns)


def describe_draft_cost(table: pd.DataFrame) -> str:
    """One sentence per configuration of a ``draft_cost_beside_model`` table: at its lowest concurrency, the c its
    measurement implies against the model's and the time a draft forward took beyond its reads against the fixed
    cost the model charged; then how far c rose at the higher concurrencies."""
    if table.empty:
        return "No closed-loop pair to derive a draft cost from yet."
    sentences = []
    for label, part in table.groupby("engine_label", sort=False):
        part = part.sort_values("concurrency")
        first, rest = part.iloc[0], part.iloc[1:]
        text = (f"**{label}**: at concurrency {first['concurrency']:g} the measured pair implies c = "
                f"{first['c_measured']:.2f} (the model {first['c_model']:.2f}); beyond its reads a draft forward took "
                f"{first['beyond_reads_ms']:.2f} ms, where the model charges {first['model_fixed_cost_ms']:.2f} "
                "ms.")  # fmt: skip
        if not rest.empty:
            text += (f" At concurrency {', '.join(f'{c:g}' for c in rest['concurrency'])} c is "
                     f"{', '.join(f'{c:.2f}' for c in rest['c_measured'])}: there it also holds whatever verifying "
                     "k + 1 tokens costs beyond a decode step.")  # fmt: skip
        sentences.append(text)
    return " ".join(sentences)


def draft_fixed_cost_ms(table: pd.DataFrame) -> float:
    """The fixed cost of one draft forward as measured: the median ``beyond_reads_ms`` of a
    ``draft_cost_beside_model`` table at its lowest concurrency, where verifying costs a decode step most nearly
    (NaN for an empty table)."""
    if table.empty:
        return float("nan")
    lowest = table[table["concurrency"] == table["concurrency"].min()]
    return float(lowest["beyond_reads_ms"].median())


def fixed_cost_change(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """Two ``theory.prediction_frame`` tables of the same configs and batches, made with different draft fixed
    costs, side by side: c and the speed-up before and after, per config and batch."""
    keep = ["config", "batch", "draft_fixed_cost_ms", "c", "speedup"]
    return before[keep].merge(after[keep], on=["config", "batch"], suffixes=("_before", "_after"))


def describe_fixed_cost_change(change: pd.DataFrame, batch: int = 1) -> str:
    """'With a draft forward's fixed cost of 0.23 ms instead of 1.71 ms, the model predicts at batch 1: A 1.40× (was
    1.00×); …' from a ``fixed_cost_change`` table ('' when it has no row at ``batch``)."""
    rows = change[change["batch"] == batch]
    if rows.empty:
        return ""
    first = rows.iloc[0]
    each = "; ".join(f"{r.config} {r.speedup_after:.2f}× (was {r.speedup_before:.2f}×, c {r.c_after:.2f} instead of "
                     f"{r.c_before:.2f})" for r in rows.itertuples())  # fmt: skip
    return (f"With a draft forward's fixed cost of {first['draft_fixed_cost_ms_after']:.2f} ms instead of "
            f"{first['draft_fixed_cost_ms_before']:.2f} ms, the model predicts at batch {batch}: {each}.")


def added_step_time(
    sweep: pd.DataFrame, before: pd.DataFrame | None = None, after: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """What speculation added to an engine step, per closed-loop pair of a ``tpot_speedups`` (or ``k_sweep``) table,
    measured and as two ``theory.prediction_frame`` tables predict it (``before`` and ``after``, e.g. with a whole
    step's fixed cost per draft forward and with a measured one; their ``config`` names are engine labels, and only
    those configurations are kept). Without the two tables every closed-loop pair is kept and the model columns are
    NaN.

    A verify step emits τ tokens per sequence, so its time is TPOT × τ: ``step_on_ms`` = the speculative TPOT × the
    measured mean acceptance length, ``step_off_ms`` = the spec-off TPOT, ``added_ms`` their difference (the draft
    forwards plus what verifying k + 1 tokens costs beyond a decode step) and ``added_share`` = ``added_ms`` /
    ``step_off_ms``, the cost ratio that S = τ / (1 + added_share) turns into the speed-up. The models' ``added_ms``
    and ``speedup`` follow with the suffixes ``_before`` and ``_after``.
    """
    import pandas as pd

    rows = sweep[sweep["concurrency"].notna() & sweep["request_rate_qps"].isna()]
    if before is not None:
        rows = rows[rows["engine_label"].isin(set(before["config"]))]
    records = []
    for row, first_rate in zip(rows.itertuples(), _position_1_rates(rows), strict=True):
        record = {"engine_label": row.engine_label, "model_shape": row.model_shape, "k": int(row.k),
                  "position_1_rate": first_rate, "concurrency": row.concurrency, "step_off_ms": row.baseline,
                  "step_on_ms": row.speculative * row.mean_acceptance_length}  # fmt: skip
        record["added_ms"] = record["step_on_ms"] - record["step_off_ms"]
        record["added_share"] = record["added_ms"] / record["step_off_ms"]
        record["speedup"] = row.speedup
        for suffix, predicted in (("before", before), ("after", after)):
            model = (predicted[(predicted["config"] == row.engine_label) & (predicted["batch"] == row.concurrency)]
                     if predicted is not None else pd.DataFrame())  # fmt: skip
            found = not model.empty
            record[f"added_ms_{suffix}"] = (float(model["tpot_on_ms"].iloc[0] * model["tau"].iloc[0]
                                                  - model["tpot_off_ms"].iloc[0]) if found else float("nan"))  # fmt: skip
            record[f"speedup_{suffix}"] = float(model["speedup"].iloc[0]) if found else float("nan")
        records.append(record)
    columns = ["engine_label", "model_shape", "k", "position_1_rate", "concurrency", "step_off_ms", "step_on_ms",
               "added_ms", "added_share", "speedup", "added_ms_before", "speedup_before", "added_ms_after",
               "speedup_after"]  # fmt: skip
    table = pd.DataFrame(records, columns=columns)
    return table.sort_values(["concurrency", "step_off_ms"], ascending=[True, False]).reset_index(drop=True)


def describe_added_step_time(
    table: pd.DataFrame, concurrency: float = 1, before: str = "a whole step's fixed cost per draft forward",
    after: str = "the fixed cost measured on MiMo-7B",
) -> str:
    """Three paragraphs on an ``added_step_time`` table: at ``concurrency``, what speculation added to each shape's
    step and the speed-up that followed; for each of those shapes, its step, added time and speed-up at every
    concurrency measured; and at ``concurrency`` each shape's added time beside the two models' (``before`` and
    ``after`` name their assumptions), with the one that came nearer."""
    low = table[table["concurrency"] == concurrency]
    if low.empty:
        return f"No closed-loop pair at concurrency {concurrency:g} is measured yet."
    each = "; ".join(f"{r.model_shape} ({r.engine_label}): +{r.added_ms:.2f} ms on a {r.step_off_ms:.2f} ms step "
                     f"({100 * r.added_share:.0f} %), {r.speedup:.2f}×" for r in low.itertuples())  # fmt: skip
    paragraphs = [f"At concurrency {concurrency:g}, speculation added to a step: {each}. The speed-up follows the "
                  "added share, not the step's length: S = τ / (1 + share)."]  # fmt: skip
    moves = []
    for label in low["engine_label"]:
        part = table[table["engine_label"] == label].sort_values("concurrency")
        if len(part) > 1:
            moves.append(f"{part['model_shape'].iloc[0]} at concurrency "
                         f"{'/'.join(f'{c:g}' for c in part['concurrency'])}: step "
                         f"{'/'.join(f'{t:.2f}' for t in part['step_off_ms'])} ms, added "
                         f"{'/'.join(f'{t:.2f}' for t in part['added_ms'])} ms, "
                         f"{'/'.join(f'{x:.2f}' for x in part['speedup'])}×")  # fmt: skip
    if moves:
        paragraphs.append("With load: " + "; ".join(moves) + ".")
    nearer = []
    for r in low.itertuples():
        gaps = {before: abs(r.added_ms - r.added_ms_before), after: abs(r.added_ms - r.added_ms_after)}
        if any(g != g for g in gaps.values()):  # NaN: no prediction at this batch
            continue
        closest = min(gaps, key=lambda name: gaps[name])
        nearer.append(f"{r.model_shape} +{r.added_ms:.2f} ms measured, +{r.added_ms_before:.2f} ms "
                      f"({r.speedup_before:.2f}×) with {before}, +{r.added_ms_after:.2f} ms ({r.speedup_after:.2f}×) "
                      f"with {after}: nearer {closest}")  # fmt: skip
    if nearer:
        paragraphs.append(f"The step model at batch {concurrency:g}: " + "; ".join(nearer) + ".")
    return "\n\n".join(paragraphs)


# --------------------------------------------------------------------------------------------------------------------
# Issue #6: EAGLE-3 on gpt-oss
# --------------------------------------------------------------------------------------------------------------------


def with_profile(table: pd.DataFrame, profiles: Mapping[str, tuple[int, int]]) -> pd.DataFrame:
    """``table`` with a ``profile`` column naming each row's (input_len, output_len) after ``profiles``."""
    names = {(int(i), int(o)): name for name, (i, o) in profiles.items()}
    out = table.copy()
    out["profile"] = [names.get((int(i), int(o))) for i, o in zip(out["input_len"], out["output_len"], strict=True)]
    return out


def gain_table(df: pd.DataFrame, profiles: Mapping[str, tuple[int, int]], metric: str = "output_tok_s") -> pd.DataFrame:
    """Every closed-loop speculative point against speculation off: ``gain_pct`` (for latencies, a negative change
    is the gain), by profile, k, imposed α and concurrency."""
    table = with_profile(versus_baseline(df, metric), profiles)
    table = table[table["concurrency"].notna()].copy()
    table["gain_pct"] = table["change_pct"] if not metric.endswith("_ms") else -table["change_pct"]
    return table.sort_values(["profile", "k", "imposed_alpha", "concurrency"]).reset_index(drop=True)


STEP_FACTOR_COLUMNS = (
    "profile", "concurrency", "fewer_steps_x", "step_cost_x", "gain_pct", "steps_per_1k_off", "steps_per_1k_spec",
    "ms_per_step_off", "ms_per_step_spec",
)  # fmt: skip


def step_factors(df: pd.DataFrame, profiles: Mapping[str, tuple[int, int]], engine: str) -> pd.DataFrame:
    """The output-throughput gain of ``engine`` over speculation off, split into its two factors per profile and
    concurrency: how many times fewer engine steps the run took per output token (``fewer_steps_x``) and how many
    times longer each step took (``step_cost_x``). ``df`` needs ``steps_per_1k_tokens`` and ``ms_per_step``
    (``results.engine_steps.with_step_times``). Output throughput is tokens over wall time, and wall time is steps
    times time per step, so 1 + gain = fewer_steps_x / step_cost_x: speculation pays exactly where it saves more
    steps than each of them costs."""
    import pandas as pd

    keys = ["profile", "concurrency"]
    parts = []
    for metric, prefix in (("steps_per_1k_tokens", "steps_per_1k"), ("ms_per_step", "ms_per_step")):
        table = gain_table(df, profiles, metric)
        table = table[table["engine_label"] == engine]
        parts.append(table[keys + ["baseline", "speculative"]].rename(
            columns={"baseline": f"{prefix}_off", "speculative": f"{prefix}_spec"}))  # fmt: skip
    gains = gain_table(df, profiles, "output_tok_s")
    gains = gains[gains["engine_label"] == engine][keys + ["gain_pct"]]
    out = parts[0].merge(parts[1], on=keys).merge(gains, on=keys).dropna()
    if out.empty:
        return pd.DataFrame(columns=list(STEP_FACTOR_COLUMNS))
    out["fewer_steps_x"] = out["steps_per_1k_off"] / out["steps_per_1k_spec"]
    out["step_cost_x"] = out["ms_per_step_spec"] / out["ms_per_step_off"]
    return out[list(STEP_FACTOR_COLUMNS)].sort_values(keys).reset_index(drop=True)


def describe_step_factors(table: pd.DataFrame, name: str = "k = 3") -> str:
    """One sentence per profile of a ``step_factors`` table: the range of both factors, and the two factors at the
    concurrency where the gain was lowest (which of them set it). '' when the table is empty."""
    sentences = []
    for profile, rows in table.groupby("profile", sort=False):
        low = rows.loc[rows["gain_pct"].idxmin()]
        sentences.append(
            f"On the {profile} profile, {name} took {rows.fewer_steps_x.min():.2f}-{rows.fewer_steps_x.max():.2f}× "
            f"fewer engine steps per output token than speculation off, and each step took "
            f"{rows.step_cost_x.min():.2f}-{rows.step_cost_x.max():.2f}× as long; its lowest gain, "
            f"{low.gain_pct:+.1f} % at concurrency {int(low.concurrency)}, came with {low.fewer_steps_x:.2f}× fewer "
            f"steps and steps {low.step_cost_x:.2f}× as long."
        )
    return " ".join(sentences)


def step_cost_by_alpha(
    df: pd.DataFrame, profiles: Mapping[str, tuple[int, int]], k: int = 3, overlapped: Iterable[str] = (),
) -> pd.DataFrame:
    """Milliseconds per engine step of the runs at one k and different imposed α, per profile and concurrency.

    At a fixed k a step drafts k tokens and verifies k + 1 per sequence whatever is accepted, so its cost depends
    on α only through the work on the accepted tokens; how far the α runs' step times spread (``spread_pct``:
    slowest over fastest, less one) bounds how much one run's step time moves between runs (other leases, other
    machines), the scale below which a gain difference between two α runs is not acceptance's doing. ``df`` needs
    ``ms_per_step`` (``results.engine_steps.with_step_times``); only loads with two or more α (``alphas``) appear.
    ``alpha_slow`` and ``alpha_fast`` name the pair; ``overlapped`` (point ids, ``analysis.overlapping_points``)
    marks in ``shared_host`` whether the slowest run shared its host with another server.
    """
    import pandas as pd

    columns = ["profile", "concurrency", "alphas", "alpha_fast", "ms_fast", "alpha_slow", "ms_slow",
               "spread_pct", "shared_host"]  # fmt: skip
    rows = df[(df["spec_method"] == "eagle3") & (df["num_speculative_tokens"] == k) & df["imposed_alpha"].notna()
              & df["ms_per_step"].notna() & df["concurrency"].notna()]  # fmt: skip
    rows = with_profile(rows, profiles)
    shared = set(overlapped)
    records = []
    for (profile, conc), group in rows.groupby(["profile", "concurrency"]):
        if group["imposed_alpha"].nunique() < 2:
            continue
        fastest, slowest = group.loc[group["ms_per_step"].idxmin()], group.loc[group["ms_per_step"].idxmax()]
        records.append({
            "profile": profile, "concurrency": int(conc),
            "alphas": tuple(sorted(float(a) for a in group["imposed_alpha"].unique())),
            "alpha_fast": float(fastest["imposed_alpha"]), "ms_fast": float(fastest["ms_per_step"]),
            "alpha_slow": float(slowest["imposed_alpha"]), "ms_slow": float(slowest["ms_per_step"]),
            "spread_pct": 100 * (float(slowest["ms_per_step"]) / float(fastest["ms_per_step"]) - 1),
            "shared_host": slowest["point_id"] in shared,
        })  # fmt: skip
    return pd.DataFrame(records, columns=columns)


def describe_step_cost_by_alpha(
    table: pd.DataFrame, k: int = 3, tolerance: float = TOLERANCE, bands: Iterable[tuple[str, int, int]] = BANDS,
) -> str:
    """The largest step-time spread between α runs per profile and concurrency band (``step_cost_by_alpha``), the
    widest pair, and the loads where a spread above ``tolerance`` had a slowest run that was not the highest α (per
    accepted token work grows with α, so a spread that does not follow α is variation between runs); '' for an
    empty table."""
    if table.empty:
        return ""
    sentences = []
    for profile, rows in table.groupby("profile", sort=False):
        spans = []
        for name, low, high in bands:
            band = rows[rows["concurrency"].between(low, high)]
            if not band.empty:
                spans.append(f"{band['spread_pct'].max():.1f} % at concurrency {name}")
        widest = rows.loc[rows["spread_pct"].idxmax()]
        beside = " (the slower run shared its host with another server)" if widest["shared_host"] else ""
        text = (f"On the {profile} profile the step time of k = {k} differed between imposed α by at most "
                f"{_and_list(spans)}; the widest, at concurrency {int(widest['concurrency'])}: "
                f"{widest['ms_fast']:.1f} ms at α {widest['alpha_fast']:g} against {widest['ms_slow']:.1f} "
                f"ms at α {widest['alpha_slow']:g}{beside}.")  # fmt: skip
        against = rows[(rows["spread_pct"] > 100 * tolerance) & (rows["alpha_slow"] < rows["alphas"].map(max))]
        if not against.empty:
            text += (f" Where it differed by more than {100 * tolerance:.0f} %, the slowest run was not the highest α "
                     f"at concurrency {', '.join(str(c) for c in against['concurrency'])}: there the spread is "
                     "variation between runs, not acceptance's doing.")  # fmt: skip
        sentences.append(text)
    return " ".join(sentences)


def _and_list(items: list[str], sep: str = ", ", last: str = " and ") -> str:
    """'a', 'a and b', 'a, b and c' (or with other separators: 'a; b; and c')."""
    return items[0] if len(items) == 1 else sep.join(items[:-1]) + last + items[-1]


def _band_means(
    gains: pd.DataFrame, alpha: float, bands: Iterable[tuple[str, int, int]],
) -> Iterable[tuple[str, str, pd.Series]]:
    """(profile, band, mean gain in % per k) for each profile and concurrency band with points at the imposed
    ``alpha``; the means are sorted best first (ties keep the smaller k first)."""
    central = gains[(gains["imposed_alpha"] - alpha).abs() < 1e-9]
    for profile, rows in central.groupby("profile"):
        for name, low, high in bands:
            band = rows[rows["concurrency"].between(low, high)]
            if not band.empty:
                yield profile, name, band.groupby("k")["gain_pct"].mean().sort_values(ascending=False, kind="stable")


def _ks(means: pd.Series) -> str:
    """The values of k a band compared, in ascending order: '2, 3, 4'."""
    return ", ".join(str(int(k)) for k in sorted(means.index))


def best_k_by_band(gains: pd.DataFrame, alpha: float, bands: Iterable[tuple[str, int, int]] = BANDS) -> pd.DataFrame:
    """For each profile and concurrency band, the k with the highest mean gain at the imposed ``alpha``.

    A band gets a best k only where at least two values of k were measured in it; ``ks`` lists those compared,
    ``runner_up_k`` is the next best and ``lead_pts`` how many points of gain the best is ahead of it (one run per
    point: a lead within ``TOLERANCE`` is not a winner, ``eagle3_rule`` says so). A band without any point of the
    profile (the long profile stops at concurrency 64) gets no row.
    """
    import pandas as pd

    records = []
    for profile, name, means in _band_means(gains, alpha, bands):
        ranked = len(means) >= 2
        records.append({
            "profile": profile, "band": name, "ks": _ks(means),
            "best_k": int(means.index[0]) if ranked else None,
            "best_gain_pct": float(means.iloc[0]) if ranked else None,
            "runner_up_k": int(means.index[1]) if ranked else None,
            "lead_pts": float(means.iloc[0] - means.iloc[1]) if ranked else None,
        })  # fmt: skip
    columns = ["profile", "band", "ks", "best_k", "best_gain_pct", "runner_up_k", "lead_pts"]
    return pd.DataFrame(records, columns=columns)


def claimed_ks_by_band(
    gains: pd.DataFrame, alpha: float, low: int, high: int, tolerance: float = TOLERANCE,
    bands: Iterable[tuple[str, int, int]] = BANDS,
) -> pd.DataFrame:
    """Whether a claimed best range of draft tokens (``low``-``high``, Red Hat's 2-3) held in each profile and
    concurrency band, at the imposed ``alpha``.

    Each band sets the best mean gain of a k inside the range (``inside_k``, ``inside_gain_pct``) against the best
    outside it (``outside_k``, ``outside_gain_pct``). ``outcome``: 'held' when the inside one leads by more than
    ``tolerance`` (in points of gain, ×100), 'not held' when the outside one does, 'too close' when they are within
    it, and 'not tested' when the band measured only ks on one side of the range (k = 2 and 3 alone cannot show
    that 2-3 is best).
    """
    import pandas as pd

    records = []
    for profile, name, means in _band_means(gains, alpha, bands):
        inside = means[(means.index >= low) & (means.index <= high)]
        outside = means.drop(inside.index)
        record = {"profile": profile, "band": name, "ks": _ks(means), "claimed": f"{low}-{high}",
                  "inside_k": None, "inside_gain_pct": None, "outside_k": None, "outside_gain_pct": None}
        if not inside.empty:
            record.update(inside_k=int(inside.index[0]), inside_gain_pct=float(inside.iloc[0]))
        if not outside.empty:
            record.update(outside_k=int(outside.index[0]), outside_gain_pct=float(outside.iloc[0]))
        if inside.empty or outside.empty:
            record["outcome"] = "not tested"
        else:
            lead = float(inside.iloc[0] - outside.iloc[0])
            record["outcome"] = ("too close" if abs(lead) <= 100 * tolerance else "held" if lead > 0 else "not held")
        records.append(record)
    columns = ["profile", "band", "ks", "claimed", "inside_k", "inside_gain_pct", "outside_k", "outside_gain_pct",
               "outcome"]  # fmt: skip
    return pd.DataFrame(records, columns=columns).astype({"inside_k": "Int64", "outside_k": "Int64"})


def _gains_at(gains: pd.DataFrame) -> str:
    """A ``gain_table``'s gains in words: '+36.0 % at 1, -4.8 % at 16' (concurrency)."""
    return ", ".join(f"{g:+.1f} % at {int(c)}" for c, g in zip(gains["concurrency"], gains["gain_pct"], strict=True))


def eagle3_verdict(
    df: pd.DataFrame, profiles: Mapping[str, tuple[int, int]], published: pd.DataFrame | None = None,
    engine: str = "eagle3-k3-a0.71", profile: str = "chat", top: int = 200, tolerance: float = TOLERANCE,
    cite_report: bool = True,
) -> Verdict:
    """Does EAGLE-3 at k = 3 raise output throughput over speculation off on ``profile``, and does the gain hold up
    to ``top`` concurrent requests, as the Red Hat article reported (gains to 200; +10-21 %)? The sentence ends with
    what Red Hat reported unless ``cite_report`` is off (a page that already cites it for another profile)."""
    import pandas as pd

    df, stalled = _without_stalled(df)
    stalled_at: list[float] = []
    if not stalled.empty:
        mine = with_profile(stalled, profiles)
        mine = mine[(mine["profile"] == profile) & (mine["engine_label"].isin([engine]) | is_baseline(mine))]
        stalled_at = sorted({float(c) for c in mine["concurrency"].dropna()})
    gains = gain_table(df, profiles) if not df.empty else pd.DataFrame()
    if not gains.empty:
        gains = gains[(gains["engine_label"] == engine) & (gains["profile"] == profile)].reset_index(drop=True)
    if gains.empty:
        return Verdict(
            "not measured",
            f"Not measured yet: no pair of speculation off and {engine} on the {profile} profile is recorded, so this "
            "page gives no verdict." + _stalled_words(stalled_at, "concurrency"),
            pd.DataFrame(),
        )
    steps = _gains_at(gains)
    measured = (f"On {_gpus(df)}, {engine} changed output throughput against speculation off on the {profile} profile "
                f"by {steps} (concurrency).")
    measured += _stalled_words([c for c in stalled_at if c not in set(gains["concurrency"])], "concurrency")
    low, high = _published(published, "output-throughput-gain-low"), _published(published, "output-throughput-gain-high")
    reported = (
        f" Red Hat reported gains that held to 200 concurrent requests, +{low:g} to +{high:g} % output throughput "
        "(the range only in a secondary summary), on H200 with real weights and ShareGPT, MLPerf and SWE-bench prompts."
        if low is not None and high is not None and cite_report
        else ""
    )
    at_top = gains[gains["concurrency"] == top]
    wins = gains[gains["gain_pct"] > 100 * tolerance]
    if wins.empty:
        status, tail = "no gain", f" It never raised throughput by more than {100 * tolerance:.0f} %."
    elif at_top.empty:
        status, tail = "incomplete", "" if top in stalled_at else f" Not yet measured at {top} concurrent requests."
    elif float(at_top["gain_pct"].iloc[0]) > 100 * tolerance:
        status, tail = f"gain holds to {top}", f" The gain held at {top} concurrent requests, as Red Hat reported."
        losses = gains[(gains["gain_pct"] < -100 * tolerance) & (gains["concurrency"] < top)]
        if not losses.empty:
            tail += f" It did not hold at every load below that: {_gains_at(losses)}."
    else:
        last = int(wins["concurrency"].max())
        status, tail = "gain fades before the top", (
            f" The last gain above {100 * tolerance:.0f} % was at concurrency {last}; at {top} it was "
            f"{float(at_top['gain_pct'].iloc[0]):+.1f} %, unlike Red Hat's result."
        )
    return Verdict(status, measured + tail + reported, gains)


# --------------------------------------------------------------------------------------------------------------------
# The rule a tuner takes away
# --------------------------------------------------------------------------------------------------------------------


def mtp_rule(verdict: Verdict, best: pd.DataFrame | None = None, added: pd.DataFrame | None = None) -> str:
    """The MTP page's rule, from its verdict (the starting configuration vLLM's own docs and PR #12755 give until a
    measurement says more), once k > 1 is measured the best k per load (``best_k_by_load``), and once more than one
    shape is measured at concurrency 1 with k = 1 at 0.85 how far the added share of a step spread between them
    (``added_step_time``)."""
    return _mtp_rule_by_verdict(verdict) + _which_k(best) + _which_model(added)


def _which_model(added: pd.DataFrame | None, concurrency: float = 1, first_rate: float = 0.85) -> str:
    if added is None:
        return ""
    low = added[(added["concurrency"] == concurrency) & (added["k"] == 1)
                & ((added["position_1_rate"] - first_rate).abs() < 1e-9)]  # fmt: skip
    if low["model_shape"].nunique() < 2:
        return ""
    cheap, dear = low.loc[low["added_share"].idxmin()], low.loc[low["added_share"].idxmax()]
    return (f" Which model: at concurrency {concurrency:g} MTP added {100 * cheap['added_share']:.0f} % to a step on "
            f"{cheap['model_shape']} ({cheap['speedup']:.2f}×) and {100 * dear['added_share']:.0f} % on "
            f"{dear['model_shape']} ({dear['speedup']:.2f}×); measure that share on your model (TPOT with MTP × the "
            "mean acceptance length, against the TPOT without) before counting on the published gain.")  # fmt: skip


def _which_k(best: pd.DataFrame | None) -> str:
    if best is None or best.empty or (best["best_k"] == 1).all():
        return ""
    first = best["position_1_rate"].iloc[0]
    return (f" Which k: the largest TPOT speed-up came from {describe_best_k(best)}, with position 1 accepted at "
            f"{first:g} and later positions at rates derived from one published acceptance length; the real "
            "acceptance of positions 2 and 3 decides whether k > 1 pays on your model.")  # fmt: skip


def _mtp_rule_by_verdict(verdict: Verdict) -> str:
    start = 'Start with `{"method": "mtp", "num_speculative_tokens": 1}`'
    if verdict.status == "not measured":
        return (
            f"{start}, the only k vLLM's DeepSeek MTP support was validated with. Not measured here yet: the published "
            "gains (1.63× at 1 QPS, none at 8 QPS) come from a 671B model on 8 GPUs; expect less on smaller models."
        )
    if verdict.status == "gain that shrinks with load":
        return f"{start} and keep it where the request rate is low: measured here, its gain shrinks as load grows."
    if verdict.status == "gain that holds with load":
        top = verdict.table["request_rate_qps"].max()
        return f"{start}: measured here, its gain held at every request rate up to {top:g} QPS."
    if verdict.status == "no gain at low load":
        return "Measured here, MTP at k = 1 did not lower TPOT even at low load on this shape: check the model's scale first."
    gains = verdict.table[verdict.table["speedup"] > 1.0 + TOLERANCE] if not verdict.table.empty else verdict.table
    if verdict.status == "incomplete" and len(gains) == len(verdict.table) and not gains.empty:
        rates = ", ".join(f"{r:g}" for r in gains["request_rate_qps"])
        return (f"{start}: measured here it lowered TPOT at every request rate measured so far ({rates} QPS); where "
                "its gain ends at higher rates is not measured yet.")
    return f"{start}; the measurement here is not complete yet."


def eagle3_profile_note(verdict: Verdict, tolerance: float = TOLERANCE) -> str:
    """One sentence on where k = 3 paid on a second length profile, from its ``eagle3_verdict``: the concurrencies
    where the gain passed ``tolerance``, those where it fell below ``-tolerance``, and whether the top of the
    profile's range is still unmeasured; empty when nothing of that profile is measured."""
    if verdict.status == "not measured" or verdict.table.empty:
        return ""
    table = verdict.table.sort_values("concurrency")
    prompts = int(table["input_len"].iloc[0])

    def where(rows: pd.DataFrame) -> str:
        return f"concurrency {_levels(rows)} ({_gains(rows)})"

    paid = table[table["gain_pct"] > 100 * tolerance]
    lost = table[table["gain_pct"] < -100 * tolerance]
    even = table[table["gain_pct"].abs() <= 100 * tolerance]
    found = [f"paid at {where(paid)}" if not paid.empty else "paid at no concurrency measured"]
    if not even.empty:
        found.append(f"was within ±{100 * tolerance:.0f} % at {where(even)}")
    if not lost.empty:
        found.append(f"lost at {where(lost)}")
    listed = _and_list(found)
    tail = "; the top of its range is not measured yet" if verdict.status == "incomplete" else ""
    return f"On the {_profile_of(verdict)} profile ({prompts:,}-token prompts) k = 3 {listed}{tail}"


def eagle3_rule(
    verdict: Verdict, best: pd.DataFrame | None = None, claimed: pd.DataFrame | None = None,
    second: Verdict | None = None, band: pd.DataFrame | None = None, tolerance: float = TOLERANCE,
) -> str:
    """The EAGLE-3 page's rule, from its verdict and, once the k sweep is measured, the best k per band
    (``best_k_by_band``; a lead within ``tolerance`` is named as such); with ``claimed`` (``claimed_ks_by_band``),
    where the published best draft-token range held; with ``second`` (the ``eagle3_verdict`` of another length
    profile), where k = 3 paid on that profile; with ``band`` (``alpha_band``), where k = 3 paid at the other imposed
    acceptances."""
    if verdict.status == "not measured":
        return (
            "Not measured here yet. Red Hat's article puts the sweet spot at 2-3 draft tokens and reports gains up to "
            "200 concurrent requests on gpt-oss-120b; start there and measure at your own concurrency."
        )
    parts: list[str] = []  # sentences after the headline
    second_note = eagle3_profile_note(second) if second is not None else ""
    if second_note:
        parts.append(second_note)
    if best is not None and not best.empty and best["best_k"].notna().any():
        found = best[best["best_k"].notna()]
        parts.append("Best k measured: " + "; ".join(_best_k_words(r, tolerance) for r in found.itertuples()))
    if claimed is not None and not claimed.empty:
        parts.append(_claimed_ks_note(claimed, tolerance))
    band_note = describe_alpha_band(band) if band is not None else ""
    if band_note:
        parts.append(band_note.removesuffix("."))
    headline = {
        "gain holds to 200": f"EAGLE-3 at k = 3 paid at every concurrency up to 200 on the {_profile_of(verdict)} "
        "profile here",
        "gain fades before the top": "EAGLE-3 at k = 3 paid at low concurrency only here: switch it off above the band "
        "where it stopped paying (num_speculative_tokens_per_batch_size with k = 0)",
        "no gain": "EAGLE-3 at k = 3 did not pay here at the imposed acceptance",
        "incomplete": "EAGLE-3 at k = 3 paid where measured so far; the top of the range is not measured yet",
    }.get(verdict.status, verdict.status)
    return ". ".join([headline, *parts]) + "."


def _profile_of(verdict: Verdict) -> str:
    """The length profile a measured ``eagle3_verdict`` is about (its gain table names it on every row)."""
    return str(verdict.table["profile"].iloc[0])


def _best_k_words(band: Any, tolerance: float) -> str:
    """One ``best_k_by_band`` row in words: '3 at concurrency 1-8 (chat)', with '; k = 4 within 0.8 points' where
    the runner-up is within ``tolerance`` (×100 points) of the best (two decimals where one would round the lead up to
    the tolerance: 'within 2.96 points', not 'within 3.0 points' under a 3-point tolerance)."""
    close = ""
    if band.lead_pts <= 100 * tolerance:
        digits = 2 if round(band.lead_pts, 1) >= 100 * tolerance else 1
        close = f"; k = {int(band.runner_up_k)} within {band.lead_pts:.{digits}f} points"
    return f"{int(band.best_k)} at concurrency {band.band} ({band.profile}{close})"


def _claimed_ks_note(claimed: pd.DataFrame, tolerance: float = TOLERANCE) -> str:
    """Where the published best range of draft tokens held, by outcome (``claimed_ks_by_band`` with the same
    ``tolerance``): 'At the imposed acceptance, Red Hat's best of 2-3 draft tokens held at …; not at …, nor at …;
    too close to call … at … and at …'."""

    def where(outcome: str) -> pd.DataFrame:
        return claimed[claimed["outcome"] == outcome]

    def against(gain: float, k: int, other: float) -> str:
        return f"mean gain {gain:+.1f} % against k = {k}'s {other:+.1f} %"

    held = where("held")
    found = [f"held at concurrency {_bands(held)}" if not held.empty else "held in no band measured"]
    beyond = where("not held")
    if not beyond.empty:
        found.append("not at " + _and_list([
            f"{r.band} ({r.profile}), where k = {int(r.outside_k)} led "
            f"({against(r.outside_gain_pct, r.inside_k, r.inside_gain_pct)})"
            for r in beyond.itertuples()
        ], ", at ", ", nor at "))  # fmt: skip
    close = where("too close")
    if not close.empty:
        found.append(f"too close to call (within {100 * tolerance:.0f} points) at " + _and_list([
            f"{r.band} ({r.profile}; k = {int(r.inside_k)}'s "
            f"{against(r.inside_gain_pct, r.outside_k, r.outside_gain_pct)})"
            for r in close.itertuples()
        ], ", at ", " and at "))  # fmt: skip
    untested = where("not tested")
    if not untested.empty:
        ks = untested["ks"].unique()
        why = (f"only k = {ks[0]} {'were' if ',' in ks[0] else 'was'} measured" if len(ks) == 1
               else "the ks measured lie on one side of the range")  # fmt: skip
        found.append(f"not tested at {_bands(untested)}, where {why}")
    listed = _and_list(found, "; ", "; and ")
    return (f"At the imposed acceptance, Red Hat's best of {claimed['claimed'].iloc[0]} draft tokens {listed}. A "
            "lower real acceptance moves the best k down")


def _bands(rows: pd.DataFrame) -> str:
    """Bands in words: '1-8 (chat), 16-64 (swe)'."""
    return ", ".join(f"{r.band} ({r.profile})" for r in rows.itertuples())


def select_gains(
    gains: pd.DataFrame, alpha: float | None = None, profile: str | None = None, k: int | None = None,
) -> pd.DataFrame:
    """Rows of a gain table at one imposed α, profile and/or k (``None``: any); an empty table stays empty."""
    if gains.empty:
        return gains
    keep = gains["engine_label"].notna()
    if alpha is not None:
        keep &= (gains["imposed_alpha"].astype(float) - alpha).abs() < 1e-9
    if profile is not None:
        keep &= gains["profile"] == profile
    if k is not None:
        keep &= gains["k"] == k
    return gains[keep]


def alpha_band(gains: pd.DataFrame, central: float, k: int = 3) -> pd.DataFrame:
    """The gains of ``k`` at each imposed α other than ``central``, beside the central α's gain at the same profile and
    concurrency: one row per profile, α and concurrency measured at that α, with ``central_alpha``,
    ``central_gain_pct`` (missing where the central α is not measured there) and ``difference_pts`` (this α's gain
    minus the central one's)."""
    import pandas as pd

    columns = ["profile", "imposed_alpha", "concurrency", "gain_pct", "central_alpha", "central_gain_pct",
               "difference_pts"]  # fmt: skip
    rows = select_gains(gains, k=k)
    if rows.empty:
        return pd.DataFrame(columns=columns)
    at_central = (rows["imposed_alpha"].astype(float) - central).abs() < 1e-9
    centre = rows[at_central].set_index(["profile", "concurrency"])["gain_pct"].rename("central_gain_pct")
    band = rows[~at_central].join(centre, on=["profile", "concurrency"])
    band = band.assign(imposed_alpha=band["imposed_alpha"].astype(float), central_alpha=central,
                       difference_pts=band["gain_pct"] - band["central_gain_pct"])  # fmt: skip
    return band[columns].sort_values(["profile", "imposed_alpha", "concurrency"]).reset_index(drop=True)


def describe_alpha_band(band: pd.DataFrame, k: int = 3, tolerance: float = TOLERANCE) -> str:
    """One sentence per profile and α of an ``alpha_band`` table of ``k``: where it still paid (a gain beyond
    ``tolerance``) and where it did not at that α, and by how many points its gain differed from the central α's at
    the concurrencies measured with both, naming those where the difference ran against acceptance by more than
    ``tolerance`` (a lower α gaining more, a higher one less: runs that differed in more than α); empty when no other α is
    measured."""
    sentences = []
    for (profile, alpha, central), rows in band.groupby(["profile", "imposed_alpha", "central_alpha"], sort=False):
        below = alpha < central
        paid = rows[rows["gain_pct"] > 100 * tolerance]
        if len(paid) == len(rows):
            found = f"paid at every concurrency measured ({_levels(rows)}: {_gains(rows)})"
        else:
            unpaid = rows[rows["gain_pct"] <= 100 * tolerance]
            found = (f"paid at concurrency {_levels(paid)} ({_gains(paid)}) and not at {_levels(unpaid)} "
                     f"({_gains(unpaid)})") if not paid.empty else f"paid at no concurrency measured ({_gains(rows)})"
        text = (f"At α = {alpha:.2f} ({abs(alpha - central):.2f} {'below' if below else 'above'} the imposed "
                f"{central:.2f}) k = {k} {found}")  # fmt: skip
        both = rows[rows["central_gain_pct"].notna()]
        if not both.empty:
            low, high = both["difference_pts"].min(), both["difference_pts"].max()
            spread = f"{low:+.1f}" if round(low, 1) == round(high, 1) else f"{low:+.1f} to {high:+.1f}"
            text += f", {spread} points against α = {central:.2f} at the same concurrencies"
            against = both["difference_pts"] > 100 * tolerance if below else both["difference_pts"] < -100 * tolerance
            contrary = both[against]
            if not contrary.empty:
                points = ", ".join(f"{int(c)} ({d:+.1f} points)"
                                   for c, d in zip(contrary["concurrency"], contrary["difference_pts"], strict=True))  # fmt: skip
                text += (f"; {'more' if below else 'less'} than α = {central:.2f} at concurrency {points}, the "
                         f"opposite of what a {'lower' if below else 'higher'} acceptance does alone: there the two "
                         "runs differed in more than α")  # fmt: skip
        sentences.append(f"{text} ({profile} profile).")
    return " ".join(sentences)


def _levels(rows: pd.DataFrame) -> str:
    return ", ".join(str(int(c)) for c in rows["concurrency"])


def _gains(rows: pd.DataFrame) -> str:
    return ", ".join(f"{g:+.1f} %" for g in rows["gain_pct"])


def beside_model(measured: pd.DataFrame, predicted: pd.DataFrame, value: str, label: str) -> pd.DataFrame:
    """Closed-loop measurements of one configuration (``engine_label`` == ``label``) beside the step model's
    prediction at the same concurrency (``predicted``'s ``batch`` or ``concurrency``): ``measured``, ``predicted``
    and their difference, for ``value`` ('speedup' or 'gain_pct')."""
    import pandas as pd

    rows = measured[(measured["engine_label"] == label) & measured["concurrency"].notna()]
    if "request_rate_qps" in rows.columns:
        rows = rows[rows["request_rate_qps"].isna()]
    model = predicted if "concurrency" in predicted.columns else predicted.rename(columns={"batch": "concurrency"})
    model = model[["concurrency", value]].rename(columns={value: "predicted"})
    table = rows[["concurrency", value]].rename(columns={value: "measured"}).astype({"concurrency": float})
    out = table.merge(model.astype({"concurrency": float}), on="concurrency", how="left").sort_values("concurrency")
    out["measured_minus_predicted"] = out["measured"] - out["predicted"]
    return pd.DataFrame(out).reset_index(drop=True)


def beside_model_by_config(measured: pd.DataFrame, predicted: pd.DataFrame, value: str) -> pd.DataFrame:
    """``beside_model`` for every configuration of ``predicted`` (a ``theory.prediction_frame`` whose ``config``
    names are engine labels), one table with an ``engine_label`` column, in ``predicted``'s order."""
    import pandas as pd

    tables = [beside_model(measured, predicted[predicted["config"] == label], value, label).assign(engine_label=label)
              for label in dict.fromkeys(predicted["config"])]  # fmt: skip
    columns = ["engine_label", "concurrency", "measured", "predicted", "measured_minus_predicted"]
    return pd.concat(tables, ignore_index=True)[columns] if tables else pd.DataFrame(columns=columns)


def describe_beside_model_by_config(table: pd.DataFrame, band: float, unit: str, fmt: str = "{:.2f}") -> str:
    """``describe_beside_model`` for each configuration of a ``beside_model_by_config`` table: one Markdown
    paragraph per engine label that has a measurement, '' when none has."""
    paragraphs = [f"**{label}.** {describe_beside_model(part, band, unit, fmt)}"
                  for label, part in table.groupby("engine_label", sort=False)
                  if not part.dropna(subset=["measured", "predicted"]).empty]  # fmt: skip
    return "\n\n".join(paragraphs)


def describe_beside_model(table: pd.DataFrame, band: float, unit: str, fmt: str = "{:.2f}") -> str:
    """One sentence on a ``beside_model`` table: the concurrencies where the model came within ``band`` (in ``unit``,
    e.g. 'percentage points') of the measurement, and those where it under- or overstated it; values as ``fmt``."""
    rows = table.dropna(subset=["measured", "predicted"])
    if rows.empty:
        return "No measurement to set beside the model yet."

    def levels(part: pd.DataFrame) -> str:
        return ", ".join(f"{int(c)} ({fmt.format(m)} measured, {fmt.format(p)} predicted)"
                         for c, m, p in zip(part["concurrency"], part["measured"], part["predicted"], strict=True))  # fmt: skip

    diff = rows["measured_minus_predicted"]
    parts = []
    for words, part in ((f"came within {band:g} {unit} of the measurement", rows[diff.abs() <= band]),
                        ("understated the measurement", rows[diff > band]), ("overstated it", rows[diff < -band])):  # fmt: skip
        if not part.empty:
            parts.append(f"{words} at concurrency {levels(part)}")
    return "The model " + "; it ".join(parts) + "."
