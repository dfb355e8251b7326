"""Comparisons a case page needs: speculation against the baseline at the same load, and where it stops paying."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from vllm_playbooks.config.speculative import SpeculativeConfig

#: Columns that must match for a speculative row and a baseline row to be compared.
PAIRING_COLUMNS = (
    "model_shape", "load_format", "input_len", "output_len", "concurrency", "request_rate_qps",
    "tensor_parallel_size", "pipeline_parallel_size", "max_num_seqs", "max_num_batched_tokens", "gpu_name",
)  # fmt: skip


#: The environment variable that overrides vLLM 0.26's choice of model runner ("0": V1, "1": Model Runner V2).
MODEL_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"


def forced_model_runner(engine_config_json: object) -> str | None:
    """"V1" or "V2" where a recorded row's engine config (its ``engine_config_json``) forces vLLM's model runner
    through ``VLLM_USE_V2_MODEL_RUNNER`` in its ``env``; None where vLLM chose (or the row has no config)."""
    import json

    if not isinstance(engine_config_json, str):
        return None
    value = (json.loads(engine_config_json).get("env") or {}).get(MODEL_RUNNER_ENV)
    if value is None:
        return None
    return "V2" if str(value).strip().lower() in {"1", "true"} else "V1"


def forced_cudagraph_mode(engine_config_json: object) -> str | None:
    """The CUDA-graph mode a recorded row's engine config forces through ``--compilation-config`` in its
    ``extra_args`` (``config.engine.cudagraph_mode_forced_by``), e.g. "PIECEWISE"; None where vLLM chose (or the row
    has no config)."""
    import json

    from vllm_playbooks.config.engine import cudagraph_mode_forced_by

    if not isinstance(engine_config_json, str):
        return None
    return cudagraph_mode_forced_by(json.loads(engine_config_json).get("extra_args") or ())


def is_control(engine_config_json: object) -> bool:
    """Whether a recorded row's engine config forces how vLLM executes the model: its model runner
    (``forced_model_runner``) or its CUDA-graph mode (``forced_cudagraph_mode``). Such a server measures one cost
    apart from the rest; it is not vLLM's own choice of how to run the config."""
    return forced_model_runner(engine_config_json) is not None or forced_cudagraph_mode(engine_config_json) is not None


def is_baseline(df: pd.DataFrame) -> pd.Series:
    """True for the rows a speculative row is compared with: speculation off, run as vLLM chose to run it.

    A spec-off server whose config forces a model runner or a CUDA-graph mode (``is_control``) is a control, not a
    baseline: it is compared by label (``label_change``), never pooled with the baseline rows of the same load."""
    import pandas as pd

    if df.empty:
        return pd.Series(dtype=bool)
    configs = df["engine_config_json"] if "engine_config_json" in df.columns else pd.Series(None, index=df.index)
    return (df["spec_method"] == "none") & ~configs.map(is_control).astype(bool)


def versus_baseline(df: pd.DataFrame, metric: str = "output_tok_s", extra: Sequence[str] = ()) -> pd.DataFrame:
    """One row per speculative point with its baseline's value of ``metric`` at the same load and settings.

    ``ratio`` is speculative / baseline, ``change_pct`` is the change in percent. For latencies a ratio below 1
    is the better result; for throughputs above 1. ``extra`` names further columns of the speculative rows to carry
    along (for example ``acceptance_rate``). The baseline rows are ``is_baseline``'s: a spec-off control that forces
    a model runner or a CUDA-graph mode is neither a baseline nor compared here.
    """
    import pandas as pd

    keys = list(PAIRING_COLUMNS)
    filled = df.assign(**{k: df[k].astype("string").fillna("—") for k in keys})
    base = filled[is_baseline(df)][[*keys, metric]].rename(columns={metric: "baseline"})
    spec = filled[filled["spec_method"] != "none"]
    if base.duplicated(keys).any():
        base = base.groupby(keys, as_index=False)["baseline"].median()
    merged = spec.merge(base, on=keys, how="inner")
    missing = pd.Series([None] * len(merged), index=merged.index, dtype="object")
    out = pd.DataFrame(
        {
            "engine_label": merged["engine_label"],
            "spec_method": merged["spec_method"],
            "k": merged["num_speculative_tokens"],
            "imposed_alpha": merged["imposed_alpha"],
            "imposed_acceptance_rates": merged.get("imposed_acceptance_rates", missing),
            "model_shape": merged["model_shape"].astype(str),
            "input_len": pd.to_numeric(merged["input_len"], errors="coerce"),
            "output_len": pd.to_numeric(merged["output_len"], errors="coerce"),
            "concurrency": pd.to_numeric(merged["concurrency"], errors="coerce"),
            "request_rate_qps": pd.to_numeric(merged["request_rate_qps"], errors="coerce"),
            "metric": metric,
            "baseline": merged["baseline"].astype(float),
            "speculative": merged[metric].astype(float),
            **{name: merged[name] for name in extra},
        }
    )
    out["ratio"] = out["speculative"] / out["baseline"]
    out["change_pct"] = 100.0 * (out["ratio"] - 1.0)
    out["load"] = [load_text(c, r) for c, r in zip(out["concurrency"], out["request_rate_qps"], strict=True)]
    order = ["engine_label", "input_len", "request_rate_qps", "concurrency"]
    return out.sort_values(order, na_position="last").reset_index(drop=True)


