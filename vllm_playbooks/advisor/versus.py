"""The advisor beside the searches tuners run today (``advisor.baselines``), scored with the grid's own noise.

Every policy searches the same ``RecordedOracle`` of a grid with the same budget (``POLICIES``: the advisor first).
Its answer is scored on every row of the grid (medians of all repeats) against the grid best under the same SLO, as
``advisor.evaluate`` scores the advisor, and then with the grid's run-to-run spread (``noise_tie``): where the grid
best leads the answer by no more than the grid's own spread, the pair is a tie (``scored_ratio`` 1), not a loss. A
grid whose points ran once has no measured spread, and its pairs are scored on the ratio alone; each pair states how
many runs the grid's points rest on.

``comparison`` gives the one small table the advisor page and the README show, per policy: the median and worst
scored ratio, the median GPU-minutes spent and the pairs with no answer; ``targets`` checks the advisor's done-when
targets against it.
"""

from __future__ import annotations

import math
from statistics import median
from typing import Any

import pandas as pd

from vllm_playbooks.advisor.baselines import BASELINES
from vllm_playbooks.advisor.goodput import POINT_COLUMNS, Slo
from vllm_playbooks.advisor.oracle import Oracle
from vllm_playbooks.advisor.search import Advice, Knobs, advise
from vllm_playbooks.analysis.noise import spread_of
from vllm_playbooks.hardware import Gpu

#: The advisor's name among the policies.
ADVISOR = "advisor"
#: The policies in the order the tables give them: the advisor, then the baselines.
POLICIES = (ADVISOR, *BASELINES)
#: The advisor's done-when targets at the default budget: every pair answered, the median and the worst scored ratio,
#: and its median GPU-minutes at most this share of the cheapest baseline's whose median ratio is as good or better.
TARGETS = {"median_ratio": 0.95, "min_ratio": 0.85, "gpu_minutes_share": 0.5}


def run_policy(policy: str, oracle: Oracle, slo: Slo, gpu: Gpu, knobs: Knobs = Knobs()) -> Advice:
    """``policy`` (one of ``POLICIES``) searching ``oracle`` under ``slo``: the advisor on ``gpu`` with ``knobs``, or
    a baseline."""
    if policy == ADVISOR:
        return advise(oracle, slo, gpu, knobs=knobs)
    return BASELINES[policy](oracle, slo)


def grid_noise(rows: pd.DataFrame) -> dict[str, float]:
    """How many runs a grid's points rest on and their run-to-run spread, from ``rows`` (one grid's recorded rows):
    ``grid_runs_median`` (the median runs per point), ``grid_points_repeated`` (points with two runs or more) and
    ``grid_spread_pct`` (the median over those points of the spread of their requests/s, ``analysis.noise``; NaN when
    no point ran twice)."""
    filled = rows.assign(
        concurrency=rows["concurrency"].fillna(-1), request_rate_qps=rows["request_rate_qps"].fillna(-1)
    )
    runs = [group["request_throughput_rps"] for _, group in filled.groupby(list(POINT_COLUMNS))]
    spreads = [spread_of(values).spread_pct for values in runs if len(values) > 1]
    return {
        "grid_runs_median": float(median(len(values) for values in runs)),
        "grid_points_repeated": float(len(spreads)),
        "grid_spread_pct": float(median(spreads)) if spreads else math.nan,
    }


def noise_tie(chosen_goodput: float, best_goodput: float, spread_pct: float) -> bool:
    """Whether an answer of ``chosen_goodput`` (requests/s, 0 when it misses the SLO or there is none) ties the grid
    best's ``best_goodput``: it meets the SLO and the best leads it by no more than the grid's run-to-run spread
    ``spread_pct`` (%; NaN, unmeasured, ties nothing)."""
    if not (chosen_goodput > 0 and best_goodput > 0) or math.isnan(spread_pct):
        return False
    return best_goodput <= chosen_goodput * (1.0 + spread_pct / 100.0)


def scored_ratio(line: dict[str, Any]) -> float:
    """An evaluation line's goodput ratio with a tie by noise counted as 1 (``noise_tie``)."""
    return 1.0 if line["tie_by_noise"] else float(line["goodput_ratio"])


def comparison(table: pd.DataFrame, budget_share: float) -> pd.DataFrame:
    """Per policy (``POLICIES``' order, those ``table`` holds), the lines of an evaluation table run with
    ``budget_share``: pairs, median and worst ``scored_ratio``, ties by noise, the median GPU-minutes spent and the
    pairs with no answer."""
    part = table[(table["budget_share"] - budget_share).abs() < 1e-9]
    records = []
    for policy in [p for p in POLICIES if p in set(part["policy"])]:
        lines = part[part["policy"] == policy]
        ratios = lines["scored_ratio"].dropna()
        records.append(
            {
                "policy": policy,
                "pairs": len(ratios),
                "median_ratio": float(ratios.median()),
                "worst_ratio": float(ratios.min()),
                "ties_by_noise": int(lines["tie_by_noise"].sum()),
                "median_gpu_minutes": float(lines["gpu_minutes"].median()),
                "no_answer": int((~lines["answered"].astype(bool)).sum()),
            }
        )
    return pd.DataFrame(records)


def targets(table: pd.DataFrame, budget_share: float) -> dict[str, float]:
    """The advisor's done-when targets (``TARGETS``) on ``comparison``'s lines of ``budget_share``: each measured
    number, the cheapest baseline's median GPU-minutes among those whose median ratio is at least the advisor's (NaN
    when none is), and whether each target is met (1.0) or not (0.0)."""
    lines = comparison(table, budget_share).set_index("policy")
    ours = lines.loc[ADVISOR]
    rivals = lines.drop(index=ADVISOR)
    as_good = rivals[rivals["median_ratio"] >= ours["median_ratio"] - 1e-12]
    cheapest = float(as_good["median_gpu_minutes"].min()) if len(as_good) else math.nan
    return {
        "no_answer": float(ours["no_answer"]),
        "median_ratio": float(ours["median_ratio"]),
        "worst_ratio": float(ours["worst_ratio"]),
        "median_gpu_minutes": float(ours["median_gpu_minutes"]),
        "cheapest_baseline_gpu_minutes": cheapest,
        "answers_met": float(ours["no_answer"] == 0),
        "median_ratio_met": float(ours["median_ratio"] >= TARGETS["median_ratio"]),
        "worst_ratio_met": float(ours["worst_ratio"] >= TARGETS["min_ratio"]),
        "gpu_minutes_met": float(
            math.isnan(cheapest) or ours["median_gpu_minutes"] <= TARGETS["gpu_minutes_share"] * cheapest
        ),
    }
