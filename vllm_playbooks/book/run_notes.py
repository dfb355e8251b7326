"""The sentences about where and when the rows ran: which points ran beside another on one host (a case page), and
what was measured in all (the recorded-runs page and ``vllm-playbooks runs``), each wording a table of
``analysis.runs``; and the GPU memory the runs need (``run.hardware_plan``): where a GPU's figure comes from, and
what a case's quick check needs (a case page)."""

from __future__ import annotations

import pandas as pd

from vllm_playbooks.analysis import runs
from vllm_playbooks.analysis.noise import MIN_CLEAN_REPEATS
from vllm_playbooks.cases.load_words import overlap_table
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.run.hardware_plan import GpuMemory, quick_check_gib
from vllm_playbooks.text import and_list

#: Above this many overlapping points, ``overlap_note`` counts them per configuration instead of listing each pair.
OVERLAPS_LISTED = 8


def overlap_note(df: pd.DataFrame) -> str:
    """One sentence for a page: which points ran at the same time as another (``cases.load_words.overlap_table``),
    or none. Up to ``OVERLAPS_LISTED`` such points are named with what each ran beside; more are counted per
    configuration, and the page shows that table for the pairs."""
    rows = overlap_table(df)
    if rows.empty:
        return f"Each of the {len(df)} points ran alone on its host."
    opening = (
        f"{len(rows)} of the {len(df)} points ran at the same time as another point, one server per GPU on the "
        "same host, sharing its CPUs (so each may have run slower than alone)"
    )
    if len(rows) > OVERLAPS_LISTED:
        per_config = rows["engine_label"].value_counts(sort=False).items()
        counts = ", ".join(f"`{label}` {count}" for label, count in per_config)
        return (
            f"{opening}; by configuration: {counts}. The table below names what each ran beside; the others ran "
            f"alone.{_set_aside_sentence(df)}"
        )
    listed = "; ".join(f"`{r.engine_label}` at {r.load} beside {r.beside}" for r in rows.itertuples())
    return f"{opening}: {listed}. The others ran alone.{_set_aside_sentence(df)}"


def _set_aside_sentence(df: pd.DataFrame) -> str:
    """' N of them are left out of the comparisons …' where ``analysis.runs.set_aside_overlapped`` leaves runs out,
    else ''."""
    left_out = len(df) - len(runs.set_aside_overlapped(df))
    if not left_out:
        return ""
    return (
        f" {left_out} of them {'is' if left_out == 1 else 'are'} left out of the comparisons and verdicts: "
        f"{'its point was' if left_out == 1 else 'their points were'} measured at least {MIN_CLEAN_REPEATS} "
        "times alone."
    )


def describe_recorded_runs(table: pd.DataFrame) -> str:
    """One sentence on an ``analysis.runs.recorded_runs`` table: how many rows, distinct points and repeats of how many
    cases, from when to when, on which GPUs and vLLM versions, and the GPU-minutes the servers of the recorded logs
    held."""
    if table.empty:
        return "No run is recorded yet."
    gpus = and_list(sorted(table["gpu_name"].unique()))
    versions = and_list(sorted(table["vllm_version"].unique()))
    cases, repeats = table["case"].nunique(), table["repeats"].sum()
    return (
        f"{table['rows'].sum()} recorded rows ({table['points'].sum()} distinct points, {repeats} "
        f"repeat{'s' if repeats != 1 else ''}) of {cases} case{'s' if cases != 1 else ''}, measured from "
        f"{table['first_measured'].min()} to {table['last_measured'].max()} on {gpus} with vLLM {versions}. The "
        f"{table['servers'].sum()} server logs recorded with them show {table['gpu_minutes'].sum():.1f} "
        "GPU-minutes held, from each launch to its last logged line; installing vLLM, idle time between runs and "
        "servers whose logs were not kept are not counted."
    )


def memory_source(memory: GpuMemory) -> str:
    """Where a ``run.hardware_plan.gpu_memory_gib`` figure comes from, in words: 'this machine's GPU', 'vLLM's log of
    a recorded start-up on it' or 'the <row> datasheet'."""
    if memory.source == "here":
        return "this machine's GPU"
    if memory.source == "log":
        return "vLLM's log of a recorded start-up on it"
    return f"the {memory.datasheet} datasheet"


def quick_check_memory(case: str) -> str:
    """The memory per GPU that the servers of a case's quick check need to start (``run.hardware_plan.quick_check_gib``)
    for a page: '75.6 GiB'; 'an unknown amount (<why>)' where the case has no quick check or the calculator models
    none of its engines."""
    try:
        least = quick_check_gib(case)
    except ConfigError as error:
        return f"an unknown amount ({error})"
    if least is None:
        return "an unknown amount (the KV calculator models none of its configs)"
    return f"{least:.1f} GiB"
