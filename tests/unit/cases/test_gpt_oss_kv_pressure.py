"""The KV cache beside the load, per GPU: each row reads the pool of the server that measured it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from vllm_playbooks.cases.gpt_oss_eagle3.step_costs import kv_pressure
from vllm_playbooks.results.server_logs import startup_memory_of_rows

CASE = "gpt-oss-eagle3"
PROFILES = {"chat": (230, 203)}


def _server_log(logs: Path, config_id: str, launched: str, kv_tokens: int) -> None:
    """A started server's log with the KV-cache lines ``read_startup`` needs."""
    lines = [
        "INFO 12-05 22:06:30 [gpu_worker.py:1] Free memory on device (79.1/79.2 GiB) on startup. Desired GPU memory "
        "utilization is (0.9, 71.3 GiB).",
        f"INFO 12-05 22:06:30 [gpu_model_runner.py:1] Estimated CUDA graph memory: {kv_tokens / 1e5:.2f} GiB total",
        "INFO 12-05 22:06:30 [gpu_worker.py:1] Available KV cache memory: 3.70 GiB",
        f"INFO 12-05 22:06:30 [kv_cache_utils.py:1] GPU KV cache size: {kv_tokens:,} tokens",
        "INFO 12-05 22:06:30 [kv_cache_utils.py:1] Maximum concurrency for 16,384 tokens per request: 3.28x",
    ]
    (logs / f"{config_id}-{launched}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _row(gpu: str, label: str, concurrency: int, measured_at: str, preemptions: int) -> dict[str, object]:
    return {
        "case": CASE,
        "gpu_name": gpu,
        "engine_label": label,
        "config_id": f"{label}-0123456789",
        "spec_method": "none" if label == "spec-off" else "eagle3",
        "concurrency": concurrency,
        "input_len": 230,
        "output_len": 203,
        "measured_at": measured_at,
        "num_preemptions": preemptions,
    }


def _recorded(tmp_path: Path) -> pd.DataFrame:
    logs = tmp_path / "runs" / CASE / "logs"
    logs.mkdir(parents=True)
    _server_log(logs, "spec-off-0123456789", "2026-12-05T220600+0000", 53_773)  # the H100's server
    _server_log(logs, "spec-off-0123456789", "2026-12-05T230000+0000", 847_977)  # a later one, on the H200
    _server_log(logs, "eagle3-k3-0123456789", "2026-12-05T221400+0000", 79_793)
    return pd.DataFrame(
        [
            _row("H100", "eagle3-k3", 200, "2026-12-05T22:18:00+00:00", 0),
            _row("H100", "spec-off", 200, "2026-12-05T22:10:00+00:00", 134),
            _row("H100", "spec-off", 200, "2026-12-05T22:11:00+00:00", 133),
            _row("H100", "spec-off", 16, "2026-12-05T22:12:00+00:00", 0),
            _row("H200", "spec-off", 200, "2026-12-05T23:05:00+00:00", 0),
        ]
    )


def test_each_row_reads_the_pool_of_the_server_of_its_config_that_ran_it(tmp_path: Path) -> None:
    rows = _recorded(tmp_path)
    startups = startup_memory_of_rows(rows, tmp_path)
    assert startups["kv_cache_tokens"].tolist() == [79_793, 53_773, 53_773, 53_773, 847_977]
    assert startups["cudagraph_estimate_gib"].tolist() == [0.80, 0.54, 0.54, 0.54, 8.48]  # each from its own log


def test_a_row_without_its_servers_log_has_no_pool(tmp_path: Path) -> None:
    rows = _recorded(tmp_path)
    rows.loc[1, "measured_at"] = "2026-12-05T21:00:00+00:00"  # before any server of its config was launched
    assert startup_memory_of_rows(rows, tmp_path)["kv_cache_tokens"].isna().tolist() == [
        False,
        True,
        False,
        False,
        False,
    ]


def test_the_pools_stand_beside_the_load_at_the_top_concurrency_both_engines_measured(tmp_path: Path) -> None:
    table = kv_pressure(_recorded(tmp_path), PROFILES, "eagle3-k3", data=tmp_path)
    # the H200 measured speculation off alone: no pair, no line
    assert table[["gpu_name", "engine_label", "concurrency", "runs"]].values.tolist() == [
        ["H100", "spec-off", 200, 2],
        ["H100", "eagle3-k3", 200, 1],
    ]  # speculation off first
    by_engine = table.set_index("engine_label")
    assert by_engine.loc["spec-off", "kv_cache_tokens"] == 53_773
    assert by_engine.loc["spec-off", "tokens_needed"] == 200 * (230 + 203)
    assert by_engine.loc["spec-off", "preemptions_per_run"] == 133.5
    assert by_engine.loc["eagle3-k3", "preemptions_per_run"] == 0


def test_a_server_that_never_finished_starting_has_no_pool(tmp_path: Path) -> None:
    rows = _recorded(tmp_path)
    logs = tmp_path / "runs" / CASE / "logs"
    (logs / "spec-off-0123456789-2026-12-05T220900+0000.log").write_text("INFO starting\n", encoding="utf-8")
    # the H100's spec-off runs at 22:10-22:12 now fall to that later launch, which logged no KV cache
    assert startup_memory_of_rows(rows, tmp_path)["kv_cache_tokens"].isna().tolist() == [False, True, True, True, False]