def load_text(concurrency: object, request_rate_qps: object) -> str:
    """A load level in words: 'concurrency 4', '2 QPS', or '2 QPS (at most 8 in flight)'."""
    has_c, has_r = not pd_isna(concurrency), not pd_isna(request_rate_qps)
    if has_r and has_c:
        return f"{float(request_rate_qps):g} QPS (at most {int(concurrency)} in flight)"  # type: ignore[arg-type]
    if has_r:
        return f"{float(request_rate_qps):g} QPS"  # type: ignore[arg-type]
    return f"concurrency {int(concurrency)}" if has_c else "unbounded load"  # type: ignore[call-overload]


def higher_is_better(metric: str) -> bool:
    """Throughputs are better higher; latencies (columns in ms) are better lower."""
    return not metric.endswith("_ms")


def winning_levels(group: pd.DataFrame) -> list[int]:
    """Concurrency levels at which one speculative config beat its baseline (higher throughput / lower latency)."""
    better_up = higher_is_better(str(group["metric"].iloc[0]))
    wins = group[(group["ratio"] > 1.0) if better_up else (group["ratio"] < 1.0)]
    return sorted(int(c) for c in wins["concurrency"].dropna())


def winning_loads(group: pd.DataFrame) -> list[str]:
    """Load levels (``load_text``) at which one speculative config beat its baseline, in the group's order."""
    better_up = higher_is_better(str(group["metric"].iloc[0]))
    wins = group[(group["ratio"] > 1.0) if better_up else (group["ratio"] < 1.0)]
    return [load_text(c, r) for c, r in zip(wins["concurrency"], wins["request_rate_qps"], strict=True)]


def _levels(texts: list[str]) -> str:
    """'concurrency 1, 4' for concurrency levels only, else the load texts joined."""
    if texts and all(t.startswith("concurrency ") for t in texts):
        return "concurrency " + ", ".join(t.removeprefix("concurrency ") for t in texts)
    return ", ".join(texts)


def _where_it_won(group: pd.DataFrame) -> str:
    wins = winning_loads(group)
    if not wins:
        return "it never beat the baseline"
    if len(wins) == len(group):
        return "it beat the baseline at every measured level"
    return f"it beat the baseline only at {_levels(wins)}"


def acceptance_check(df: pd.DataFrame) -> pd.DataFrame:
    """Measured mean acceptance length beside the one the imposed per-position rates imply (1 + Σ p_i)."""
    import json

    from vllm_playbooks.theory import tokens_per_step_from_rates

    spec = df[df["imposed_acceptance_rates"].notna()].copy()
    spec["expected_acceptance_length"] = [
        tokens_per_step_from_rates(json.loads(r)) for r in spec["imposed_acceptance_rates"]
    ]
    spec["deviation_pct"] = 100.0 * (spec["mean_acceptance_length"] / spec["expected_acceptance_length"] - 1.0)
    columns = ["engine_label", "concurrency", "request_rate_qps", "imposed_alpha", "expected_acceptance_length",
               "mean_acceptance_length", "deviation_pct", "acceptance_rate", "per_position_acceptance"]  # fmt: skip
    return spec[columns].reset_index(drop=True)


def provenance_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Where the rows were measured: one line per (GPU, count, driver, vLLM, torch, load format) with the dates."""
    keys = ["gpu_name", "gpu_count", "driver_version", "vllm_version", "torch_version", "load_format"]
    grouped = df.groupby(keys, dropna=False)
    return grouped.agg(
        rows=("point_id", "count"),
        first_measured=("measured_at", "min"),
        last_measured=("measured_at", "max"),
        measured_seconds=("duration_s", "sum"),
    ).reset_index()


def measured_windows(df: pd.DataFrame) -> pd.DataFrame:
    """Each row's measured run as a time window: ``started_at`` = ``measured_at`` (its end) − ``duration_s``."""
    import pandas as pd

    out = df[["point_id", "engine_label", "concurrency", "request_rate_qps", "measured_at", "duration_s"]].copy()
    out["ended_at"] = pd.to_datetime(out["measured_at"], utc=True)
    out["started_at"] = out["ended_at"] - pd.to_timedelta(out["duration_s"].astype(float), unit="s")
    return out.drop(columns=["measured_at"])


