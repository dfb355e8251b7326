"""Sentences on a comparison (``analysis.compare``): the change of each speculative config at each load level and
where it beat its baseline, per GPU where there are several, a config against a reference config, and the one-line
fingerprint of a case's rows that the pages print as a regression check."""

from __future__ import annotations

import pandas as pd

from vllm_playbooks.analysis.compare import winning_lines
from vllm_playbooks.cases.load_words import load_label, with_load_labels


def _levels(texts: list[str]) -> str:
    """'concurrency 1, 4' for concurrency levels only, else the load texts joined."""
    if texts and all(t.startswith("concurrency ") for t in texts):
        return "concurrency " + ", ".join(t.removeprefix("concurrency ") for t in texts)
    return ", ".join(texts)


def _where_it_won(group: pd.DataFrame) -> str:
    wins = with_load_labels(winning_lines(group))["load"].tolist()
    if not wins:
        return "it never beat the baseline"
    if len(wins) == len(group):
        return "it beat the baseline at every measured level"
    return f"it beat the baseline only at {_levels(wins)}"


def describe_change(comparison: pd.DataFrame) -> str:
    """One sentence per speculative config: the change at each load level and where speculation stopped paying."""
    if comparison.empty:
        return "No speculative point has a baseline at the same load yet, so there is nothing to compare."
    metric = comparison["metric"].iloc[0]
    sentences = []
    for label, group in comparison.groupby("engine_label"):
        steps = ", ".join(
            f"{chg:+.1f} % at {load_label(c, r)}"
            for c, r, chg in zip(group["concurrency"], group["request_rate_qps"], group["change_pct"], strict=True)
        )
        sentences.append(f"{label}: {metric} {steps}; {_where_it_won(group)}.")
    return " ".join(sentences)


def describe_change_by_hardware(comparison: pd.DataFrame) -> str:
    """``describe_change`` once per GPU of ``comparison`` (its ``gpu_name``), each headed by the GPU's name when
    there are several: the verdict computed for each hardware, never from their rows mixed."""
    names = sorted(str(n) for n in comparison["gpu_name"].unique()) if not comparison.empty else []
    if len(names) < 2:
        return describe_change(comparison)
    return "\n\n".join(
        f"**On {name}.** {describe_change(comparison[comparison['gpu_name'] == name])}" for name in names
    )


def summary_line(df: pd.DataFrame) -> str:
    """A one-line fingerprint of a case's rows (a regression check for the notebooks: rows, engines, loads)."""
    engines = sorted(str(e) for e in df["engine_label"].unique())
    loads = sorted(int(c) for c in df["concurrency"].dropna().unique())
    rates = sorted(float(r) for r in df["request_rate_qps"].dropna().unique())
    return f"rows={len(df)} engines={engines} concurrency={loads} request_rates={rates}"
