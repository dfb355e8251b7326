"""``vllm-playbooks plan``: the points of a case still to measure on a GPU and the GPU minutes they take, from the
recorded runs (``run.hardware_plan``)."""

from __future__ import annotations

import argparse
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Self

from vllm_playbooks.book.run_notes import memory_source
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.results.failed_starts import failed_starts, latest_tries
from vllm_playbooks.results.identity import engine_gpus, hardware_key
from vllm_playbooks.run.budget import (
    fresh_time,
    fresh_time_per_gpu,
    gpu_here,
    point_estimates,
    points_within,
    vllm_here,
)
from vllm_playbooks.run.case import hardware_in_words
from vllm_playbooks.run.hardware_plan import (
    PlanInputs,
    cannot_start,
    gpu_memory_gib,
    hardware_plan,
    on_gpu_memory,
    one_after_another_gpu_minutes,
    part_fits,
    plan_inputs,
    rows_of_hardware,
)

if TYPE_CHECKING:
    import pandas as pd

    from vllm_playbooks.run.plan import CasePlan


def _table(table: pd.DataFrame) -> str:
    return table.to_string(index=False, float_format="{:.0f}".format)


class RenamedToGpu(argparse.Action):
    """The old spelling ``--hardware`` of ``--gpu``: refused in one line that names the new one (exit 2), since
    ``--hardware`` elsewhere (``advise``, the recorded rows) names a recorded key, not a GPU model."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        """Stop parsing with ``error: --hardware is now --gpu …``."""
        parser.error(
            f"{option_string} is now --gpu, the GPU model as NVML names it, e.g. --gpu {values!r}; "
            "--hardware names a recorded key (nvidia-h200-x1-vllm0.26.0) in `advise`"
        )


@dataclass(frozen=True)
class Args:
    """The case, one part of it, the GPU model as NVML names it (None: this machine's), the vLLM version, the
    time-limit margin, the data folder, and the two other questions: ``fresh`` (every point, as a machine without
    caches) and ``budget_s`` (the points a new server measures in that many seconds)."""

    case: str
    part: str | None = None
    gpu: str | None = None
    vllm_version: str | None = None
    margin: float = 1.25
    data: Path | None = None
    fresh: bool = False
    budget_s: float | None = None

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """The case, a part of it, the GPU, the margin, the data folder, and a budget in seconds."""
        parser.add_argument("--case", required=True, help="a packaged case's name, or the path of your own case file")
        parser.add_argument("--part", help="one part of the case's grid (its 'parts:'), e.g. 5-long-sweep")
        parser.add_argument(
            "--gpu",
            help='the GPU model as NVML names it, e.g. "NVIDIA H200" (default: this machine\'s first GPU)',
        )
        parser.add_argument("--hardware", action=RenamedToGpu, help=argparse.SUPPRESS)
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

    @classmethod
    def from_cli_args(cls, namespace: argparse.Namespace) -> Self:
        """The parsed arguments; ``ConfigError`` for a budget that is not positive."""
        if namespace.budget_s is not None and not namespace.budget_s > 0:
            raise ConfigError(f"--budget-s must be positive, got {namespace.budget_s:g}")
        return cls(
            case=namespace.case,
            part=namespace.part,
            gpu=namespace.gpu,
            vllm_version=namespace.vllm_version,
            margin=float(namespace.margin),
            data=namespace.data,
            fresh=bool(namespace.fresh),
            budget_s=namespace.budget_s,
        )


def describe_fresh_time(table: pd.DataFrame) -> str:
    """One line on a ``fresh_time`` table: points, servers and the estimated wall minutes and GPU-minutes, or which
    configs have no estimate."""
    unknown = table.loc[table["total_s"].isna(), "engine_label"].tolist()
    if unknown:
        return f"no estimate for {', '.join(unknown)}: its shape or one of its loads was never measured"
    servers = f"{len(table)} server{'s' if len(table) != 1 else ''}"
    return (
        f"{int(table['points'].sum())} points on {servers}: ≈ {table['total_s'].sum() / 60:.0f} min "
        f"wall, {table['gpu_minutes'].sum():.0f} GPU-minutes, start-ups included"
    )


def print_fresh(args: Args, inputs: PlanInputs) -> None:
    """``--fresh``: every point of the plan estimated from the runs recorded on ``args.gpu`` where they time the
    whole plan, else on every GPU (with each GPU's own estimate after it)."""
    per_gpu = fresh_time_per_gpu(inputs.plan, inputs.measured, inputs.servers)
    own = args.gpu in per_gpu  # a GPU whose own runs time the whole plan: its estimate alone
    table = per_gpu[args.gpu] if own else fresh_time(inputs.plan, inputs.measured, inputs.servers)
    source = inputs.measured[inputs.measured["gpu_name"] == args.gpu] if own else inputs.measured
    print(_table(table))
    print(f"{describe_fresh_time(table)}; from the runs recorded on {hardware_in_words(source)}")
    for gpu, gpu_table in per_gpu.items() if not own and len(per_gpu) > 1 else ():
        print(f"from {gpu}'s runs alone: {describe_fresh_time(gpu_table)}")


def print_within_budget(args: Args, inputs: PlanInputs, gpu: str, version: str, budget_s: float) -> None:
    """``--budget-s``: the points left on ``gpu`` that a new server per config measures in ``budget_s`` seconds."""
    here = rows_of_hardware(inputs.plan, inputs.measured, gpu, version)
    points = point_estimates(inputs.plan, inputs.measured, inputs.servers, here)
    table = points_within(points, budget_s, args.margin)
    if points.empty:
        print(f"nothing left to measure on {gpu}")
    elif table.empty:
        print(f"no point left to measure fits in {budget_s:g} s with a server's start-up")
    else:
        print(_table(table))


def describe_hardware_plan(
    table: pd.DataFrame, case: str, gpu_name: str, vllm_version: str, cannot_start: Collection[str] = ()
) -> str:
    """The plan's last lines: runs to measure and recorded on that hardware, and the estimated GPU-minutes of the
    servers still to start, leaving out those of ``cannot_start`` (engine labels the KV calculator refuses there),
    with every start-up as on a machine without compile caches and, where that is less, with the servers run one after
    another on one machine (``one_after_another_gpu_minutes``)."""
    todo, done = int(table["to_measure"].sum()), int(table["recorded"].sum())
    head = (
        f"{case} on {gpu_name} (vLLM {vllm_version}): {todo} run(s) to measure, {done} already recorded for this "
        "hardware."
    )
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
    cached = one_after_another_gpu_minutes(servers)
    estimate = (
        f"about {minutes:.0f} GPU-minutes, {int(servers['starts'].sum())} server start-up(s) included"
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


def print_hardware_plan(args: Args, inputs: PlanInputs, gpu: str, version: str) -> None:
    """What the case (or part) still needs on ``gpu``: the table, its GPU time, whether it fits the GPU's memory and
    the configs whose server did not start there before."""
    plan = inputs.plan
    table = hardware_plan(plan, inputs.measured, inputs.servers, gpu, version, args.margin)
    memory = gpu_memory_gib(gpu, args.data)
    refused = cannot_start(plan, table, memory.gib) if memory else {}
    print(_table(table))
    print(describe_hardware_plan(table, plan.case, gpu, version, refused))
    if memory:
        gib, source = memory.gib, memory_source(memory)
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


def run(args: Args) -> int:
    """Print what a case (or one part of it) still needs on a hardware, recorded runs counted, and its GPU time;
    without a GPU here and no ``--gpu``, one line saying so (exit 2). ``--fresh`` needs no hardware: it
    estimates every point of the plan from the runs recorded on any."""
    inputs = plan_inputs(args.case, args.part, args.data)
    if inputs.note:
        print(f"{args.part}: {inputs.note}")
    if args.fresh:
        print_fresh(args, inputs)
        return 0
    gpu = args.gpu or gpu_here()
    if gpu is None:
        print('plan: no GPU found on this machine (NVML); name the GPU to plan for, e.g. --gpu "NVIDIA H200"')
        return 2
    memory = gpu_memory_gib(gpu, args.data)
    if memory is not None and inputs.plan.pairing is not None:  # paired side by side or by restart on that GPU
        inputs = on_gpu_memory(inputs, args.case, args.part, memory.gib)
    version = args.vllm_version or vllm_here()
    if args.budget_s is not None:
        print_within_budget(args, inputs, gpu, version, args.budget_s)
    else:
        print_hardware_plan(args, inputs, gpu, version)
    return 0
