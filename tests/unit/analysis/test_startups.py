"""Which engines started on which GPU: measured rows say it did, a kept failure that it did not and why."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from vllm_playbooks.analysis.startups import startup_memory_by_gpu
from vllm_playbooks.results.failed_starts import FAILED_START_COLUMNS

CASE = "some-case"
H100, H200 = "nvidia-h100-x1-vllm0.26.0", "nvidia-h200-x1-vllm0.26.0"


def _started_log(logs: Path, config_id: str, launched: str, kv_tokens: int, graphs_gib: float) -> None:
    lines = [
        "INFO 12-06 02:20:04 [gpu_worker.py:1] Free memory on device (78.66/79.18 GiB) on startup. Desired GPU memory "
        "utilization is (0.9, 71.26 GiB).",
        f"INFO 12-06 02:19:22 [gpu_model_runner.py:1] Estimated CUDA graph memory: {graphs_gib} GiB total",
        "INFO 12-06 02:19:22 [gpu_worker.py:1] Available KV cache memory: 5.78 GiB",
        f"INFO 12-06 02:19:22 [kv_cache_utils.py:1] GPU KV cache size: {kv_tokens:,} tokens",
        "INFO 12-06 02:19:22 [kv_cache_utils.py:1] Maximum concurrency for 16,384 tokens per request: 4.87x",
    ]
    (logs / f"{config_id}-{launched}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _row(gpu: str, hardware: str, label: str, measured_at: str) -> dict[str, object]:
    return {
        "case": CASE,
        "gpu_name": gpu,
        "hardware": hardware,
        "engine_label": label,
        "config_id": f"{label}-0123",
        "measured_at": measured_at,
    }


def _failed(hardware: str, label: str, launched: str, graphs_gib: float, left_gib: float) -> dict[str, object]:
    record = dict.fromkeys(FAILED_START_COLUMNS)
    record.update(
        hardware=hardware,
        config_id=f"{label}-0123",
        engine_label=label,
        log=f"{label}-0123-{launched}.log",
        points=2,
        error="ValueError: No available memory for the cache blocks",
        cudagraph_estimate_gib=graphs_gib,
        available_kv_gib=left_gib,
        gpu_memory_utilization=0.9,
    )
    return record


def test_each_gpu_lists_the_engines_that_started_and_those_that_did_not(tmp_path: Path) -> None:
    logs = tmp_path / "runs" / CASE / "logs"
    logs.mkdir(parents=True)
    _started_log(logs, "k3-0123", "2026-12-06T021800+0000", 79_769, 1.17)
    _started_log(logs, "k2-0123", "2026-12-06T030000+0000", 716_682, 9.45)  # on the H200
    rows = pd.DataFrame(
        [
            _row("H100", H100, "k3", "2026-12-06T02:20:00+00:00"),
            _row("H100", H100, "k3", "2026-12-06T02:21:00+00:00"),
            _row("H200", H200, "k2", "2026-12-06T03:05:00+00:00"),
        ]
    )
    failed = pd.DataFrame(
        [
            _failed(H100, "k2", "2026-12-06T021537+0000", 9.40, -2.00),
            _failed(H100, "k2", "2026-12-06T041537+0000", 9.45, -2.59),  # tried again later: the latest stands
            _failed(H200, "k5", "2026-12-06T021537+0000", 9.48, -1.00),  # the H200 has no row of k5 either
        ]
    )
    table = startup_memory_by_gpu(rows, failed, ["k2", "k3", "k5"], tmp_path)
    assert table[["gpu_name", "engine_label", "started", "runs"]].values.tolist() == [
        ["H100", "k2", False, 0],
        ["H100", "k3", True, 2],
        ["H200", "k2", True, 1],
        ["H200", "k5", False, 0],
    ]
    h100 = table[table["gpu_name"] == "H100"].set_index("engine_label")
    assert (h100.loc["k2", "cudagraph_estimate_gib"], h100.loc["k2", "available_kv_gib"]) == (9.45, -2.59)
    assert h100.loc["k2", "error"].startswith("ValueError")
    assert (h100.loc["k3", "kv_cache_tokens"], h100.loc["k3", "cudagraph_estimate_gib"]) == (79_769, 1.17)
    assert table.set_index(["gpu_name", "engine_label"]).loc[("H200", "k2"), "kv_cache_tokens"] == 716_682
