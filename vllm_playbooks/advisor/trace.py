"""A live search's trace: what the advisor paid for on a GPU, why, and where it stopped, kept beside the case's rows.

``vllm-playbooks advise --mode live`` writes one file per search, ``data/runs/<case>/advisor/<start time>.jsonl``:
one JSON object a line, each appended and synced to disk as it happens and never rewritten, so a search stopped half
way keeps what it paid for. The lines, by their ``record``:

- ``search``: the case, the grid (model shape, acceptance scenario, lengths, kind of load), the hardware keys, the
  SLO, the budget, the points in the grid and what measuring each once would cost by the same estimates, whether rows
  recorded on this hardware counted as measured, when it started;
- ``payment``: one per run paid for, as soon as its row is in: the point, its repeat, whether it was recorded before
  (free) or measured now, its row's id, the GPU-seconds charged (the estimate, start-up included), the GPU-seconds
  the GPUs were actually held for it (a server start included), the budget spent so far, its p99s, throughput and
  goodput under the SLO;
- ``advice``: at the end, the search's steps (why each run, what the model expected of the point and the most it
  could give), the chosen point, the runner-up, the stop reason and the GPU time spent;
- ``stopped``: instead of ``advice`` when the search did not finish (Ctrl-C, a point that failed), with the reason.

``read_trace`` reads one back, ``latest_trace`` finds a case's most recent, ``trace_steps`` gives its runs paid for
as a table; ``book.advisor_page`` words them for the advisor page and for what the command prints.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from vllm_playbooks.advisor.goodput import Slo, goodput_rps
from vllm_playbooks.errors import SchemaError
from vllm_playbooks.results.provenance import utc_now
from vllm_playbooks.results.store import TRACE_FOLDER, TRACE_SUFFIX, case_dir

if TYPE_CHECKING:
    from vllm_playbooks.advisor.search import Advice


#: The columns of ``trace_steps``.
STEP_COLUMNS = (
    "number",
    "point",
    "repeat",
    "source",
    "why",
    "expected_goodput_rps",
    "optimistic_goodput_rps",
    "measured_goodput_rps",
    "gpu_s",
    "held_gpu_s",
    "spent_gpu_s",
    "point_id",
)


def _plain(value: Any) -> Any:
    """``value`` as JSON holds it: numpy scalars as Python numbers, NaN and infinity as None, containers walked."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def trace_folder(case: str, data: Path | None = None) -> Path:
    """``data/runs/<case>/advisor``: where a case's live searches are traced."""
    return case_dir(case, data) / TRACE_FOLDER


class TraceWriter:
    """Appends one live search's records to its trace file (see the module's docstring), each line synced to disk."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, case: str, started_at: str, data: Path | None = None) -> TraceWriter:
        """A new trace file for a search of ``case`` started at ``started_at`` (an ISO time): its name is that time
        (``2026-12-05T101500+0000.jsonl``; ``…-2.jsonl`` and on when two searches start in the same second)."""
        folder = trace_folder(case, data)
        folder.mkdir(parents=True, exist_ok=True)
        stem = started_at.replace(":", "")
        for number in range(1, 1000):
            path = folder / f"{stem}{'' if number == 1 else f'-{number}'}{TRACE_SUFFIX}"
            try:
                path.open("x", encoding="utf-8").close()
            except FileExistsError:
                continue
            return cls(path)
        raise SchemaError(f"{folder}: no free trace name for a search started at {started_at}")

    def _append(self, record: str, fields: dict[str, Any]) -> None:
        line = json.dumps({"record": record, **_plain(fields)}, allow_nan=False)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def search(
        self,
        *,
        case: str,
        grid: dict[str, Any],
        hardware: list[str],
        slo: Slo,
        budget_gpu_s: float,
        points: int,
        grid_gpu_s: float,
        recorded_count: bool,
        started_at: str,
    ) -> None:
        """The first line: what is searched (``points`` points, ``grid_gpu_s`` GPU-seconds to measure each once by
        the estimates, one start-up per config), under which SLO and budget, on which hardware."""
        self._append(
            "search",
            {
                "case": case,
                "grid": grid,
                "hardware": hardware,
                "slo": dataclasses.asdict(slo),
                "slo_label": slo.label(),
                "budget_gpu_s": budget_gpu_s,
                "points": points,
                "grid_gpu_s": grid_gpu_s,
                "recorded_count": recorded_count,
                "started_at": started_at,
            },
        )

    def payment(
        self,
        *,
        number: int,
        point: str,
        repeat: int,
        recorded: bool,
        row: dict[str, Any],
        gpu_s: float,
        startup_gpu_s: float,
        held_gpu_s: float,
        spent_gpu_s: float,
        slo: Slo,
    ) -> None:
        """One run paid for, with its row's numbers, as soon as the row is in."""
        tpot, ttft, rps = (float(row[m]) for m in ("tpot_p99_ms", "ttft_p99_ms", "request_throughput_rps"))
        self._append(
            "payment",
            {
                "number": number,
                "point": point,
                "repeat": repeat,
                "recorded": recorded,
                "point_id": row.get("point_id"),
                "gpu_s": gpu_s,
                "startup_gpu_s": startup_gpu_s,
                "held_gpu_s": held_gpu_s,
                "spent_gpu_s": spent_gpu_s,
                "tpot_p99_ms": tpot,
                "ttft_p99_ms": ttft,
                "request_throughput_rps": rps,
                "measured_goodput_rps": goodput_rps(slo, tpot, ttft, rps),
                "at": utc_now(),
            },
        )

    def advice(self, advice: Advice) -> None:
        """The last line of a finished search: its steps, choice, runner-up and stop reason."""
        self._append(
            "advice",
            {
                "steps": [dataclasses.asdict(step) for step in advice.steps],
                "chosen": advice.chosen,
                "runner_up": advice.runner_up,
                "stop_reason": advice.stop_reason,
                "spent_gpu_s": advice.spent_gpu_s,
                "pruned": advice.pruned,
                "baseline_unmeasured": advice.baseline_unmeasured,
                "finished_at": utc_now(),
            },
        )

    def stopped(self, reason: str) -> None:
        """The last line of a search that did not finish, and why."""
        self._append("stopped", {"reason": reason, "at": utc_now()})


