"""What a case still needs on one hardware: ``vllm-playbooks plan``.

For a GPU model and vLLM version, the runs of a case (or one part of it) that its recorded rows lack, repeats
counted, one line per engine config with the GPU-minutes ``run.budget`` estimates; an engine the KV calculator says
cannot start on that GPU (its weights, or one full-length sequence, do not fit) is named with the reason and left out
of the estimate, and one whose server did not start there before is named with the error its log gave. ``--fresh``
estimates every point as a machine without compile caches measures it; ``--budget-s`` lists what a server started
now can measure in that many seconds. ``quick_check_memory`` gives a case page the memory per GPU its quick check's
servers need to start.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

from vllm_playbooks.config.capacity import budget_is_modelled, refused_engines
from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.engine.gpu_sampler import gpu_at_hand
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.hardware import datasheet_gpu
from vllm_playbooks.results.conditions import with_run_conditions
from vllm_playbooks.results.failed_starts import failed_starts, latest_tries
from vllm_playbooks.results.identity import engine_gpus, hardware_key
from vllm_playbooks.results.server_logs import logged_gpu_memory
from vllm_playbooks.results.stalls import mark_stalled
from vllm_playbooks.results.store import load_runs
from vllm_playbooks.run.budget import (
    describe_fresh_time,
    fresh_time,
    fresh_time_per_gpu,
    gpu_here,
    point_estimates,
    points_within,
    remaining_time,
    runs_at_load,
    server_time,
    startups_by_shape,
    vllm_here,
)
from vllm_playbooks.run.case import hardware_in_words
from vllm_playbooks.run.plan import QUICK_PART, CasePlan, load_part, load_plan, part_note, part_overrides, quiet_plan

if TYPE_CHECKING:
    import pandas as pd


def rows_of_hardware(plan: CasePlan, measured: pd.DataFrame, gpu_name: str, vllm_version: str) -> pd.DataFrame:
    """The rows of ``measured`` recorded on ``gpu_name`` with ``vllm_version``, each engine config of ``plan`` with
    the GPUs it uses (``hardware_key``): what a live run on that hardware would skip. A paired plan skips only runs
    measured in a paired session (``pair_session``, ``results.conditions``; rows without the column count as none)."""
    keys = {engine.label: hardware_key(gpu_name, engine_gpus(engine), vllm_version) for engine in plan.engines}
    if measured.empty:
        return measured
    if plan.pairing is not None:
        measured = measured[measured["pair_session"].notna()] if "pair_session" in measured else measured.iloc[:0]
    return measured[measured["hardware"] == measured["engine_label"].map(keys)]


def hardware_plan(
    plan: CasePlan,
    measured: pd.DataFrame,
    servers: pd.DataFrame,
    gpu_name: str,
    vllm_version: str,
    margin: float = 1.25,
) -> pd.DataFrame:
    """What ``plan`` still needs on ``gpu_name`` with ``vllm_version``: one line per engine config with its model
    shape, the runs recorded there (``recorded``), the runs to measure (``to_measure``, repeats counted) and their
    loads, the GPUs a server uses, ``remaining_time``'s estimates (from the runs recorded on any hardware) with
    ``gpu_minutes``, start-up included (NaN when unknown), and ``cached_startup_s``, the shortest start-up recorded for
    its shape (a server that finds the compile caches of one before it; ``startups_by_shape``)."""
    import pandas as pd

    here = rows_of_hardware(plan, measured, gpu_name, vllm_version)
    points = point_estimates(plan, measured, servers, here)
    times = remaining_time(plan, measured, servers, margin, here).set_index("engine_label")
    shapes, _, shortest_startup = startups_by_shape(plan, measured, servers)
    records = []
    for engine in plan.engines:
        todo = points[points["engine_label"] == engine.label]
        mine = here[here["engine_label"] == engine.label] if len(here) else here
        recorded = sum(int(runs_at_load(mine, load).sum()) for load in plan.loads_for(engine)) if len(mine) else 0
        loads = pd.Series([_load_name(r) for r in todo.itertuples()]).value_counts(sort=False)
        row = times.loc[engine.label] if engine.label in times.index else None
        gpus = engine_gpus(engine)
        records.append(
            {
                "engine_label": engine.label,
                "model_shape": shapes[engine.label],
                "gpus": gpus,
                "recorded": recorded,
                "to_measure": len(todo),
                "loads": ", ".join(f"{name} ×{n}" if n > 1 else name for name, n in loads.items()) or "—",
                "startup_s": row["startup_s"] if row is not None else 0.0,
                "cached_startup_s": float(shortest_startup.get(shapes[engine.label], math.nan)),
                "points_s": row["points_s"] if row is not None else 0.0,
                "time_limit_s": row["time_limit_s"] if row is not None else 0.0,
                "gpu_minutes": gpus * (row["startup_s"] + row["points_s"]) / 60.0 if row is not None else 0.0,
            }
        )
    return pd.DataFrame(records)


def _load_name(row: object) -> str:
    """A run's load in a plan line: ``c16``, ``qps4``, with its lengths (``in512-out128-c16``)."""
    concurrency, rate = getattr(row, "concurrency"), getattr(row, "request_rate_qps")
    level = f"qps{rate:g}" if rate is not None and rate == rate else f"c{int(concurrency)}"
    return f"in{getattr(row, 'input_len')}-out{getattr(row, 'output_len')}-{level}"


