"""Case: issue #27462 — --max-num-seqs caps all running sequences, so pipeline parallelism is underused (its checks and
page functions)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from vllm_playbooks.analysis.noise import THRESHOLD_PCT
from vllm_playbooks.claims.claim import CheckResult, Claim, Evidence, check
from vllm_playbooks.claims.verdict import Verdict
from vllm_playbooks.config.load import MIN_DURATION_S, MIN_REQUESTS_PER_CONCURRENCY
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.hardware import REFERENCE_DATASHEET, Gpu, measured_on
from vllm_playbooks.model.calibration import EfficiencyFit
from vllm_playbooks.model.pipeline import layout, microbatch_size, predicted_throughput, with_layout
from vllm_playbooks.results import raw
from vllm_playbooks.results.engine_steps import FILL_THRESHOLD
from vllm_playbooks.results.gpu_samples import gpu_summary
from vllm_playbooks.results.store import case_dir, recorded_cases
from vllm_playbooks.run.plan import CasePlan, load_plan, text_list
from vllm_playbooks.shapes import resolve_model

#: The #27462 page's verdict labels (``cases.pp_27462.verdict_label``) as the ledger's verdicts.
_PAGE_VERDICTS = {
    "Reproduced": Verdict.REPRODUCED,
    "Direction only": Verdict.DIRECTION_ONLY,
    "Not reproduced": Verdict.NOT_REPRODUCED,
}


@check("pp_cap_starves_stages")
def pp_cap_starves_stages(claim: Claim, ev: Evidence) -> CheckResult:
    """vLLM issue #27462: ``--max-num-seqs`` caps every running sequence, not one micro-batch, so pipeline stages
    run under-filled.

    Measured: the #27462 page's own comparison (``pp_comparison`` and ``verdict_label``) over the rows of the claim's
    case and of ``CASE``: at each cap N, PP=2 at N against PP=1 at N (the stages starve) and PP=2 at 2N against PP=1
    at N (the fix), on rows whose measured fill (``Evidence.engine_steps``) shows that the cap, not the request path,
    set the batch. Model: ``model.pipeline.predicted_throughput`` on the grid. Published: the related issue #41682's
    PP numbers.
    """
    sources = ev.sources(claim)
    published = "; ".join(f"{r['setting']}: {r['value']:g} {r['unit']}" for _, r in sources.iterrows())
    cases = list(dict.fromkeys([claim.case, CASE]))
    frames = [frame for frame in (ev.rows(case) for case in cases) if not frame.empty]
    rows = pd.concat(frames, ignore_index=True) if frames else ev.rows(claim.case)
    steps = [ev.engine_steps[case] for case in cases if case in ev.engine_steps]
    comparison = pp_comparison(rows, steps=pd.concat(steps, ignore_index=True) if steps else None)
    label = verdict_label(comparison)
    verdict = _PAGE_VERDICTS.get(label, Verdict.NOT_MEASURED)
    judged = comparison.dropna(subset=["pp2_vs_pp1_pct", "pp2_at_2n_vs_pp1_pct"])
    notes = [
        f"{r.model_shape} N={int(r.max_num_seqs)}: PP=2 at N {r.pp2_vs_pp1_pct:+.1f} %, at 2N "
        f"{r.pp2_at_2n_vs_pp1_pct:+.1f} % against PP=1 at N"
        for r in judged.itertuples()
    ]
    measured = "; ".join(notes) if notes else "no cap N with PP=1 at N, PP=2 at N and PP=2 at 2N all saturated yet"
    if ev.fit is None:
        return CheckResult(published, measured, verdict, len(judged), "no roofline fit (too few recorded rows)", None)

    predicted = pp_comparison(predicted_rows(planned_grid(load_plan(CASE), ev.fit)))
    model_label = verdict_label(predicted)
    model_judged = predicted.dropna(subset=["pp2_vs_pp1_pct", "pp2_at_2n_vs_pp1_pct"])
    model_says = (
        "model.pipeline.predicted_throughput (the fitted roofline split over the stages, no communication): "
        + "; ".join(
            f"{r.model_shape} N={int(r.max_num_seqs)}: PP=2 at N {r.pp2_vs_pp1_pct:+.1f} %, at 2N "
            f"{r.pp2_at_2n_vs_pp1_pct:+.1f} %"
            for r in model_judged.itertuples()
        )
    )
    model_verdict = _PAGE_VERDICTS.get(model_label)
    return CheckResult(published, measured, verdict, len(judged), model_says, model_verdict)


#: The case this module's page is about, and the published numbers it is compared with.
CASE = "pp-27462"


#: A row counts as saturated (the cap binds, not the load) when concurrency ≥ this × max_num_seqs.
SATURATION_FACTOR = 2.0


#: Server start-up seconds assumed when estimating device time for a shape never started here (``recorded_startup_s``
#: gives the measured ones: the 8B shape started in 1.5-2 min on the H200s).
STARTUP_S = {"llama-3.1-8b": 60.0, "llama-3.3-70b": 150.0}


DEFAULT_STARTUP_S = 120.0


def recorded_startup_s(data: Any = None, gpu: Gpu | str = REFERENCE_DATASHEET) -> dict[str, float]:
    """Median seconds from launching a server to its first health check, per model shape, over every recorded point
    on ``gpu`` (the reference H200's by default, the GPU the grid is planned for) of every case (``point.json``'s
    ``server_startup_s``, once per server lifetime); what ``planned_grid`` should assume in place of ``STARTUP_S``
    for the shapes it covers."""
    import json
    import statistics

    seen: dict[str, dict[tuple[str, float], None]] = {}
    for case in recorded_cases(data):
        for point_dir in raw.finished_points(case_dir(case, data)):
            point = json.loads((point_dir / raw.POINT_FILE).read_text(encoding="utf-8"))
            seconds = point.get("server_startup_s")
            if seconds and measured_on(point_dir.parent.parent.name, gpu):  # raw/<hardware>/<config>/<load>
                seen.setdefault(point["model_shape"], {})[(point["config_id"], float(seconds))] = None
    return {model: statistics.median(s for _, s in lifetimes) for model, lifetimes in sorted(seen.items())}


def _startup(model: str, startup_s: Mapping[str, float] | None) -> float:
    table = {**STARTUP_S, **(startup_s or {})}
    return float(table.get(model, DEFAULT_STARTUP_S))


def estimated_point_s(load: Any, output_tok_s: float, min_duration_s: float = MIN_DURATION_S) -> float:
    """Device seconds one closed-loop point takes at a predicted throughput: the calibration (2 × concurrency
    requests, at least 8) and the measured run (the duration rule: max(10 × concurrency, 1.1 × rate × 30 s))."""
    rps = output_tok_s / load.output_len
    warmup = load.warmup_prompts()
    measured = max(MIN_REQUESTS_PER_CONCURRENCY * (load.concurrency or 1), math.ceil(1.1 * rps * min_duration_s))
    return (warmup + measured) / rps


def planned_grid(
    plan: CasePlan,
    fit: EfficiencyFit | None = None,
    gpu: str | None = None,
    startup_s: Mapping[str, float] | None = None,
) -> pd.DataFrame:
    """The case's points as a table: engine, shape, layout, GPUs, max_num_seqs, microbatch (min(concurrency,
    max_num_seqs) / PP), concurrency, lengths; with a fit, the predicted output tok/s (total and per GPU) and the
    estimated device seconds of each point and of its server's start-up (counted once per engine)."""
    records = []
    for point in plan.points():
        engine, load = point.engine, point.load

        model = resolve_model(engine.model).name
        tp, pp = engine.tensor_parallel_size, engine.pipeline_parallel_size
        cap = engine.max_num_seqs or 1
        running = min(cap, load.concurrency or cap)  # below the cap, the load sets how many run
        record: dict[str, Any] = {
            "engine_label": engine.label,
            "model_shape": model,
            "layout": layout(tp, pp),
            "gpus": tp * pp,
            "tensor_parallel_size": tp,
            "pipeline_parallel_size": pp,
            "max_num_seqs": engine.max_num_seqs,
            "microbatch": microbatch_size(running, pp),
            "concurrency": load.concurrency,
            "input_len": load.input_len,
            "output_len": load.output_len,
        }
        if fit is not None:
            pred = predicted_throughput(
                fit, engine.model, running, tp, pp, load.input_len, load.output_len, engine.kv_cache_dtype, gpu
            )
            record["predicted_output_tok_s"] = pred["output_tok_s"]
            record["predicted_tok_s_per_gpu"] = pred["output_tok_s_per_gpu"]
            record["estimated_point_s"] = estimated_point_s(load, pred["output_tok_s"], plan.min_duration_s)
            first = not any(r["engine_label"] == engine.label for r in records)
            record["estimated_startup_s"] = _startup(model, startup_s) if first else 0.0
        records.append(record)
    return pd.DataFrame(records)


