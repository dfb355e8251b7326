"""``vllm-playbooks run``: measure a case's grid on this machine's GPUs, one server per GPU group (``run.parallel``),
or on a Ray cluster, one task per engine config (``run.ray_grid``); resumable and time-limited."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Self, TypeVar

from vllm_playbooks.errors import PlaybookError
from vllm_playbooks.run.parallel import ParallelReport, run_parallel
from vllm_playbooks.run.plan import overrides_for
from vllm_playbooks.run.ray_grid import RayReport, run_on_ray

#: The exit status when ``--time-limit-s`` stopped a worker (as coreutils' ``timeout``).
TIMED_OUT_EXIT = 124
#: What a worker, and the parallel runner, print when interrupted (Ctrl-C, or ``timeout -s INT``) instead of a trace.
INTERRUPTED = "interrupted: the servers were stopped and the points finished so far are recorded"


Number = TypeVar("Number", int, float)


def positive(kind: type[Number]) -> Callable[[str], Number]:
    """An argument type: a number of ``kind`` above 0 (NaN and infinity are refused)."""

    def parse(text: str) -> Number:
        value = kind(text)
        if not value > 0 or math.isinf(value):
            raise argparse.ArgumentTypeError(f"must be a number above 0, got {text!r}")
        return value

    parse.__name__ = kind.__name__
    return parse


@dataclass(frozen=True)
class Args:
    """The case, where it runs (this machine's GPU groups ``gpus``, or the Ray cluster at ``ray``: one of the two),
    one part of its grid, the engine configs and loads chosen, repeats, a time limit and whether the configs are
    measured pair by pair (None: the case's or part's choice)."""

    case: str
    gpus: tuple[str, ...] | None = None
    ray: str | None = None
    part: str | None = None
    engines: tuple[str, ...] | None = None
    concurrency: tuple[int, ...] | None = None
    repeats: int | None = None
    time_limit_s: float | None = None
    paired: bool | None = None

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """The case, the GPU groups, what part of the grid, repeats and a time limit."""
        parser.add_argument("--case", required=True, help="a packaged case's name, or the path of your own case file")
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--gpus", nargs="+", help="GPU groups, e.g. 0 1, or 0,1 2,3 for TP=2")
        where.add_argument(
            "--ray",
            metavar="ADDRESS",
            help="measure on a Ray cluster instead (its head's HOST:PORT, or auto): one task per engine config",
        )
        parser.add_argument(
            "--part",
            default=None,
            help="one part of the case's grid (its 'parts:'), e.g. 1-verdict; --engines and "
            "--concurrency, when given, replace the part's",
        )
        parser.add_argument(
            "--engines",
            nargs="+",
            default=None,
            help="engine labels, dealt over the GPU groups and run in this order (default: every one of "
            "the case, in its file's order)",
        )
        parser.add_argument("--concurrency", nargs="+", type=positive(int), default=None)
        parser.add_argument(
            "--repeats",
            type=positive(int),
            default=None,
            help="runs per point in all (default: the case's); the recorded ones count, so 2 adds a "
            "second run where one is recorded",
        )
        parser.add_argument(
            "--time-limit-s",
            type=positive(float),
            default=None,
            help="stop the workers after this many seconds (exit 124), keeping what they finished",
        )
        parser.add_argument(
            "--paired",
            action="store_true",
            default=None,
            help="measure the configs in turn on one GPU group (both servers up where they fit, else by "
            "restart), so the comparison is made pair by pair (default: the part's choice)",
        )

    @classmethod
    def from_cli_args(cls, namespace: argparse.Namespace) -> Self:
        """The parsed arguments as typed values."""
        return cls(
            case=namespace.case,
            gpus=None if namespace.gpus is None else tuple(namespace.gpus),
            ray=namespace.ray,
            part=namespace.part,
            engines=None if namespace.engines is None else tuple(namespace.engines),
            concurrency=None if namespace.concurrency is None else tuple(namespace.concurrency),
            repeats=namespace.repeats,
            time_limit_s=namespace.time_limit_s,
            paired=namespace.paired,
        )


def run(args: Args) -> int:
    """Run the case over the GPU groups (``run.parallel.run_parallel``) or the Ray cluster (``run.ray_grid``) and
    print what each group or task ran and the rows added; exit 2 on an error (one line), 124 when the time limit
    stopped the run, 130 on Ctrl-C."""
    report: ParallelReport | RayReport | None = None
    try:
        if args.ray is not None:
            lists = {"engines": args.engines, "concurrency": args.concurrency}
            chosen = {name: None if value is None else list(value) for name, value in lists.items()}
            chosen["repeats"] = args.repeats
            overrides = overrides_for(args.case, args.part, paired=args.paired, **chosen)
            report = run_on_ray(args.case, args.ray, time_limit_s=args.time_limit_s, **overrides)
            print("\n".join(report.lines()))
            report.raise_for_failures()
            return 0
        assert args.gpus is not None  # the parser asks for --gpus or --ray
        report = run_parallel(
            args.case,
            args.gpus,
            part=args.part,
            engines=args.engines,
            concurrency=args.concurrency,
            repeats=args.repeats,
            paired=args.paired,
            time_limit_s=args.time_limit_s,
        )
        for group, labels in report.assignment.items():
            status, log = report.returncodes.get(group), report.logs[group]
            print(f"GPUs {group}: {', '.join(labels)} → exit {status}, log {log}")
        print(f"rows added: {len(report.added)}")
        report.raise_for_failures()
    except PlaybookError as error:
        print("error: " + " ".join(str(error).splitlines()), file=sys.stderr)
        return TIMED_OUT_EXIT if report is not None and report.timed_out else 2
    except KeyboardInterrupt:
        print(f"{INTERRUPTED}; the points every worker finished were merged", file=sys.stderr)
        return 130
    return 0
