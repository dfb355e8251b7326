"""The worked solutions of the workshop's engine-setting exercises (5 to 7: max_num_seqs, CUDA graphs,
microbatches under pipeline parallelism), each recomputed from the recorded data or the capacity calculator."""

from __future__ import annotations

import math

import pandas as pd

from vllm_playbooks.book.calculator_notes import describe_budget
from vllm_playbooks.book.exercises import Solution, case_rows, one_label
from vllm_playbooks.config.capacity import (
    budget_table,
    cudagraph_capture_sizes,
    kv_budget,
    resolve_batching,
)
from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.errors import CapacityError, ConfigError, PlaybookError
from vllm_playbooks.results.engine_steps import step_summary


def max_num_seqs_solution(
    model: str = "llama-3.3-70b-awq",
    kv_cache_dtype: str = "fp8",
    max_model_len: int = 8192,
    gpu_memory_gib: float = 80.0,
    gpu_name: str = "A100 80GB",
    gpu_memory_utilization: float = 0.9,
    draft_model: str | None = None,
    num_speculative_tokens: int = 0,
) -> Solution:
    """The largest max_num_seqs whose sequences all fit at max_model_len, and the limit that binds at vLLM's default.

    The KV cache holds ``kv_tokens`` (``capacity.kv_budget``); ``kv_tokens // max_model_len`` full-length sequences
    fit. Setting max_num_seqs leaves the budget unchanged (the token budget stays at its default), which the
    solution confirms: at that value the cap binds, one more and memory binds.
    """

    def engine(max_num_seqs: int | None) -> EngineConfig:
        speculative = (
            {"method": "draft_model", "model": draft_model, "num_speculative_tokens": num_speculative_tokens}
            if draft_model
            else None
        )
        return EngineConfig(
            label="workshop",
            model=model,
            kv_cache_dtype=kv_cache_dtype,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            gpu_memory_utilization=gpu_memory_utilization,
            speculative=speculative,
        )

    default = kv_budget(engine(None), gpu_memory_gib, gpu_name)
    tokens, _ = resolve_batching(max_model_len, gpu_memory_gib, gpu_name)
    fits = min(max(default.kv_tokens, 0) // max_model_len, tokens)
    if fits < 1:
        raise CapacityError(
            f"not even one sequence of {max_model_len} tokens fits ({default.kv_tokens} KV tokens): "
            "lower max_model_len, use an fp8 KV cache, or a GPU with more memory"
        )
    at = kv_budget(engine(fits), gpu_memory_gib, gpu_name)
    for _ in range(8):  # the CUDA graphs vLLM reserves memory for follow max_num_seqs: settle the two together
        settled = min(max(at.kv_tokens, 0) // max_model_len, tokens)
        if settled == fits or settled < 1:
            break
        fits, at = settled, kv_budget(engine(settled), gpu_memory_gib, gpu_name)
    above = kv_budget(engine(fits + 1), gpu_memory_gib, gpu_name) if fits < tokens else None
    if at.binding != "max_num_seqs" or (above and above.binding != "memory"):
        raise PlaybookError(f"max_num_seqs={fits} moved the KV budget's binding limit: the sizing rule broke")
    statement = (
        f"the KV cache holds {at.kv_tokens:,} tokens = {at.max_concurrency:.2f} sequences of "
        f"{max_model_len} tokens, so max_num_seqs={fits} is the largest whose sequences all fit; at vLLM's default "
        f"max_num_seqs={default.max_num_seqs}, {_binding_words(default.binding)} binds"
    )
    explanation = (
        f"{describe_budget(at)} Full-length sequences that fit: ⌊{at.kv_tokens} / {max_model_len}⌋ "
        f"= {fits}. So: {statement}."
    )
    return Solution(
        exercise="size-max-num-seqs",
        inputs={
            "model": model,
            "kv_cache_dtype": kv_cache_dtype,
            "max_model_len": max_model_len,
            "gpu_memory_gib": gpu_memory_gib,
            "gpu_name": gpu_name,
            "gpu_memory_utilization": gpu_memory_utilization,
            "draft_model": draft_model,
            "num_speculative_tokens": num_speculative_tokens,
        },
        value={"max_num_seqs": fits, "binding": default.binding},
        kinds={"max_num_seqs": "int", "binding": "word"},
        statement=statement,
        explanation=explanation,
        table=budget_table(default),
    )


def _binding_words(binding: str) -> str:
    return "memory (the KV cache)" if binding == "memory" else "the max_num_seqs cap"


def cuda_graphs_solution(
    num_speculative_tokens: int = 3,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int | None = None,
    max_model_len: int = 4096,
    gpu_memory_gib: float = 139.8,
    gpu_name: str = "NVIDIA H200",
) -> Solution:
    """The largest decode batch (in sequences) that still replays a CUDA graph, with k speculative tokens.

    A decoding sequence schedules 1 + k tokens; capture sizes count tokens (``capacity.cudagraph_capture_sizes``),
    so the largest graphed decode batch is ⌊largest size / (1 + k)⌋ sequences.
    """
    k = int(num_speculative_tokens)
    tokens, seqs = resolve_batching(
        max_model_len,
        gpu_memory_gib,
        gpu_name,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    sizes = cudagraph_capture_sizes(seqs, k, tokens)
    step = 1 + k
    largest = sizes[-1]
    graphed = largest // step

    table = pd.DataFrame({"capture_size_tokens": sizes, "decode_sequences": [s // step for s in sizes]})
    cap = min(seqs * step * 2, 512, tokens)
    if graphed < seqs:
        tail = f"decode batches of {graphed + 1} to {seqs} sequences run without a full CUDA graph"
    else:
        tail = f"every decode batch up to max_num_seqs={seqs} is graphed"
    statement = (
        f"k = {k}: each decoding sequence takes {step} tokens and the largest capture size is {largest} tokens, "
        f"so decode batches up to {graphed} sequences replay a CUDA graph; {tail}"
    )
    explanation = (
        f"vLLM 0.26 captures graphs up to min(max_num_seqs × (1 + k) × 2, 512, max_num_batched_tokens) = "
        f"min({seqs} × {step} × 2, 512, {tokens}) = {cap} tokens, with sizes rounded to multiples of 1 + k for "
        f"full decode graphs ({len(sizes)} sizes). The 512-token cap does not grow with k, so the longer the draft, "
        f"the fewer sequences a graphed decode step can hold. So: {statement}."
    )
    return Solution(
        exercise="cuda-graph-sizes",
        inputs={
            "num_speculative_tokens": k,
            "max_num_seqs": max_num_seqs,
            "max_num_batched_tokens": max_num_batched_tokens,
            "max_model_len": max_model_len,
            "gpu_memory_gib": gpu_memory_gib,
            "gpu_name": gpu_name,
        },
        value=graphed,
        kinds="int",
        statement=statement,
        explanation=explanation,
        table=table,
    )


def microbatches_solution(case: str, engine_label: str = "8b-pp2-mns64") -> Solution:
    """From vLLM's own counters of one recorded point: the sequences one engine step carried (output tokens / engine
    steps) and the sequences running at once (that × the pipeline parallel size), against ``max_num_seqs``.

    The worked table shows the same counts for every point of the case with the same cap, so PP=1 and PP=2 sit side
    by side (``results.engine_steps.step_summary``, read from the points' raw ``/metrics`` scrapes).
    """

    rows = case_rows(case)
    labels = sorted(str(label) for label in rows["engine_label"].unique())
    label = one_label(labels, engine_label, "recorded")
    steps = step_summary(rows)
    row = steps[steps["engine_label"] == label].iloc[0]
    if not math.isfinite(float(row["engine_steps"])):
        raise ConfigError(f"{label}: its /metrics scrapes hold no step histogram (vLLM before it exported one)")
    per_step = float(row["output_tokens"]) / float(row["engine_steps"])
    stages = int(row["pipeline_parallel_size"])
    running = per_step * stages
    statement = (
        f"{int(row['output_tokens']):,} output tokens / {int(row['engine_steps']):,} engine steps = {per_step:.2f} "
        f"sequences per step; × {stages} pipeline stage(s) = {running:.2f} running at once, against "
        f"max_num_seqs {int(row['max_num_seqs'])}"
    )
    same_cap = steps[steps["max_num_seqs"] == row["max_num_seqs"]]
    table = same_cap[
        [
            "engine_label",
            "pipeline_parallel_size",
            "tensor_parallel_size",
            "max_num_seqs",
            "concurrency",
            "engine_steps",
            "output_tokens",
            "sequences_per_step",
            "running_mean",
            "small_step_frac",
        ]
    ]
    explanation = (
        "Every decoding sequence in a step emits one token, so output tokens / engine steps is the sequences one "
        "step carried. With P pipeline stages, P steps (microbatches) are in flight and each running sequence is "
        "in exactly one of them, so P × that is the number running at once: the count that `--max-num-seqs` caps "
        "(issue #27462). Each microbatch therefore carries about max_num_seqs / P, and the share of small steps "
        f"shows how unevenly the two microbatches split. So: {statement}."
    )
    return Solution(
        exercise="microbatches",
        inputs={"case": case, "engine_label": label},
        value={"sequences_per_step": per_step, "running": running},
        kinds={"sequences_per_step": "float", "running": "float"},
        statement=statement,
        explanation=explanation,
        table=table.reset_index(drop=True),
    )