def estimated_minutes(grid: pd.DataFrame) -> float:
    """Device minutes of a ``planned_grid`` with predictions: every point plus every server start-up (0 for none)."""
    if grid.empty:
        return 0.0
    return float((grid["estimated_point_s"].sum() + grid["estimated_startup_s"].sum()) / 60.0)


def _offered(df: pd.DataFrame, factor: float) -> pd.DataFrame:
    """Rows that offered enough load for the cap to bind: closed loop at concurrency ≥ ``factor`` × max_num_seqs."""
    keep = df[df["concurrency"].notna() & df["max_num_seqs"].notna()]
    return keep[keep["concurrency"].astype(float) >= factor * keep["max_num_seqs"].astype(float)]


def _filled(df: pd.DataFrame, steps: pd.DataFrame | None, fill: float) -> pd.DataFrame:
    """``df`` without the rows whose measured fill (``steps``, a ``results.engine_steps.step_summary``) is below
    ``fill``; rows without a measured fill stay."""
    if steps is None or df.empty:
        return df
    low = set(steps.loc[steps["fill"] < fill, "point_id"])
    return df[~df["point_id"].isin(low)]


def saturated(
    df: pd.DataFrame, factor: float = SATURATION_FACTOR, steps: pd.DataFrame | None = None, fill: float = FILL_THRESHOLD
) -> pd.DataFrame:
    """Rows that kept the server saturated: closed loop at concurrency ≥ ``factor`` × max_num_seqs and, where
    ``steps`` gives the measured running sequences, a fill of at least ``fill`` (the cap, not the request path, set
    the batch); one line per engine config (the median where an engine has several such rows), with ``layout`` and
    ``output_tok_s_per_gpu``."""
    columns = [
        "model_shape",
        "engine_label",
        "layout",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "max_num_seqs",
        "gpus",
        "rows",
        "output_tok_s",
        "output_tok_s_per_gpu",
        "tpot_p50_ms",
    ]
    if df.empty:
        return pd.DataFrame(columns=columns)
    keep = _filled(_offered(df, factor), steps, fill)
    if keep.empty:
        return pd.DataFrame(columns=columns)
    keep = with_layout(keep)
    keys = ["model_shape", "engine_label", "layout", "tensor_parallel_size", "pipeline_parallel_size", "max_num_seqs"]
    out = keep.groupby(keys, as_index=False).agg(
        rows=("point_id", "count"), output_tok_s=("output_tok_s", "median"), tpot_p50_ms=("tpot_p50_ms", "median")
    )
    out["gpus"] = out["tensor_parallel_size"] * out["pipeline_parallel_size"]
    out["output_tok_s_per_gpu"] = out["output_tok_s"] / out["gpus"]
    out["max_num_seqs"] = out["max_num_seqs"].astype(int)
    return out[columns].sort_values(["model_shape", "layout", "max_num_seqs"]).reset_index(drop=True)


