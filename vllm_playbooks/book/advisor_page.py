"""What the advisor page shows of a case's live searches (``advisor.trace``), and what ``vllm-playbooks advise --mode
live`` prints of one: the search in words, then its runs paid for."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from vllm_playbooks.advisor.goodput import workload_text
from vllm_playbooks.advisor.scenarios import scenario_text
from vllm_playbooks.advisor.search import BASELINE_UNMEASURED
from vllm_playbooks.advisor.trace import LiveTrace, latest_trace, trace_steps


def live_section(case: str, data: Path | None = None) -> tuple[str, pd.DataFrame | None]:
    """What the advisor page shows of ``case``'s live searches: the most recent one's summary and steps, or one
    sentence saying none is recorded (and no table)."""
    trace = latest_trace(case, data)
    if trace is None:
        return (
            f"No live search of {case} is recorded yet: `vllm-playbooks advise --mode live --case {case} …` on "
            "a GPU records one here.",
            None,
        )
    return trace_summary(trace), trace_steps(trace)


def stop_text(trace: LiveTrace) -> str:
    """Where the search stopped, in words: its stop reason, or why it did not finish."""
    if trace.end is None:
        return "did not finish (the process ended before it could say why)"
    return str(trace.stop_reason) if trace.finished else f"did not finish: {trace.stop_reason}"


def _point_text(point: dict[str, Any] | None) -> str:
    if point is None:
        return "nothing"
    return f"{point['point']} ({point['goodput_rps']:.2f} req/s over {point['runs']} run(s))"


def trace_summary(trace: LiveTrace) -> str:
    """The search in one paragraph: case, grid, hardware, SLO and budget; runs paid for (measured, recorded before),
    GPU time charged and held; the stop reason; the choice and the runner-up."""
    search, grid = trace.search, trace.search["grid"]
    measured = [p for p in trace.payments if not p["recorded"]]
    charged = trace.payments[-1]["spent_gpu_s"] if trace.payments else 0.0
    held = sum(p["held_gpu_s"] for p in trace.payments)
    text = (
        f"A live search of {search['case']} ({grid['model_shape']}{scenario_text(grid.get('acceptance'))}, "
        f"{workload_text(grid)}) on "
        f"{', '.join(search['hardware'])}, started {search['started_at']}: SLO {search['slo_label']}, budget "
        f"{search['budget_gpu_s'] / 60:.1f} GPU-minutes (each of the grid's {search['points']} points once: "
        f"{search['grid_gpu_s'] / 60:.1f}). It paid for {len(trace.payments)} run(s), "
        f"{len(measured)} measured and {len(trace.payments) - len(measured)} recorded before on this hardware, "
        f"charged {charged / 60:.1f} GPU-minutes by the estimates and held the GPU(s) {held / 60:.1f} GPU-minutes; "
        f"it stopped: {stop_text(trace)}."
    )
    if trace.finished and trace.end is not None:
        text += f" It recommends {_point_text(trace.end['chosen'])}; runner-up: {_point_text(trace.end['runner_up'])}."
        if trace.end.get("baseline_unmeasured"):
            text += f" Warning: {BASELINE_UNMEASURED}."
    return text


def trace_text(trace: LiveTrace) -> str:
    """What ``vllm-playbooks advise --mode live`` answers: ``trace_summary``, then one line per run paid for."""
    lines = [trace_summary(trace)]
    for step in trace_steps(trace).itertuples():
        expected = "" if math.isnan(step.expected_goodput_rps) else f", expected {step.expected_goodput_rps:.2f}"
        lines.append(
            f"  paid {step.number}: {step.point} r{step.repeat} ({step.source}"
            f"{'; ' + step.why if step.why else ''}): {step.gpu_s / 60:.1f} GPU-min charged, "
            f"{step.held_gpu_s / 60:.1f} held{expected}, measured {step.measured_goodput_rps:.2f} req/s"
        )
    return "\n".join(lines)
