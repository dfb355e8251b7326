"""The one definition of noise: a point's spread over its runs, a comparison's band, and what a change is called."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.unit.analysis.test_crossover import _rows
from vllm_playbooks.analysis import compare, crossover
from vllm_playbooks.analysis.noise import MIN_BAND_PCT, Effect, band_pct, effect_of_speedup, spread_of


def test_a_spread_is_the_range_of_the_runs_over_their_median() -> None:
    spread = spread_of([102.0, 98.0, 100.0])
    assert (spread.runs, spread.median, spread.lowest, spread.highest) == (3, 100.0, 98.0, 102.0)
    assert spread.spread_pct == pytest.approx(4.0)
    assert spread_of([7.0]).spread_pct == 0.0  # one run: no spread of its own
    assert spread_of([1.0, 3.0]).median == 2.0
    with pytest.raises(ValueError):
        spread_of([])


def test_an_outlier_repeat_moves_the_band_not_the_median() -> None:
    steady, with_outlier = spread_of([100.0, 101.0, 99.0]), spread_of([100.0, 101.0, 150.0])
    assert with_outlier.median == 101.0  # the median stays with the two runs that agree
    assert with_outlier.spread_pct == pytest.approx(100 * 50 / 101)
    assert band_pct(steady.spread_pct, with_outlier.spread_pct) == pytest.approx(with_outlier.spread_pct)
    # a 20 % difference against that point is within its noise; against the steady one it is a gain
    assert effect_of_speedup(1.20, band_pct(with_outlier.spread_pct)) is Effect.NONE
    assert effect_of_speedup(1.20, band_pct(steady.spread_pct)) is Effect.GAIN


def test_the_band_never_falls_below_the_floor() -> None:
    assert band_pct() == MIN_BAND_PCT and band_pct(0.0, 1.5) == MIN_BAND_PCT and band_pct(2.0, 12.0) == 12.0
    assert effect_of_speedup(1.0 + MIN_BAND_PCT / 100) is Effect.NONE  # at the band's edge: not yet a gain
    assert effect_of_speedup(0.94) is Effect.LOSS and effect_of_speedup(1.06) is Effect.GAIN


def test_repeats_turn_a_single_run_gain_into_within_noise() -> None:
    """Speculation +15 % at concurrency 4 is a gain on one run each; with the baseline's repeats 100 and 118 (a 17 %
    spread, their median 109), the same config's +5.5 % over that median lies within noise."""
    single = compare.versus_baseline(_rows([100, 100], [150, 115], [1, 4])).set_index("concurrency")
    assert single.loc[4, "effect"] == "gain" and single.loc[4, "band_pct"] == MIN_BAND_PCT
    rows = _rows([100, 100], [150, 115], [1, 4])
    again = rows[(rows.engine_label == "off") & (rows.concurrency == 4)].assign(output_tok_s=118.0)
    repeated = compare.versus_baseline(pd.concat([rows, again], ignore_index=True)).set_index("concurrency")
    assert repeated.loc[4, "baseline"] == pytest.approx(109.0) and repeated.loc[4, "baseline_runs"] == 2
    assert repeated.loc[4, "band_pct"] == pytest.approx(100 * 18 / 109)
    assert repeated.loc[4, "effect"] == "within noise"
    assert (
        crossover.crossover(compare.versus_baseline(_rows([100, 100], [150, 115], [1, 4]))).iloc[0]["gains_up_to"] == 4
    )
    assert crossover.crossover(compare.versus_baseline(pd.concat([rows, again]))).iloc[0]["gains_up_to"] == 1


def test_a_second_run_of_a_speculative_point_is_a_repeat_not_a_second_point() -> None:
    rows = _rows([100], [150], [4])
    again = rows[rows.engine_label == "on"].assign(output_tok_s=130.0)
    paired = compare.versus_baseline(pd.concat([rows, again], ignore_index=True))
    assert len(paired) == 1 and paired.iloc[0]["speculative"] == pytest.approx(140.0)
    assert paired.iloc[0]["speculative_runs"] == 2


