"""The worked solutions of the workshop's exercises 1 to 4 (speculation and load), each recomputed from the recorded
data, and what every solution shares (``Solution``, the rows of a case, one configuration picked by label)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from vllm_playbooks.analysis.compare import (
    acceptance_check,
    higher_is_better,
    is_baseline,
    versus_baseline,
    winning_levels,
)
from vllm_playbooks.cases.discussion_13834 import implied_13834
from vllm_playbooks.cases.results import results_for
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.hardware import REFERENCE_GPU
from vllm_playbooks.model.speculative import expected_tokens_per_step
from vllm_playbooks.results.store import load_reference

#: The word a learner writes for "at no measured level" in exercise 1 (``None`` is accepted as well).
NEVER = "never"


#: How one part of an answer is graded: "float" (within the tolerance), "int" (exactly), "level" (a concurrency
#: or ``NEVER``), "word" (one of a few words, case-insensitive).
AnswerKind = str


AnswerKinds = AnswerKind | dict[str, AnswerKind]


@dataclass(frozen=True, eq=False)
class Solution:
    """The worked solution of one exercise, computed from the data.

    ``inputs`` are the arguments it was computed with (``check`` solves again with them); ``value`` is the expected
    answer in the form a learner writes it; ``kinds`` says how each part is graded; ``statement`` is the sentence
    ``check`` prints after ``correct:``; ``explanation`` (Markdown) and ``table`` show the worked numbers.
    """

    exercise: str
    inputs: dict[str, Any]
    value: Any
    kinds: AnswerKinds
    statement: str
    explanation: str
    table: pd.DataFrame | None = field(default=None, repr=False)


def case_rows(case: str, gpu_name: str | None = None) -> pd.DataFrame:
    """A case's recorded rows (replayed from the raw files), those of one GPU.

    Rows of different GPUs must not be mixed. Without ``gpu_name`` the rows are those of the only GPU that has some,
    or, where several have (a live run adds the learner's next to ours), the reference GPU's
    (``hardware.REFERENCE_GPU``), as on the case pages; several GPUs without the reference need ``gpu_name``.
    """

    rows = results_for(case, "replay")
    if rows.empty:
        raise ConfigError(f"no recorded rows for case {case!r} in data/runs/{case}/: run it live first")
    gpus = sorted(str(g) for g in rows["gpu_name"].unique())
    if gpu_name is None:
        if len(gpus) == 1:
            return rows
        if REFERENCE_GPU not in gpus:
            raise ConfigError(f"case {case}: rows from several GPUs {gpus}; set gpu_name to the one to answer for")
        gpu_name = REFERENCE_GPU
    picked = rows[rows["gpu_name"] == gpu_name]
    if picked.empty:
        raise ConfigError(f"case {case}: no rows measured on {gpu_name!r}; recorded GPUs: {gpus}")
    return picked


def reference_value(published: pd.DataFrame, claim_id: str) -> float:
    """The value of one claim in the reference table (exactly one row must match)."""
    match = published.loc[published["claim_id"] == claim_id, "value"]
    if len(match) != 1:
        raise ConfigError(f"reference table: expected one row {claim_id!r}, found {len(match)}")
    return float(match.iloc[0])


def one_label(labels: list[str], wanted: str | None, what: str) -> str:
    """``wanted`` if it is one of ``labels``, or the only label when none is wanted; ``ConfigError`` naming the
    ``what`` configs otherwise."""
    if wanted is None:
        if len(labels) != 1:
            raise ConfigError(f"{len(labels)} {what} configs {labels}: pass engine_label to pick one")
        return labels[0]
    if wanted not in labels:
        raise ConfigError(f"no {what} config {wanted!r}; measured: {labels}")
    return wanted


def _levels(values: Any) -> str:
    return ", ".join(str(int(v)) for v in sorted(values))


def stop_paying_solution(
    case: str,
    metrics: list[str] | tuple[str, ...] = ("output_tok_s", "tpot_p50_ms"),
    gpu_name: str | None = None,
    engine_label: str | None = None,
) -> Solution:
    """Per metric, the highest measured concurrency at which the speculative config beat the baseline (or never).

    Each speculative row is paired with the baseline row at the same load and settings
    (``analysis.versus_baseline``); throughputs win above the baseline, latencies (``*_ms``) below it.
    """
    metrics = list(metrics)
    if not metrics:
        raise ConfigError("metrics: name at least one column, e.g. ['output_tok_s']")
    rows = case_rows(case, gpu_name)
    unknown = [m for m in metrics if m not in rows.columns]
    if unknown:
        raise ConfigError(f"unknown metric column(s) {unknown}; e.g. output_tok_s, tpot_p50_ms, itl_p50_ms")
    comparisons = {m: versus_baseline(rows, m) for m in metrics}
    if any(c.empty for c in comparisons.values()):
        raise ConfigError(f"case {case}: no speculative row has a baseline row at the same load")
    label = one_label(sorted(set(comparisons[metrics[0]]["engine_label"])), engine_label, "speculative")
    baseline = ", ".join(sorted(str(e) for e in rows.loc[is_baseline(rows), "engine_label"].unique()))
    gpus = ", ".join(sorted(str(g) for g in rows["gpu_name"].unique()))

    value: dict[str, int | str] = {}
    parts, tables = [], []
    for metric in metrics:
        group = comparisons[metric][comparisons[metric]["engine_label"] == label]
        wins = winning_levels(group)
        value[metric] = max(wins) if wins else NEVER
        levels = _levels(group["concurrency"].dropna())
        direction = "higher" if higher_is_better(metric) else "lower"
        if not wins:
            parts.append(f"{metric} ({direction} is better) never beat the baseline at concurrency {levels}")
        else:
            parts.append(
                f"{metric} ({direction} is better) last beat the baseline at concurrency {max(wins)} "
                f"(wins at {_levels(wins)} of {levels})"
            )
        tables.append(
            group.assign(beat_baseline=group["concurrency"].isin(wins))[
                ["metric", "concurrency", "baseline", "speculative", "change_pct", "beat_baseline"]
            ]
        )
    table = pd.concat(tables, ignore_index=True)
    statement = f"{label} against {baseline} on {gpus}: " + "; ".join(parts)
    changes = " ".join(
        f"{metric}: "
        + ", ".join(
            f"{chg:+.1f} % at {int(c)}" for c, chg in zip(group["concurrency"], group["change_pct"], strict=True)
        )
        + "."
        for metric, group in ((m, comparisons[m][comparisons[m]["engine_label"] == label]) for m in metrics)
    )
    explanation = (
        f"Pair every row of `{label}` with the `{baseline}` row at the same concurrency (same shapes, lengths and "
        "GPU: `analysis.versus_baseline`), then ask at which levels speculation won: a higher throughput, or a "
        f"lower latency. Change against the baseline: {changes} So: {statement}."
    )
    return Solution(
        exercise="stop-paying",
        inputs={"case": case, "metrics": metrics, "gpu_name": gpu_name, "engine_label": engine_label},
        value=value,
        kinds={m: "level" for m in metrics},
        statement=statement,
        explanation=explanation,
        table=table,
    )


def chunks_solution(
    case: str,
    concurrency: int = 16,
    gpu_name: str | None = None,
    engine_label: str | None = None,
) -> Solution:
    """The per-token latency of the speculative config at ``concurrency``: mean ITL / mean acceptance length.

    ``vllm bench serve`` times ITL between streamed chunks; one speculative step streams, on average, the mean
    acceptance length in tokens (from the server's ``/metrics``). Dividing the two estimates the time per token,
    which the answer compares with the mean TPOT. Repeats at one level are averaged.
    """
    rows = case_rows(case, gpu_name)
    spec = rows[(rows["spec_method"] != "none") & rows["mean_acceptance_length"].notna()]
    if spec.empty:
        raise ConfigError(f"case {case}: no speculative row with a measured mean acceptance length")
    label = one_label(sorted(str(e) for e in spec["engine_label"].unique()), engine_label, "speculative")
    spec = spec[spec["engine_label"] == label]
    columns = ["itl_mean_ms", "mean_acceptance_length", "tpot_mean_ms", "itl_p50_ms", "tpot_p50_ms"]
    table = spec.groupby("concurrency", as_index=False)[columns].mean()
    table["per_token_ms"] = table["itl_mean_ms"] / table["mean_acceptance_length"]
    table["per_token_over_tpot"] = table["per_token_ms"] / table["tpot_mean_ms"]
    table["itl_over_tpot"] = table["itl_mean_ms"] / table["tpot_mean_ms"]
    table["p50_per_token_ms"] = table["itl_p50_ms"] / table["mean_acceptance_length"]
    table = table[
        [
            "concurrency",
            "itl_mean_ms",
            "mean_acceptance_length",
            "per_token_ms",
            "tpot_mean_ms",
            "per_token_over_tpot",
            "itl_over_tpot",
            "itl_p50_ms",
            "p50_per_token_ms",
            "tpot_p50_ms",
        ]
    ]
    at = table[table["concurrency"] == concurrency]
    if at.empty:
        raise ConfigError(f"{label}: no row at concurrency {concurrency}; measured: {_levels(table['concurrency'])}")
    row = at.iloc[0]
    statement = (
        f"{label} at concurrency {concurrency}: mean ITL {row.itl_mean_ms:.2f} ms / {row.mean_acceptance_length:.2f} "
        f"tokens per chunk = {row.per_token_ms:.2f} ms per token, against a mean TPOT of {row.tpot_mean_ms:.2f} ms "
        f"(ratio {row.per_token_over_tpot:.2f}); the chunk ITL alone is {row.itl_over_tpot:.2f}× the TPOT"
    )
    low, high = f"{table['per_token_over_tpot'].min():.2f}", f"{table['per_token_over_tpot'].max():.2f}"
    spread = f"{low}×" if low == high else f"{low}× to {high}×"
    explanation = (
        "A speculative step streams every token it accepted in one chunk, so `bench serve`'s ITL (the gap between "
        "chunks) is the time per *step*. Dividing the mean ITL by the mean acceptance length (tokens per step, from "
        f"the server's counters) gives the time per token. At every measured level the estimate is {spread} the "
        "mean TPOT. Medians do not divide that way: the median chunk gap over the mean chunk size is not the median "
        f"time per token (compare `p50_per_token_ms` with `tpot_p50_ms`). So: {statement}."
    )
    return Solution(
        exercise="chunks-not-tokens",
        inputs={"case": case, "concurrency": concurrency, "gpu_name": gpu_name, "engine_label": engine_label},
        value=float(row.per_token_ms),
        kinds="float",
        statement=statement,
        explanation=explanation,
        table=table,
    )


def break_even_draft_cost(tokens_per_step: float, k: int) -> float:
    """The draft cost ratio c at which S = τ / (k·c + 1) equals 1: c = (τ − 1) / k."""
    if k < 1:
        raise ConfigError(f"k must be >= 1 for a break-even draft cost, got {k}")
    return (tokens_per_step - 1.0) / k


def tokens_per_step_solution(case: str, alpha: float | None = None, k: int | None = None) -> Solution:
    """τ(α, k) for the report's acceptance read as an i.i.d. α, and the break-even draft cost ratio c = (τ − 1)/k.

    ``alpha`` and ``k`` default to the reported values in the reference table (``acceptance-rate-author-quoted``
    and ``num-speculative-tokens``).
    """

    published = load_reference(case)
    a = reference_value(published, "acceptance-rate-author-quoted") if alpha is None else float(alpha)
    n = int(reference_value(published, "num-speculative-tokens")) if k is None else int(k)
    tau = expected_tokens_per_step(a, n)
    cost = break_even_draft_cost(tau, n)

    table = pd.DataFrame(
        [
            {
                "k": j,
                "tokens_per_step": expected_tokens_per_step(a, j),
                "break_even_c": break_even_draft_cost(expected_tokens_per_step(a, j), j),
            }
            for j in range(1, n + 1)
        ]
    )
    statement = (
        f"α = {a:g}, k = {n}: τ = (1 − {a:g}^{n + 1}) / (1 − {a:g}) = {tau:.2f} tokens per verify step; "
        f"S = τ / (k·c + 1) = 1 at c = (τ − 1) / k = {cost:.2f}"
    )
    measured = _measured_acceptance(case, a, n)
    explanation = (
        "Read the reported rate as the chance that each drafted position matches, independently of the others (the "
        "i.i.d. assumption; V0 counted every matching position, including those after a rejection, so under that "
        f"assumption its rate is α itself). Then τ(α, k) = (1 − α^(k+1)) / (1 − α). A step with a draft costs "
        "1 + k·c target steps and emits τ tokens, so speculation breaks even where τ = 1 + k·c. "
        f"The table gives τ and the break-even c for every k up to {n}: the longer the draft, the cheaper each "
        f"draft pass must be. {measured}So: {statement}."
    )
    return Solution(
        exercise="tokens-per-step",
        inputs={"case": case, "alpha": alpha, "k": k},
        value={"tokens_per_step": tau, "break_even_c": cost},
        kinds={"tokens_per_step": "float", "break_even_c": "float"},
        statement=statement,
        explanation=explanation,
        table=table,
    )


def _measured_acceptance(case: str, alpha: float, k: int) -> str:
    """A sentence on the recorded mean acceptance length at this imposed α and k, or '' when none is recorded."""

    rows = results_for(case, "replay")
    if rows.empty:
        return ""
    same = rows[
        rows["imposed_alpha"].notna()
        & (rows["imposed_alpha"].astype(float).sub(alpha).abs() < 1e-9)
        & (rows["num_speculative_tokens"] == k)
        & rows["mean_acceptance_length"].notna()
    ]
    if same.empty:
        return ""
    check = acceptance_check(same)
    first = check.iloc[0]
    gpus = ", ".join(sorted(str(g) for g in same["gpu_name"].unique()))
    return (
        f"With this α imposed at k = {k}, the recorded {first.engine_label} server on {gpus} measured a mean "
        f"acceptance length of {first.mean_acceptance_length:.2f} at concurrency {int(first.concurrency)} "
        f"(τ from its imposed rates: {first.expected_acceptance_length:.2f}). "
    )


def littles_law_solution(case: str) -> Solution:
    """Streams decoding at once with speculation off, from the reported numbers: output tok/s × ITL in seconds.

    The worked table applies the same law to our own spec-off rows of the case, where the concurrency is known:
    request rate × mean end-to-end latency recovers it, while output tok/s × mean TPOT counts only the streams
    past their first token.
    """

    published = load_reference(case)
    streams = float(implied_13834(published)["streams_in_flight_spec_off"])
    out_off = reference_value(published, "output-tok-s-spec-off")
    itl_off = reference_value(published, "itl-ms-spec-off")
    statement = (
        f"{out_off:g} output tok/s × {itl_off / 1000:g} s per token = {streams:.2f} streams decoding at once "
        "with speculation off"
    )
    table = _measured_littles_law(case)
    explanation = (
        "Little's law: items in a system = arrival rate × time each spends there. For output tokens, a stream that "
        "is decoding emits one token per inter-token interval, so output tok/s × seconds per token = streams "
        "decoding at once. Requests still waiting for their first token emit nothing and are not counted: the "
        "server held at least that many. The table checks the law on our spec-off rows, where the concurrency was "
        "set: request rate × mean end-to-end latency gives it back, and output tok/s × mean TPOT gives the part "
        f"that was decoding. So: {statement}."
    )
    return Solution(
        exercise="littles-law",
        inputs={"case": case},
        value=streams,
        kinds="float",
        statement=statement,
        explanation=explanation,
        table=table,
    )


def _measured_littles_law(case: str) -> pd.DataFrame | None:

    rows = results_for(case, "replay")
    off = rows[is_baseline(rows)]
    if off.empty:
        return None
    table = off[["gpu_name", "concurrency", "request_throughput_rps", "e2el_mean_ms", "output_tok_s", "tpot_mean_ms"]]
    return (
        table.assign(
            requests_in_flight=off["request_throughput_rps"] * off["e2el_mean_ms"] / 1000.0,
            streams_decoding=off["output_tok_s"] * off["tpot_mean_ms"] / 1000.0,
        )
        .sort_values(["gpu_name", "concurrency"])
        .reset_index(drop=True)
    )
