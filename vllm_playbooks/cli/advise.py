"""``vllm-playbooks advise``: the tuning advisor, the config of most goodput under an SLO measured within a GPU-time
budget, on a recorded grid (replay) or on this machine's GPU (live); ``--evaluate`` and ``--sensitivity`` score it
against every recorded grid."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any, Self

from vllm_playbooks.advisor.evaluate import (
    BUDGET_SHARE,
    BUDGET_SHARES,
    CHECK_FILE,
    SENSITIVITY_FILE,
    advise_replay,
    write_evaluation,
    write_sensitivity,
)
from vllm_playbooks.advisor.goodput import Slo, workload_text
from vllm_playbooks.advisor.grids import GridFilter
from vllm_playbooks.advisor.live import search_live
from vllm_playbooks.advisor.scenarios import scenario_text
from vllm_playbooks.advisor.search import BASELINE_UNMEASURED, Advice
from vllm_playbooks.advisor.trace import read_trace
from vllm_playbooks.advisor.versus import TARGETS, comparison, targets
from vllm_playbooks.book.advisor_page import trace_text
from vllm_playbooks.cases.results import live_summary
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.results import store


@dataclass(frozen=True)
class Args:
    """What to do (``evaluate``, ``sensitivity``, or search the grid of ``case`` in ``mode`` replay or live), the
    grid's filters, the SLO, the budget in GPU-minutes, and for a live search the GPU group and whether recorded rows
    count."""

    evaluate: bool = False
    sensitivity: bool = False
    case: str | None = None
    mode: str = "replay"
    hardware: str | None = None
    model_shape: str | None = None
    input_len: int | None = None
    output_len: int | None = None
    load: str | None = None
    acceptance: str | None = None
    max_concurrency: float | None = None
    slo_tpot_p99_ms: float | None = None
    slo_ttft_p99_ms: float | None = None
    budget_gpu_min: float | None = None
    gpus: str | None = None
    ignore_recorded: bool = False

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """``vllm-playbooks advise``'s arguments."""
        parser.add_argument(
            "--evaluate",
            action="store_true",
            help="score the advisor and the searches tuners run today (exhaustive sweep, auto_tune.sh, GuideLLM's "
            f"sweep) against every recorded H200 grid and write data/{CHECK_FILE}",
        )
        parser.add_argument(
            "--sensitivity",
            action="store_true",
            help="run the evaluation with each of the search's constants moved by ±50 %% and write "
            f"data/{SENSITIVITY_FILE}",
        )
        parser.add_argument(
            "--case", help="the case whose grid to search (live: a packaged case or your own case file)"
        )
        parser.add_argument(
            "--mode",
            choices=["replay", "live"],
            default="replay",
            help="replay: pay recorded GPU time, no GPU (default); live: measure on this machine's GPU with the "
            "runner, rows recorded as `vllm-playbooks run` records them, the search's trace in "
            "data/runs/<case>/advisor/",
        )
        parser.add_argument("--hardware", help="replay: a recorded hardware key, e.g. nvidia-h200-x1-vllm0.26.0")
        parser.add_argument("--model-shape", help="the model shape, when the case has several")
        parser.add_argument("--input-len", type=int)
        parser.add_argument("--output-len", type=int)
        parser.add_argument("--load", choices=["concurrency", "rate"], help="closed-loop concurrency or request rates")
        parser.add_argument(
            "--acceptance",
            help="the acceptance scenario, when the case imposes several: its first-position acceptance rate, "
            "e.g. 0.71",
        )
        parser.add_argument("--max-concurrency", type=float, help="your clients: loads above this are not considered")
        parser.add_argument("--slo-tpot-p99-ms", type=float)
        parser.add_argument("--slo-ttft-p99-ms", type=float)
        parser.add_argument(
            "--budget-gpu-min",
            type=float,
            default=None,
            help=f"GPU-minutes to spend (replay default: {BUDGET_SHARE * 100:.0f}%% of the grid's recorded GPU "
            "time; live: required, charged at `vllm-playbooks plan`'s estimates)",
        )
        parser.add_argument(
            "--gpus",
            help="live: the GPU group the servers use, e.g. 0, or 0,1 for TP=2 (default: the GPUs this process sees)",
        )
        parser.add_argument(
            "--ignore-recorded",
            action="store_true",
            help="live: measure every run the search pays for, even one recorded on this hardware before "
            "(a search from scratch; its runs are added as further repeats)",
        )

    @classmethod
    def from_cli_args(cls, namespace: argparse.Namespace) -> Self:
        """The parsed arguments as typed values."""
        return cls(
            evaluate=bool(namespace.evaluate),
            sensitivity=bool(namespace.sensitivity),
            case=namespace.case,
            mode=str(namespace.mode),
            hardware=namespace.hardware,
            model_shape=namespace.model_shape,
            input_len=namespace.input_len,
            output_len=namespace.output_len,
            load=namespace.load,
            acceptance=namespace.acceptance,
            max_concurrency=namespace.max_concurrency,
            slo_tpot_p99_ms=namespace.slo_tpot_p99_ms,
            slo_ttft_p99_ms=namespace.slo_ttft_p99_ms,
            budget_gpu_min=namespace.budget_gpu_min,
            gpus=namespace.gpus,
            ignore_recorded=bool(namespace.ignore_recorded),
        )

    def grid_filter(self) -> GridFilter:
        """The filters that pick the grid searched (``--model-shape`` to ``--max-concurrency``)."""
        return GridFilter(
            model_shape=self.model_shape,
            input_len=self.input_len,
            output_len=self.output_len,
            load_kind=self.load,
            max_concurrency=self.max_concurrency,
            acceptance=self.acceptance,
        )


