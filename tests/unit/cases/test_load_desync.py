"""The load-shape case: medians over repeats, how the shape moves each side, the gain under each shape, what is left."""

from __future__ import annotations

import pandas as pd
import pytest

from vllm_playbooks.analysis import cards
from vllm_playbooks.cases import load_desync
from vllm_playbooks.run.plan import load_plan


def _rows(values: dict[tuple[str, int, float], list[float]]) -> pd.DataFrame:
    """Rows of the load-desync shape: {(label, concurrency, random_range_ratio): [output tok/s of each run]}."""
    base = {
        "case": "load-desync",
        "model_shape": "llama-3.1-8b",
        "load_format": "dummy",
        "input_len": 512,
        "output_len": 128,
        "request_rate_qps": None,
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "max_num_seqs": 256,
        "max_num_batched_tokens": 8192,
        "gpu_name": "NVIDIA H200",
        "imposed_acceptance_rates": None,
        "engine_config_json": None,
    }
    records = []
    for (label, concurrency, ratio), runs in values.items():
        off = label == "spec-off"
        for value in runs:
            records.append(
                {
                    **base,
                    "engine_label": label,
                    "concurrency": concurrency,
                    "random_range_ratio": ratio,
                    "spec_method": "none" if off else "draft_model",
                    "num_speculative_tokens": 0 if off else 4,
                    "imposed_alpha": None if off else 0.8,
                    "output_tok_s": value,
                    "tpot_p50_ms": 1000.0 / value,
                }
            )
    return pd.DataFrame(records)


ROWS_VALUES = {
    ("spec-off", 16, 0.0): [2300.0, 2340.0, 2320.0],
    ("spec-off", 16, 0.5): [2100.0, 2110.0, 2120.0],
    ("draft", 16, 0.0): [2300.0, 1900.0, 2100.0],
    ("draft", 16, 0.5): [1580.0, 1590.0],
}
ROWS = _rows(ROWS_VALUES)


def test_a_point_is_the_median_of_its_runs_with_their_spread() -> None:
    spreads = load_desync.point_spreads(ROWS).set_index(["engine_label", "lengths"])
    assert spreads.loc[("draft", "fixed"), ["runs", "median", "lowest", "highest"]].tolist() == [
        3,
        2100.0,
        1900.0,
        2300.0,
    ]
    assert spreads.loc[("draft", "fixed"), "spread_pct"] == pytest.approx(100 * 400 / 2100)
    assert spreads.loc[("spec-off", "±50 %"), "runs"] == 3


def test_the_shape_moves_a_steady_side_beyond_noise_and_a_noisy_one_within_it() -> None:
    moved = load_desync.shape_effect(ROWS).set_index("engine_label")
    assert moved.loc["spec-off", "change_pct"] == pytest.approx(100 * (2110 / 2320 - 1))
    assert moved.loc["spec-off", "moved"] == "lower" and moved.loc["spec-off", "band_pct"] == 5.0
    # the draft's fixed-length runs lie 19 % apart: its -24.6 % is beyond that band, a -15 % would not be
    assert moved.loc["draft", "moved"] == "lower"
    noisier = _rows({("draft", 16, 0.0): [2300.0, 1900.0, 2100.0], ("draft", 16, 0.5): [1790.0]})
    assert load_desync.shape_effect(noisier).iloc[0]["moved"] == "within noise"
    latency = load_desync.shape_effect(ROWS, "tpot_p50_ms").set_index("engine_label")
    assert latency.loc["spec-off", "moved"] == "higher"  # lower throughput per request, longer per token


def test_the_gain_under_each_shape_and_how_far_the_shape_moves_it() -> None:
    gains = load_desync.gain_by_shape(ROWS)
    assert gains["lengths"].tolist() == ["fixed", "±50 %"]
    assert gains["change_pct"].tolist() == pytest.approx([100 * (2100 / 2320 - 1), 100 * (1585 / 2110 - 1)])
    shift = load_desync.gain_shift(gains).iloc[0]
    assert shift["shift_pts"] == pytest.approx(gains["change_pct"].iloc[1] - gains["change_pct"].iloc[0])
    # a shift of 15 points inside the draft's 19 % spread is not a shift yet; with steady draft runs it is
    assert shift["band_pct"] == pytest.approx(100 * 400 / 2100) and not shift["beyond_noise"]
    steady = _rows(
        {
            **{k: v for k, v in ROWS_VALUES.items() if k[0] == "spec-off"},
            ("draft", 16, 0.0): [2090.0, 2100.0, 2110.0],
            ("draft", 16, 0.5): [1580.0, 1590.0],
        }
    )
    assert bool(load_desync.gain_shift(load_desync.gain_by_shape(steady)).iloc[0]["beyond_noise"])


def test_a_gain_says_on_how_many_gpu_cards_its_two_sides_ran() -> None:
    # fixed lengths: both sides on one card; varied: the draft on another machine's card than speculation off
    card_of = {
        ("spec-off", 0.0): ["GPU-a"] * 3,
        ("draft", 0.0): ["GPU-a"] * 3,
        ("spec-off", 0.5): ["GPU-a"] * 3,
        ("draft", 0.5): ["GPU-b", ""],
    }  # the second draft run was recorded without its card
    sides = zip(ROWS["engine_label"], ROWS["random_range_ratio"], strict=True)
    rows = ROWS.assign(gpu_cards=[card_of[side].pop(0) for side in sides])
    gains = load_desync.with_cards(load_desync.gain_by_shape(rows), rows)
    assert gains.set_index("lengths")["cards"].to_dict() == {"fixed": 1, "±50 %": 2}


