"""The advisor against recorded grids: each line scores its choice on every row of the grid, the summary says whether
the issue's targets hold, the stored table is what its command computes, and ``vllm-playbooks advise`` answers."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests.unit.advisor.grids import engine_json, frame, row, startups
from vllm_playbooks import cli, paths
from vllm_playbooks.advisor.evaluate import (
    BUDGET_SHARES,
    CHECK_FILE,
    EVALUATION_COLUMNS,
    SENSITIVITY,
    SENSITIVITY_COLUMNS,
    evaluate,
    evaluate_grid,
    floor_gpu_s,
    live_versus_grid,
    read_evaluation,
    read_sensitivity,
    sensitivity,
    summary,
)
from vllm_playbooks.advisor.goodput import point_table
from vllm_playbooks.advisor.trace import read_trace
from vllm_playbooks.advisor.versus import POLICIES
from vllm_playbooks.results import raw
from vllm_playbooks.results.store import RUNS_FILE, TRACE_FOLDER

KEY = {
    "case": "synthetic",
    "hardware": "nvidia-h200-x1-vllm0.26.0",
    "model_shape": "llama-3.1-8b",
    "input_len": 512,
    "output_len": 128,
    "load_kind": "concurrency",
    "acceptance": "none imposed",
}


def _grid() -> pd.DataFrame:
    loads = (1, 4, 16, 64)
    a = [row("a", c, t, r) for c, t, r in zip(loads, (5.0, 5.2, 6.6, 12.0), (1.5, 5.8, 18.0, 39.0), strict=True)]
    b = [row("b", c, t, r) for c, t, r in zip(loads, (5.0, 5.3, 9.0, 20.0), (1.2, 4.0, 10.0, 25.0), strict=True)]
    return frame(a + b)


def test_each_line_scores_the_choice_on_the_whole_grid_within_its_budget() -> None:
    rows = _grid()
    for policy in POLICIES:
        lines = pd.DataFrame(evaluate_grid(KEY, rows, startups(rows), budget_share=0.5, policy=policy))
        assert list(lines["slo_level"]) == ["tight", "medium", "loose"]
        assert set(lines.columns) == set(EVALUATION_COLUMNS) and (lines["policy"] == policy).all()
        scored = lines[lines["grid_best_goodput_rps"] > 0]
        assert (scored["goodput_ratio"] == scored["chosen_goodput_rps"] / scored["grid_best_goodput_rps"]).all()
        assert (lines["gpu_time_share"] <= 0.5 + 1e-9).all()
        assert (lines["gpu_minutes"] == lines["gpu_s_spent"] / 60).all()
        assert lines["gpu_s_grid"].iloc[0] == rows["gpu_s"].sum() + 2 * 100.0 and (lines["grid_configs"] == 2).all()
        # single runs: no measured spread, so no tie, and every point rests on one run
        assert not lines["tie_by_noise"].any() and (lines["scored_ratio"] == lines["goodput_ratio"]).all()
        assert (lines["grid_runs_median"] == 1).all() and lines["grid_spread_pct"].isna().all()
        assert (lines["answered"] == (lines["chosen"] != "none")).all()
        assert (lines["gpu_s_min_answer"] == 100.0 + 40.0).all()


def test_each_line_states_the_runs_the_grids_points_rest_on_and_their_spread() -> None:
    # every point ran twice, its requests/s 5 % under and over its median: a spread of 10 %
    loads = (1, 4, 16, 64)
    a = [
        row("a", c, t, r * f, repeat=i)
        for c, t, r in zip(loads, (5.0, 5.2, 6.6, 12.0), (1.5, 5.8, 18.0, 39.0), strict=True)
        for i, f in enumerate((0.95, 1.05))
    ]
    b = [
        row("b", c, t, r * f, repeat=i)
        for c, t, r in zip(loads, (5.0, 5.3, 9.0, 20.0), (1.2, 4.0, 10.0, 25.0), strict=True)
        for i, f in enumerate((0.95, 1.05))
    ]
    rows = frame(a + b)
    lines = pd.DataFrame(evaluate_grid(KEY, rows, startups(rows), budget_share=1.0, policy="exhaustive sweep"))
    assert (lines["grid_runs_median"] == 2).all() and (abs(lines["grid_spread_pct"] - 10.0) < 1e-9).all()
    assert (lines["chosen_runs"] == 2).all() and (lines["grid_best_runs"] == 2).all()


def test_the_floor_is_one_run_of_the_best_and_one_of_its_baseline_with_their_start_ups() -> None:
    draft = engine_json("d", draft="llama-3.2-1b", k=4)
    rows = frame(
        [
            row("off", 16, 6.0, 10.0, gpu_s=30.0),
            row("off", 64, 9.0, 20.0, gpu_s=50.0),
            row("d", 16, 5.0, 12.0, gpu_s=40.0, engine=draft),
            row("d", 16, 5.1, 12.2, gpu_s=45.0, repeat=1, engine=draft),
        ]
    )
    points = point_table(rows)
    best_draft = points[(points["engine_label"] == "d")].iloc[0]
    # the draft's first run and start-up, and speculation off at the same load (c16), not its dearer c64
    assert floor_gpu_s(rows, startups(rows), best_draft) == 100.0 + 40.0 + 100.0 + 30.0
    best_off = points[(points["engine_label"] == "off") & (points["concurrency"] == 64)].iloc[0]
    assert floor_gpu_s(rows, startups(rows), best_off) == 100.0 + 50.0  # speculation off needs no baseline
    lines = pd.DataFrame(evaluate_grid(KEY, rows, startups(rows), budget_share=1.0))
    assert (lines["floor_share"] == lines["gpu_s_floor"] / lines["gpu_s_grid"]).all()


def test_the_summary_reads_one_budget_and_one_policy_and_counts_ties_by_noise() -> None:
    table = pd.DataFrame(
        {
            "budget_share": [0.25] * 4 + [0.5],
            "policy": ["advisor"] * 3 + ["auto_tune.sh"] * 2,
            "goodput_ratio": [1.0, 0.9, 0.0, 0.1, 0.2],
            "scored_ratio": [1.0, 1.0, 0.0, 0.1, 0.2],
            "answered": [True, True, False, True, True],
            "gpu_time_share": [0.2, 0.4, 0.0, 0.9, 0.9],
            "floor_share": [0.1] * 5,
        }
    )
    result = summary(table, 0.25)
    assert result == {
        "pairs": 3.0,
        "median_ratio": 1.0,
        "min_ratio": 0.0,
        "median_goodput_ratio": 0.9,
        "min_goodput_ratio": 0.0,
        "median_share": 0.2,
        "median_floor_share": 0.1,
        "no_answer": 1.0,
    }
    assert summary(table, 0.25, "auto_tune.sh")["median_ratio"] == 0.1


def test_the_stored_table_is_consistent_with_itself() -> None:
    table = pd.read_csv(paths.data_dir() / CHECK_FILE)
    assert list(table.columns) == list(EVALUATION_COLUMNS)
    assert sorted(table["budget_share"].unique()) == list(BUDGET_SHARES)
    # one line per (grid, SLO, policy, budget)
    assert list(table["policy"].unique()) == list(POLICIES)
    assert not table.duplicated(
        ["budget_share", "policy", "case", "hardware", "model_shape", "acceptance", "workload", "slo_level"]
    ).any()
    assert ((table["scored_ratio"] == 1.0) | (table["scored_ratio"] == table["goodput_ratio"])).all()
    assert (table.loc[table["tie_by_noise"], "scored_ratio"] == 1.0).all()
    assert (table["answered"] == (table["chosen"] != "none")).all()
    assert (table["gpu_time_share"] <= table["budget_share"] + 1e-6).all()
    scored = table[table["grid_best_goodput_rps"] > 0]
    ratio = scored["chosen_goodput_rps"] / scored["grid_best_goodput_rps"]
    assert ((scored["goodput_ratio"] - ratio).abs() < 1e-5).all() and (scored["goodput_ratio"] <= 1 + 1e-6).all()
    assert ((table["gpu_time_share"] - table["gpu_s_spent"] / table["gpu_s_grid"]).abs() < 1e-5).all()
    assert table.groupby(["budget_share", "policy"]).size().nunique() == 1
    # one acceptance per grid: the EAGLE-3 case's three imposed acceptances are three grids of each workload, each
    # with speculation off beside its own configs
    eagle = table[(table["case"] == "gpt-oss-eagle3") & (table["budget_share"] == 1.0)]
    eagle = eagle.assign(acceptance=eagle["acceptance"].astype(str))
    configs = eagle.groupby(["acceptance", "workload"])["grid_configs"].first().to_dict()
    assert sorted({a for a, _ in configs}) == ["0.61", "0.71", "0.81"] and len(configs) == 6
    assert all(n == (5 if a == "0.71" else 2) for (a, _), n in configs.items())


@pytest.mark.recorded_data
def test_the_stored_table_is_what_the_evaluation_gives_on_the_recorded_runs_of_a_case_measured_on_two_gpus() -> None:
    # discussion-13834 has H100 runs and start-ups beside the H200's: pooled, they moved the H200 grids' prices
    stored = read_evaluation()
    stored = stored[stored["case"] == "discussion-13834"].reset_index(drop=True)
    fresh = evaluate(["discussion-13834"]).reset_index(drop=True)
    assert len(stored) == len(fresh) > 0
    for column in (
        "policy",
        "chosen",
        "grid_best",
        "stop_reason",
        "points_paid",
        "runs_paid",
        "answered",
        "sure",
        "tie_by_noise",
    ):
        assert list(stored[column]) == list(fresh[column]), column
    for column in ("gpu_s_spent", "gpu_s_grid", "gpu_s_floor", "goodput_ratio", "scored_ratio"):
        assert ((stored[column] - fresh[column]).abs() <= 1e-5 * fresh[column].abs() + 1e-9).all(), column


@pytest.mark.recorded_data
def test_advise_answers_with_its_choice_its_trace_and_the_gpu_time(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        cli.main(
            [
                "advise",
                "--case",
                "llama-8b-draft-model",
                "--slo-tpot-p99-ms",
                "8",
                "--max-concurrency",
                "16",
                "--budget-gpu-min",
                "6",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "SLO TPOT p99 ≤ 8 ms" in out and "recommended: " in out and "runner-up: " in out
    assert "goodput " in out and "the model predicted " in out
    assert "paid 1: " in out and "@ c64" not in out  # 64 clients are more than the 16 given
    spent = float(out.split("stopped: ")[1].split("spent ")[1].split(" of ")[0])
    assert spent <= 6.0 and not math.isnan(spent)
    assert "how sure: " in out


@pytest.mark.recorded_data
def test_advise_refuses_a_budget_short_of_one_point_naming_the_least_that_answers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    command = ["advise", "--case", "llama-8b-draft-model", "--slo-tpot-p99-ms", "8", "--max-concurrency", "16"]
    assert cli.main([*command, "--budget-gpu-min", "0.01"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    least = float(captured.err.split("--budget-gpu-min ")[-1].split()[0])
    assert captured.err.startswith("error: ") and least > 0.01
    assert cli.main([*command, "--budget-gpu-min", str(least)]) == 0  # that budget answers
    assert "paid 1: " in capsys.readouterr().out  # it measured a point


LIVE_CASE = "llama-8b-draft-model"
#: The live searches recorded for LIVE_CASE: on an H200 with a budget short of its baseline-first plan, then on an H100
#: with one that pays for it.
H200_SEARCH, H100_SEARCH = (
    paths.data_dir() / "runs" / LIVE_CASE / TRACE_FOLDER / f"{name}.jsonl"
    for name in ("2026-12-05T025439+0000", "2026-12-06T075605+0000")
)


@pytest.mark.recorded_data
def test_the_recorded_live_search_is_scored_against_its_grid_best_on_every_recorded_run() -> None:
    trace = read_trace(H200_SEARCH)
    assert trace.search["slo"]["tpot_p99_ms"] == 7.6
    scored = live_versus_grid(trace)
    # its one run of the draft at c1 met 7.6 ms; the median of all the point's recorded runs does not
    assert scored["chosen"] == trace.end["chosen"]["point"] == "draft-1b-k4-a0.8 @ c1"  # type: ignore[index]
    chosen_runs = trace.end["chosen"]["runs"]  # type: ignore[index]
    assert scored["chosen_runs"] > chosen_runs == 1 and scored["chosen_goodput_rps"] == 0.0
    assert scored["grid_best"] == "spec-off @ c16" and scored["grid_best_runs"] >= 3
    assert scored["grid_best_goodput_rps"] > 15.0 and scored["goodput_ratio"] == 0.0
    # one run of the draft met the bound, but at a tenth of what the grid best gave in its worst run
    assert 0.0 < scored["chosen_goodput_max_rps"] < scored["grid_best_goodput_min_rps"] / 10
    assert not scored["within_spread"]


def _as_searched(data: Path, before: str) -> None:
    """Leave in ``data`` (a copy of the case's runs) only the points measured before ``before`` (an ISO time): the grid
    as the search met it, whatever was measured since."""
    case = data / "runs" / LIVE_CASE
    table = pd.read_csv(case / RUNS_FILE, dtype=str, keep_default_na=False)
    later = table["measured_at"] >= before
    for point_id in table.loc[later, "point_id"]:
        shutil.rmtree(raw.raw_root(case) / point_id)
    table[~later].to_csv(case / RUNS_FILE, index=False)
    for log in (case / "logs").iterdir():  # the servers started since: <config id>-<start time>.log.gz, .bench.log.gz
        if re.search(r"\d{4}-\d{2}-\d{2}T\d{6}", log.name).group(0) >= before:
            log.unlink()


def _with_draft_c4_tpot_p99(data: Path, values_ms: list[float]) -> None:
    """Set the p99 TPOT of the H100 draft-at-c4 runs in ``data`` (a copy of the case's runs) to ``values_ms`` in turn
    (the last one for any further run), in their ``bench.json`` and their rows alike."""
    case = data / "runs" / LIVE_CASE
    root = raw.raw_root(case)
    points = sorted(root.glob("nvidia-h100-*/draft-1b-k4-a0.8-*/in512-out128-c4-r*"))
    assert len(points) >= 2
    table = pd.read_csv(case / RUNS_FILE, dtype=str, keep_default_na=False)
    for number, point in enumerate(points):
        value = values_ms[min(number, len(values_ms) - 1)]
        bench = json.loads((point / raw.BENCH_FILE).read_text())
        bench["p99_tpot_ms"] = value
        (point / raw.BENCH_FILE).write_text(json.dumps(bench))
        table.loc[table["point_id"] == point.relative_to(root).as_posix(), "tpot_p99_ms"] = str(value)
    table.to_csv(case / RUNS_FILE, index=False)


@pytest.mark.recorded_data
def test_a_live_choice_is_within_the_grid_bests_spread_only_while_their_single_runs_overlap(tmp_path: Path) -> None:
    trace = read_trace(H100_SEARCH)
    assert trace.end is not None and trace.end["chosen"]["point"] == "spec-off @ c4"
    data = tmp_path / "data"
    shutil.copytree(paths.data_dir() / "runs" / LIVE_CASE, data / "runs" / LIVE_CASE)
    _as_searched(data, "2026-12-07")  # the search ran on 2026-12-06
    # every run of the draft at c4 meets 7.6 ms: it is the grid best, ahead of the choice in every single run
    _with_draft_c4_tpot_p99(data, [6.5])
    scored = live_versus_grid(trace, data)
    assert scored["grid_best"] == "draft-1b-k4-a0.8 @ c4" and scored["chosen"] == "spec-off @ c4"
    assert scored["grid_best_goodput_min_rps"] > scored["chosen_goodput_max_rps"] and not scored["within_spread"]
    # the search's own run of it misses the bound while the median still meets it: the lead is inside the spread
    _with_draft_c4_tpot_p99(data, [6.5, 8.6, 6.5])
    scored = live_versus_grid(trace, data)
    assert scored["grid_best"] == "draft-1b-k4-a0.8 @ c4" and scored["grid_best_goodput_min_rps"] == 0.0
    assert scored["goodput_ratio"] < 1.0 and scored["within_spread"]


@pytest.mark.recorded_data
def test_the_sensitivity_table_runs_each_knob_and_its_first_variant_is_the_evaluation_as_set() -> None:
    table = sensitivity(["llama-8b-draft-model"])
    assert list(table.columns) == list(SENSITIVITY_COLUMNS)
    assert list(table["variant"].unique()) == [name for name, _ in SENSITIVITY] and len(table) == 8 * 3
    as_set = summary(evaluate(["llama-8b-draft-model"]), 1.0)
    whole = table[(table["variant"] == "as set") & (table["budget_share"] == 1.0)].iloc[0]
    assert whole["median_share"] == as_set["median_share"] and whole["min_ratio"] == as_set["min_ratio"]
    dropped = table[table["variant"] == "no baseline-first rule"]
    assert (dropped["plan_margin"] == math.inf).all()
    listed = table["pairs_below_min_ratio"].map(lambda text: len(text.split("; ")) if text else 0)
    assert (listed == table["below_min_ratio"]).all()


def test_the_stored_sensitivity_table_starts_from_the_stored_evaluation() -> None:
    stored = read_sensitivity()
    assert list(stored.columns) == list(SENSITIVITY_COLUMNS)
    assert list(stored["variant"].unique()) == [name for name, _ in SENSITIVITY]
    evaluation = read_evaluation()
    for share in BUDGET_SHARES:  # regenerate both files together: advise --evaluate, then advise --sensitivity
        line = stored[(stored["variant"] == "as set") & (stored["budget_share"] == share)].iloc[0]
        result = summary(evaluation, share)
        assert line["pairs"] == result["pairs"] and abs(line["median_share"] - result["median_share"]) < 1e-5
        assert abs(line["min_ratio"] - result["min_ratio"]) < 1e-5
