"""Which engine configs started on which GPU, and the start-up memory that decided it, from the recorded rows and the
servers that did not start (``results.failed_starts``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from vllm_playbooks.results.failed_starts import latest_tries
from vllm_playbooks.results.server_logs import startup_memory_of_rows

#: The columns of ``startup_memory_by_gpu``.
STARTUP_COLUMNS = (
    "gpu_name",
    "engine_label",
    "started",
    "runs",
    "kv_cache_tokens",
    "cudagraph_estimate_gib",
    "available_kv_gib",
    "gpu_memory_utilization",
    "error",
)


def startup_memory_by_gpu(
    rows: pd.DataFrame, failed: pd.DataFrame, labels: Sequence[str], data: Path | None = None
) -> pd.DataFrame:
    """For each GPU of ``rows`` and each engine of ``labels`` (in that order) tried there: whether its server started.

    An engine with rows on a GPU ``started``: its ``runs``, the smallest KV cache and the largest CUDA-graph estimate
    of the servers that measured them (``results.server_logs.startup_memory_of_rows``). One without rows there that
    ``failed`` (``results.failed_starts.failed_starts``, matched through the ``hardware`` key of the rows on that GPU)
    did not: the CUDA-graph estimate, the KV-cache memory left (negative: none), the utilization asked for and the
    ``error`` of its latest failed start-up. An engine neither measured nor failed on a GPU has no row.
    """
    latest = latest_tries(failed)
    records = []
    for gpu, on_gpu in rows.groupby("gpu_name", sort=True):
        hardware = set(on_gpu["hardware"])
        for label in labels:
            runs = on_gpu[on_gpu["engine_label"] == label]
            if not runs.empty:
                memory = startup_memory_of_rows(runs, data)
                records.append(
                    {
                        "gpu_name": gpu,
                        "engine_label": label,
                        "started": True,
                        "runs": len(runs),
                        "kv_cache_tokens": memory["kv_cache_tokens"].min(),
                        "cudagraph_estimate_gib": memory["cudagraph_estimate_gib"].max(),
                    }
                )
                continue
            tried = latest[latest["hardware"].isin(hardware) & (latest["engine_label"] == label)]
            if not tried.empty:
                last = tried.iloc[-1]
                records.append(
                    {
                        "gpu_name": gpu,
                        "engine_label": label,
                        "started": False,
                        "runs": 0,
                        "cudagraph_estimate_gib": last["cudagraph_estimate_gib"],
                        "available_kv_gib": last["available_kv_gib"],
                        "gpu_memory_utilization": last["gpu_memory_utilization"],
                        "error": last["error"],
                    }
                )
    table = pd.DataFrame(records, columns=list(STARTUP_COLUMNS))
    return table.astype(
        {
            "kv_cache_tokens": "Int64",
            "cudagraph_estimate_gib": "Float64",
            "available_kv_gib": "Float64",
            "gpu_memory_utilization": "Float64",
        }
    )