def test_a_point_measured_once_borrows_the_widest_spread_its_config_showed_at_another_load() -> None:
    """The speculative config's three runs at concurrency 4 lie 40 % apart; measured once at 16, its −9 % there is
    within that noise, not a loss. Another config's spread is not borrowed, and without repeats the floor stays."""
    rows = _rows([100, 100], [100, 91], [4, 16])
    at_4 = rows[(rows.engine_label == "on") & (rows.concurrency == 4)]
    repeats = [at_4.assign(output_tok_s=v) for v in (80.0, 120.0)]  # on at 4: 100, 80, 120 → spread 40 %
    other = [at_4.assign(engine_label="other", output_tok_s=v) for v in (50.0, 150.0)]  # spread 100 %, not "on"'s
    paired = compare.versus_baseline(pd.concat([rows, *repeats, *other], ignore_index=True))
    on = paired[paired.engine_label == "on"].set_index("concurrency")
    assert on.loc[16, "speculative_runs"] == 1 and on.loc[16, "borrowed_spread_pct"] == pytest.approx(40.0)
    assert on.loc[16, "band_pct"] == pytest.approx(40.0) and on.loc[16, "effect"] == "within noise"
    assert on.loc[4, "borrowed_spread_pct"] == 0.0 and on.loc[4, "band_pct"] == pytest.approx(40.0)  # its own runs
    single = compare.versus_baseline(rows).set_index("concurrency")
    assert single.loc[16, "effect"] == "loss" and single.loc[16, "band_pct"] == MIN_BAND_PCT


def test_two_runs_that_agree_still_borrow_the_spread_their_config_showed_at_another_load() -> None:
    """Two runs at 16 that lie 1 % apart do not make the config's 40 % spread at 4 go away: fewer than three runs
    borrow it, three or more stand on their own."""
    rows = _rows([100, 100], [100, 91], [4, 16])
    at_4 = rows[(rows.engine_label == "on") & (rows.concurrency == 4)]
    at_16 = rows[(rows.engine_label == "on") & (rows.concurrency == 16)]
    repeats = [at_4.assign(output_tok_s=v) for v in (80.0, 120.0)] + [at_16.assign(output_tok_s=91.9)]
    on = compare.versus_baseline(pd.concat([rows, *repeats], ignore_index=True)).set_index("concurrency")
    assert on.loc[16, "speculative_runs"] == 2 and on.loc[16, "speculative_spread_pct"] < 1.5
    assert on.loc[16, "borrowed_spread_pct"] == pytest.approx(40.0) and on.loc[16, "effect"] == "within noise"
    third = compare.versus_baseline(pd.concat([rows, *repeats, at_16.assign(output_tok_s=91.5)], ignore_index=True))
    settled = third.set_index("concurrency").loc[16]
    assert settled["speculative_runs"] == 3 and settled["borrowed_spread_pct"] == 0.0 and settled["effect"] == "loss"


def test_a_run_is_disturbed_by_steal_load_or_a_slow_gpu_clock_and_not_by_missing_readings() -> None:
    from vllm_playbooks.analysis.noise import Disturbance, host_disturbances

    calm = host_disturbances(steal_pct=0.5, load_1m_max=3.0, cpu_count=16, sm_clock_mhz=1980, top_sm_clock_mhz=1980)
    assert calm == ()
    assert host_disturbances(2.0, 3.0, 16, 1980, 1980) == (Disturbance.STEAL,)
    assert host_disturbances(0.0, 16.0, 16, 1980, 1980) == (Disturbance.LOAD,)
    assert host_disturbances(0.0, 1.0, 16, 0.9 * 1980, 1980) == (Disturbance.GPU_CLOCK,)
    assert host_disturbances(0.0, 1.0, 16, 0.91 * 1980, 1980) == ()
    assert host_disturbances(5.0, 40.0, 16, 1000, 1980) == tuple(Disturbance)
    nan = float("nan")
    assert host_disturbances(None, None, None, None, None) == () == host_disturbances(nan, nan, nan, nan, nan)
