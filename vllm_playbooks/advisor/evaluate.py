"""The advisor against the recorded grids (no GPU), and ``vllm-playbooks advise``.

For every recorded grid on the H200 (``advisor.goodput``: a case, a hardware, a model shape, one pair of lengths and
one kind of load) and each of its three SLOs (``goodput.slo_levels``: tight, medium, loose), the advisor and each
baseline (``advisor.versus.POLICIES``: the searches tuners run today, ``advisor.baselines``) search a
``RecordedOracle`` of that grid with a budget of each of ``BUDGET_SHARES`` of the grid's recorded GPU time, paying
each point's recorded GPU time; a search stops by its own rule or at the budget. Its choice is then scored on *all*
the grid's rows (medians of every repeat): the goodput ratio is the chosen point's goodput over the grid best's, under
the same SLO, and the scored ratio counts a tie within the grid's run-to-run spread as 1 (``versus.noise_tie``).
``vllm-playbooks advise --evaluate`` writes ``data/checks/advisor-vs-grid.csv``, one line per (grid, SLO, policy,
budget); ``vllm-playbooks advise --sensitivity`` runs it again with each of the search's
constants moved by ±50 % (``SENSITIVITY``) and writes ``data/checks/advisor-sensitivity.csv``.

What the evaluation cannot show: the configs are config-only shapes with dummy weights and imposed acceptance, and the
advisor is scored on the same recorded grids its oracle serves (there is no held-out hardware).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_playbooks import paths
from vllm_playbooks.advisor.goodput import (
    Slo,
    goodput_rps,
    grid_best,
    point_name,
    point_table,
    slo_levels,
    with_goodput,
    workload_text,
)
from vllm_playbooks.advisor.grids import GridFilter, one_grid, recorded_grids
from vllm_playbooks.advisor.oracle import RecordedOracle, point_key
from vllm_playbooks.advisor.scenarios import scenario_text
from vllm_playbooks.advisor.search import Advice, Knobs, advise, min_answer_gpu_s
from vllm_playbooks.advisor.versus import (
    ADVISOR,
    POLICIES,
    TARGETS,
    grid_noise,
    noise_tie,
    run_policy,
    scored_ratio,
)
from vllm_playbooks.analysis.compare import is_baseline
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.hardware import datasheet_gpu

if TYPE_CHECKING:
    import pandas as pd

    from vllm_playbooks.advisor.trace import LiveTrace


#: The advisor's budget in the evaluation and the command's default: the grid's whole recorded GPU time, what measuring
#: every point would cost. The search stops by its own rule, and the evaluation reports what share it spent...
BUDGET_SHARE = 1.0
#: ...and every budget the evaluation runs: a strict quarter and half of the grid's GPU time, and the whole.
BUDGET_SHARES = (0.25, 0.5, 1.0)
#: Where the evaluation is written, under the data folder.
CHECK_FILE = Path("checks") / "advisor-vs-grid.csv"
#: The search's constants moved by ±50 % one at a time, and its baseline-first rule dropped (an infinite margin: no
#: budget pays for the plan), each name with the knobs it runs (``sensitivity``).
SENSITIVITY = (
    ("as set", Knobs()),
    ("no baseline-first rule", Knobs(plan_margin=math.inf)),
    ("PLAN_MARGIN × 0.5", Knobs(plan_margin=0.5 * Knobs().plan_margin)),
    ("PLAN_MARGIN × 1.5", Knobs(plan_margin=1.5 * Knobs().plan_margin)),
    ("PLAUSIBLE_CHANCE × 0.5", Knobs(plausible_chance=0.5 * Knobs().plausible_chance)),
    ("PLAUSIBLE_CHANCE × 1.5", Knobs(plausible_chance=1.5 * Knobs().plausible_chance)),
    ("DISTANCE_UNCERTAINTY × 0.5", Knobs(distance_uncertainty=0.5 * Knobs().distance_uncertainty)),
    ("DISTANCE_UNCERTAINTY × 1.5", Knobs(distance_uncertainty=1.5 * Knobs().distance_uncertainty)),
)
#: Where the sensitivity table is written, under the data folder.
SENSITIVITY_FILE = Path("checks") / "advisor-sensitivity.csv"
SENSITIVITY_COLUMNS = (
    "variant",
    "plausible_chance",
    "plan_margin",
    "distance_uncertainty",
    "budget_share",
    "pairs",
    "median_ratio",
    "min_ratio",
    "median_share",
    "below_min_ratio",
    "pairs_below_min_ratio",
)
EVALUATION_COLUMNS = (
    "budget_share",
    "policy",
    "case",
    "hardware",
    "model_shape",
    "acceptance",
    "workload",
    "grid_configs",
    "slo_level",
    "slo",
    "slo_tpot_p99_ms",
    "chosen",
    "grid_best",
    "chosen_goodput_rps",
    "grid_best_goodput_rps",
    "goodput_ratio",
    "answered",
    "sure",
    "lead_pct",
    "band_pct",
    "chosen_runs",
    "grid_best_runs",
    "grid_runs_median",
    "grid_points_repeated",
    "grid_spread_pct",
    "tie_by_noise",
    "scored_ratio",
    "points_paid",
    "runs_paid",
    "gpu_s_spent",
    "gpu_minutes",
    "gpu_s_grid",
    "gpu_time_share",
    "gpu_s_floor",
    "floor_share",
    "gpu_s_min_answer",
    "stop_reason",
)


def _name(point: Any) -> str:
    return point_name(point["engine_label"], point["concurrency"], point["request_rate_qps"])


def score(advice: Advice, points: pd.DataFrame, slo: Slo) -> tuple[str, float, int]:
    """The chosen point's name, its goodput on every recorded row of the grid and the runs that rest on (0 when
    nothing was chosen)."""
    if advice.chosen is None:
        return "none", 0.0, 0
    scored = with_goodput(points, slo)
    line = scored[scored.apply(_name, axis=1) == advice.chosen["point"]].iloc[0]
    return advice.chosen["point"], float(line["goodput_rps"]), int(line["runs"])


def floor_gpu_s(rows: pd.DataFrame, startups: dict[str, float], best: pd.Series) -> float:
    """What a search that knew the answer would still pay on ``rows`` (one grid's priced rows): one run of the grid
    best ``best`` (a ``point_table`` line) with its server's start-up and, where the best is speculative, one run of
    the baseline at the same load with its start-up (a speculative answer is only known against its baseline). A
    share of the grid below this one's is out of any search's reach."""
    oracle = RecordedOracle(rows, startups, budget_gpu_s=math.inf)  # what it costs, not what a budget allows
    best_key = point_key(best)
    oracle.pay(best_key)
    if is_baseline(rows[rows["config_id"] == best["config_id"]]).all():
        return oracle.spent_gpu_s
    baselines = rows[is_baseline(rows)]
    same_load = [key for key in map(point_key, baselines.to_dict("records")) if key[1:] == best_key[1:]]
    if same_load:
        oracle.pay(same_load[0])
    return oracle.spent_gpu_s


def evaluate_grid(
    key: dict[str, Any],
    rows: pd.DataFrame,
    startups: dict[str, float],
    budget_share: float = BUDGET_SHARE,
    knobs: Knobs = Knobs(),
    policy: str = ADVISOR,
) -> list[dict[str, Any]]:
    """One evaluation line per SLO level of one grid, ``policy`` (one of ``versus.POLICIES``; the advisor searching
    with ``knobs``) given ``budget_share`` of the grid's recorded GPU time (see the module's docstring)."""
    points = point_table(rows)
    gpu = datasheet_gpu(str(key["hardware"]))
    lines = []
    full = RecordedOracle(rows, startups, budget_gpu_s=1.0).full_grid_gpu_s()
    noise = grid_noise(rows)
    least = min_answer_gpu_s(RecordedOracle(rows, startups, budget_gpu_s=1.0), gpu)
    for level, slo in slo_levels(points):
        oracle = RecordedOracle(rows, startups, budget_gpu_s=budget_share * full)
        advice = run_policy(policy, oracle, slo, gpu, knobs)
        best = grid_best(points, slo)
        chosen, chosen_goodput, chosen_runs = score(advice, points, slo)
        best_goodput = float(best["goodput_rps"]) if best is not None else 0.0
        floor = floor_gpu_s(rows, startups, best) if best is not None else math.nan
        tie = (
            best is not None
            and chosen != _name(best)
            and noise_tie(chosen_goodput, best_goodput, noise["grid_spread_pct"])
        )
        ratio = chosen_goodput / best_goodput if best_goodput > 0 else math.nan
        lines.append(
            {
                "budget_share": budget_share,
                "policy": policy,
                "case": key["case"],
                "hardware": key["hardware"],
                "model_shape": key["model_shape"],
                "acceptance": key["acceptance"],
                "workload": workload_text(key),
                "grid_configs": rows["config_id"].nunique(),
                "slo_level": level,
                "slo": slo.label(),
                "slo_tpot_p99_ms": slo.tpot_p99_ms,
                "chosen": chosen,
                "grid_best": _name(best) if best is not None else "none",
                "chosen_goodput_rps": chosen_goodput,
                "grid_best_goodput_rps": best_goodput,
                "goodput_ratio": ratio,
                "answered": advice.chosen is not None,
                "sure": advice.sure,
                "lead_pct": advice.lead_pct,
                "band_pct": advice.band_pct,
                "chosen_runs": chosen_runs,
                "grid_best_runs": int(best["runs"]) if best is not None else 0,
                **noise,
                "tie_by_noise": tie,
                "scored_ratio": scored_ratio({"tie_by_noise": tie, "goodput_ratio": ratio}),
                "points_paid": len(oracle.paid_keys()),
                "runs_paid": len(oracle.payments),
                "gpu_s_spent": oracle.spent_gpu_s,
                "gpu_minutes": oracle.spent_gpu_s / 60.0,
                "gpu_s_grid": full,
                "gpu_time_share": oracle.spent_gpu_s / full,
                "gpu_s_floor": floor,
                "floor_share": floor / full,
                "gpu_s_min_answer": least,
                "stop_reason": advice.stop_reason,
            }
        )
    return lines


def evaluate(
    cases: list[str] | None = None,
    data: Path | None = None,
    budget_shares: tuple[float, ...] = BUDGET_SHARES,
    knobs: Knobs = Knobs(),
    policies: tuple[str, ...] = POLICIES,
) -> pd.DataFrame:
    """The evaluation table over every recorded H200 grid of ``cases`` (default: every packaged case), once per
    budget share and policy (the advisor's search run with ``knobs``)."""
    return _evaluation(recorded_grids(cases, data), budget_shares, knobs, policies)


def _evaluation(
    grids: list[tuple[dict[str, Any], pd.DataFrame, dict[str, float]]],
    budget_shares: tuple[float, ...],
    knobs: Knobs,
    policies: tuple[str, ...] = (ADVISOR,),
) -> pd.DataFrame:
    """``evaluate``'s table over ``grids`` (``grids.case_grids``' tuples) for ``policies``."""
    import pandas as pd

    records = [
        line
        for key, rows, startups in grids
        for share in budget_shares
        for policy in policies
        for line in evaluate_grid(key, rows, startups, share, knobs, policy)
    ]
    return pd.DataFrame(records, columns=list(EVALUATION_COLUMNS))


def pair_name(line: Any) -> str:
    """One (grid, SLO) pair of an evaluation table in words: case, model shape, acceptance, workload and SLO level."""
    return (
        f"{line['case']} {line['model_shape']}{scenario_text(str(line['acceptance']))}, {line['workload']}, "
        f"{line['slo_level']} SLO"
    )


def sensitivity(cases: list[str] | None = None, data: Path | None = None) -> pd.DataFrame:
    """The evaluation under each of ``SENSITIVITY``'s knobs: per variant and budget share, ``summary``'s numbers,
    how many pairs fall below the lowest goodput ratio the targets allow, and which."""
    import pandas as pd

    grids = recorded_grids(cases, data)  # read and priced once: the knobs move the search only
    records = []
    for name, knobs in SENSITIVITY:
        table = _evaluation(grids, BUDGET_SHARES, knobs)
        for share in BUDGET_SHARES:
            result = summary(table, share)
            part = table[(table["budget_share"] - share).abs() < 1e-9]
            below = part[part["scored_ratio"] < TARGETS["min_ratio"]]
            records.append(
                {
                    "variant": name,
                    **vars(knobs),
                    "budget_share": share,
                    "pairs": int(result["pairs"]),
                    "median_ratio": result["median_ratio"],
                    "min_ratio": result["min_ratio"],
                    "median_share": result["median_share"],
                    "below_min_ratio": len(below),
                    "pairs_below_min_ratio": "; ".join(pair_name(line) for _, line in below.iterrows()),
                }
            )
    return pd.DataFrame(records, columns=list(SENSITIVITY_COLUMNS))


def read_sensitivity(data: Path | None = None) -> pd.DataFrame:
    """The stored sensitivity table (``SENSITIVITY_FILE`` under the data folder)."""
    import pandas as pd

    return pd.read_csv((data or paths.data_dir()) / SENSITIVITY_FILE, keep_default_na=False)


def summary(table: pd.DataFrame, budget_share: float = BUDGET_SHARE, policy: str = ADVISOR) -> dict[str, float]:
    """Of the lines of an evaluation table run with ``budget_share`` by ``policy``: pairs, the median and lowest
    scored ratio (ties by noise counted as 1: ``versus.noise_tie``), the median and lowest goodput ratio as measured,
    the median GPU-time share, the median floor share (``floor_gpu_s``) and the pairs with no answer."""
    table = table[((table["budget_share"] - budget_share).abs() < 1e-9) & (table["policy"] == policy)]
    ratios, raw = table["scored_ratio"].dropna(), table["goodput_ratio"].dropna()
    return {
        "pairs": float(len(ratios)),
        "median_ratio": float(ratios.median()),
        "min_ratio": float(ratios.min()),
        "median_goodput_ratio": float(raw.median()),
        "min_goodput_ratio": float(raw.min()),
        "median_share": float(table["gpu_time_share"].median()),
        "median_floor_share": float(table["floor_share"].median()),
        "no_answer": float((~table["answered"].astype(bool)).sum()),
    }


def read_evaluation(data: Path | None = None) -> pd.DataFrame:
    """The stored evaluation table (``CHECK_FILE`` under the data folder)."""
    import pandas as pd

    return pd.read_csv((data or paths.data_dir()) / CHECK_FILE, dtype={"acceptance": str})


def live_versus_grid(trace: LiveTrace, data: Path | None = None) -> dict[str, Any]:
    """A live search's choice against its grid's best under the same SLO, both scored on every row recorded for that
    grid on the search's hardware (medians of all repeats, the search's own runs among them): ``chosen`` and
    ``grid_best`` (point names, or 'nothing'), ``chosen_goodput_rps``, ``grid_best_goodput_rps``, their runs,
    ``goodput_ratio`` (NaN when no point meets the SLO or the search chose nothing), each side's lowest and highest
    goodput of a single run (``…_goodput_min_rps``, ``…_goodput_max_rps``; 0 with no runs) and ``within_spread``:
    whether the choice is the grid best or the two sides' single-run goodputs overlap, so that the grid best's lead is
    not larger than the measured spread of both."""
    grid, hardware = trace.search["grid"], trace.search["hardware"][0]
    _, rows, _ = one_grid(
        trace.search["case"],
        hardware,
        grid["model_shape"],
        grid["input_len"],
        grid["output_len"],
        grid["load_kind"],
        None,
        data,
        acceptance=grid.get("acceptance"),
    )
    slo = Slo(**trace.search["slo"])
    points = with_goodput(point_table(rows), slo)
    best = grid_best(points, slo)
    chosen_name = trace.end["chosen"]["point"] if trace.finished and trace.end and trace.end["chosen"] else None
    matches = points[points.apply(_name, axis=1) == chosen_name]
    chosen = matches.iloc[0] if not matches.empty else None
    ratio = float(chosen["goodput_rps"] / best["goodput_rps"]) if chosen is not None and best is not None else math.nan
    names = {"chosen": chosen_name or "nothing", "grid_best": _name(best) if best is not None else "nothing"}
    run_names = rows.apply(_name, axis=1)
    scored: dict[str, Any] = {"goodput_ratio": ratio}
    for side, point in (("chosen", chosen), ("grid_best", best)):
        runs = rows[run_names == names[side]]
        each = [goodput_rps(slo, r.tpot_p99_ms, r.ttft_p99_ms, r.request_throughput_rps) for r in runs.itertuples()]
        scored |= {
            side: names[side],
            f"{side}_goodput_rps": float(point["goodput_rps"]) if point is not None else 0.0,
            f"{side}_runs": int(point["runs"]) if point is not None else 0,
            f"{side}_goodput_min_rps": min(each, default=0.0),
            f"{side}_goodput_max_rps": max(each, default=0.0),
        }
    overlap = (
        scored["chosen_goodput_max_rps"] >= scored["grid_best_goodput_min_rps"]
        and scored["grid_best_goodput_max_rps"] >= scored["chosen_goodput_min_rps"]
    )
    scored["within_spread"] = (
        chosen is not None and best is not None and (names["chosen"] == names["grid_best"] or overlap)
    )
    return scored


def write_evaluation() -> tuple[pd.DataFrame, Path]:
    """Score the advisor and the baselines on every recorded grid (``evaluate``), write the table to ``CHECK_FILE``
    under the data folder and return it with its path."""
    table = evaluate()
    out = paths.data_dir() / CHECK_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    table.round(6).to_csv(out, index=False)
    return table, out


def write_sensitivity() -> tuple[pd.DataFrame, Path]:
    """Run the evaluation with each of the search's constants moved (``sensitivity``), write the table to
    ``SENSITIVITY_FILE`` under the data folder and return it with its path."""
    table = sensitivity()
    out = paths.data_dir() / SENSITIVITY_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    table.round(6).to_csv(out, index=False)
    return table, out


def advise_replay(
    case: str,
    slo: Slo,
    budget_gpu_s: float | None = None,
    *,
    hardware: str | None = None,
    filters: GridFilter = GridFilter(),
) -> tuple[Advice, dict[str, Any], float]:
    """The advisor on the one recorded grid of ``hardware`` (None: see ``one_grid``) the filters leave, paying
    recorded GPU time up to
    ``budget_gpu_s`` (None: ``BUDGET_SHARE`` of the grid's): the advice, the grid's key and the GPU-seconds the
    whole grid took. ``ConfigError`` where the budget pays for no point of the grid, naming the least that does."""
    key, rows, startups = one_grid(
        case,
        hardware,
        filters.model_shape,
        filters.input_len,
        filters.output_len,
        filters.load_kind,
        filters.max_concurrency,
        acceptance=filters.acceptance,
    )
    full = RecordedOracle(rows, startups, budget_gpu_s=1.0).full_grid_gpu_s()
    budget = budget_gpu_s if budget_gpu_s is not None else BUDGET_SHARE * full
    oracle = RecordedOracle(rows, startups, budget_gpu_s=budget)
    gpu = datasheet_gpu(str(key["hardware"]))
    least = min_answer_gpu_s(oracle, gpu)
    if budget < least:
        raise ConfigError(
            f"a budget of {budget / 60:.2f} GPU-min pays for no point of this grid; the smallest budget "
            f"that can answer is --budget-gpu-min {math.ceil(least / 60 * 100) / 100:.2f}"
        )
    return advise(oracle, slo, gpu), key, full
