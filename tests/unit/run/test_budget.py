"""Remaining GPU time of a grid, estimated from the wall times of its recorded points and its servers' start-ups."""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import FROZEN
from tests.unit.run.grid_rows import GRID_PLAN, grid_spec, run_rows, server_rows
from vllm_playbooks import cli
from vllm_playbooks.book import page_notes
from vllm_playbooks.config.pairing import CO_RESIDENT
from vllm_playbooks.run import budget
from vllm_playbooks.run.plan import plan_from_dict


def test_a_points_wall_runs_from_ready_or_the_point_before_on_its_server() -> None:
    servers = server_rows(("a1", "a", 0, 100), ("a2", "a", 1000, 50), ("never", "b", 0, math.nan))
    # a's first server: ready at 100; c1 ends at 160, c4 at 200. Its second server (ready at 1050) measures c16 at 1300.
    # b never became ready: its row has no server to time it from
    rows = run_rows(("a", 4, 200), ("a", 1, 160), ("a", 16, 1300), ("b", 1, 500))
    walls = budget.point_walls(rows, servers)
    assert walls[["engine_label", "concurrency", "wall_s"]].values.tolist() == [
        ["a", 1, 60.0],
        ["a", 4, 40.0],
        ["a", 16, 250.0],
    ]


def test_servers_side_by_side_take_turns_so_a_points_wall_runs_from_the_sessions_point_before() -> None:
    servers = server_rows(("a1", "a", 0, 100), ("b1", "b", 0, 110))
    # a paired session with both servers up: a c1 ends at 160, b c1 at 200, a c1 again at 250, b c1 at 290
    rows = run_rows(("a", 1, 160), ("b", 1, 200), ("a", 1, 250), ("b", 1, 290))
    together = rows.assign(pair_mode=CO_RESIDENT, pair_session="s")
    walls = budget.point_walls(together, servers).sort_values("measured_at")
    assert walls["wall_s"].tolist() == [60.0, 40.0, 50.0, 40.0]
    # the same rows measured on their own: each wall from its own server's point before (b's first from its ready)
    alone = budget.point_walls(rows, servers).sort_values("measured_at")
    assert alone["wall_s"].tolist() == [60.0, 90.0, 90.0, 90.0]


def test_the_rest_of_a_grid_takes_the_longest_recorded_wall_per_load_and_start_up() -> None:
    servers = server_rows(("a1", "a", 0, 100), ("b1", "b", 400, 80), ("b2", "b", 900, 120))
    # walls: a c1 60, a c4 40, a c16 300; b c1 90 (its second server's point)
    rows = run_rows(("a", 1, 160), ("a", 4, 200), ("a", 16, 500), ("b", 1, 1110))
    table = budget.remaining_time(GRID_PLAN, rows, servers).set_index("engine_label")
    assert table.index.tolist() == ["b", "c", "big"]  # a is complete
    assert table.loc["b", "points"] == 2 and table.loc["b", "startup_s"] == 120.0  # the shape's longest start
    assert table.loc["b", "points_s"] == 340.0  # c4 40 + c16 300
    assert table.loc["b", "time_limit_s"] == 580  # 1.25 × 460 = 575, up to 10 s
    assert table.loc["c", "startup_s"] == 120.0 and table.loc["c", "points_s"] == 90.0 + 40.0 + 300.0  # any config's
    assert (
        budget.remaining_time(GRID_PLAN, rows, servers, margin=1.0).set_index("engine_label").loc["b", "time_limit_s"]
        == 460
    )
    # the 70B shape never ran: neither its start-up nor its points are estimated from the 8B's
    assert table.loc["big", "model_shape"] == "llama-3.3-70b" and table.loc["big", "unknown"] == 3
    assert table.loc["big", ["startup_s", "points_s", "time_limit_s"]].isna().all()