def describe_hardware_plan(
    table: pd.DataFrame, case: str, gpu_name: str, vllm_version: str, cannot_start: Collection[str] = ()
) -> str:
    """The plan's last lines: runs to measure and recorded on that hardware, and the estimated GPU-minutes of the
    servers still to start, leaving out those of ``cannot_start`` (engine labels the KV calculator refuses there),
    with every start-up as on a machine without compile caches and, where that is less, with the servers run one after
    another on one machine (``_one_after_another_gpu_minutes``)."""
    todo, done = int(table["to_measure"].sum()), int(table["recorded"].sum())
    head = f"{case} on {gpu_name} (vLLM {vllm_version}): {todo} run(s) to measure, {done} already recorded for this hardware."
    if not todo:
        return f"{head}\nNothing left to measure on this hardware."
    servers = table[(table["to_measure"] > 0) & ~table["engine_label"].isin(list(cannot_start))]
    left_out = [label for label in table.loc[table["to_measure"] > 0, "engine_label"] if label in cannot_start]
    if servers.empty:
        return f"{head}\nNone of them can run here: {', '.join(left_out)} cannot start on this GPU (see below)."
    unknown = servers["gpu_minutes"].isna().sum()
    minutes = servers["gpu_minutes"].sum()
    if unknown == len(servers):
        return f"{head}\nNo estimate: the shape or load of every server left to start never ran."
    cached = _one_after_another_gpu_minutes(servers)
    estimate = (
        f"about {minutes:.0f} GPU-minutes, {len(servers)} server start-up(s) included"
        + (f"; no estimate for {unknown} server(s) whose shape or load never ran" if unknown else "")
        + (f"; left out: {', '.join(left_out)}, which cannot start on this GPU (see below)" if left_out else "")
    )
    warm = (
        f" One after another on one machine, where each later server of a shape finds the compile caches of the "
        f"one before and starts in the shortest time recorded for its shape: about {cached:.0f} GPU-minutes."
        if not unknown and round(cached) < round(minutes)
        else ""
    )
    return f"{head}\nEstimated: {estimate} (times recorded on any GPU; a slower GPU takes longer).{warm}"


def _one_after_another_gpu_minutes(servers: pd.DataFrame) -> float:
    """The GPU-minutes of ``servers`` (``hardware_plan`` lines, in the plan's order, as the runner starts them) on one
    machine: the first server of each model shape with its start-up as estimated (a machine without compile caches),
    each later one with the shortest start-up recorded for its shape."""
    seen: set[str] = set()
    total = 0.0
    for row in servers.itertuples():
        startup = row.cached_startup_s if row.model_shape in seen else row.startup_s
        seen.add(row.model_shape)
        total += row.gpus * (startup + row.points_s) / 60.0
    return total


