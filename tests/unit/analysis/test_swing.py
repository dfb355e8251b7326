"""A point's runs beside their readings: the spread, the GPU busy share and clock, the host, and how closely the
throughput follows the busy share."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from vllm_playbooks.analysis.swing import SWING_COLUMNS, busy_correlation, point_swings


def _runs(label: str, concurrency: int, tok_s: list[float], busy: list[float], clock: float = 1980.0) -> list[dict]:
    return [
        {
            "gpu_name": "NVIDIA H100 80GB HBM3",
            "engine_label": label,
            "concurrency": concurrency,
            "output_tok_s": t,
            "gpu_util_pct_mean": b,
            "gpu_sm_clock_mhz_mean": clock,
            "host_steal_pct": 0.01,
            "host_load_1m_max": 1.1,
        }
        for t, b in zip(tok_s, busy, strict=True)
    ]


def test_a_swing_that_follows_the_gpu_busy_share_at_a_steady_clock() -> None:
    rows = pd.DataFrame(
        _runs("draft", 1, [225.0, 196.0, 223.0], [87.0, 76.0, 86.0])
        + _runs("draft", 16, [2381.0, 2280.0, 2433.0], [85.0, 81.0, 87.0])
        + _runs("off", 1, [161.7, 161.8, 161.9], [98.4, 98.7, 98.4])
        + _runs("lone", 4, [100.0], [90.0])
    )
    table = point_swings(rows)
    assert list(table.columns) == SWING_COLUMNS
    assert table[["engine_label", "concurrency"]].values.tolist() == [["draft", 1], ["draft", 16], ["off", 1]]
    split = point_swings(rows.assign(gpu_name=["A", "B", "A"] * 3 + ["A"]))  # a GPU's runs are a point of their own
    assert split[["gpu_name", "runs"]].values.tolist() == [["A", 2]] * 3
    draft = table.iloc[0]
    assert draft["spread_pct"] == pytest.approx(100 * (225 - 196) / 223)
    assert (draft["gpu_busy_pct_low"], draft["gpu_busy_pct_high"]) == (76.0, 87.0)
    assert draft["sm_clock_mhz_low"] == draft["sm_clock_mhz_high"] == 1980.0
    assert busy_correlation(rows) > 0.9  # the throughput rises and falls with the busy share


def test_no_correlation_without_enough_runs_or_variation() -> None:
    assert busy_correlation(pd.DataFrame(_runs("a", 1, [1.0, 2.0], [50.0, 60.0]))) is None  # two runs
    steady = pd.DataFrame(_runs("a", 1, [1.0, 2.0, 3.0], [50.0, 50.0, 50.0]))
    assert busy_correlation(steady) is None  # the busy share does not vary
    opposite = pd.DataFrame(_runs("a", 1, [1.0, 2.0, 3.0], [60.0, 50.0, 40.0]))
    assert math.isclose(busy_correlation(opposite), -1.0)