def unfilled(
    df: pd.DataFrame, steps: pd.DataFrame, factor: float = SATURATION_FACTOR, fill: float = FILL_THRESHOLD
) -> pd.DataFrame:
    """The rows that offered enough load for the cap to bind but ran fewer sequences than it (measured fill below
    ``fill``): left out of the comparison, listed with their measured running sequences."""
    offered = _offered(df, factor)
    rows = steps[steps["point_id"].isin(set(offered["point_id"])) & (steps["fill"] < fill)]
    return with_layout(rows)[
        ["engine_label", "layout", "max_num_seqs", "concurrency", "running_mean", "fill", "output_tok_s"]
    ].reset_index(drop=True)


def unfilled_note(rows: pd.DataFrame, fill: float = FILL_THRESHOLD) -> str:
    """One sentence on the ``unfilled`` rows (or that there are none)."""
    if rows.empty:
        return f"Every point that offered twice its cap ran at least {fill:.0%} of its cap on average."
    listed = "; ".join(
        f"`{r.engine_label}` ran {r.running_mean:.0f} of {int(r.max_num_seqs)} ({r.fill:.0%}) at "
        f"{r.output_tok_s:,.0f} tok/s"
        for r in rows.itertuples()
    )
    return (
        f"Left out of the comparison, because fewer sequences ran than the cap allowed (below {fill:.0%} of it on "
        f"average) although twice as many requests were offered: {listed}. There something other than "
        "`max_num_seqs` set the batch."
    )


