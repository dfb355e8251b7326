"""The paragraphs a case page prints about its recorded rows: repeated runs and their spread, kernel compilations,
stalled runs, the GPU time its servers held, the points left to measure, how long a part takes on a fresh machine, and
what has been measured so far. Each words a table that the layers below compute (``analysis.repeats``,
``results.jit``, ``results.stalls``, ``run.budget``)."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pandas as pd

from vllm_playbooks.cases.load_words import load_label
from vllm_playbooks.config.spec_detection import SpeculativeConfigWarning
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.results import raw
from vllm_playbooks.results.stalls import STALL_S, STALL_SHARE, describe_load
from vllm_playbooks.results.store import load_runs
from vllm_playbooks.run.budget import fresh_time, fresh_time_per_gpu, server_time
from vllm_playbooks.run.case import hardware_in_words
from vllm_playbooks.run.plan import QUICK_PART, part_overrides, quiet_plan


def measurement_status(measured: pd.DataFrame, case: str) -> str:
    """A sentence on what has been measured for ``case`` so far, from the rows themselves."""
    if measured.empty:
        return (
            f"No run of case {case!r} is recorded in data/runs/{case}/ yet: this page shows published numbers only, "
            "and gives no verdict until a measured run exists."
        )
    gpus = ", ".join(sorted(f"{n} ×{c}" for n, c in set(zip(measured.gpu_name, measured.gpu_count, strict=True))))
    return f"{len(measured)} measured point(s) of case {case!r} on {gpus}."


def gpu_time_note(servers: pd.DataFrame, gpu: str = "GPU") -> str:
    """One sentence on a ``server_time`` table: the GPU-minutes its servers held, how many of them went to starting,
    and what the figure leaves out ('' for an empty table)."""
    if servers.empty:
        return ""
    starting = (servers["startup_s"].fillna(servers["held_s"]) * servers["gpus"]).sum() / 60.0
    unready = int(servers["startup_s"].isna().sum())
    never = f" ({unready} of them never became ready)" if unready else ""
    return (
        f"**GPU time.** The {len(servers)} recorded server starts{never} held {gpu}s for "
        f"{servers['gpu_minutes'].sum():.1f} GPU-minutes, {starting:.1f} of them starting (launch to ready); the "
        "rest served the measured points, their warm-ups and calibration runs. Read from the server logs (launch "
        "to the last logged line), so installing vLLM and a machine's idle time between runs are not in it."
    )


def describe_remaining_time(table: pd.DataFrame) -> str:
    """One Markdown paragraph on a ``remaining_time`` table: that nothing is left when it is empty, else how many
    points are left on how many servers and, per server, its points (and how many of them only stalled so far), its
    estimated start-up and points' time and the ``--time-limit-s`` to give it (or that its shape or a load was never
    measured, so it has no estimate)."""
    if table.empty:
        return "Every planned point is recorded in a run that did not stall: nothing is left to measure."
    servers = []
    for row in table.itertuples():
        if math.isnan(row.startup_s):
            estimate = "no estimate (no server of its shape ever became ready)"
        elif math.isnan(row.time_limit_s):
            estimate = f"no estimate ({row.unknown} of its loads never ran on its shape)"
        else:
            estimate = (
                f"start-up ≈ {row.startup_s:.0f} s, points ≈ {row.points_s:.0f} s, "
                f"`--time-limit-s {row.time_limit_s:.0f}`"
            )
        again = f" ({row.stalled} recorded only in runs that stalled)" if row.stalled else ""
        servers.append(
            f"`{row.engine_label}` ({row.model_shape}): {row.points} point{'s' if row.points != 1 else ''}"
            f"{again}, {estimate}"
        )
    total = int(table["points"].sum())
    return (
        f"{total} planned point{'s are' if total != 1 else ' is'} left on {len(table)} "
        f"server{'s' if len(table) != 1 else ''}, each started once: " + "; ".join(servers) + "."
    )


def stall_note(table: pd.DataFrame) -> str:
    """One Markdown paragraph naming the stalled points of a ``stall_table``, or '' when none stalled."""
    stalled = table[table.stall_share >= STALL_SHARE]
    if stalled.empty:
        return ""
    clean = {raw.split_point_id(pid)[0] for pid in table.loc[table.stall_share < STALL_SHARE, "point_id"]}
    items = []
    for row in stalled.itertuples(index=False):
        load = describe_load(row.request_rate_qps, row.concurrency)
        point, repeat = raw.split_point_id(row.point_id)
        again = ", measured again without a stall" if point in clean else ""
        load += f", repeat {repeat}" if repeat else ""
        share = f"≥ {row.stall_share:.1%} of the requests' time"
        items.append(
            f"{row.engine_label} at {load} ({row.stalled_gaps:,} gaps, the longest "
            f"≤ {row.longest_gap_at_most_s:g} s; {share}{again})"
        )
    points = {raw.split_point_id(pid)[0] for pid in stalled["point_id"]}
    redone = len(points & clean)
    waiting = len(points) - redone
    if not redone:
        outcome = "they are shown, and left out of the verdict, until they are measured again"
    else:
        if waiting:
            again = f"{redone} of their {len(points)} points were measured again without a stall and count"
        elif redone == 1:
            again = "the point was measured again without a stall and counts"
        else:
            again = f"all {redone} of their points were measured again without a stall and count"
        rest = f", {waiting} {'waits' if waiting == 1 else 'wait'} for one" if waiting else ""
        outcome = f"they are shown and left out of the verdict; {again} through that run{rest}"
    return (
        f"**Stalls.** In {len(stalled)} of {len(table)} measured runs the engine emitted nothing for seconds while "
        f"requests ran (output-token gaps longer than {STALL_S:g} s in vLLM's inter-token latency histogram, "
        f"{STALL_SHARE:.0%} of the requests' time or more): {'; '.join(items)}. Their throughput and latencies "
        f"understate the engine: {outcome}."
    )


def jit_note(table: pd.DataFrame) -> str:
    """One Markdown paragraph on a ``jit_table``: how many of the logged compilations fell inside measured runs,
    in which runs and whether those stalled, and what the logs cannot show; '' when there are no events."""
    if table.empty:
        return ""
    inside = table[table["point_id"].notna()]
    logged = f"vLLM logged {len(table)} kernel JIT compilation{'s' if len(table) > 1 else ''} during inference"
    if inside.empty:
        found = (
            f"{logged}, none inside a measured run (all during warm-up, calibration, a run measured again, or "
            "between points)."
        )
    else:
        items = []
        for _, run in inside.groupby("point_id", sort=False):
            kernels = ", ".join(f"`{event.kernel}` at {event.at:%H:%M:%S} UTC" for event in run.itertuples())
            outcome = "stalled" if run["stalled"].iloc[0] else "did not stall"
            items.append(f"{run['engine_label'].iloc[0]} at {run['load'].iloc[0]} ({kernels}; the run {outcome})")
        found = f"{logged}, {len(inside)} inside {'a measured run' if len(inside) == 1 else 'measured runs'}: "
        found += f"{'; '.join(items)}."
        if len(inside) < len(table):
            found += (
                f" The other {len(table) - len(inside)} came outside the recorded runs (warm-up, calibration, "
                "a run measured again, or between points)."
            )
    return (
        f"**Kernel compilations.** {found} vLLM logs only the first compilation of each kernel name per server "
        "process (unless its observability setting `jit_monitor_verbose` is on), so later compilations of the same "
        "kernels, for other shapes, are invisible in these logs: a run without one logged may still have compiled."
    )


def describe_repeat_spread(spread: pd.DataFrame, unit: str = "output tok/s") -> str:
    """One Markdown paragraph on ``repeat_spread``: each load run more than once, its values and how far apart they
    are, and what that means for a comparison (they enter it as their median); empty when nothing was repeated."""
    if spread.empty:
        return ""
    loads = []
    for row in spread.itertuples():
        lengths = f"{int(row.input_len):,} in / {int(row.output_len):,} out"
        values = ", ".join(f"{v:.1f}" for v in row.values[:-1]) + f" and {row.values[-1]:.1f}"
        loads.append(
            f"{row.engine_label} at {load_label(row.concurrency, row.request_rate_qps)} ({lengths}) "
            f"ran {row.runs} times without a stall: {values} {unit}, {row.spread_pct:.1f} % apart"
        )
    return (
        "**Repeated runs.** " + "; ".join(loads) + ". Comparisons at such a load use the median of the runs. "
        "Their spread is how far the same engine moved from one run to the next: a gain difference smaller than it "
        "is not a measured difference between configs."
    )


def quick_check_time(case: str, data: Path | None = None) -> str:
    """How long the case's ``quick`` part takes on a machine without compile caches (``part_time``)."""
    return part_time(case, QUICK_PART, data)