def advice_text(advice: Advice, key: dict[str, Any], full_gpu_s: float) -> str:
    """The command's answer: the chosen point, the runner-up, the points paid for and the GPU time spent."""
    head = (
        f"{key['case']} on {key['hardware']}, {key['model_shape']}{scenario_text(key['acceptance'])}, "
        f"{workload_text(key)}; SLO {advice.slo.label()}"
    )
    lines = [head]
    for what, point in (("recommended", advice.chosen), ("runner-up", advice.runner_up)):
        if point is None:
            lines.append(f"{what}: none")
            continue
        predicted = next(s.expected_goodput_rps for s in advice.steps if s.point == point["point"] and s.repeat == 0)
        lines.append(
            f"{what}: {point['point']} (speculative {point['speculative']}, k={point['k']}, "
            f"--max-num-seqs {point['max_num_seqs']}): goodput {point['goodput_rps']:.2f} req/s measured over "
            f"{point['runs']} run(s) (the model predicted {predicted:.2f} before measuring it), TPOT p99 "
            f"{point['tpot_p99_ms']:.1f} ms"
        )
    for step in advice.steps:
        lines.append(
            f"  paid {step.number}: {step.point} r{step.repeat} ({step.why}): "
            f"{step.gpu_s / 60:.1f} GPU-min, expected {step.expected_goodput_rps:.2f}, "
            f"measured {step.measured_goodput_rps:.2f} req/s"
        )
    lines.append(
        f"how sure: {advice.sure}"
        + (
            ""
            if math.isnan(advice.lead_pct)
            else f" (measured lead {advice.lead_pct:+.1f} % over the runner-up, noise band {advice.band_pct:.1f} %)"
        )
    )
    if advice.baseline_unmeasured:
        lines.append(f"warning: {BASELINE_UNMEASURED}")
    lines.append(
        f"stopped: {advice.stop_reason}; spent {advice.spent_gpu_s / 60:.1f} of "
        f"{advice.budget_gpu_s / 60:.1f} GPU-min budget ({advice.spent_gpu_s / full_gpu_s:.0%} of the grid's "
        f"{full_gpu_s / 60:.1f})"
    )
    return "\n".join(lines)


def print_evaluation() -> None:
    """``--evaluate``: write the evaluation and print, per budget, each policy's ratios and GPU time, and the
    advisor's targets."""
    table, out = write_evaluation()
    for share in BUDGET_SHARES:
        print(f"budget {share:.0%} of each grid (ratios with ties by noise counted as ties):")
        for line in comparison(table, share).itertuples():
            print(
                f"  {line.policy}: {line.pairs} (grid, SLO) pairs, median ratio {line.median_ratio:.3f}, worst "
                f"{line.worst_ratio:.3f}, median {line.median_gpu_minutes:.1f} GPU-min, {line.no_answer} with "
                "no answer"
            )
    met = targets(table, BUDGET_SHARE)
    print(
        "advisor's targets at the default budget: "
        + ", ".join(f"{name[:-4]} {'met' if met[name] else 'missed'}" for name in met if name.endswith("_met"))
    )
    print(f"written to {out}")


def print_sensitivity() -> None:
    """``--sensitivity``: write the sensitivity table and print each variant's line at the whole-grid budget."""
    table, out = write_sensitivity()
    for line in table[table["budget_share"] == BUDGET_SHARE].itertuples():
        print(
            f"{line.variant}: whole-grid budget, median share {line.median_share:.1%}, lowest ratio "
            f"{line.min_ratio:.3f}, {line.below_min_ratio} pair(s) below {TARGETS['min_ratio']}"
        )
    print(f"written to {out}")


def print_live(args: Args, case: str, slo: Slo) -> None:
    """``--mode live``: the search on this machine's GPU, then its trace in words, the rows it added and its path."""
    if args.hardware is not None:
        raise ConfigError("--hardware picks recorded rows to replay; a live search measures on this machine's GPU")
    if args.budget_gpu_min is None:
        raise ConfigError("a live search needs --budget-gpu-min: the GPU-minutes it may spend")
    search = search_live(
        case,
        slo,
        args.budget_gpu_min * 60.0,
        filters=args.grid_filter(),
        gpus=args.gpus,
        use_recorded=not args.ignore_recorded,
    )
    print(trace_text(read_trace(search.trace)))
    print(live_summary(search.report, store.load_runs(search.case), store.case_dir(search.case)))
    print(f"trace: {search.trace}")


def run(args: Args) -> int:
    """Run ``vllm-playbooks advise``: the evaluation, the sensitivity, or a search (replay or live) whose answer is
    printed."""
    if args.evaluate:
        print_evaluation()
        return 0
    if args.sensitivity:
        print_sensitivity()
        return 0
    if args.case is None:
        raise ConfigError("give --case (with an SLO), --evaluate or --sensitivity")
    slo = Slo(tpot_p99_ms=args.slo_tpot_p99_ms, ttft_p99_ms=args.slo_ttft_p99_ms)
    if args.budget_gpu_min is not None and not args.budget_gpu_min > 0:
        raise ConfigError(f"--budget-gpu-min must be positive, got {args.budget_gpu_min}")
    if args.mode == "live":
        print_live(args, args.case, slo)
        return 0
    if args.gpus is not None or args.ignore_recorded:
        raise ConfigError("--gpus and --ignore-recorded are for --mode live")
    advice, key, full = advise_replay(
        args.case,
        slo,
        None if args.budget_gpu_min is None else args.budget_gpu_min * 60.0,
        hardware=args.hardware,
        filters=args.grid_filter(),
    )
    print(advice_text(advice, key, full))
    return 0
