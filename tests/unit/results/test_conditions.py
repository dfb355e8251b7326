"""What a point folder says about the conditions its run had: its paired session, its host and its GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_playbooks.results.conditions import CONDITION_COLUMNS, run_conditions


def _point(folder: Path, record: dict, samples: str | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "point.json").write_text(json.dumps(record))
    if samples is not None:
        (folder / "gpu_samples.csv").write_text(samples)
    return folder


def test_a_paired_run_with_host_readings_and_gpu_samples(tmp_path: Path) -> None:
    record = {
        "pairing": {"mode": "co-resident", "session": "2026-12-07T05:00:00+00:00", "position": 3},
        "host_signals": {
            "cpu_count": 16,
            "steal_pct": 0.4,
            "busy_pct": 21.5,
            "load_1m_max": 3.2,
            "cpu_mhz_mean": 2600.0,
        },
    }
    samples = (
        "t_s,gpu,nvml_index,util_pct,mem_util_pct,mem_used_mib,sm_clock_mhz,power_w\n"
        "0.0,0,0,90,40,1000,1980,500\n0.1,0,0,100,40,1000,1960,510\n0.2,0,0,,40,1000,,\n"
    )
    found = run_conditions(_point(tmp_path / "p", record, samples))
    assert set(found) == set(CONDITION_COLUMNS)
    assert (found["pair_mode"], found["pair_position"], found["host_steal_pct"]) == ("co-resident", 3, 0.4)
    assert found["gpu_sm_clock_mhz_mean"] == pytest.approx(1970.0) and found["gpu_util_pct_mean"] == 95.0
    unread = run_conditions(tmp_path / "p", gpu_samples=False)
    assert unread["gpu_sm_clock_mhz_mean"] is None and unread["host_load_1m_max"] == 3.2


def test_a_run_recorded_before_the_readings_has_none(tmp_path: Path) -> None:
    found = run_conditions(_point(tmp_path / "old", {"case": "c"}))
    assert all(value is None for value in found.values())