def gpu_memory_gib(gpu_name: str, data: Path | None = None) -> tuple[float, str] | None:
    """The memory (GiB, to 0.1) of one GPU called ``gpu_name`` and where the figure comes from: this machine's GPU
    (NVML) when it is one, else what vLLM logged at a recorded start-up on one (``server_logs.logged_gpu_memory``),
    else the datasheet's figure (``data/reference/hardware.csv``) read as GiB. That is an upper bound, as HBM comes in
    binary sizes and a GPU shows a little less than its nominal size, so an engine that ``cannot_start`` refuses on it
    cannot start there. None for a GPU none of them knows."""
    here = gpu_at_hand(os.environ.get("CUDA_VISIBLE_DEVICES"))
    if here is not None and here.name == gpu_name:
        return round(here.memory_gib, 1), "this machine's GPU"
    logged = logged_gpu_memory(gpu_name, data)
    if logged is not None:
        return round(logged, 1), "vLLM's log of a recorded start-up on it"
    try:
        sheet = datasheet_gpu(gpu_name)
    except ConfigError:
        return None
    return sheet.memory_gb, f"the {sheet.name} datasheet"


def cannot_start(plan: CasePlan, table: pd.DataFrame, memory_gib: float) -> dict[str, str]:
    """The engines of ``plan`` that ``table`` (``hardware_plan``) still has to measure and whose weights, activations
    and CUDA graphs, or one full-length sequence, the KV calculator (``config.capacity.check_fits``) says cannot fit a
    GPU of ``memory_gib``, each with the calculator's reason: a live run refuses them before any GPU time. Engines
    whose memory the calculator does not model (``budget_is_modelled``) are not judged."""
    todo = set(table.loc[table["to_measure"] > 0, "engine_label"])
    return refused_engines((engine for engine in plan.engines if engine.label in todo), memory_gib)


def engine_memory_gib(engine: EngineConfig) -> float | None:
    """The least memory per GPU (GiB, rounded up to 0.1) with which the KV calculator (``check_fits``) lets ``engine``
    start: its weights, activations and CUDA graphs within its ``gpu_memory_utilization``, and a KV cache of at least
    one full-length sequence. None when the calculator does not model it (``budget_is_modelled``)."""
    if not budget_is_modelled(engine):
        return None
    low, high = 0.0, 4096.0  # GiB: refused at low, started at high
    while high - low > 0.05:
        middle = (low + high) / 2
        low, high = (middle, high) if refused_engines([engine], middle) else (low, middle)
    return math.ceil(high * 10) / 10


def least_gpu_memory_gib(plan: CasePlan) -> float | None:
    """The least memory per GPU (GiB, rounded up to 0.1) with which the KV calculator lets every engine of ``plan``
    start (``engine_memory_gib``); None when the calculator models no engine of it (``budget_is_modelled``)."""
    needs = [need for engine in plan.engines if (need := engine_memory_gib(engine)) is not None]
    return max(needs) if needs else None


def part_fits(plan: CasePlan, memory_gib: float) -> pd.DataFrame:
    """Whether each engine config of ``plan`` starts on GPUs of ``memory_gib`` each, recorded rows or not: its model
    shape, the GPUs it uses, the memory per GPU it needs (``engine_memory_gib``), ``fits`` (None where the calculator
    does not model it) and ``why_not``, the KV calculator's reason where it does not fit."""
    import pandas as pd

    refused = refused_engines(plan.engines, memory_gib)
    records = []
    for engine in plan.engines:
        needs = engine_memory_gib(engine)
        records.append(
            {
                "engine_label": engine.label,
                "model_shape": Path(engine.model).name,
                "gpus": engine_gpus(engine),
                "needs_gib": needs,
                "fits": None if needs is None else engine.label not in refused,
                "why_not": refused.get(
                    engine.label, "" if needs is not None else "memory not modelled for this config"
                ),
            }
        )
    return pd.DataFrame(records)