def test_the_opening_reads_the_top_load_of_one_gpus_rows() -> None:
    rows = pd.concat(
        [
            ROWS,
            _rows(
                {
                    ("spec-off", 64, 0.0): [4000.0] * 3,
                    ("spec-off", 64, 0.5): [4400.0] * 3,
                    ("draft", 64, 0.0): [3000.0] * 3,
                    ("draft", 64, 0.5): [3900.0] * 3,
                }
            ),
        ]
    )
    summary = load_desync.at_top_load(rows, metrics=("output_tok_s", "tpot_p50_ms"))
    assert summary["concurrency"] == 64  # the highest load, not the first
    assert summary["output_tok_s_change_pct"] == pytest.approx(10.0) and summary["output_tok_s_moved"] == "higher"
    assert summary["tpot_p50_ms_moved"] == "lower"
    assert summary["gain_fixed_pct"] == pytest.approx(-25.0) and summary["effect_fixed"] == "loss"
    assert summary["gain_varied_pct"] == pytest.approx(100 * (3900 / 4400 - 1)) and summary["effect_varied"] == "loss"
    # a top load without the draft's varied lengths is not the page's top load; without any complete load, nothing
    dropped = (rows["concurrency"] == 64) & (rows["engine_label"] == "draft") & (rows["random_range_ratio"] > 0)
    partial = rows[~dropped]
    assert load_desync.at_top_load(partial, metrics=("output_tok_s",))["concurrency"] == 16
    assert load_desync.at_top_load(partial[partial["random_range_ratio"] == 0]) is None
    assert load_desync.at_top_load(rows.iloc[0:0]) is None


def test_the_points_left_are_those_with_fewer_runs_than_planned() -> None:
    plan = load_plan("load-desync", engines=["spec-off"], concurrency=[16])
    assert load_desync.runs_left(plan, ROWS).empty  # both length modes of spec-off at 16 have three runs
    left = load_desync.runs_left(load_plan("load-desync", engines=["spec-off"], concurrency=[16, 64]), ROWS)
    assert left[["concurrency", "lengths", "runs", "planned"]].values.tolist() == [
        [64, "fixed", 0, 3],
        [64, "±50 %", 0, 3],
    ]
    assert load_desync.baseline_label(ROWS) == "spec-off"


def test_a_gain_judged_on_one_card_at_a_time_shows_what_the_machine_moved() -> None:
    # speculation off is steady on both machines; the draft gains on card b and loses on card a at fixed lengths
    values = {
        ("spec-off", 16, 0.0): [1900.0, 1910.0, 1920.0, 1930.0],
        ("draft", 16, 0.0): [1650.0, 1640.0, 2290.0, 2190.0],
        ("spec-off", 16, 0.5): [1890.0, 1900.0],
        ("draft", 16, 0.5): [2250.0],
    }
    card_of = {
        ("spec-off", 0.0): ["GPU-aaaaaaaa-1", "GPU-aaaaaaaa-1", "GPU-bbbbbbbb-2", "GPU-bbbbbbbb-2"],
        ("draft", 0.0): ["GPU-aaaaaaaa-1", "GPU-aaaaaaaa-1", "GPU-bbbbbbbb-2", "GPU-bbbbbbbb-2"],
        ("spec-off", 0.5): ["GPU-bbbbbbbb-2", ""],
        ("draft", 0.5): ["GPU-bbbbbbbb-2"],
    }
    rows = _rows(values)
    sides = zip(rows["engine_label"], rows["random_range_ratio"], strict=True)
    rows = rows.assign(gpu_cards=[card_of[side].pop(0) for side in sides])
    by_card = load_desync.gain_by_card(rows).set_index(["lengths", "card"])
    assert by_card.loc[("fixed", "GPU-aaaaaaaa"), "change_pct"] == pytest.approx(100 * (1645 / 1905 - 1))
    assert by_card.loc[("fixed", "GPU-aaaaaaaa"), "effect"] == "loss"
    assert by_card.loc[("fixed", "GPU-bbbbbbbb"), "change_pct"] == pytest.approx(100 * (2240 / 1925 - 1))
    assert by_card.loc[("fixed", "GPU-bbbbbbbb"), "effect"] == "gain"
    # all four runs pooled, the two machines cancel out into "within noise"
    pooled = load_desync.gain_by_shape(rows).set_index("lengths")
    assert pooled.loc["fixed", "effect"] == "within noise"
    # the run without its card is left out: card b's ±50 % line rests on one run of each side
    assert by_card.loc[("±50 %", "GPU-bbbbbbbb"), ["baseline_runs", "speculative_runs"]].tolist() == [1, 1]
    swings = cards.card_swings(load_desync.gain_by_card(rows), load_desync.CARD_SWING_KEYS)
    assert swings["lengths"].tolist() == ["fixed"]  # the ±50 % point ran on one card only
    swing = swings.iloc[0]
    assert (swing["lowest_card"], swing["highest_card"], swing["cards"]) == ("GPU-aaaaaaaa", "GPU-bbbbbbbb", 2)
    assert (swing["lowest_effect"], swing["highest_effect"]) == ("loss", "gain")
    assert swing["swing_pts"] == pytest.approx(swing["highest_pct"] - swing["lowest_pct"])
    assert load_desync.gain_by_card(rows.assign(gpu_cards="")).empty