def overlapping_points(df: pd.DataFrame) -> pd.DataFrame:
    """Rows whose measured run overlapped another row's in time (two servers, one per GPU group, on one host: they
    share its CPUs, so each may have run slower than alone); one line per such row, naming the others."""
    import pandas as pd

    windows = measured_windows(df).reset_index(drop=True)
    records = []
    for i, row in windows.iterrows():
        others = windows[(windows.index != i) & (windows["started_at"] < row["ended_at"])
                         & (windows["ended_at"] > row["started_at"])]  # fmt: skip
        if len(others):
            beside = [f"{o.engine_label} at {load_text(o.concurrency, o.request_rate_qps)}" for o in others.itertuples()]
            records.append({"point_id": row["point_id"], "engine_label": row["engine_label"],
                            "load": load_text(row["concurrency"], row["request_rate_qps"]),
                            "beside": "; ".join(sorted(beside))})  # fmt: skip
    return pd.DataFrame(records, columns=["point_id", "engine_label", "load", "beside"])


#: Above this many overlapping points, ``overlap_note`` counts them per configuration instead of listing each pair.
OVERLAPS_LISTED = 8


def overlap_note(df: pd.DataFrame) -> str:
    """One sentence for a page: which points ran at the same time as another (``overlapping_points``), or none.
    Up to ``OVERLAPS_LISTED`` such points are named with what each ran beside; more are counted per configuration,
    and the page shows the ``overlapping_points`` table for the pairs."""
    rows = overlapping_points(df)
    if rows.empty:
        return f"Each of the {len(df)} points ran alone on its host."
    opening = (f"{len(rows)} of the {len(df)} points ran at the same time as another point, one server per GPU on the "
               "same host, sharing its CPUs (so each may have run slower than alone)")  # fmt: skip
    if len(rows) > OVERLAPS_LISTED:
        per_config = rows["engine_label"].value_counts(sort=False).items()
        counts = ", ".join(f"`{label}` {count}" for label, count in per_config)
        return (f"{opening}; by configuration: {counts}. The table below names what each ran beside; the others ran "
                "alone.")  # fmt: skip
    listed = "; ".join(f"`{r.engine_label}` at {r.load} beside {r.beside}" for r in rows.itertuples())
    return f"{opening}: {listed}. The others ran alone."


def describe_change(comparison: pd.DataFrame) -> str:
    """One sentence per speculative config: the change at each load level and where speculation stopped paying."""
    if comparison.empty:
        return "No speculative point has a baseline at the same load yet, so there is nothing to compare."
    metric = comparison["metric"].iloc[0]
    sentences = []
    for label, group in comparison.groupby("engine_label"):
        steps = ", ".join(
            f"{chg:+.1f} % at {load_text(c, r)}"
            for c, r, chg in zip(group["concurrency"], group["request_rate_qps"], group["change_pct"], strict=True)
        )
        sentences.append(f"{label}: {metric} {steps}; {_where_it_won(group)}.")
    return " ".join(sentences)


#: What names a repeated load in a ``repeat_spread`` table (the shown part of its pairing key).
REPEAT_LOAD_COLUMNS = ("engine_label", "model_shape", "input_len", "output_len", "concurrency", "request_rate_qps")
REPEAT_COLUMNS = (*REPEAT_LOAD_COLUMNS, "runs", "values", "lowest", "highest", "spread_pct")


def repeat_spread(df: pd.DataFrame, metric: str = "output_tok_s") -> pd.DataFrame:
    """The loads one engine config ran more than once (same label and ``PAIRING_COLUMNS``): the number of runs,
    their values of ``metric`` in the order measured, the lowest and highest, and ``spread_pct`` (highest over
    lowest, less 1, in percent): how far a second run of the same engine moved on its own. Pass rows without stalls
    (``results.stalls.unstalled``): a stalled run is not a fair repeat."""
    import pandas as pd

    keys = ["engine_label", *PAIRING_COLUMNS]
    records = []
    ordered = df.sort_values("measured_at") if "measured_at" in df.columns else df
    for _, group in ordered.groupby(keys, dropna=False, sort=False):
        if len(group) < 2:
            continue
        values = [float(v) for v in group[metric]]
        first = group.iloc[0]
        records.append({**{c: first[c] for c in REPEAT_LOAD_COLUMNS}, "runs": len(group), "values": values,
                        "lowest": min(values), "highest": max(values),
                        "spread_pct": 100.0 * (max(values) / min(values) - 1.0)})  # fmt: skip
    return pd.DataFrame(records, columns=list(REPEAT_COLUMNS))


