"""The oracle reveals a point only once its GPU time is paid, charges a server start-up once per config, and never
spends past its budget."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.unit.advisor.grids import HARDWARE, frame, row, startups
from vllm_playbooks.advisor.goodput import METRIC_COLUMNS
from vllm_playbooks.advisor.oracle import (
    CATALOG_COLUMNS,
    BudgetError,
    LiveOracle,
    RecordedOracle,
    UnpaidPointError,
    point_key,
    prices_per_hardware,
    recorded_prices,
)


def _grid() -> pd.DataFrame:
    return frame(
        [
            row("a", 1, 5.0, 1.5, gpu_s=30.0),
            row("a", 1, 5.2, 1.4, repeat=1, gpu_s=35.0),
            row("a", 16, 7.0, 15.0, gpu_s=50.0),
            row("b", 1, 4.0, 1.8, gpu_s=60.0),
        ]
    )


def test_rows_of_a_point_not_paid_for_are_refused() -> None:
    rows = _grid()
    oracle = RecordedOracle(rows, startups(rows), budget_gpu_s=1000.0)
    key = point_key(rows.iloc[0].to_dict())
    with pytest.raises(UnpaidPointError):
        oracle.rows(key)
    oracle.pay(key)
    assert [r["tpot_p99_ms"] for r in oracle.rows(key)] == [5.0]  # one repeat paid, one repeat seen
    with pytest.raises(UnpaidPointError):
        oracle.rows(point_key(rows.iloc[3].to_dict()))


def test_the_catalog_holds_no_measured_number() -> None:
    rows = _grid()
    catalog = RecordedOracle(rows, startups(rows), budget_gpu_s=1000.0).catalog()
    assert list(catalog.columns) == list(CATALOG_COLUMNS)
    assert not set(METRIC_COLUMNS) & set(catalog.columns) and "gpu_s" not in catalog.columns
    assert len(catalog) == 3  # points, not repeats


def test_a_start_up_is_charged_the_first_time_a_config_is_touched_and_each_repeat_its_own_time() -> None:
    rows = _grid()
    oracle = RecordedOracle(rows, startups(rows, 100.0), budget_gpu_s=1000.0)
    a1, a16 = point_key(rows.iloc[0].to_dict()), point_key(rows.iloc[2].to_dict())
    assert oracle.price(a1) == 130.0
    oracle.pay(a1)
    assert oracle.price(a1) == 35.0 and oracle.price(a16) == 50.0  # the server is up: no second start-up
    oracle.pay(a1)
    oracle.pay(a16)
    assert oracle.spent_gpu_s == 215.0 and [p.startup_gpu_s for p in oracle.payments] == [100.0, 0.0, 0.0]
    assert oracle.full_grid_gpu_s() == 30.0 + 35.0 + 50.0 + 60.0 + 200.0


def test_no_payment_past_the_budget_or_past_the_recorded_repeats() -> None:
    rows = _grid()
    oracle = RecordedOracle(rows, startups(rows, 100.0), budget_gpu_s=150.0)
    b1 = point_key(rows.iloc[3].to_dict())
    with pytest.raises(BudgetError):
        oracle.pay(b1)  # 160 GPU-s
    assert oracle.spent_gpu_s == 0.0 and oracle.payments == []
    a16 = point_key(rows.iloc[2].to_dict())
    oracle.pay(a16)
    assert oracle.repeats_left(a16) == 0
    with pytest.raises(BudgetError):
        oracle.pay(a16)
    with pytest.raises(BudgetError):
        RecordedOracle(rows, startups(rows), budget_gpu_s=0.0)


def test_one_oracle_holds_one_hardware() -> None:
    rows = _grid()
    rows.loc[0, "hardware"] = "nvidia-h200-x2-vllm0.26.0"
    with pytest.raises(BudgetError):
        RecordedOracle(rows, startups(rows), budget_gpu_s=100.0)


def test_the_live_oracle_reveals_recorded_rows_of_the_hardware_for_free_then_measures() -> None:
    rows = _grid()
    measured: list[dict[str, object]] = []

    def measure(line: dict[str, object]) -> dict[str, object]:
        measured.append(line)
        return {**line, "tpot_p99_ms": 9.0, "ttft_p99_ms": 60.0, "request_throughput_rps": 2.0, "hardware": HARDWARE}

    oracle = LiveOracle(
        rows,
        500.0,
        measure,
        run_estimate_gpu_s=lambda line: 40.0,
        startup_estimate_gpu_s=lambda config: 120.0,
        recorded=rows.iloc[[0]],
    )
    a1, b1 = point_key(rows.iloc[0].to_dict()), point_key(rows.iloc[3].to_dict())
    assert oracle.price(a1) == 0.0
    assert oracle.pay(a1)["tpot_p99_ms"] == 5.0 and measured == [] and oracle.spent_gpu_s == 0.0
    assert oracle.price(a1) == 40.0 + 120.0  # the next repeat needs a server: none was started for it
    assert oracle.pay(b1)["tpot_p99_ms"] == 9.0 and len(measured) == 1 and oracle.spent_gpu_s == 160.0
    assert oracle.repeats_left(b1) == 2


def test_recorded_prices_are_wall_times_times_gpus_with_one_median_start_up_per_config() -> None:
    rows = frame([row("a", 1, 5.0, 1.5), row("a", 4, 5.0, 1.5, repeat=1)]).assign(duration_s=[30.0, 31.0])
    rows["measured_at"] = ["2026-12-01T00:02:00+00:00", "2026-12-01T00:03:00+00:00"]
    servers = pd.DataFrame(
        {
            "log": ["a1", "a2"],
            "engine_label": ["a", "a"],
            "gpus": [1, 1],
            "launched_at": pd.to_datetime(["2026-12-01T00:00:00+00:00", "2026-11-30T00:00:00+00:00"]),
            "startup_s": [60.0, 100.0],
            "held_s": [200.0, 200.0],
            "gpu_minutes": [1.0, 1.0],
        }
    )
    priced, ups = recorded_prices(rows.drop(columns=["gpu_s"]), servers)
    assert list(priced["gpu_s"]) == [60.0, 60.0]  # ready at 00:01; each point ends a minute after the one before
    assert ups == {"a-id": 80.0}


def test_each_hardware_is_priced_from_its_own_servers_a_server_stopped_before_its_first_point_included() -> None:
    h100 = "nvidia-h100-80gb-hbm3-x1-vllm0.26.0"
    rows = frame([row("a", 1, 5.0, 1.5), {**row("a", 4, 5.0, 1.5), "hardware": h100}]).drop(columns=["gpu_s"])
    rows = rows.assign(
        duration_s=[30.0, 31.0],
        gpu_count=[1, 1],
        measured_at=["2026-12-01T00:02:00+00:00", "2026-12-02T00:03:00+00:00"],
    )
    servers = pd.DataFrame(
        {
            "log": ["on-h200", "on-h100", "stopped-on-h100"],
            "engine_label": ["a", "a", "a"],
            "gpus": [1, 1, 1],
            "launched_at": pd.to_datetime(
                ["2026-12-01T00:00:00+00:00", "2026-12-02T00:00:00+00:00", "2026-12-02T00:10:00+00:00"]
            ),
            "startup_s": [60.0, 150.0, 170.0],
            "held_s": [200.0] * 3,
            "gpu_minutes": [1.0] * 3,
        }
    )
    prices = prices_per_hardware(rows, servers)
    assert sorted(prices) == sorted([HARDWARE, h100])
    assert prices[HARDWARE][1] == {"a-id": 60.0} and prices[h100][1] == {"a-id": 160.0}
    assert list(prices[HARDWARE][0]["gpu_s"]) == [60.0] and list(prices[h100][0]["gpu_s"]) == [30.0]
    assert recorded_prices(rows, servers)[1] == {"a-id": 150.0}  # pooled, the other GPU's start-ups move the price


def test_the_live_oracle_runs_one_server_at_a_time_so_coming_back_to_a_config_starts_it_again() -> None:
    rows = _grid()

    def measure(line: dict[str, object]) -> dict[str, object]:
        return {**line, "tpot_p99_ms": 9.0, "ttft_p99_ms": 60.0, "request_throughput_rps": 2.0, "hardware": HARDWARE}

    oracle = LiveOracle(
        rows,
        5000.0,
        measure,
        run_estimate_gpu_s=lambda line: 40.0,
        startup_estimate_gpu_s=lambda config: 120.0,
        recorded=rows.iloc[[3]],
    )
    a1, a16, b1 = (point_key(rows.iloc[i].to_dict()) for i in (0, 2, 3))
    oracle.pay(a1)
    assert oracle.price(a16) == 40.0  # a's server is up
    oracle.pay(b1)  # recorded: no server started or stopped
    assert oracle.price(a16) == 40.0 and oracle.price(b1) == 40.0 + 120.0
    oracle.pay(b1)  # measured: b's server replaces a's
    assert oracle.price(a16) == 40.0 + 120.0 and oracle.price(b1) == 40.0
    assert [p.startup_gpu_s for p in oracle.payments] == [120.0, 0.0, 120.0]
