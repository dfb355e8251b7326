"""GPU time read back from server logs: launch (file name) to last logged line, times the engine's GPUs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import FROZEN
from vllm_playbooks.book.page_notes import gpu_time_note
from vllm_playbooks.errors import SchemaError
from vllm_playbooks.run.budget import server_time
from vllm_playbooks.run.plan import load_plan

CASE = "pp-27462"


def _log(folder: Path, label: str, launched: str, lines: list[str]) -> Path:
    engine = next(e for e in load_plan(CASE).engines if e.label == label)
    logs = folder / "runs" / CASE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    path = logs / f"{engine.config_id()}-{launched}.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_server_held_its_gpus_from_launch_to_its_last_line(tmp_path: Path) -> None:
    # a PP=2 server launched on New Year's Eve: ready 90 s later, last line after midnight
    _log(
        tmp_path,
        "8b-pp2-mns64",
        "2026-12-31T235800+0000",
        [
            "(APIServer pid=1) INFO 12-31 23:58:05 [api_utils.py:345] starting",
            "(APIServer pid=1) INFO 12-31 23:59:30 [launcher.py:37] Available routes are:",
            "a line without a time",
            "(APIServer pid=1) INFO 01-01 00:01:00 [loggers.py:1] Engine 000: Avg prompt throughput",
        ],
    )
    # a TP=1 server stopped during its start: never ready
    _log(tmp_path, "8b-pp1-mns32", "2026-12-31T235800+0000", ["(APIServer pid=2) INFO 12-31 23:58:40 [x.py:1] loading"])
    table = server_time(CASE, tmp_path).set_index("engine_label")
    assert table.loc["8b-pp2-mns64", "gpus"] == 2 and table.loc["8b-pp1-mns32", "gpus"] == 1
    assert table.loc["8b-pp2-mns64", "startup_s"] == 90.0 and table.loc["8b-pp2-mns64", "held_s"] == 180.0
    assert table.loc["8b-pp2-mns64", "gpu_minutes"] == pytest.approx(2 * 180 / 60)
    assert (
        table.loc["8b-pp1-mns32", "held_s"] == 40.0
        and table.loc["8b-pp1-mns32", "startup_s"] != table.loc["8b-pp1-mns32", "startup_s"]
    )  # NaN: never became ready
    note = gpu_time_note(table.reset_index())
    # starting: 90 s × 2 GPUs + 40 s (the whole life of the server that never became ready) = 220 GPU-seconds
    assert note.startswith(
        "**GPU time.** The 2 recorded server starts (1 of them never became ready) held GPUs for "
        "6.7 GPU-minutes, 3.7 of them starting (launch to ready);"
    )
    assert "installing vLLM and a machine's idle time between runs are not in it" in note


def test_no_logs_no_gpu_time(tmp_path: Path) -> None:
    assert server_time(CASE, tmp_path).empty and gpu_time_note(server_time(CASE, tmp_path)) == ""


def test_the_recorded_servers(tmp_path: Path) -> None:
    """Five server logs of the #27462 runs (frozen): PP=1 on one GPU, PP=2 and TP=2 on two."""
    table = server_time(CASE, FROZEN).set_index("log")
    tp2 = table.loc["8b-tp2-mns32-ce81eebe0c-2026-11-30T172431+0000.log"]
    assert (tp2["startup_s"], tp2["gpus"]) == (118.0, 2)  # launched 17:24:31, routes at 17:26:29
    ready = table["startup_s"].notna()
    assert (table.loc[ready, "held_s"] >= table.loc[ready, "startup_s"]).all()
    assert table.groupby("engine_label")["gpus"].first().to_dict() == {
        "8b-pp1-mns256": 1,
        "8b-pp2-mns256": 2,
        "8b-tp2-mns128": 2,
        "8b-tp2-mns32": 2,
    }
    # the session's time limit stopped this server while it started: held (to its last line, 14:11:59), never ready
    lost = table.loc["8b-pp2-mns256-81631b9c80-2026-11-30T141113+0000.log"]
    assert pd.isna(lost["startup_s"]) and lost["held_s"] == 46.0 and (~ready).sum() == 1
    with pytest.raises(SchemaError, match="no launch time"):
        bad = tmp_path / "runs" / CASE / "logs"
        bad.mkdir(parents=True)
        (bad / "server.log").write_text("", encoding="utf-8")
        server_time(CASE, tmp_path)


def test_server_modes_reads_the_runner_cudagraph_mode_and_async_scheduling_a_server_ran_with(tmp_path: Path) -> None:
    from vllm_playbooks.results.server_logs import server_modes

    started = [
        "(EngineCore pid=3) INFO 12-31 23:58:30 [gpu_worker.py:1] Available KV cache memory: 80.00 GiB",
        "(EngineCore pid=3) INFO 12-31 23:58:30 [kv_cache_utils.py:1] GPU KV cache size: 400,000 tokens",
        "(EngineCore pid=3) INFO 12-31 23:58:30 [kv_cache_utils.py:1] Maximum concurrency for 4,096 tokens per "
        "request: 97.66x",
        "(EngineCore pid=3) INFO 12-31 23:58:30 [gpu_worker.py:1] Free memory on device (139.29/139.8 GiB) on "
        "startup. Desired GPU memory utilization is (0.9, 125.82 GiB).",
    ]
    _log(
        tmp_path,
        "8b-pp1-mns32",
        "2026-12-31T235800+0000",
        [
            "(APIServer pid=1) INFO 12-31 23:58:01 [vllm.py:1] Asynchronous scheduling is enabled.",
            "(EngineCore pid=3) INFO 12-31 23:58:02 [core.py:1] config: 'cudagraph_mode': <CUDAGraphMode.PIECEWISE: "
            "1>, x",
            "(EngineCore pid=3) INFO 12-31 23:58:02 [gpu_model_runner.py:1] Starting to load model x...",
            "(EngineCore pid=3) INFO 12-31 23:58:03 [vllm.py:1] Asynchronous scheduling is disabled.",
            *started,
        ],
    )
    _log(tmp_path, "8b-pp1-mns64", "2026-12-31T235800+0000", started)
    _log(
        tmp_path,
        "8b-pp1-mns256",
        "2026-12-31T235800+0000",
        ["(EngineCore pid=3) INFO 12-31 23:58:02 [gpu_worker.py:1] Using V2 Model Runner", *started],
    )
    _log(tmp_path, "8b-pp1-mns128", "2026-12-31T235800+0000", ["(APIServer pid=1) INFO 12-31 23:58:01 [x.py:1] x"])
    table = server_modes(CASE, tmp_path).set_index("engine_label")
    assert sorted(table.index) == ["8b-pp1-mns256", "8b-pp1-mns32", "8b-pp1-mns64"]  # the unstarted one has no row
    assert table.loc[["8b-pp1-mns32", "8b-pp1-mns256"], "model_runner"].tolist() == ["V1", "V2"]
    assert table.loc["8b-pp1-mns32", "cudagraph_mode"] == "PIECEWISE"
    assert table.loc["8b-pp1-mns32", "async_scheduling"] in (False,)  # the last line said so, not NaN or True
    assert table.loc[["8b-pp1-mns64"], ["model_runner", "cudagraph_mode", "async_scheduling"]].isna().all(axis=None)