def describe_repeat_spread(spread: pd.DataFrame, unit: str = "output tok/s") -> str:
    """One Markdown paragraph on ``repeat_spread``: each load run more than once, its values and how far apart they
    are, and what that means for a comparison (they enter it as their median); empty when nothing was repeated."""
    if spread.empty:
        return ""
    loads = []
    for row in spread.itertuples():
        lengths = f"{int(row.input_len):,} in / {int(row.output_len):,} out"
        values = ", ".join(f"{v:.1f}" for v in row.values[:-1]) + f" and {row.values[-1]:.1f}"
        loads.append(f"{row.engine_label} at {load_text(row.concurrency, row.request_rate_qps)} ({lengths}) "
                     f"ran {row.runs} times without a stall: {values} {unit}, {row.spread_pct:.1f} % apart")  # fmt: skip
    return ("**Repeated runs.** " + "; ".join(loads) + ". Comparisons at such a load use the median of the runs. "
            "Their spread is how far the same engine moved from one run to the next: a gain difference smaller than it "
            "is not a measured difference between configs.")


def duration_rule_breaches(df: pd.DataFrame, min_duration_s: float = 30.0) -> pd.DataFrame:
    """Rows whose measured run lasted less than ``min_duration_s`` (the duration rule, book: methodology).

    The runner measures a short point a second time with more requests; rows recorded before it did so, or
    still short after the second attempt, are listed here so a page can say which numbers rest on short runs.
    """
    short = df[df["duration_s"] < min_duration_s]
    return short[["engine_label", "concurrency", "request_rate_qps", "num_prompts", "duration_s", "point_id"]]


def summary_line(df: pd.DataFrame) -> str:
    """A one-line fingerprint of a case's rows (a regression check for the notebooks: rows, engines, loads)."""
    engines = sorted(str(e) for e in df["engine_label"].unique())
    loads = sorted(int(c) for c in df["concurrency"].dropna().unique())
    rates = sorted(float(r) for r in df["request_rate_qps"].dropna().unique())
    return f"rows={len(df)} engines={engines} concurrency={loads} request_rates={rates}"


def speculation_rule(df: pd.DataFrame, metric: str = "output_tok_s") -> str:
    """The tuner's rule this data supports, one sentence per speculative config (derived, never typed in)."""
    comparison = versus_baseline(df, metric)
    if comparison.empty:
        return "Not measured yet against a baseline at the same load: no rule from this data."
    gpus = ", ".join(sorted(set(df["gpu_name"])))
    sentences = []
    for label, group in comparison.groupby("engine_label"):
        texts = [load_text(c, r) for c, r in zip(group["concurrency"], group["request_rate_qps"], strict=True)]
        only_c = all(t.startswith("concurrency ") for t in texts)
        levels = ", ".join(t.removeprefix("concurrency ") for t in texts) if only_c else ", ".join(texts)
        kind = "concurrency" if only_c else "load"
        row = group.iloc[0]
        alpha = "" if pd_isna(row["imposed_alpha"]) else f" at an imposed α={row['imposed_alpha']:g}"
        wins = winning_loads(group)
        better = "raised" if higher_is_better(metric) else "lowered"
        if not wins:
            verdict = f"did not improve {metric} over no speculation at any measured {kind} ({levels})"
        elif len(wins) == len(group):
            verdict = f"{better} {metric} at every measured {kind} ({levels})"
        else:
            verdict = f"improved {metric} only at {_levels(wins)} (measured: {levels})"
        sentences.append(f"On {gpus}, {row['spec_method']} with k={int(row['k'])}{alpha} ({label}) {verdict}.")
    return " ".join(sentences)


def pd_isna(value: object) -> bool:
    """True for None and NaN (pandas' missing values)."""
    import pandas as pd

    return bool(pd.isna(value))


def for_tuners(rule: str, evidence: str, limits: str) -> str:
    """The 'For tuners' box a case page opens with, as MyST markdown (rendered from a cell's output)."""
    return (
        "```{admonition} For tuners\n:class: tip\n"
        f"**Rule.** {rule}\n\n**Measured evidence.** {evidence}\n\n**When it does not apply.** {limits}\n```"
    )


#: A change within ±5 % counts as no change (the claims ledger's band; run-to-run spread is not measured yet).
NO_CHANGE_BAND_PCT = 5.0