def test_a_start_up_is_estimated_as_cold_when_the_config_only_ever_started_warm() -> None:
    # a started first on a fresh machine (400 s: no compile or kernel cache); b after it on the same machine (60 s)
    servers = server_rows(("a1", "a", 0, 400), ("b1", "b", 500, 60))
    rows = run_rows(("a", 1, 460), ("b", 1, 620))
    table = budget.remaining_time(GRID_PLAN, rows, servers).set_index("engine_label")
    assert table.loc["b", "startup_s"] == 400.0 and table.loc["a", "startup_s"] == 400.0


def test_the_rest_of_a_grid_in_words_names_each_server_and_says_when_nothing_is_left() -> None:
    servers = server_rows(("a1", "a", 0, 100), ("b1", "b", 400, 80), ("b2", "b", 900, 120))
    rows = run_rows(("a", 1, 160), ("a", 4, 200), ("a", 16, 500), ("b", 1, 1110))
    text = page_notes.describe_remaining_time(budget.remaining_time(GRID_PLAN, rows, servers))
    assert text.startswith("8 planned points are left on 3 servers, each started once: ")
    assert "`b` (llama-3.1-8b): 2 points, start-up ≈ 120 s, points ≈ 340 s, `--time-limit-s 580`" in text
    assert "`big` (llama-3.3-70b): 3 points, no estimate (no server of its shape ever became ready)" in text
    one = budget.remaining_time(GRID_PLAN, run_rows(("a", 1, 160)), server_rows(("a1", "a", 0, 100)))
    assert "`a` (llama-3.1-8b): 2 points, no estimate (2 of its loads never ran on its shape)" in (
        page_notes.describe_remaining_time(one)
    )
    assert page_notes.describe_remaining_time(budget.remaining_time(GRID_PLAN, rows, servers).iloc[:0]) == (
        "Every planned point is recorded in a run that did not stall: nothing is left to measure."
    )
    last = pd.DataFrame(
        [
            {
                "engine_label": "k3",
                "model_shape": "gpt-oss-120b",
                "points": 1,
                "stalled": 0,
                "unknown": 0,
                "startup_s": 192.0,
                "points_s": 387.0,
                "time_limit_s": 730,
            }
        ]
    )
    assert page_notes.describe_remaining_time(last) == (
        "1 planned point is left on 1 server, each started once: `k3` "
        "(gpt-oss-120b): 1 point, start-up ≈ 192 s, points ≈ 387 s, "
        "`--time-limit-s 730`."
    )
    again = last.assign(stalled=1)
    assert "`k3` (gpt-oss-120b): 1 point (1 recorded only in runs that stalled), start-up" in (
        page_notes.describe_remaining_time(again)
    )


def test_a_load_recorded_only_in_stalled_runs_is_left_to_measure_again() -> None:
    servers = server_rows(("a1", "a", 0, 100))
    rows = run_rows(("a", 1, 160), ("a", 4, 200), ("a", 16, 500))
    assert "a" not in budget.remaining_time(GRID_PLAN, rows, servers)["engine_label"].tolist()  # no stalled column
    marked = rows.assign(stalled=[False, False, True])  # c16's only run stalled
    table = budget.remaining_time(GRID_PLAN, marked, servers).set_index("engine_label")
    assert table.loc["a", "points"] == 1 and table.loc["a", "stalled"] == 1
    assert table.loc["a", "points_s"] == 300.0  # its own stalled run's wall estimates the next
    assert table.loc["b", "stalled"] == 0 and table.loc["b", "points"] == 3
    both = pd.concat([marked, run_rows(("a", 16, 900)).assign(stalled=False)])  # measured again without a stall
    assert "a" not in budget.remaining_time(GRID_PLAN, both, servers)["engine_label"].tolist()