def describe_part_fits(
    fits: pd.DataFrame, part: str, gpu_name: str, memory_gib: float, source: str, said: Collection[str] = ()
) -> list[str]:
    """The plan's lines on whether a part (or a case) fits ``gpu_name``: one summary, then one line per engine config
    with the memory per GPU it needs, and why not where it does not fit (unless ``said`` names it: a line above
    gave the reason)."""
    counted = fits[fits["fits"].notna()]
    several = counted[counted["gpus"] > 1]
    where = f"{gpu_name} ({memory_gib:g} GiB, from {source})"
    if counted.empty:
        head = f"{part} on {where}: the KV calculator models none of its configs, so it cannot say whether they fit."
    elif counted["fits"].astype(bool).all():
        head = (
            f"{part} fits {where}: every config starts with at most {counted['needs_gib'].max():.1f} GiB per GPU"
            + (
                f" ({', '.join(several['engine_label'])} on {int(several['gpus'].max())} GPUs each)"
                if len(several)
                else " on one GPU"
            )
            + "."
        )
    else:
        head = (
            f"{part} does not fit {where}: "
            f"{', '.join(counted.loc[~counted['fits'].astype(bool), 'engine_label'])} cannot start there."
        )
    lines = [head]
    for row in fits.itertuples():
        need = (
            "memory not modelled"
            if row.needs_gib is None or row.needs_gib != row.needs_gib
            else f"needs {row.needs_gib:.1f} GiB per GPU on {row.gpus} GPU(s)"
        )
        verdict = "fits" if row.fits is True else "does not fit" if row.fits is False else "not judged"
        lines.append(
            f"  {row.engine_label} ({row.model_shape}): {verdict}, {need}"
            + (
                "; why not: see above"
                if row.engine_label in said
                else f"; why not: {row.why_not}"
                if row.fits is False
                else ""
            )
        )
    return lines


def quick_check_memory(case: str) -> str:
    """The memory per GPU that the servers of a case's quick check need to start, as the KV calculator reckons it
    (``least_gpu_memory_gib``), for a page: '75.6 GiB'; 'an unknown amount (<why>)' where the case has no quick
    check or the calculator models none of its engines."""
    try:
        plan, _ = quiet_plan(case, **part_overrides(case, QUICK_PART))
    except ConfigError as error:
        return f"an unknown amount ({error})"
    least = least_gpu_memory_gib(plan)
    if least is None:
        return "an unknown amount (the KV calculator models none of its configs)"
    return f"{least:.1f} GiB"


def failed_before(
    plan: CasePlan, table: pd.DataFrame, failed: pd.DataFrame, gpu_name: str, vllm_version: str
) -> list[str]:
    """One line per engine config of ``plan`` that ``table`` (``hardware_plan``) still has to measure and whose server
    did not start on that hardware before (``failed``: ``results.failed_starts.failed_starts``, the latest try): its
    error and the memory its log counted, so that no GPU time goes to a start-up that fails the same way."""
    import pandas as pd

    tries = latest_tries(failed).set_index(["hardware", "config_id"])
    lines = []
    for engine in plan.engines:
        todo = table.loc[table["engine_label"] == engine.label, "to_measure"]
        key = (hardware_key(gpu_name, engine_gpus(engine), vllm_version), engine.config_id())
        if todo.empty or not int(todo.iloc[0]) or key not in tries.index:
            continue
        latest = tries.loc[key]
        memory = [
            f"{name} {latest[column]:.2f} GiB"
            for name, column in [
                ("CUDA graphs estimated at", "cudagraph_estimate_gib"),
                ("KV-cache memory left", "available_kv_gib"),
            ]
            if pd.notna(latest[column])
        ]
        if pd.notna(latest["gpu_memory_utilization"]):
            memory.append(f"--gpu-memory-utilization {latest['gpu_memory_utilization']:g}")
        lines.append(
            f"note: {engine.label} did not start on this hardware before: "
            f"{latest['error'] or 'no error logged'} ({'; '.join([*memory, 'log ' + latest['log']])}); it is "
            "likely to fail the same way unless its memory settings change"
        )
    return lines


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """The case, a part of it, the hardware, the margin, the data folder, and a budget in seconds."""
    parser.add_argument("--case", required=True, help="a packaged case's name, or the path of your own case file")
    parser.add_argument("--part", help="one part of the case's grid (its 'parts:'), e.g. 5-long-sweep")
    parser.add_argument(
        "--hardware", help='the GPU model as NVML names it, e.g. "NVIDIA H200" (default: this machine\'s first GPU)'
    )
    parser.add_argument("--vllm-version", help="the vLLM version (default: the installed one, else the book's)")
    parser.add_argument("--margin", type=float, default=1.25, help="time_limit_s = margin × the estimate")
    parser.add_argument("--data", type=Path, help="the data folder (default: the book's data/)")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="instead, estimate every point of the plan (or part), recorded or not, as a machine "
        "without compile caches measures it: what a quick check costs on your GPU",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        help="instead, list the points that a new server per config can measure in this many seconds, "
        "shortest first (the order to run them in)",
    )