def crossover(comparison: pd.DataFrame, band_pct: float = NO_CHANGE_BAND_PCT) -> pd.DataFrame:
    """Where each speculative config stops paying, from ``versus_baseline`` rows of a throughput metric.

    One row per config: the highest measured concurrency where it gained more than ``band_pct``, the lowest where it
    lost more than ``band_pct`` (``None`` where there is none), and a sentence. Latency metrics are refused.
    """
    import pandas as pd

    if comparison.empty:
        return pd.DataFrame(columns=["engine_label", "gains_up_to", "loses_from", "text"])
    metric = str(comparison["metric"].iloc[0])
    if not higher_is_better(metric):
        raise ValueError(f"crossover reads a throughput (higher is better), not {metric!r}")
    records = []
    for label, group in comparison.dropna(subset=["concurrency"]).groupby("engine_label"):
        group = group.sort_values("concurrency")
        gains = group[group["change_pct"] > band_pct]["concurrency"]
        losses = group[group["change_pct"] < -band_pct]["concurrency"]
        even = group[group["change_pct"].abs() <= band_pct]
        up_to = int(gains.max()) if not gains.empty else None
        loses = int(losses.min()) if not losses.empty else None
        parts = []
        if up_to is not None:
            parts.append(f"gains up to {up_to} stream{'s' if up_to > 1 else ''}")
        if not even.empty:
            parts.append("no change (within ±{:g} %) at {}".format(band_pct, ", ".join(str(int(c)) for c in even["concurrency"])))
        if loses is not None:
            parts.append(f"loses from {loses} stream{'s' if loses > 1 else ''}")
        records.append({"engine_label": label, "gains_up_to": up_to, "loses_from": loses,
                        "text": f"{label}: " + "; ".join(parts) + "."})  # fmt: skip
    out = pd.DataFrame(records)
    return out.astype({"gains_up_to": "Int64", "loses_from": "Int64"})


def itl_artifact(df: pd.DataFrame) -> pd.DataFrame:
    """How much of speculation's rise in inter-token latency is the streaming artifact, at each paired load.

    ``vllm bench serve`` times ITL per streamed chunk, and with speculation one chunk carries every token a verify step
    accepted, so mean ITL ≈ mean TPOT × tokens per chunk. Columns: the ITL and TPOT ratios on/off (means), their
    quotient ``chunking`` (≈ tokens per chunk), the measured mean acceptance length beside it, and ``artifact_share``:
    the share of the ITL rise, on a log scale, that chunking alone explains (log chunking / log ITL ratio, at most 1:
    where TPOT fell, all of the rise is chunking).
    """
    import numpy as np

    itl = versus_baseline(df, "itl_mean_ms", extra=["mean_acceptance_length"])
    tpot = versus_baseline(df, "tpot_mean_ms")
    keys = ["engine_label", "concurrency", "request_rate_qps", "input_len", "output_len"]
    both = itl.merge(tpot[[*keys, "ratio"]], on=keys, suffixes=("_itl", "_tpot"))
    out = both[["engine_label", "concurrency"]].copy()
    out["itl_ratio"] = both["ratio_itl"]
    out["tpot_ratio"] = both["ratio_tpot"]
    out["chunking"] = out["itl_ratio"] / out["tpot_ratio"]
    out["mean_acceptance_length"] = both["mean_acceptance_length"].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.log(out["chunking"]) / np.log(out["itl_ratio"])
    out["artifact_share"] = share.clip(upper=1.0).where(out["itl_ratio"] > 1.0)
    return out.reset_index(drop=True)


def change_table(comparison: pd.DataFrame) -> pd.DataFrame:
    """``change_pct`` of each speculative config (rows: label, k, imposed α) at each measured concurrency (columns)."""
    return comparison.pivot_table(
        index=["engine_label", "k", "imposed_alpha"], columns="concurrency", values="change_pct", aggfunc="first"
    ).round(1)


def schedule_rule(crossover_table: pd.DataFrame, label: str, k: int, max_num_seqs: int) -> str:
    """The batch-size schedule a tuner sets from ``label``'s crossover: speculate with ``k`` up to the highest
    measured concurrency it did not lose at, off above (vLLM 0.26's ``num_speculative_tokens_per_batch_size``)."""
    rows = crossover_table[crossover_table["engine_label"] == label]
    if rows.empty or pd_isna(rows.iloc[0]["loses_from"]):
        return f"{label} lost at no measured concurrency: no schedule follows from this data."
    row = rows.iloc[0]
    keep = int(row["gains_up_to"]) if not pd_isna(row["gains_up_to"]) else 0
    if keep == 0:
        return f"{label} gained at no measured concurrency: leave speculation off."
    schedule = [[1, keep, k], [keep + 1, max_num_seqs, 0]]
    return (f"{label} gained up to {keep} and lost from {int(row['loses_from'])} concurrent streams: set "
            f"`\"num_speculative_tokens_per_batch_size\": {schedule}` to speculate only where it paid "
            "(between the two, the measured points do not say where the crossover lies).")  # fmt: skip


