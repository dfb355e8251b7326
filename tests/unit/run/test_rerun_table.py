"""The rerun table (``run.rerun_table``): each part's GPUs, memory and minutes are ``plan``'s own."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from vllm_playbooks.config.pairing import BY_RESTART, CO_RESIDENT
from vllm_playbooks.results.store import load_runs
from vllm_playbooks.run import rerun_table
from vllm_playbooks.run.budget import fresh_time_per_gpu, server_time, server_values, startups_by_shape
from vllm_playbooks.run.hardware_plan import least_gpu_memory_gib, part_fits
from vllm_playbooks.run.plan import load_part, paired_for_memory, part_overrides

#: The DeepSeek case's parts on the 32-expert shape (more than 80 GB) and on the 16-expert one that fits 80 GB.
FULL_SIZE = ["1-verdict", "2-concurrency", "3-acceptance", "4-k-sweep"]
FIT80 = ["quick", "decide-v3-speedup", "decide-pr12755", "7-fit80"]


def test_the_parts_come_quick_first_then_those_that_decide_then_the_grid_each_once() -> None:
    parts = [part.name for part in rerun_table.table_parts("deepseek-mtp")]
    assert parts == [
        "quick",
        "decide-v3-speedup",
        "decide-pr12755",
        "1-verdict",
        "2-concurrency",
        "3-acceptance",
        "4-k-sweep",
        "5-mimo",
        "6-scale",
        "7-fit80",
    ]
    assert [part.name for part in rerun_table.table_parts("discussion-13834")] == ["quick", "all"]  # quick decides


def test_the_deepseek_rows_hold_plans_memory_and_fit_without_recorded_runs(tmp_path: Path) -> None:
    table = rerun_table.rerun_table(80.0, ["deepseek-mtp"], data=tmp_path).set_index("part")
    for part in FULL_SIZE + FIT80:
        plan = load_part("deepseek-mtp", part)
        assert table.loc[part, "min_gib"] == least_gpu_memory_gib(plan)
        assert table.loc[part, "fits"] == bool(part_fits(plan, 80.0)["fits"].all())
        assert table.loc[part, "points"] == len(plan.points())
    assert (table.loc[FULL_SIZE, "min_gib"] >= 119.6).all() and not table.loc[FULL_SIZE, "fits"].any()
    assert (table.loc[FIT80, "min_gib"] < 80.0).all() and table.loc[FIT80, "fits"].all()
    assert table.loc["decide-v3-speedup", "decides"] == "deepseek-v3-mtp-speedup"
    assert (table["gpus"] == 1).all()
    minutes = table[[f"minutes_{model}" for model in rerun_table.GPU_MODELS]]
    assert minutes.isna().all().all()  # no recorded run: no estimate on any GPU


def test_on_more_memory_the_full_size_parts_fit_too(tmp_path: Path) -> None:
    table = rerun_table.rerun_table(139.8, ["deepseek-mtp"], data=tmp_path)
    assert table["fits"].all()


def test_two_gpus_per_server_show_in_the_gpus_column(tmp_path: Path) -> None:
    table = rerun_table.rerun_table(80.0, ["pp-27462"], data=tmp_path).set_index("part")
    assert table.loc["1-8b-pp1", "gpus"] == 1 and table.loc["2-8b-pp2", "gpus"] == 2


@pytest.mark.recorded_data
def test_the_minutes_are_those_fresh_time_per_gpu_gives_per_gpu_model() -> None:
    table = rerun_table.rerun_table(80.0, ["deepseek-mtp"]).set_index("part")
    plan = load_part("deepseek-mtp", "1-verdict")
    per_gpu = fresh_time_per_gpu(plan, load_runs("deepseek-mtp"), server_time("deepseek-mtp"))
    assert list(per_gpu) == ["NVIDIA H200"]
    assert table.loc["1-verdict", "minutes_H200"] == pytest.approx(per_gpu["NVIDIA H200"]["total_s"].sum() / 60)
    assert math.isnan(table.loc["1-verdict", "minutes_A100-80GB"])  # no A100 run recorded


def test_a_paired_part_needs_the_memory_of_its_servers_run_by_restart(tmp_path: Path) -> None:
    table = rerun_table.rerun_table(80.0, ["discussion-13834"], data=tmp_path).set_index("part")
    by_restart = load_part("discussion-13834", "quick", paired=False)
    assert load_part("discussion-13834", "quick").pairing is not None
    assert table.loc["quick", "min_gib"] == least_gpu_memory_gib(by_restart) < 80.0
    assert table.loc["quick", "fits"]


def test_a_paired_part_is_timed_by_restart_on_an_80_gb_model_each_restart_at_the_shortest_start_up() -> None:
    case, measured, servers = "discussion-13834", load_runs("discussion-13834"), server_time("discussion-13834")
    paired, unpaired = load_part(case, "quick"), load_part(case, "quick", paired=False)
    on_h100 = paired_for_memory(case, paired, 80.0, **part_overrides(case, "quick"))
    assert (
        on_h100.pairing == BY_RESTART
        and paired_for_memory(case, paired, 141.0, **part_overrides(case, "quick")).pairing == CO_RESIDENT
    )
    gpu = "NVIDIA H100 80GB HBM3"
    restarted, once = (fresh_time_per_gpu(p, measured, servers)[gpu] for p in (on_h100, unpaired))
    shape = restarted["model_shape"].iloc[0]
    on_gpu = [name == gpu for name in server_values(measured, servers, "gpu_name")]
    shortest = startups_by_shape(on_h100, measured[measured["gpu_name"] == gpu], servers[on_gpu])[2][shape]
    # A | B B | A A | B: each server starts twice, the second time finding the compile caches
    assert (restarted["startup_s"] - once["startup_s"]).tolist() == pytest.approx([shortest, shortest])
    table = rerun_table.rerun_table(80.0, [case]).set_index("part")
    assert table.loc["quick", "minutes_H100"] == pytest.approx(restarted["total_s"].sum() / 60)