def test_a_short_budget_takes_the_shortest_points_first_after_the_start_up() -> None:
    servers = server_rows(("a1", "a", 0, 100), ("b1", "b", 400, 80), ("b2", "b", 900, 120))
    # walls: a c1 60, a c4 40, a c16 300; b c1 90. Start-ups: b 120 (its own), c 120 (any of the 8B's), big unknown
    rows = run_rows(("a", 1, 160), ("a", 4, 200), ("a", 16, 500), ("b", 1, 1110))
    points = budget.point_estimates(GRID_PLAN, rows, servers)
    assert points[["engine_label", "concurrency", "wall_s"]].values.tolist()[:5] == [
        ["b", 4, 40.0],
        ["b", 16, 300.0],
        ["c", 1, 90.0],
        ["c", 4, 40.0],
        ["c", 16, 300.0],
    ]
    fit = budget.points_within(points, budget_s=250, margin=1.0)
    # c: 120 + 40 (c4) = 160, + 90 (c1) = 250, + 300 (c16) = 550; b: 160, then 460
    assert fit[["engine_label", "concurrency", "needed_s"]].values.tolist() == [
        ["b", 4, 160.0],
        ["c", 4, 160.0],
        ["c", 1, 250.0],
    ]
    assert budget.points_within(points, budget_s=250)["needed_s"].tolist() == [200.0, 200.0]  # × 1.25: c1 no more
    assert budget.points_within(points, budget_s=150, margin=1.0).empty  # not even one point after a start-up


def test_a_load_never_measured_has_no_estimate() -> None:
    servers = server_rows(("a1", "a", 0, 100))
    table = budget.remaining_time(GRID_PLAN, run_rows(("a", 1, 160)), servers).set_index("engine_label")
    assert table.loc["a", "unknown"] == 2 and math.isnan(table.loc["a", "points_s"])
    assert math.isnan(table.loc["a", "time_limit_s"])