def schedule_outcome(
    df: pd.DataFrame, schedule_label: str, fixed_label: str, metric: str = "output_tok_s",
) -> pd.DataFrame:
    """What a measured batch-size schedule (``num_speculative_tokens_per_batch_size``) delivered at each concurrency:
    the k its schedule sets there (taking the concurrency as the batch size, the most the server can schedule at
    once), the drafts it made, and its ``metric`` against what it is meant to match: ``fixed_label`` (the same
    speculative config without a schedule) where it speculates, speculation off where its k is 0.

    Columns: engine_label, concurrency, scheduled_k, num_drafts, ``metric``, reference_label, reference, change_pct;
    concurrencies whose reference was not measured are left out; an empty table where the schedule was not measured.
    """
    import pandas as pd

    columns = ["engine_label", "concurrency", "scheduled_k", "num_drafts", metric, "reference_label", "reference",
               "change_pct"]
    rows = df[df["engine_label"] == schedule_label]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    spec = recorded_speculative(rows["engine_config_json"].iloc[0])
    if spec is None:
        raise ValueError(f"{schedule_label} has no speculative config, so no schedule")
    off = df[is_baseline(df)]
    fixed = df[df["engine_label"] == fixed_label]
    records = []
    for row in rows.sort_values("concurrency").itertuples():
        k = spec.k_at_batch_size(int(row.concurrency))
        reference_rows = fixed if k else off
        same = reference_rows[reference_rows["concurrency"] == row.concurrency]
        if same.empty:
            continue
        reference = float(same[metric].astype(float).median())
        records.append({
            "engine_label": schedule_label, "concurrency": int(row.concurrency), "scheduled_k": k,
            "num_drafts": row.num_drafts,
            metric: float(getattr(row, metric)),
            "reference_label": fixed_label if k else str(same["engine_label"].iloc[0]), "reference": reference,
            "change_pct": 100.0 * (float(getattr(row, metric)) / reference - 1.0),
        })  # fmt: skip
    return pd.DataFrame(records, columns=columns).astype({"num_drafts": "Int64"})


def schedule_outcome_text(
    outcome: pd.DataFrame, modes: pd.DataFrame | None = None, band_pct: float = NO_CHANGE_BAND_PCT,
) -> str:
    """A sentence on a ``schedule_outcome`` table: whether the schedule matched speculation off where it switched
    speculation off, and the same config without a schedule where it speculated (within ±``band_pct``); with
    ``modes`` (``startup.server_modes``) a second one on how the servers compared ran, as their logs say."""
    if outcome.empty:
        return "The batch-size schedule is not measured yet."

    def part(rows: pd.DataFrame, where: str, against: str) -> str:
        changes = ", ".join(f"{r.change_pct:+.1f} % at {r.concurrency}" for r in rows.itertuples())
        if (rows["change_pct"].abs() <= band_pct).all():
            return f"where {where} it matched {against} within ±{band_pct:g} % ({changes})"
        verb = "fell short of" if (rows["change_pct"] < -band_pct).all() else "did not match"
        return f"where {where} it {verb} {against} ({changes})"

    off, on = outcome[outcome["scheduled_k"] == 0], outcome[outcome["scheduled_k"] > 0]
    parts = []
    if not off.empty:
        parts.append(part(off, "the schedule switched speculation off", f"`{off['reference_label'].iloc[0]}`"))
    if not on.empty:
        where = "it speculated" if parts else "the schedule speculated"
        parts.append(part(on, where, f"`{on['reference_label'].iloc[0]}` without a schedule"))
    off_fell_short = not off.empty and bool((off["change_pct"] < -band_pct).all())
    text = ("The schedule was not free here: " if off_fell_short else "Measured, ") + "; ".join(parts) + "."
    if modes is not None:
        labels = [str(outcome["engine_label"].iloc[0]), *outcome["reference_label"].astype(str)]
        text = " ".join(filter(None, [text, server_modes_text(modes, labels)]))
    return text


def server_modes_text(modes: pd.DataFrame, labels: Sequence[str]) -> str:
    """A sentence on how the servers of ``labels`` ran, from ``startup.server_modes``: model runner, CUDA graph mode
    and async scheduling, as their logs say, in label order; '' where none of them is in ``modes``."""
    shown = modes[modes["engine_label"].isin(list(labels))].drop_duplicates("engine_label")

    def said(value: object, text: str) -> str:
        return "not logged" if pd_isna(value) else text

    described = "; ".join(
        f"`{r.engine_label}` ran model runner {said(r.model_runner, str(r.model_runner))}, CUDA graphs "
        f"{said(r.cudagraph_mode, str(r.cudagraph_mode))}, async scheduling "
        f"{said(r.async_scheduling, 'on' if r.async_scheduling else 'off')}"
        for r in shown.sort_values("engine_label").itertuples()
    )  # fmt: skip
    return f"Server logs: {described}." if described else ""


