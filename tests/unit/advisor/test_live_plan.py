"""What a live search chooses from and pays: the one planned grid the filters pick, and each point's price from the
plan's estimates."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FROZEN
from vllm_playbooks.advisor.grids import GridFilter
from vllm_playbooks.advisor.live_plan import live_grid, live_prices
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.run.plan import load_plan


def test_the_grid_is_one_shape_lengths_load_kind_and_acceptance_scenario_of_the_plan() -> None:
    plan = load_plan("gpt-oss-eagle3")
    with pytest.raises(
        ConfigError,
        match="6 planned grids of gpt-oss-eagle3 match; pick one of: --model-shape "
        "gpt-oss-120b --input-len 230 --output-len 203 --load concurrency "
        "--acceptance '0.61'",
    ):
        live_grid(plan)
    with pytest.raises(ConfigError, match="3 planned grids"):  # three acceptances imposed on the chat profile
        live_grid(plan, GridFilter(input_len=230))
    chat = live_grid(plan, GridFilter(input_len=230, acceptance="0.710"))
    assert chat.key == {
        "case": "gpt-oss-eagle3",
        "model_shape": "gpt-oss-120b",
        "input_len": 230,
        "output_len": 203,
        "load_kind": "concurrency",
        "acceptance": "0.71",
    }
    # speculation off and k = 2..5 at α 0.71: the k=3 configs at α 0.61 and 0.81 are other models, not other choices
    assert sorted(e.label for e in chat.engines()) == [
        "eagle3-k2-a0.71",
        "eagle3-k3-a0.71",
        "eagle3-k4-a0.71",
        "eagle3-k5-a0.71",
        "spec-off",
    ]
    assert len(chat.points) == 5 * 9
    catalog = chat.catalog()
    assert set(catalog["concurrency"]) == {1, 2, 4, 8, 16, 32, 64, 128, 200}
    assert catalog["request_rate_qps"].isna().all()
    few = live_grid(plan, GridFilter(input_len=230, acceptance="0.81", max_concurrency=8))
    assert set(few.catalog()["concurrency"]) == {1, 2, 4, 8} and len(few.engines()) == 2
    with pytest.raises(ConfigError, match="0 planned grids"):
        live_grid(plan, GridFilter(input_len=231))


def test_prices_are_the_plans_estimates_times_the_gpus_a_config_uses(frozen_data: Path) -> None:
    from vllm_playbooks.results.store import load_runs
    from vllm_playbooks.run.budget import point_walls, server_time

    plan = load_plan("pp-27462", engines=["8b-pp1-mns256", "8b-pp2-mns256"])  # both 8B, at concurrency 512
    grid = live_grid(plan)
    prices = live_prices(plan, grid, frozen_data)
    servers = server_time("pp-27462", frozen_data)
    walls = point_walls(load_runs("pp-27462", frozen_data), servers)
    # every recorded server is of the 8B shape: the longest start-up, and the longest wall recorded at 512 clients
    wall, startup = float(walls.loc[walls["concurrency"] == 512, "wall_s"].max()), float(servers["startup_s"].max())
    one, two = (grid.catalog().iloc[i].to_dict() for i in (0, 1))
    assert prices.run_estimate(one) == wall and prices.startup_estimate(one["config_id"]) == startup
    assert prices.run_estimate(two) == 2 * wall and prices.startup_estimate(two["config_id"]) == 2 * startup  # PP=2
    assert prices.grid_gpu_s() == 3 * (wall + startup)
    never = load_plan("pp-27462", engines=["8b-pp1-mns256"], concurrency=[3])
    with pytest.raises(ConfigError, match=r"no GPU-time estimate for 8b-pp1-mns256 @ c3: .* never ran at that load"):
        live_prices(never, live_grid(never), FROZEN)
