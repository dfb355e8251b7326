"""Servers that did not start: tied to their hardware by the failures the runner kept, explained by their logs."""

from __future__ import annotations

from pathlib import Path

from vllm_playbooks.results import raw
from vllm_playbooks.results.failed_starts import failed_starts
from vllm_playbooks.results.server_logs import read_failed_startup
from vllm_playbooks.results.textfiles import compressed_bytes

CASE = "some-case"
H100 = "nvidia-h100-80gb-hbm3-x1-vllm0.26.0"
CONFIG = "eagle3-k2-a0.71-46e4ee5f5c"
E = "(EngineCore pid=1) "

#: The lines a vLLM 0.26 server logs when CUDA graphs leave no memory for the KV cache, in their order.
FAILED_LOG = "\n".join(
    [
        "(APIServer pid=7) WARNING 12-06 02:16:00 [system_utils.py:299] Found ulimit of 20000 and failed to "
        "automatically increase with error current limit exceeds maximum limit. This can cause fd limit errors like "
        "`OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n",
        f"{E}INFO 12-06 02:17:00 [gpu_model_runner.py:5347] Model loading took 61.88 GiB memory and 4.96 seconds",
        f"{E}INFO 12-06 02:18:07 [gpu_model_runner.py:6737] Estimated CUDA graph memory: 9.45 GiB total",
        f"{E}INFO 12-06 02:18:07 [gpu_worker.py:560] Available KV cache memory: -2.59 GiB",
        f"{E}INFO 12-06 02:18:07 [gpu_worker.py:575] CUDA graph memory profiling is enabled (default since v0.21.0). "
        "The current --gpu-memory-utilization=0.9000 is equivalent to --gpu-memory-utilization=0.7807 without CUDA "
        "graph memory profiling.",
        f"{E}ERROR 12-06 02:18:07 [core.py:1330] EngineCore failed to start.",
        f"{E}ERROR 12-06 02:18:07 [core.py:1330] Traceback (most recent call last):",
        f"{E}ERROR 12-06 02:18:07 [core.py:1330]     raise ValueError(",
        f"{E}ERROR 12-06 02:18:07 [core.py:1330] ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.",
        "(APIServer pid=7) RuntimeError: Engine core initialization failed. See root cause above.",
    ]
)

#: The KV-cache lines of a server that started (``server_logs.has_started``).
STARTED_LOG = "\n".join(
    [
        f"{E}INFO 12-06 02:20:04 [gpu_worker.py:857] Free memory on device (78.66/79.18 GiB) on startup. Desired GPU "
        "memory utilization is (0.9, 71.26 GiB). Actual usage is 61.88 GiB for weight, 1.84 GiB for peak activation",
        f"{E}INFO 12-06 02:19:22 [gpu_worker.py:560] Available KV cache memory: 5.78 GiB",
        f"{E}INFO 12-06 02:19:22 [kv_cache_utils.py:2177] GPU KV cache size: 79,769 tokens",
        f"{E}INFO 12-06 02:19:22 [kv_cache_utils.py:2182] Maximum concurrency for 16,384 tokens per request: 4.87x",
    ]
)


def _case(tmp_path: Path, logs: dict[str, str], failures: dict[str, str]) -> Path:
    """A data folder whose case keeps ``logs`` (name → text, stored compressed as the runner stores them) and one
    failure per point id of ``failures`` (point id → the server log path the runner named)."""
    folder = tmp_path / "runs" / CASE
    (folder / "logs").mkdir(parents=True)
    for name, text in logs.items():
        (folder / "logs" / f"{name}.gz").write_bytes(compressed_bytes(text))
    for pid, log in failures.items():
        raw.record_failure(
            folder, pid, "ServerError: vLLM server exited with code 1 before it was healthy", {"server_log": log}
        )
    return tmp_path


def test_a_start_up_stopped_before_vllm_counted_memory_reads_as_unknown(tmp_path: Path) -> None:
    log = tmp_path / f"{CONFIG}-2026-12-06T021537+0000.log"
    log.write_text(FAILED_LOG.splitlines()[0] + "\n")  # stopped early: only the start-up warning was logged
    startup = read_failed_startup(log)
    assert startup.log == log.name and startup.error is None
    assert (startup.weights_gib, startup.cudagraph_estimate_gib, startup.available_kv_gib) == (None, None, None)


def test_failed_starts_ties_each_unstarted_log_to_the_hardware_of_its_failures(tmp_path: Path) -> None:
    failed, started = f"{CONFIG}-2026-12-06T021537+0000.log", f"{CONFIG}-2026-12-06T030000+0000.log"
    data = _case(
        tmp_path,
        {failed: FAILED_LOG, started: STARTED_LOG},
        {
            f"{H100}/{CONFIG}/in230-out203-c1-r0": f"/machine/logs/{failed}",
            f"{H100}/{CONFIG}/in230-out203-c200-r0": f"/machine/logs/{failed}",
            f"{H100}/{CONFIG}/in230-out203-c1-r1": f"/machine/logs/{started}",  # started, died while measuring
            f"{H100}/{CONFIG}/in230-out203-c1-r2": "/machine/logs/gone.log",  # its log was not kept
        },
    )
    table = failed_starts(CASE, data)
    assert len(table) == 1
    row = table.iloc[0]
    assert (row.hardware, row.config_id, row.engine_label, row.log, row.points) == (
        H100,
        CONFIG,
        "eagle3-k2-a0.71",
        failed,
        2,
    )
    assert row.error == "ValueError: No available memory for the cache blocks"  # not the warning's OSError
    assert (row.weights_gib, row.cudagraph_estimate_gib, row.available_kv_gib) == (61.88, 9.45, -2.59)
    assert (row.gpu_memory_utilization, row.utilization_without_cudagraphs) == (0.9, 0.7807)


def test_a_log_no_failure_names_gives_no_row(tmp_path: Path) -> None:
    data = _case(tmp_path, {f"{CONFIG}-2026-12-06T021537+0000.log": FAILED_LOG}, {})
    assert failed_starts(CASE, data).empty