def schedule_table(outcomes: pd.DataFrame, metric: str = "output_tok_s") -> pd.DataFrame:
    """Several ``schedule_outcome`` tables (concatenated) side by side: one row per concurrency and scheduled k, the
    reference (its label and ``metric``), then for each schedule, in the order they come, its drafts, ``metric`` and
    change against the reference. Columns are ``(group, field)`` with group "reference" or a schedule's label; a
    concurrency a schedule lacks is empty there."""
    import pandas as pd

    index = ["concurrency", "scheduled_k"]
    fields = ["num_drafts", metric, "change_pct"]
    labels = list(dict.fromkeys(outcomes["engine_label"]))
    reference = outcomes.drop_duplicates(index).set_index(index)[["reference_label", "reference"]]
    reference.columns = pd.MultiIndex.from_tuples([("reference", "engine_label"), ("reference", metric)])
    wide = outcomes.set_index([*index, "engine_label"])[fields].unstack("engine_label")
    wide = wide.swaplevel(axis=1).reindex(columns=[(label, field) for label in labels for field in fields])
    return pd.concat([reference, wide], axis=1).sort_index(level="concurrency")


def label_change(df: pd.DataFrame, label: str, reference_label: str, metric: str = "output_tok_s") -> pd.DataFrame:
    """``label``'s ``metric`` against ``reference_label``'s at each concurrency both were measured at (medians over
    repeats): columns concurrency, ``label``, ``reference_label``, change_pct (of ``label`` against the reference)."""
    values = (
        df[df["engine_label"].isin([label, reference_label])]
        .pivot_table(index="concurrency", columns="engine_label", values=metric, aggfunc="median")
        .reindex(columns=[label, reference_label])
        .dropna()
    )
    values["change_pct"] = 100.0 * (values[label] / values[reference_label] - 1.0)
    values.columns.name = None
    return values.reset_index().astype({"concurrency": int})


def label_change_text(change: pd.DataFrame, metric: str = "output_tok_s", band_pct: float = NO_CHANGE_BAND_PCT) -> str:
    """A sentence on a ``label_change`` table: where the config matched its reference within ±``band_pct`` and
    where it did not, with the change at each concurrency; '' for an empty table."""
    if change.empty:
        return ""
    label, reference = str(change.columns[1]), str(change.columns[2])
    even = change[change["change_pct"].abs() <= band_pct]
    apart = change[change["change_pct"].abs() > band_pct]
    parts = []
    if not even.empty:
        levels = ", ".join(f"{r.concurrency} ({r.change_pct:+.1f} %)" for r in even.itertuples())
        parts.append(f"within ±{band_pct:g} % at {levels}")
    if not apart.empty:
        parts.append(", ".join(f"{r.change_pct:+.1f} % at {r.concurrency}" for r in apart.itertuples()))
    return f"`{label}` against `{reference}` ({metric}): " + "; ".join(parts) + "."


def change_chain(
    df: pd.DataFrame, labels: Sequence[str], modes: pd.DataFrame, metric: str = "output_tok_s"
) -> pd.DataFrame:
    """A gap between two servers taken apart one change at a time: ``labels`` run from the reference to the server
    it is compared with, each a control that differs from the one before in as little as possible.

    One row per step (each label against the one before it) and a last row "total" (the last label against the
    first); ``differs`` says what changed, from the servers' logs in ``modes`` (``startup.server_modes``: model
    runner, CUDA graphs, async scheduling) and the rows' ``spec_method``; one column per concurrency that every label
    was measured at, holding the change of ``metric`` in percent (medians over repeats). The steps compound: the
    product of their ratios is the total's."""
    import pandas as pd

    if len(labels) < 2:
        raise ValueError(f"a change chain needs at least two labels, got {list(labels)}")
    values = (
        df[df["engine_label"].isin(list(labels))]
        .pivot_table(index="engine_label", columns="concurrency", values=metric, aggfunc="median")
        .reindex(list(labels))
        .dropna(axis="columns")
    )
    values.columns = [int(level) for level in values.columns]
    described = modes.drop_duplicates("engine_label").set_index("engine_label")
    methods = df.drop_duplicates("engine_label").set_index("engine_label")["spec_method"]

    def setting(label: str) -> dict[str, str]:
        logged = described.loc[label] if label in described.index else None

        def said(column: str, text: Callable[[object], str] = str) -> str:
            return "not logged" if logged is None or pd_isna(logged[column]) else text(logged[column])

        return {
            "speculation": str(methods.get(label, "not recorded")),
            "model runner": said("model_runner"),
            "CUDA graphs": said("cudagraph_mode"),
            "async scheduling": said("async_scheduling", lambda on: "on" if on else "off"),
        }

    def differs(label: str, reference: str) -> str:
        before, after = setting(reference), setting(label)
        changed = [f"{name} {before[name]} → {after[name]}" for name in before if before[name] != after[name]]
        return "; ".join(changed) or "nothing logged"

    steps = [(labels[i], labels[i - 1]) for i in range(1, len(labels))] + [(labels[-1], labels[0])]
    records = []
    for number, (label, reference) in enumerate(steps, start=1):
        change = 100.0 * (values.loc[label] / values.loc[reference] - 1.0)
        records.append({
            "step": "total" if number == len(steps) else str(number),
            "server": label, "against": reference, "differs": differs(label, reference), **change.to_dict(),
        })  # fmt: skip
    return pd.DataFrame(records).set_index("step")


