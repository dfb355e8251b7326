"""The paragraphs the batching-calculator page prints: one KV budget in words (``describe_budget``), and under its
check against vLLM's start-up logs, where the MoE targets' memory budgets go and what vLLM's CUDA-graph reserve
estimate left unused (each words a ``analysis.calculator.calculator_check`` table)."""

from __future__ import annotations

import pandas as pd

from vllm_playbooks.config.capacity import GIB, KVBudget, kv_tokens_fitting
from vllm_playbooks.config.memory import CalibrationGap
from vllm_playbooks.text import value_range


def describe_budget(budget: KVBudget) -> str:
    """One paragraph: tokens, full-length sequences at once, and which limit binds."""
    per_token_kib = budget.kv_bytes_per_token / 1024
    limit = (
        f"memory binds: only {budget.max_concurrency:.1f} sequences of {budget.max_model_len} tokens fit, fewer than "
        f"max_num_seqs={budget.max_num_seqs}, so long requests queue or get preempted before the cap is reached"
        if budget.binding == "memory"
        else f"max_num_seqs={budget.max_num_seqs} binds: the cache could hold {budget.max_concurrency:.1f} sequences "
        f"of {budget.max_model_len} tokens"
    )
    where = (
        f"{budget.kv_bytes / GIB:.1f} GiB"
        if budget.gpus == 1
        else f"{budget.kv_bytes / GIB:.1f} GiB on each of {budget.gpus} GPUs, which keep "
        f"{budget.kv_bytes_per_token_per_gpu / 1024:g} KiB of each token"
    )
    text = (
        f"The KV cache takes {per_token_kib:g} KiB per token and holds {budget.kv_tokens:,} tokens ({where}); {limit}."
    )
    gap = budget.calibration_warning
    return f"{text} Warning: {calibration_gap_text(gap)}." if gap is not None else text


def calibration_gap_text(gap: CalibrationGap) -> str:
    """The warning on a KV budget whose memory family no recorded start-up calibrates, with the error to expect."""
    return (
        f"the KV budget of {gap.family} is not calibrated on a recorded vLLM start-up: it uses "
        f"the {gap.borrowed} calibration, which was off by up to {gap.worst_error_pct:.0f} % on recorded "
        f"{'MoE' if gap.moe else 'dense'} families it was not fitted on; leave headroom"
    )


def overheads_note(check: pd.DataFrame) -> str:
    """One Markdown paragraph on a ``calculator_check`` table: how far the MoE targets' KV tokens are overstated, the
    activation peaks and CUDA-graph estimates vLLM logged for them against ours, and how close the KV tokens come with
    vLLM's logged overheads in place of ours ('' without MoE rows)."""
    moe = check[check["moe"]]
    if moe.empty:
        return ""

    def span(values: pd.Series, unit: str = " GiB", digits: int = 2) -> str:
        return value_range(values, f"{{:.{digits}f}}", "-", unit)

    parts = []
    for model, rows in moe.groupby("model", sort=True):
        graphs = rows["cudagraph_gib_vllm"].dropna()
        graph = f", and set aside {span(graphs)} for CUDA graphs" if not graphs.empty else ""
        parts.append(
            f"`{model}`: KV tokens off by {span(rows['kv_tokens_error_pct'], ' %', 1)} calibrated, "
            f"{span(rows['kv_tokens_error_uncalibrated_pct'], ' %', 1)} without; vLLM measured a "
            f"{span(rows['activation_gib_vllm'])} activation peak against our "
            f"{span(rows['activation_gib_ours'])}{graph}"
        )
    adjusted = check["kv_tokens_error_with_vllm_overheads_pct"].dropna()
    closing = ""
    if not adjusted.empty:
        closing = (
            f" With vLLM's logged activation, non-torch memory and CUDA-graph estimate in place of ours, the "
            f"calculator's weights and KV bytes per token give the KV tokens of {len(adjusted)} of the "
            f"{len(check)} start-ups within {adjusted.abs().max():.1f} %: the gap is those two terms."
        )
    return "**Where the MoE budgets go.** " + "; ".join(parts) + "." + closing


def cudagraph_reserve_note(check: pd.DataFrame, threshold_gib: float = 1.0) -> str:
    """One Markdown paragraph on a ``calculator_check`` table: where vLLM's CUDA-graph estimate (taken from the KV
    budget before capture) exceeded what the graph pool then took by more than ``threshold_gib``, the KV memory and
    tokens that went unused (at our KV bytes per token), and where it fell short ('' when no start-up logged both)."""
    logged = check.dropna(subset=["cudagraph_gib_vllm", "cudagraph_gib_actual"])
    if logged.empty:
        return ""
    excess = logged["cudagraph_gib_vllm"] - logged["cudagraph_gib_actual"]
    over = logged[excess > threshold_gib]
    text = (
        f"**The CUDA-graph reserve is an estimate.** vLLM 0.26 estimates the memory its CUDA graphs will take, "
        f"takes that from the KV-cache budget, then captures the graphs and logs what their pool took. In "
        f"{len(over)} of the {len(logged)} start-ups that logged both, the estimate was more than "
        f"{threshold_gib:g} GiB too high"
    )
    configs = over.groupby(["model", "engine_label"], sort=True)
    if configs.ngroups != len(over):
        text += f" ({configs.ngroups} configs)" if configs.ngroups > 1 else " (one config)"
    if not over.empty:
        cases = []
        for (model, label), rows in configs:
            row = rows.iloc[0]
            lost = row["cudagraph_gib_vllm"] - row["cudagraph_gib_actual"]
            tokens = kv_tokens_fitting(lost * GIB, int(row["kv_bytes_per_token_ours"]))
            cases.append(
                f"`{model}` {label} ({row['cudagraph_gib_vllm']:.2f} GiB estimated, "
                f"{row['cudagraph_gib_actual']:.2f} GiB taken: {lost:.2f} GiB, about {tokens:,} KV tokens, "
                f"left unused)"
            )
        text += (
            ": " + "; ".join(cases) + ". Such a server holds fewer KV tokens than its memory allows; its log "
            "names two remedies: a higher `--gpu-memory-utilization`, or "
            "`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0`"
        )
    short = logged[excess < 0]
    if not short.empty:
        text += (
            f". In {len(short)} the estimate fell short, by up to {-excess.min():.2f} GiB: those graphs took more "
            "than was set aside"
        )
    return text + "."