def pp_comparison(
    df: pd.DataFrame, factor: float = SATURATION_FACTOR, steps: pd.DataFrame | None = None, fill: float = FILL_THRESHOLD
) -> pd.DataFrame:
    """Per shape and max_num_seqs N, the saturated throughputs (``saturated``) the verdict compares: PP=1 at N,
    PP=2 at N, PP=2 at 2N, TP=2 at N, and PP=2's change in percent against PP=1 and against TP=2 (NaN where a side
    is missing)."""
    sat = saturated(df, factor, steps, fill)
    columns = [
        "model_shape",
        "max_num_seqs",
        "pp1_tok_s",
        "pp2_tok_s",
        "pp2_at_2n_tok_s",
        "tp2_tok_s",
        "pp2_vs_pp1_pct",
        "pp2_at_2n_vs_pp1_pct",
        "pp2_vs_tp2_pct",
        "pp2_at_2n_vs_tp2_pct",
    ]
    if sat.empty:
        return pd.DataFrame(columns=columns)
    value = {(r.model_shape, r.layout, int(r.max_num_seqs)): float(r.output_tok_s) for r in sat.itertuples()}
    nan = float("nan")
    records = []
    for model, n in sorted({(m, n) for m, _, n in value}):
        pp1, pp2 = value.get((model, "PP=1", n), nan), value.get((model, "PP=2", n), nan)
        pp2_2n, tp2 = value.get((model, "PP=2", 2 * n), nan), value.get((model, "TP=2", n), nan)
        records.append(
            {
                "model_shape": model,
                "max_num_seqs": n,
                "pp1_tok_s": pp1,
                "pp2_tok_s": pp2,
                "pp2_at_2n_tok_s": pp2_2n,
                "tp2_tok_s": tp2,
                "pp2_vs_pp1_pct": 100 * (pp2 / pp1 - 1),
                "pp2_at_2n_vs_pp1_pct": 100 * (pp2_2n / pp1 - 1),
                "pp2_vs_tp2_pct": 100 * (pp2 / tp2 - 1),
                "pp2_at_2n_vs_tp2_pct": 100 * (pp2_2n / tp2 - 1),
            }
        )
    return pd.DataFrame(records, columns=columns)


def predicted_rows(grid: pd.DataFrame) -> pd.DataFrame:
    """A ``planned_grid`` with predictions as rows ``pp_comparison`` reads: each point's predicted output tok/s in
    ``output_tok_s``, so the model's verdict comes from the same comparison as the measured one."""
    out = grid.dropna(subset=["predicted_output_tok_s"]).copy()
    out["point_id"] = out["engine_label"] + "/c" + out["concurrency"].astype(str)
    out["output_tok_s"] = out["predicted_output_tok_s"]
    out["tpot_p50_ms"] = float("nan")
    return out


