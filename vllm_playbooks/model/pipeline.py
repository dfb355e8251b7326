"""Pipeline parallelism in closed form: micro-batches, the max_num_seqs a layout needs, and the throughput a fitted step
time predicts."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from vllm_playbooks.model.calibration import EfficiencyFit
from vllm_playbooks.model.prediction import forward_time_s


def layout(tensor_parallel_size: int, pipeline_parallel_size: int) -> str:
    """``'PP=1'`` (one GPU), ``'PP=2'``, ``'TP=2'``, or ``'TP=2 PP=2'`` for both."""
    tp, pp = int(tensor_parallel_size), int(pipeline_parallel_size)
    if tp == 1:
        return f"PP={pp}"
    return f"TP={tp}" if pp == 1 else f"TP={tp} PP={pp}"


def microbatch_size(max_num_seqs: int, pipeline_parallel_size: int) -> float:
    """Sequences per microbatch when every slot is taken: max_num_seqs / PP (the scheduler's cap covers all stages)."""
    if max_num_seqs < 1 or pipeline_parallel_size < 1:
        raise ValueError("max_num_seqs and pipeline_parallel_size must be >= 1")
    return max_num_seqs / pipeline_parallel_size


def max_num_seqs_for(pipeline_parallel_size: int, per_microbatch: int) -> int:
    """The fix: the ``--max-num-seqs`` that gives each of PP microbatches ``per_microbatch`` sequences (PP × B)."""
    if pipeline_parallel_size < 1 or per_microbatch < 1:
        raise ValueError("pipeline_parallel_size and per_microbatch must be >= 1")
    return pipeline_parallel_size * per_microbatch


def fix_table(pipeline_parallel_size: int, batches: Iterable[int]) -> pd.DataFrame:
    """For each wanted per-microbatch batch B: the ``max_num_seqs`` to set, and what setting B itself would give."""
    return pd.DataFrame(
        [
            {
                "per_microbatch_batch_wanted": b,
                "max_num_seqs_to_set": max_num_seqs_for(pipeline_parallel_size, b),
                "per_microbatch_batch_if_max_num_seqs_is_B": microbatch_size(b, pipeline_parallel_size),
            }
            for b in batches
        ]
    )


def predicted_throughput(
    fit: EfficiencyFit,
    model: str,
    max_num_seqs: int,
    tensor_parallel_size: int,
    pipeline_parallel_size: int,
    input_len: int,
    output_len: int,
    kv_cache_dtype: str = "auto",
    gpu: str | None = None,
) -> dict[str, float]:
    """Saturated closed loop on the fitted roofline (``model.prediction.forward_time_s``): microbatch b = N / P, one
    stage step ``t = T(b) / (P · TP) + overhead`` (bytes and FLOPs split over the GPUs, the fixed per-step overhead paid
    by every stage), one microbatch finishing per stage step, so output tok/s = b / t and TPOT = P · t. Each step also
    carries the prompts of the requests that replace finished ones (b · input_len / output_len tokens). Communication
    between GPUs is not modelled, so TP and PP figures are upper bounds.
    """

    p, tp = int(pipeline_parallel_size), int(tensor_parallel_size)
    batch = microbatch_size(max_num_seqs, p)
    context = input_len + output_len / 2
    step = forward_time_s(
        fit, model, batch, context, batch * input_len / output_len, kv_cache_dtype, gpu, shards=p * tp
    )
    tok_s = batch / step
    return {
        "microbatch": batch,
        "stage_step_ms": 1000 * step,
        "tpot_ms": 1000 * p * step,
        "output_tok_s": tok_s,
        "output_tok_s_per_gpu": tok_s / (p * tp),
    }


def with_layout(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a ``layout`` column ('PP=1', 'PP=2', 'TP=2') from its parallel sizes."""
    out = df.copy()
    out["layout"] = [
        layout(t, p) for t, p in zip(out["tensor_parallel_size"], out["pipeline_parallel_size"], strict=True)
    ]
    return out
