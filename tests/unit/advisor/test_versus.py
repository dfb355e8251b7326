"""The advisor beside the baselines: a tie within the grid's own spread, the runs a grid rests on, the comparison
table and the done-when targets read from it."""

from __future__ import annotations

import math

import pandas as pd

from tests.unit.advisor.grids import frame, row
from vllm_playbooks.advisor.versus import POLICIES, comparison, grid_noise, noise_tie, scored_ratio, targets


def test_a_grid_best_within_the_grids_spread_of_the_choice_is_a_tie() -> None:
    assert noise_tie(5.8, 6.2, spread_pct=10.0)  # 6.9 % ahead, within a 10 % spread
    assert not noise_tie(5.8, 6.5, spread_pct=10.0)  # 12 % ahead
    assert not noise_tie(5.8, 6.2, spread_pct=math.nan)  # points that ran once: no measured spread, no tie
    assert not noise_tie(0.0, 0.1, spread_pct=1000.0)  # an answer that misses the SLO ties nothing
    assert scored_ratio({"tie_by_noise": True, "goodput_ratio": 0.9}) == 1.0
    assert scored_ratio({"tie_by_noise": False, "goodput_ratio": 0.9}) == 0.9


def test_grid_noise_counts_runs_per_point_and_takes_the_median_spread_of_the_repeated_points() -> None:
    rows = frame(
        [
            row("a", 1, 5.0, 10.0),
            row("a", 1, 5.0, 11.0, repeat=1),
            row("a", 1, 5.0, 12.0, repeat=2),
            row("a", 4, 5.0, 20.0),
            row("a", 4, 5.0, 22.0, repeat=1),
            row("a", 16, 5.0, 30.0),
        ]
    )
    noise = grid_noise(rows)
    # runs 3, 2, 1; spreads (12 − 10) / 11 = 18.2 % and (22 − 20) / 21 = 9.5 %
    assert noise["grid_runs_median"] == 2.0 and noise["grid_points_repeated"] == 2.0
    assert abs(noise["grid_spread_pct"] - (200 / 11 + 200 / 21) / 2) < 1e-9
    assert math.isnan(grid_noise(frame([row("a", 1, 5.0, 10.0)]))["grid_spread_pct"])


def _table() -> pd.DataFrame:
    """Four pairs per policy at the whole budget: the advisor cheap and right, the sweep dear and right, auto_tune
    cheap and wrong once, the GuideLLM sweep with no answer once."""
    lines = []
    numbers = {
        "advisor": ([1.0, 1.0, 0.9, 1.0], [2.0, 3.0, 4.0, 5.0], [True] * 4),
        "exhaustive sweep": ([1.0] * 4, [10.0, 10.0, 12.0, 12.0], [True] * 4),
        "auto_tune.sh": ([1.0, 0.0, 1.0, 1.0], [6.0, 7.0, 8.0, 9.0], [True] * 4),
        "guidellm sweep": ([1.0, 1.0, 1.0, 0.0], [8.0] * 4, [True, True, True, False]),
    }
    for policy, (ratios, minutes, answered) in numbers.items():
        for ratio, minute, answer in zip(ratios, minutes, answered, strict=True):
            lines.append(
                {
                    "budget_share": 1.0,
                    "policy": policy,
                    "scored_ratio": ratio,
                    "tie_by_noise": ratio == 0.9,
                    "gpu_minutes": minute,
                    "answered": answer,
                }
            )
    return pd.DataFrame(lines)


def test_the_comparison_gives_each_policys_ratios_gpu_minutes_and_pairs_with_no_answer() -> None:
    table = comparison(_table(), 1.0)
    assert list(table["policy"]) == list(POLICIES)
    ours = table.iloc[0]
    assert (ours["median_ratio"], ours["worst_ratio"], ours["median_gpu_minutes"], ours["no_answer"]) == (
        1.0,
        0.9,
        3.5,
        0,
    )
    assert list(table["no_answer"]) == [0, 0, 0, 1] and list(table["median_gpu_minutes"]) == [3.5, 11.0, 7.5, 8.0]
    assert comparison(_table(), 0.5).empty


def test_the_targets_compare_the_gpu_minutes_with_the_cheapest_baseline_as_good_or_better() -> None:
    met = targets(_table(), 1.0)
    # every baseline's median ratio is 1.0, the advisor's too: the cheapest of them spends 7.5 GPU-min a pair
    assert met["cheapest_baseline_gpu_minutes"] == 7.5 and met["median_gpu_minutes"] == 3.5
    assert met["gpu_minutes_met"] == 1.0 and met["worst_ratio_met"] == 1.0 and met["answers_met"] == 1.0
    dear = _table()
    dear.loc[dear["policy"] == "advisor", "gpu_minutes"] = 4.0
    assert targets(dear, 1.0)["gpu_minutes_met"] == 0.0  # 4 > 0.5 × 7.5
    worse = _table()
    worse.loc[worse["policy"] == "advisor", "scored_ratio"] = [0.8, 1.0, 1.0, 1.0]
    assert targets(worse, 1.0)["worst_ratio_met"] == 0.0