def part_time(case: str, part: str, data: Path | None = None) -> str:
    """How long one part of a case takes on a machine without compile caches (``fresh_time``), per GPU whose recorded
    runs time all of it (``fresh_time_per_gpu``), each named as its rows name it: 'about 14 minutes (14 GPU-minutes,
    start-ups included) on NVIDIA H200 (1 GPU per server), vLLM 0.26.0'; clauses joined by '; '. Where no one GPU's
    runs time every point, one estimate from the runs of every GPU, naming them all."""

    try:
        plan, _ = quiet_plan(case, **part_overrides(case, part))
    except ConfigError as error:
        return f"no estimate ({error})"
    measured = load_runs(plan.case, data)
    servers = server_time(case, data)
    with warnings.catch_warnings():  # a start-up's advisories say nothing about its time
        warnings.simplefilter("ignore", SpeculativeConfigWarning)
        tables = fresh_time_per_gpu(plan, measured, servers)
        sources = {gpu: measured[measured["gpu_name"] == gpu] for gpu in tables}
        if not tables:  # no one GPU's runs time the whole part: every GPU's together
            tables, sources = {"": fresh_time(plan, measured, servers)}, {"": measured}
            if tables[""]["total_s"].isna().any():
                return "no estimate yet (a shape or load of it was never measured)"
    return "; ".join(
        f"about {table['total_s'].sum() / 60:.0f} minutes ({table['gpu_minutes'].sum():.0f} GPU-minutes, "
        f"start-ups included) on {hardware_in_words(sources[gpu])}"
        for gpu, table in tables.items()
    )
