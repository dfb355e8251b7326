"""Comparisons a case page needs: speculation against the baseline at the same load, and where it stops paying."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

#: Columns that must match for a speculative row and a baseline row to be compared.
PAIRING_COLUMNS = (
    "model_shape", "load_format", "input_len", "output_len", "concurrency", "request_rate_qps",
    "tensor_parallel_size", "pipeline_parallel_size", "max_num_seqs", "max_num_batched_tokens", "gpu_name",
)  # fmt: skip


def versus_baseline(df: pd.DataFrame, metric: str = "output_tok_s", extra: Sequence[str] = ()) -> pd.DataFrame:
    """One row per speculative point with its baseline's value of ``metric`` at the same load and settings.

    ``ratio`` is speculative / baseline, ``change_pct`` is the change in percent. For latencies a ratio below 1
    is the better result; for throughputs above 1. ``extra`` names further columns of the speculative rows to carry
    along (for example ``acceptance_rate``).
    """
    import pandas as pd

    keys = list(PAIRING_COLUMNS)
    filled = df.assign(**{k: df[k].astype("string").fillna("—") for k in keys})
    base = filled[filled["spec_method"] == "none"][[*keys, metric]].rename(columns={metric: "baseline"})
    spec = filled[filled["spec_method"] != "none"]
    if base.duplicated(keys).any():
        base = base.groupby(keys, as_index=False)["baseline"].median()
    merged = spec.merge(base, on=keys, how="inner")
    out = pd.DataFrame(
        {
            "engine_label": merged["engine_label"],
            "spec_method": merged["spec_method"],
            "k": merged["num_speculative_tokens"],
            "imposed_alpha": merged["imposed_alpha"],
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
    return out.sort_values(["engine_label", "concurrency", "request_rate_qps"]).reset_index(drop=True)


def higher_is_better(metric: str) -> bool:
    """Throughputs are better higher; latencies (columns in ms) are better lower."""
    return not metric.endswith("_ms")


def winning_levels(group: pd.DataFrame) -> list[int]:
    """Concurrency levels at which one speculative config beat its baseline (higher throughput / lower latency)."""
    better_up = higher_is_better(str(group["metric"].iloc[0]))
    wins = group[(group["ratio"] > 1.0) if better_up else (group["ratio"] < 1.0)]
    return sorted(int(c) for c in wins["concurrency"].dropna())


def _where_it_won(group: pd.DataFrame) -> str:
    wins = winning_levels(group)
    if not wins:
        return "it never beat the baseline"
    if len(wins) == len(group):
        return "it beat the baseline at every measured level"
    return f"it beat the baseline only at concurrency {', '.join(map(str, wins))}"


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


def describe_change(comparison: pd.DataFrame) -> str:
    """One sentence per speculative config: the change at each load level and where speculation stopped paying."""
    if comparison.empty:
        return "No speculative point has a baseline at the same load yet, so there is nothing to compare."
    metric = comparison["metric"].iloc[0]
    sentences = []
    for label, group in comparison.groupby("engine_label"):
        steps = ", ".join(
            f"{chg:+.1f} % at concurrency {int(c)}" for c, chg in zip(group["concurrency"], group["change_pct"], strict=True)
        )
        sentences.append(f"{label}: {metric} {steps}; {_where_it_won(group)}.")
    return " ".join(sentences)


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
        levels = ", ".join(str(int(c)) for c in sorted(group["concurrency"].dropna()))
        row = group.iloc[0]
        alpha = "" if pd_isna(row["imposed_alpha"]) else f" at an imposed α={row['imposed_alpha']:g}"
        wins = winning_levels(group)
        better = "raised" if higher_is_better(metric) else "lowered"
        if not wins:
            verdict = f"did not improve {metric} over no speculation at any measured concurrency ({levels})"
        elif len(wins) == len(group):
            verdict = f"{better} {metric} at every measured concurrency ({levels})"
        else:
            verdict = f"improved {metric} only at concurrency {', '.join(map(str, wins))} (measured: {levels})"
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