def measured_vs_predicted(measured: pd.DataFrame, grid: pd.DataFrame) -> pd.DataFrame:
    """The saturated rows (``saturated``) beside the roofline's prediction for the same engine config
    (``planned_grid`` with a fit): measured and predicted output tok/s and the prediction's error in percent."""
    predicted = grid.groupby("engine_label", as_index=False)["predicted_output_tok_s"].first()
    out = measured.merge(predicted, on="engine_label", how="left")
    out["prediction_error_pct"] = 100 * (out["predicted_output_tok_s"] / out["output_tok_s"] - 1)
    return out[
        [
            "model_shape",
            "engine_label",
            "layout",
            "max_num_seqs",
            "output_tok_s",
            "predicted_output_tok_s",
            "prediction_error_pct",
        ]
    ]


def reproduced_at(row: Any, threshold_pct: float = THRESHOLD_PCT) -> bool | None:
    """The claim at one N: PP=2 at N is no more than ``threshold_pct`` % faster than PP=1 at N (the pipeline starves)
    while PP=2 at 2N is more than that faster (the fix works). None when one of the three was not measured."""
    same, double = row["pp2_vs_pp1_pct"], row["pp2_at_2n_vs_pp1_pct"]
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in (same, double)):
        return None
    return bool(same <= threshold_pct and double > threshold_pct)


def _judged(comparison: pd.DataFrame, threshold_pct: float) -> list[tuple[Any, bool]]:
    judged = [(r, reproduced_at(r, threshold_pct)) for _, r in comparison.iterrows()]
    return [(r, ok) for r, ok in judged if ok is not None]


def verdict_label(comparison: pd.DataFrame, threshold_pct: float = THRESHOLD_PCT) -> str:
    """The verdict in the book's terms: 'Reproduced' (the claim holds at every cap with all three sides measured),
    'Direction only' (at some caps, not at others), 'Not reproduced' (at none) or 'Not measured yet'."""
    judged = _judged(comparison, threshold_pct)
    if not judged:
        return "Not measured yet"
    yes = sum(ok for _, ok in judged)
    return "Reproduced" if yes == len(judged) else "Not reproduced" if not yes else "Direction only"


def verdict(comparison: pd.DataFrame, threshold_pct: float = THRESHOLD_PCT) -> str:
    """The page's verdict from ``pp_comparison``: ``verdict_label``, then the numbers it rests on, one cap at a time."""
    head = verdict_label(comparison, threshold_pct)
    if head == "Not measured yet":
        return (
            "Not measured yet: no shape has PP=1 at max_num_seqs N, PP=2 at N and PP=2 at 2N measured at a saturating "
            "load, so there is no verdict."
        )
    parts = []
    for r, ok in _judged(comparison, threshold_pct):
        n = int(r["max_num_seqs"])
        parts.append(
            f"{r['model_shape']} at max_num_seqs={n}: PP=2 {r['pp2_vs_pp1_pct']:+.1f} % against PP=1, "
            f"PP=2 with max_num_seqs={2 * n} {r['pp2_at_2n_vs_pp1_pct']:+.1f} % "
            f"({'as the issue predicts' if ok else 'not as the issue predicts'})"
        )
    rule = (
        f"(the claim holds at N when PP=2 at N is at most {threshold_pct:g} % faster than PP=1 at N and PP=2 at 2N "
        f"is more than {threshold_pct:g} % faster)"
    )
    return f"{head} {rule}: " + "; ".join(parts) + "."