def change_chain_text(chain: pd.DataFrame) -> str:
    """A sentence on a ``change_chain`` table: at each concurrency, the total change and the step that moved it
    most (what it changed, its two servers and its change); '' where the table has no concurrency in common."""
    levels = [column for column in chain.columns if isinstance(column, int)]
    steps = chain.drop(index="total")
    described = []
    for level in levels:
        largest = steps.loc[steps[level].abs().idxmax()]
        described.append(f"at {level}, {chain.loc['total', level]:+.1f} % in all, the largest step "
                         f"{largest['differs']} (`{largest['server']}` against `{largest['against']}`: "
                         f"{largest[level]:+.1f} %)")  # fmt: skip
    if not described:
        return ""
    return f"`{chain.loc['total', 'server']}` against `{chain.loc['total', 'against']}`: " + "; ".join(described) + "."


def never_lost_text(crossover_table: pd.DataFrame, comparison: pd.DataFrame) -> str:
    """A sentence naming the configs of a ``crossover`` table that lost at no measured concurrency but gained at
    some, each with its change at its lowest and highest measured concurrency (from ``comparison``, the
    ``versus_baseline`` rows the table was built from); '' where there is none."""
    kept = crossover_table[crossover_table["loses_from"].isna() & crossover_table["gains_up_to"].notna()]
    described = []
    for label in kept["engine_label"]:
        rows = comparison[comparison["engine_label"] == label].dropna(subset=["concurrency"]).sort_values("concurrency")
        low, high = rows.iloc[0], rows.iloc[-1]
        described.append(f"{label} ({low.change_pct:+.1f} % at {int(low.concurrency)}, "
                         f"{high.change_pct:+.1f} % at {int(high.concurrency)})")  # fmt: skip
    if not described:
        return ""
    return "Lost at no measured concurrency: " + "; ".join(described) + "."


def recorded_speculative(engine_config_json: object) -> SpeculativeConfig | None:
    """The speculative config stored in a recorded row's ``engine_config_json`` (None for speculation off, or where
    the row has no config), validated without repeating its advisories."""
    import json

    from vllm_playbooks.config.speculative import SpeculativeConfig

    if not isinstance(engine_config_json, str):
        return None
    spec_json = json.loads(engine_config_json).get("speculative")
    return SpeculativeConfig.model_validate(spec_json, context={"advisories": False}) if spec_json else None


def schedule_switched_off(engine_config_json: object, concurrency: object) -> bool:
    """True where a recorded row's speculative config (its ``engine_config_json``) has a batch-size schedule that
    sets k = 0 at ``concurrency`` (taken as the batch size); False without a schedule or a concurrency."""
    spec = recorded_speculative(engine_config_json)
    if spec is None or spec.keeps_full_cudagraphs or pd_isna(concurrency):  # no schedule
        return False
    return spec.k_at_batch_size(int(concurrency)) == 0


def scheduled_off(df: pd.DataFrame) -> pd.Series:
    """True for each recorded row whose speculative config's batch-size schedule sets k = 0 at its concurrency
    (``schedule_switched_off``): speculation was (nearly) off there, so its acceptance and chunking say nothing about
    drafting. False for every other row, speculative or not, and for request-rate loads."""
    import pandas as pd

    if df.empty:
        return pd.Series(dtype=bool)
    return df.apply(
        lambda row: row["spec_method"] != "none"
        and schedule_switched_off(row.get("engine_config_json"), row["concurrency"]), axis=1,
    ).astype(bool)
