"""Kernel JIT compilations during inference, read from the recorded server logs, beside the stall table.

After its warm-up, vLLM 0.26 watches for kernel compilations (``vllm/utils/jit_monitor.py``: Triton, CuTeDSL and
TileLang kernels) and logs each as a warning such as::

    (EngineCore pid=1440) WARNING 11-30 15:46:38 [jit_monitor.py:135] Triton kernel JIT compilation during
    inference: fused_moe_kernel. This causes a latency spike; consider extending warmup to cover this shape/config.

A kernel compiles in the process that launches it, so the engine step that needs it waits; one that falls inside a
measured run is evidence to read beside that run's output-token gaps (``results.stalls``). The evidence is one-sided:
unless its observability setting ``jit_monitor_verbose`` is on (off in every recorded run), vLLM logs with
``warning_once``, so only the *first* compilation of each kernel name per server process appears. Later compilations
of the same kernel (other shapes, other constants) are silent, and a run with no logged compilation may still have
compiled.

Log lines carry ``MM-DD HH:MM:SS`` in UTC, to the second and without a year; the year comes from the log's start,
which its file name holds (``<config_id>-<YYYY-MM-DDTHHMMSS+0000>.log``, written by ``runner``). Like the stalls,
none of this is a column of ``runs.csv``: it is read from the case's ``logs/`` at replay.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from vllm_playbooks.results.server_logs import parse_log_name, server_log_files, stamp_time
from vllm_playbooks.results.stalls import describe_load, mark_stalled
from vllm_playbooks.results.store import case_dir
from vllm_playbooks.results.textfiles import plain_name, read_text

#: One line of vLLM's JIT monitor; verbose mode adds `` (<details>)`` after the kernel name.
_JIT_LINE = re.compile(
    r"^(?:\((?P<process>[^)]*)\) )?WARNING (?P<stamp>\d{2}-\d{2} \d{2}:\d{2}:\d{2}) \[jit_monitor\.py:\d+\] "
    r"(?P<backend>\S+) (?:kernel )?JIT compilation during inference: (?P<kernel>\S+?)(?: \(.*\))?\. ",
    re.MULTILINE,
)
#: ``load`` of an event outside every recorded run: during warm-up, the calibration run, an attempt measured again
#: (``point.json``: ``remeasured_because``), or between points.
OUTSIDE = "outside measured runs"
#: Columns of ``jit_table``.
JIT_COLUMNS = ("log", "at", "process", "backend", "kernel", "point_id", "engine_label", "load", "stalled")


@dataclass(frozen=True)
class JitEvent:
    """One kernel compilation vLLM's JIT monitor logged during inference."""

    at: dt.datetime
    """UTC, to the second."""
    process: str
    """The process that logged it, as the line's prefix names it (``EngineCore pid=1440``); '' without one."""
    backend: str
    """``Triton``, ``CuTeDSL`` or ``TileLang``."""
    kernel: str
    """The kernel's name as vLLM logs it (``fused_moe_kernel``)."""


def parse_jit_events(text: str, started: dt.datetime) -> list[JitEvent]:
    """The JIT compilations one server log's ``text`` records, in order. ``started`` (timezone-aware) is when the
    log was opened: it gives the lines' year, the next one for lines dated more than a day before it (a log that ran
    past New Year)."""
    events = []
    for match in _JIT_LINE.finditer(text):
        at = stamp_time(match["stamp"], started)
        events.append(JitEvent(at=at, process=match["process"] or "", backend=match["backend"], kernel=match["kernel"]))
    return events


def jit_table(runs: pd.DataFrame, data: Path | None = None) -> pd.DataFrame:
    """One row (``JIT_COLUMNS``) per kernel compilation logged during inference by the servers of ``runs``' configs,
    in time order: the log's file name, when (UTC), the process, backend and kernel, and the measured row whose run
    [``measured_at`` − ``duration_s``, ``measured_at``] holds it (times to the second): its ``point_id``,
    ``engine_label``, load in words and ``stalled`` (``runs``' column, else ``mark_stalled``). An event outside every
    measured run of its config keeps the config's ``engine_label``, with ``point_id`` missing, ``stalled`` None and
    ``load`` ``OUTSIDE``.

    Logs are the server logs in each case's ``logs/`` whose config id (file name) is one of ``runs``; a config's
    points are measured one after another on its server, so at most one run window holds an event."""
    marked = runs if "stalled" in runs.columns else mark_stalled(runs, data)
    records = []
    for case in sorted(set(marked["case"])):
        rows = marked[marked["case"] == case]
        for log in server_log_files(case_dir(case, data) / "logs"):
            name = parse_log_name(log.name)
            if name is None or name[0] not in set(rows["config_id"]):
                continue
            config_id, started = name
            config_rows = rows[rows["config_id"] == config_id]
            windows = []
            for row in config_rows.itertuples(index=False):
                end = dt.datetime.fromisoformat(row.measured_at)
                windows.append((end - dt.timedelta(seconds=float(row.duration_s)), end, row))
            for event in parse_jit_events(read_text(log), started):
                run = next((point for first, last, point in windows if first <= event.at <= last), None)
                records.append(
                    {
                        "log": plain_name(log),
                        "at": event.at,
                        "process": event.process,
                        "backend": event.backend,
                        "kernel": event.kernel,
                        "point_id": None if run is None else run.point_id,
                        "engine_label": config_rows["engine_label"].iloc[0],
                        "load": OUTSIDE if run is None else describe_load(run.request_rate_qps, run.concurrency),
                        "stalled": None if run is None else bool(run.stalled),
                    }
                )
    table = pd.DataFrame(records, columns=list(JIT_COLUMNS))
    return table.sort_values(["at", "log"], kind="stable", ignore_index=True)