def tp_sentence(comparison: pd.DataFrame, model: str) -> str:
    """For a shape that needs both GPUs: PP=2 at N and at 2N against TP=2 at N, one clause per N measured."""
    rows = comparison[(comparison["model_shape"] == model) & comparison["tp2_tok_s"].notna()]
    rows = rows[rows["pp2_tok_s"].notna() | rows["pp2_at_2n_tok_s"].notna()]
    if rows.empty:
        return f"{model}: PP=2 and TP=2 have not both been measured at a saturating load yet."
    clauses = []
    for _, r in rows.iterrows():
        n = int(r["max_num_seqs"])
        same = "not measured" if math.isnan(r["pp2_vs_tp2_pct"]) else f"{r['pp2_vs_tp2_pct']:+.1f} %"
        double = "not measured" if math.isnan(r["pp2_at_2n_vs_tp2_pct"]) else f"{r['pp2_at_2n_vs_tp2_pct']:+.1f} %"
        clauses.append(f"at max_num_seqs={n}, PP=2 {same} and PP=2 with {2 * n} {double} against TP=2")
    return f"{model}: " + "; ".join(clauses) + "."


def best_pp_setting(
    df: pd.DataFrame, model: str, pipeline_parallel_size: int = 2, steps: pd.DataFrame | None = None
) -> str | None:
    """The engine label of the fastest saturated PP setting of ``model`` (highest output tok/s), or None."""
    sat = saturated(df, steps=steps)
    sat = sat[
        (sat["model_shape"] == model)
        & (sat["pipeline_parallel_size"] == pipeline_parallel_size)
        & (sat["tensor_parallel_size"] == 1)
    ]
    if sat.empty:
        return None
    return str(sat.sort_values("output_tok_s", ascending=False)["engine_label"].iloc[0])


def select_engines(
    case: str, engines: Sequence[str] | None = None, max_num_seqs: Sequence[int] | None = None
) -> list[str] | None:
    """Engine labels of ``case`` to run: ``engines`` (all when None) narrowed to those whose ``max_num_seqs`` is in
    ``max_num_seqs`` (all when None). None when neither narrows anything, as ``load_plan`` expects."""
    if engines is None and max_num_seqs is None:
        return None
    engines, max_num_seqs = text_list("engines", engines), text_list("max_num_seqs", max_num_seqs)

    plan = load_plan(case, engines=list(engines) if engines is not None else None)
    wanted = None if max_num_seqs is None else {int(n) for n in max_num_seqs}
    labels = [e.label for e in plan.engines if wanted is None or e.max_num_seqs in wanted]
    if not labels:
        raise ConfigError(f"case {case}: no engine has max_num_seqs in {sorted(wanted or [])}")
    return labels


def gpu_table(
    df: pd.DataFrame,
    data: Any = None,
    factor: float = SATURATION_FACTOR,
    steps: pd.DataFrame | None = None,
    fill: float = FILL_THRESHOLD,
) -> pd.DataFrame:
    """Per-GPU utilisation summary (``results.gpu_samples.gpu_summary``) of the saturated rows, with ``layout``."""

    if df.empty:
        return with_layout(gpu_summary(df, data))
    return with_layout(gpu_summary(_filled(_offered(df, factor), steps, fill), data))


def measurement_status(df: pd.DataFrame, plan: CasePlan) -> str:
    """How much of the planned grid is recorded, from the rows themselves ('not measured yet' when none is)."""
    planned = {p.point_id for p in plan.points()}
    done = planned & set(df["point_id"]) if not df.empty else set()
    extra = len(df) - len(done)
    if not done and df.empty:
        return (
            f"Not measured yet: none of the {len(planned)} planned points of case {plan.case!r} is recorded in "
            f"data/runs/{plan.case}/. The tables and figures below fill in as the runs land; until then this page "
            "shows the claim, the theory and the plan, and gives no verdict."
        )
    gpus = ", ".join(sorted(f"{n} ×{c}" for n, c in set(zip(df["gpu_name"], df["gpu_count"], strict=True))))
    more = f", and {extra} more point(s) (the concurrency sweep)" if extra else ""
    return f"{len(done)} of the {len(planned)} planned points are recorded{more}, on {gpus}."