def plan_main(args: argparse.Namespace) -> int:
    """Print what a case (or one part of it) still needs on a hardware, recorded runs counted, and its GPU time;
    without a GPU here and no ``--hardware``, one line saying so (exit 2). ``--fresh`` needs no hardware: it
    estimates every point of the plan from the runs recorded on any."""
    if args.budget_s is not None and not args.budget_s > 0:
        raise ConfigError(f"--budget-s must be positive, got {args.budget_s:g}")
    plan = load_part(args.case, args.part) if args.part else load_plan(args.case)
    measured = mark_stalled(load_runs(plan.case, args.data), args.data)
    if plan.pairing is not None and not measured.empty:
        measured = with_run_conditions(measured, args.data, gpu_samples=False)
    servers = server_time(args.case, args.data)
    note = part_note(args.case, args.part) if args.part else None
    if note:
        print(f"{args.part}: {note}")
    if args.fresh:
        per_gpu = fresh_time_per_gpu(plan, measured, servers)
        own = args.hardware in per_gpu  # a GPU whose own runs time the whole plan: its estimate alone
        table = per_gpu[args.hardware] if own else fresh_time(plan, measured, servers)
        source = measured[measured["gpu_name"] == args.hardware] if own else measured
        print(table.to_string(index=False, float_format="{:.0f}".format))
        print(f"{describe_fresh_time(table)}; from the runs recorded on {hardware_in_words(source)}")
        for gpu, gpu_table in per_gpu.items() if not own and len(per_gpu) > 1 else ():
            print(f"from {gpu}'s runs alone: {describe_fresh_time(gpu_table)}")
        return 0
    gpu = args.hardware or gpu_here()
    if gpu is None:
        print('plan: no GPU found on this machine (NVML); name the hardware to plan for, e.g. --hardware "NVIDIA H200"')
        return 2
    version = args.vllm_version or vllm_here()
    if args.budget_s is not None:
        here = rows_of_hardware(plan, measured, gpu, version)
        points = point_estimates(plan, measured, servers, here)
        table = points_within(points, args.budget_s, args.margin)
        if points.empty:
            print(f"nothing left to measure on {gpu}")
        elif table.empty:
            print(f"no point left to measure fits in {args.budget_s:g} s with a server's start-up")
        else:
            print(table.to_string(index=False, float_format="{:.0f}".format))
        return 0
    table = hardware_plan(plan, measured, servers, gpu, version, args.margin)
    memory = gpu_memory_gib(gpu, args.data)
    refused = cannot_start(plan, table, memory[0]) if memory else {}
    print(table.to_string(index=False, float_format="{:.0f}".format))
    print(describe_hardware_plan(table, plan.case, gpu, version, refused))
    if memory:
        gib, source = memory
        for label, reason in refused.items():
            print(f"note: {label} cannot start on {gpu} ({gib:g} GiB, from {source}): {reason}")
        print("\n".join(describe_part_fits(part_fits(plan, gib), args.part or plan.case, gpu, gib, source, refused)))
    else:
        print(
            f"{args.part or plan.case}: the memory of {gpu} is unknown (no GPU of that name here, in a recorded "
            "start-up or in data/reference/hardware.csv), so whether it fits is not judged"
        )
    for line in failed_before(plan, table, failed_starts(plan.case, args.data), gpu, version):
        print(line)
    return 0