def test_recorded_walls_and_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    """The frozen #27462 runs and five of their server logs: the TP=2 cap-32 server launched 17:24:31 and was ready
    at 17:26:29 (118 s); its point ended 17:27:26, 57 s later. The cap-256 servers were ready 101 s (PP=1, launched
    13:56:18) and 97 s (PP=2, 14:12:20) after launch; their points at concurrency 512 ended 126 s and 123 s later.
    The first TP=2 cap-128 server started in 110 s but measured nothing."""
    from vllm_playbooks.results.store import load_runs
    from vllm_playbooks.run.budget import server_time

    servers = server_time("pp-27462", FROZEN)
    walls = budget.point_walls(load_runs("pp-27462", FROZEN), servers)
    assert walls[["engine_label", "concurrency", "wall_s"]].values.tolist() == [
        ["8b-pp1-mns256", 512, 126.0],
        ["8b-pp2-mns256", 512, 123.0],
        ["8b-tp2-mns32", 64, 57.0],
    ]
    frozen = ["--case", "pp-27462", "--data", str(FROZEN), "--gpu", "NVIDIA H200"]
    assert cli.main(["plan", *frozen, "--part", "1-8b-pp1"]) == 0  # its four points are recorded, none stalled
    assert "Nothing left to measure on this hardware." in capsys.readouterr().out.splitlines()
    assert cli.main(["plan", *frozen, "--part", "1-8b-pp1", "--budget-s", "600"]) == 0
    assert capsys.readouterr().out.strip() == "nothing left to measure on NVIDIA H200"
    # caps 128 and 256 left: the longest 8B start-up for each, the longest wall at 512 for cap 256 (none at 256);
    # two GPUs a server: (118 + 126) s × 2 = 8 GPU-minutes
    assert cli.main(["plan", *frozen, "--part", "3-8b-tp2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # beside each start-up, the shortest recorded for the shape (97 s): a server that finds the caches of one before
    assert [line.split() for line in lines[1:5]] == [
        ["8b-tp2-mns32", "llama-3.1-8b", "2", "1", "0", "—", "0", "0", "97", "0", "0", "0"],
        ["8b-tp2-mns64", "llama-3.1-8b", "2", "1", "0", "—", "0", "0", "97", "0", "0", "0"],
        ["8b-tp2-mns128", "llama-3.1-8b", "2", "0", "1", "in128-out256-c256", "1", "118", "97", "NaN", "NaN", "NaN"],
        ["8b-tp2-mns256", "llama-3.1-8b", "2", "0", "1", "in128-out256-c512", "1", "118", "97", "126", "310", "8"],
    ]
    head = next(i for i, line in enumerate(lines) if line.startswith("pp-27462 on NVIDIA H200"))
    assert lines[head] == (
        "pp-27462 on NVIDIA H200 (vLLM 0.26.0): 2 run(s) to measure, 2 already recorded for this hardware."
    )
    assert lines[head + 1].startswith(
        "Estimated: about 8 GPU-minutes, 2 server start-up(s) included; no estimate for 1 "
    )
    # then whether the part fits the GPU: every config, measured or not, with the memory per GPU it needs
    assert lines[head + 2].startswith("3-8b-tp2 fits NVIDIA H200 (") and len(lines) == head + 3 + 4
    # the same runs on another GPU are not recorded there: every run of the part is to measure
    other = [a if a != "NVIDIA H200" else "NVIDIA A100-SXM4-80GB" for a in frozen]
    assert cli.main(["plan", *other, "--part", "3-8b-tp2"]) == 0
    assert "4 run(s) to measure, 0 already recorded" in capsys.readouterr().out
    assert cli.main(["plan", *frozen, "--part", "9-nope"]) == 2
    assert "no part '9-nope'" in capsys.readouterr().err
    assert cli.main(["plan", *frozen, "--budget-s", "0"]) == 2
    assert capsys.readouterr().err == "error: --budget-s must be positive, got 0\n"


def test_a_case_with_nothing_recorded_has_no_estimates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.errors.PerformanceWarning)  # no server logs: an empty launch column
        assert cli.main(["plan", "--case", "llama-8b-draft-model", "--data", str(tmp_path), "--gpu", "GPU"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[:5] == ["spec-off", "llama-3.1-8b", "1", "0", "4"] and lines[1].split()[-5:] == ["NaN"] * 5
    # with no estimate, no point can be said to fit
    assert (
        cli.main(
            [
                "plan",
                "--case",
                "llama-8b-draft-model",
                "--data",
                str(tmp_path),
                "--gpu",
                "GPU",
                "--budget-s",
                "1800",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip() == "no point left to measure fits in 1800 s with a server's start-up"


def test_repeats_are_counted_as_runs_not_loads() -> None:
    """Three repeats planned and one recorded at a's c1: two runs of it are left, three of every other load."""
    plan = plan_from_dict(
        {
            "case": "t",
            "engine_defaults": {"model": "llama-3.1-8b", "max_model_len": 2048},
            "engines": [{"label": "a"}],
            "repeats": 3,
            "loads": {"input_len": 8, "output_len": 8, "concurrency": [1, 4], "random_range_ratio": 0.0},
        }
    )
    points = budget.point_estimates(plan, run_rows(("a", 1, 160)), server_rows(("a1", "a", 0, 100)))
    assert points["concurrency"].tolist() == [1, 1, 4, 4, 4]
    assert budget.remaining_time(plan, run_rows(("a", 1, 160)), server_rows(("a1", "a", 0, 100)))[
        "points"
    ].tolist() == [5]


def test_a_fresh_machine_pays_the_longest_start_up_once_per_shape_and_every_repeat() -> None:
    servers = server_rows(("a1", "a", 0, 100), ("b1", "b", 400, 80), ("b2", "b", 900, 120))
    rows = run_rows(("a", 1, 160), ("a", 4, 200), ("a", 16, 500), ("b", 1, 1110))  # walls a: 60, 40, 300; b c1: 90
    plan = plan_from_dict({**grid_spec(), "repeats": 3})
    table = budget.fresh_time(plan, rows, servers).set_index("engine_label")
    assert table["points"].tolist() == [9, 9, 9, 9]  # recorded or not: 3 loads × 3 repeats
    # the first 8B server finds no compile caches (the shape's longest start-up), later ones the shortest
    assert table["startup_s"].tolist()[:3] == [120.0, 80.0, 80.0]
    assert table.loc["a", "points_s"] == 3 * (60.0 + 40.0 + 300.0)  # a's own walls
    assert table.loc["b", "points_s"] == 3 * (90.0 + 40.0 + 300.0)  # its own at c1, else the shape's longest
    assert table.loc["a", "gpu_minutes"] == pytest.approx((120.0 + 1200.0) / 60)
    assert math.isnan(table.loc["big", "total_s"])  # the 70B never ran
    assert table.index[table["total_s"].isna()].tolist() == ["big"]  # the only config without an estimate
    known = budget.fresh_time(plan_from_dict({**grid_spec(), "engines": [{"label": "a"}]}), rows, servers)
    assert (len(known), int(known["points"].sum())) == (1, 3)  # 3 points on 1 server
    assert known["total_s"].sum() / 60 == pytest.approx(9.0, abs=0.5) == known["gpu_minutes"].sum()


def test_each_gpu_gets_its_own_fresh_estimate_from_its_own_servers() -> None:
    servers = server_rows(("a1", "a", 0, 100), ("a2", "a", 2000, 40)).assign(gpus=1)
    rows = pd.concat(
        [
            run_rows(("a", 1, 160), ("a", 4, 200), ("a", 16, 500)).assign(
                gpu_name="X"
            ),  # on a1, ready at 100: 60, 40, 300
            run_rows(("a", 1, 2070), ("a", 4, 2080), ("a", 16, 2140)).assign(
                gpu_name="Y"
            ),  # on a2, ready at 2040: 30, 10, 60
        ],
        ignore_index=True,
    ).assign(gpu_count=1)
    plan = plan_from_dict({**grid_spec(), "engines": [{"label": "a"}], "repeats": 1})
    tables = budget.fresh_time_per_gpu(plan, rows, servers)
    assert list(tables) == ["X", "Y"]
    assert tables["X"][["startup_s", "points_s"]].values.tolist() == [[100.0, 400.0]]
    assert tables["Y"][["startup_s", "points_s"]].values.tolist() == [[40.0, 100.0]]
    # a server that started on Y's machine and measured nothing still times a start-up there: the GPU of the row
    # measured nearest its launch, as every reader of server logs places it
    stopped = pd.concat([servers, server_rows(("a3", "a", 2200, 90)).assign(gpus=1)], ignore_index=True)
    assert budget.fresh_time_per_gpu(plan, rows, stopped)["Y"]["startup_s"].tolist() == [90.0]
    assert budget.fresh_time_per_gpu(plan, rows, stopped)["X"]["startup_s"].tolist() == [100.0]
    assert budget.fresh_time(plan, rows, servers)["total_s"].tolist() == [500.0]  # pooled: every GPU's longest
    # a GPU whose runs miss a load of the plan gets no estimate of its own
    partial = rows[~((rows["gpu_name"] == "Y") & (rows["concurrency"] == 16))]
    assert list(budget.fresh_time_per_gpu(plan, partial, servers)) == ["X"]


def test_the_quick_check_is_planned_from_the_recorded_runs(
    frozen_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the frozen #27462 copy keeps no server log of the configs the quick check runs: no estimate, and it says why
    assert page_notes.quick_check_time("pp-27462") == "no estimate yet (a shape or load of it was never measured)"
    assert page_notes.quick_check_time("nope").startswith("no estimate (Unknown case 'nope'")
    assert cli.main(["plan", "--case", "pp-27462", "--part", "quick", "--fresh"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("quick: Needs two GPUs of one host") and "no estimate for 8b-pp1-mns64" in out


@pytest.mark.recorded_data
def test_any_part_is_timed_like_the_quick_check() -> None:
    assert page_notes.part_time("gpt-oss-eagle3", "quick") == page_notes.quick_check_time("gpt-oss-eagle3")
    sweep = page_notes.part_time(
        "gpt-oss-eagle3", "decide-draft-tokens"
    )  # four servers: dearer than the quick check's two
    assert sweep.startswith("about ") and sweep.endswith("on NVIDIA H200 (1 GPU per server), vLLM 0.26.0")
    minutes = [int(text.split()[1]) for text in (sweep, page_notes.quick_check_time("gpt-oss-eagle3"))]
    assert minutes[0] > minutes[1]
    assert page_notes.part_time("gpt-oss-eagle3", "nope").startswith("no estimate (case gpt-oss-eagle3: no part 'nope'")


@pytest.mark.recorded_data
def test_the_quick_check_time_names_the_hardware_it_is_estimated_from() -> None:
    """One estimate per GPU whose runs time the whole check (the H100's and the H200's), each naming its GPU."""
    text = page_notes.quick_check_time("llama-8b-draft-model")
    pattern = r"about \d+ minutes \(\d+ GPU-minutes, start-ups included\) on [^;]+ \(1 GPU per server\), vLLM [^;]+"
    clauses = text.split("; ")
    assert all(re.fullmatch(pattern, clause) for clause in clauses), text
    assert [clause.split(" on ")[1].split(" (")[0] for clause in clauses] == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]


@pytest.mark.recorded_data
def test_plan_fresh_estimates_from_the_named_gpus_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", "--case", "load-desync", "--part", "quick", "--fresh"]) == 0
    pooled = capsys.readouterr().out
    assert "from NVIDIA H200's runs alone: 12 points on 2 servers" in pooled
    assert "from NVIDIA H100 80GB HBM3's runs alone: 12 points on 2 servers" in pooled
    assert cli.main(["plan", "--case", "load-desync", "--part", "quick", "--fresh", "--gpu", "NVIDIA H200"]) == 0
    own = capsys.readouterr().out
    assert own.rstrip().endswith("from the runs recorded on NVIDIA H200 (1 GPU per server), vLLM 0.26.0")
    assert "runs alone" not in own


def test_a_logs_engine_read_from_its_cases_recorded_configs_is_the_one_its_points_recorded() -> None:
    from vllm_playbooks.results.server_logs import all_server_logs, log_name_parts

    logs = all_server_logs(FROZEN / "runs" / "pp-27462")
    recorded = budget.recorded_engine_json("pp-27462", FROZEN)
    assert logs and {log_name_parts(log)[0] for log in logs} & set(recorded)
    for log in logs:
        assert budget.engine_for_log(log, FROZEN, recorded) == budget.engine_for_log(log, FROZEN)
    config_id = next(log_name_parts(log)[0] for log in logs if log_name_parts(log)[0] in recorded)
    engine = budget.engine_for_log(logs[0], FROZEN)
    other = {config_id: engine.model_copy(update={"max_num_seqs": 3}).model_dump_json()}  # what the caller read
    log = next(log for log in logs if log_name_parts(log)[0] == config_id)
    assert budget.engine_for_log(log, FROZEN, other).max_num_seqs == 3


def test_a_log_without_points_reads_its_planned_engine_without_the_plans_advisories(tmp_path: Path) -> None:
    """A server stopped before its first point (a log, no row) is matched to the packaged plan's engine of its id;
    reading that plan's other configs must not print their advisories (an MTP k > 1 config warns) on every page that
    times the case's servers."""
    from vllm_playbooks.config.spec_detection import SpeculativeConfigWarning
    from vllm_playbooks.run.plan import load_plan

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpeculativeConfigWarning)
        engines = load_plan("deepseek-mtp").engines
    assert any(e.speculative is not None and e.speculative.num_speculative_tokens > 1 for e in engines)
    wanted = engines[0]
    log = tmp_path / "runs" / "deepseek-mtp" / "logs" / f"{wanted.config_id()}-2026-12-07T104134+0000.log"
    log.parent.mkdir(parents=True)
    log.write_text("")
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpeculativeConfigWarning)
        assert budget.engine_for_log(log, tmp_path, recorded={}) == wanted
