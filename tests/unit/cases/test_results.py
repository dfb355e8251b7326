"""What a case notebook calls for its rows, and the line a live run prints (``cases.results``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from vllm_playbooks.cases.results import live_summary
from vllm_playbooks.run.measure import RunReport


def test_a_live_run_says_what_it_measured_on_which_hardware_and_what_it_skipped() -> None:
    rows = pd.DataFrame(
        {
            "point_id": ["a/c1-r0", "b/c1-r0", "b/c4-r0"],
            "gpu_name": ["NVIDIA H200", "NVIDIA A100", "NVIDIA A100"],
            "gpu_count": [1, 2, 2],
            "vllm_version": ["0.26.0"] * 3,
        }
    )
    report = RunReport(measured=["b/c1-r0", "b/c4-r0"], skipped=["a/c1-r0"])
    assert live_summary(report, rows, Path("/d")) == (
        "live: 2 point(s) measured on NVIDIA A100 (2 GPUs per server), vLLM 0.26.0, 1 already recorded and skipped; "
        "rows in /d"
    )
    nothing = live_summary(RunReport(skipped=["a/c1-r0"]), rows, Path("/d"))
    assert nothing.startswith("live: no point measured, 1 already")
