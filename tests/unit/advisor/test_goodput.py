"""Goodput under an SLO, from a point's p99s, and the grid best it is scored against."""

from __future__ import annotations

import math

import pytest

from tests.unit.advisor.grids import frame, row
from vllm_playbooks.advisor.goodput import (
    Slo,
    goodput_rps,
    grid_best,
    point_name,
    point_table,
    slo_levels,
    with_grid_columns,
)
from vllm_playbooks.errors import ConfigError


def test_a_point_meets_an_slo_only_when_every_bound_set_holds() -> None:
    both = Slo(tpot_p99_ms=10.0, ttft_p99_ms=200.0)
    assert goodput_rps(both, 10.0, 200.0, 7.5) == 7.5  # at the bound counts
    assert goodput_rps(both, 10.1, 100.0, 7.5) == 0.0
    assert goodput_rps(both, 5.0, 201.0, 7.5) == 0.0
    assert goodput_rps(Slo(tpot_p99_ms=10.0), 5.0, 1e6, 7.5) == 7.5  # TTFT free
    assert both.label() == "TPOT p99 ≤ 10 ms, TTFT p99 ≤ 200 ms"


@pytest.mark.parametrize("kwargs", [{}, {"tpot_p99_ms": 0.0}, {"ttft_p99_ms": -1.0}, {"tpot_p99_ms": math.nan}])
def test_an_slo_without_a_positive_bound_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        Slo(**kwargs)


def test_a_point_is_the_median_of_its_repeats_and_the_grid_best_its_highest_goodput() -> None:
    rows = frame(
        [
            row("a", 1, 5.0, 1.0),
            row("a", 1, 9.0, 3.0, repeat=1),
            row("a", 1, 6.0, 2.0, repeat=2),
            row("a", 16, 7.0, 15.0),
            row("b", 16, 12.0, 20.0),
        ]
    )
    points = point_table(rows)
    a1 = points[(points.engine_label == "a") & (points.concurrency == 1)].iloc[0]
    assert (a1.runs, a1.tpot_p99_ms, a1.request_throughput_rps) == (3, 6.0, 2.0)
    best = grid_best(points, Slo(tpot_p99_ms=8.0))
    assert best is not None and point_name(best.engine_label, best.concurrency, best.request_rate_qps) == "a @ c16"
    assert grid_best(points, Slo(tpot_p99_ms=13.0))["engine_label"] == "b"  # type: ignore[index]
    assert grid_best(points, Slo(tpot_p99_ms=1.0)) is None


def test_slo_levels_sit_at_the_quartiles_of_the_grid_tpot_p99() -> None:
    rows = frame([row("a", c, t, 1.0) for c, t in ((1, 4.0), (2, 6.0), (4, 8.0), (8, 10.0), (16, 12.0))])
    assert [(n, s.tpot_p99_ms) for n, s in slo_levels(point_table(rows))] == [
        ("tight", 6.0),
        ("medium", 8.0),
        ("loose", 10.0),
    ]


def test_a_rate_load_is_its_own_kind_of_grid() -> None:
    rows = frame([row("a", 1, 5.0, 1.0), {**row("a", 1, 5.0, 1.0), "concurrency": math.nan, "request_rate_qps": 2.0}])
    assert list(with_grid_columns(rows)["load_kind"]) == ["concurrency", "rate"]
    assert point_name("x", math.nan, 2.0) == "x @ 2 req/s" and point_name("x", 4.0, math.nan) == "x @ c4"