@dataclass
class LiveTrace:
    """One live search read back: its ``search`` line, its ``payment`` lines and its last line (``advice`` or
    ``stopped``; None when the search was killed before it could write one)."""

    path: Path
    search: dict[str, Any]
    payments: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        """Whether the search ran to its own stop (an ``advice`` line)."""
        return self.end is not None and self.end["record"] == "advice"

    @property
    def stop_reason(self) -> str | None:
        """The search's stop reason (``Advice.stop_reason``) where it finished, the reason its ``stopped`` line gives
        where it did not, None where the process ended before it could write either."""
        if self.end is None:
            return None
        return str(self.end["stop_reason"] if self.finished else self.end["reason"])


def read_trace(path: Path) -> LiveTrace:
    """A trace file read back; ``SchemaError`` when its first line is not a ``search`` line or a line is not JSON. A
    last line cut short (the process killed while writing it) is left out."""
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as error:
            if number == len(lines):
                break
            raise SchemaError(f"{path}, line {number}: not JSON ({error.msg})") from None
    if not records or records[0].get("record") != "search":
        raise SchemaError(f"{path}: a live search's trace starts with its 'search' line")
    trace = LiveTrace(path=path, search=records[0])
    for record in records[1:]:
        if record.get("record") == "payment":
            trace.payments.append(record)
        elif record.get("record") in ("advice", "stopped"):
            trace.end = record
    return trace


def latest_trace(case: str, data: Path | None = None) -> LiveTrace | None:
    """The most recently started live search of ``case`` (by its trace's name, the start time), None without one.

    It lists the case's folder rather than testing whether the trace folder exists: the book's execution cache
    (``book.cache``) records what a page lists, not what it only looked for, so a page run before the first live
    search runs again once there is one."""
    folder = trace_folder(case, data)
    entries = {p.name for p in folder.parent.iterdir()} if folder.parent.is_dir() else set()
    paths = sorted(folder.glob(f"*{TRACE_SUFFIX}")) if TRACE_FOLDER in entries else []
    return read_trace(paths[-1]) if paths else None


def trace_steps(trace: LiveTrace) -> pd.DataFrame:
    """One line per run paid for (``STEP_COLUMNS``): the point, its repeat, ``source`` ('measured' or 'recorded'),
    why the search paid for it, the goodput the model expected and the most it could give (NaN for a repeat, and
    for every step of a search that did not finish), the goodput measured, the GPU-seconds charged and actually
    held, the budget spent, and the row's id."""
    steps = {s["number"]: s for s in trace.end.get("steps", [])} if trace.finished and trace.end else {}
    records = []
    for paid in trace.payments:
        step = steps.get(paid["number"], {})
        records.append(
            {
                "number": paid["number"],
                "point": paid["point"],
                "repeat": paid["repeat"],
                "source": "recorded" if paid["recorded"] else "measured",
                "why": step.get("why", ""),
                "expected_goodput_rps": _number(step.get("expected_goodput_rps")),
                "optimistic_goodput_rps": _number(step.get("optimistic_goodput_rps")),
                "measured_goodput_rps": paid["measured_goodput_rps"],
                "gpu_s": paid["gpu_s"],
                "held_gpu_s": paid["held_gpu_s"],
                "spent_gpu_s": paid["spent_gpu_s"],
                "point_id": paid["point_id"],
            }
        )
    return pd.DataFrame(records, columns=list(STEP_COLUMNS))


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)
