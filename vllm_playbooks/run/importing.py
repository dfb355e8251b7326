"""Bring the points measured in another data folder (another clone, another machine) into this one.

``vllm-playbooks import-runs SOURCE [--case CASE ...]``: SOURCE is a data folder (it holds ``runs/<case>/``), such
as the one ``VLLM_PLAYBOOKS_DATA_DIR`` pointed at while a case was measured there. Every finished point folder of a
case in SOURCE becomes a repeat of its point here: at its own repeat number when that is free, else at the next free
one (the folder's name gives a point its repeat, as after ``vllm-playbooks migrate``; its files are copied as they
are). A point whose ``bench.json`` is already here under any repeat is skipped, so importing twice adds nothing.
Server logs come along under their own names, and so do the failures the source keeps for points not measured here
(a server that did not start leaves one per point it was to measure, naming its log), and so do the advisor's
live-search traces (``advisor/*.jsonl``), each run's ``point_id`` in them changed to where that run lies here; then the
rows are appended from the raw files. Nothing recorded is overwritten, and the source is checked whole before anything
is copied (``run.import_check``: no links, every point complete, of this case, where its files say it belongs).

``merge_into`` is the runner's own merge: the points its workers (``run.parallel``) or Ray tasks (``run.ray_grid``)
measured, added under the ids they were measured as.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_playbooks import paths
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.files import atomic_write_text
from vllm_playbooks.results import raw
from vllm_playbooks.results.replay import sync_rows
from vllm_playbooks.results.store import TRACE_FOLDER, TRACE_SUFFIX, case_dir
from vllm_playbooks.results.textfiles import read_text
from vllm_playbooks.run.import_check import check_case_name, check_source_case


@dataclass
class Imported:
    """What importing one case did: the ids of the points added (``renumbered``: those that took another repeat
    number than they had in the source) and of those skipped because their measurement was already here."""

    added: list[str] = field(default_factory=list)
    renumbered: list[str] = field(default_factory=list)
    already_here: list[str] = field(default_factory=list)
    logs: int = 0
    failures: int = 0
    traces: int = 0


def measurement_digest(point_dir: Path) -> str:
    """A fingerprint of one point's measurement: the SHA-256 of its ``bench.json`` text (plain or gzipped)."""
    return hashlib.sha256(read_text(point_dir / raw.BENCH_FILE).encode()).hexdigest()


def _free_repeat(target_root: Path, point_id: str) -> str:
    """``point_id`` if its folder is free under ``target_root``, else the same point at the next free repeat."""
    if not (target_root / point_id).exists():
        return point_id
    stem, _ = raw.split_point_id(point_id)
    folder, load = stem.rsplit("/", 1)
    return f"{stem}-r{raw.next_repeat(target_root / folder, load)}"


def import_case(case: str, source: Path, data: Path) -> Imported:
    """Import one case's points and server logs from the data folder ``source`` into ``data`` (see the module's
    docstring); return what was added and skipped."""
    src, dst = case_dir(case, source), case_dir(case, data)
    if not raw.finished_points(src) and not raw.failure_records(src):
        raise ConfigError(f"{source} holds no measured or failed point of {case} (looked in {raw.raw_root(src)})")
    check_source_case(case, src)
    points = raw.finished_points(src)
    target_root = raw.raw_root(dst)
    here = {measurement_digest(p): p.relative_to(target_root).as_posix() for p in raw.finished_points(dst)}
    result = Imported()
    lies_here: dict[str, str] = {}  # a source point's id → the id of its measurement here
    for point in points:
        pid = point.relative_to(raw.raw_root(src)).as_posix()
        digest = measurement_digest(point)
        if digest in here:
            result.already_here.append(pid)
            lies_here[pid] = here[digest]
            continue
        new_id = _free_repeat(target_root, pid)
        raw.copy_point(point, target_root / new_id)
        here[digest] = lies_here[pid] = new_id
        result.added.append(new_id)
        if new_id != pid:
            result.renumbered.append(new_id)
    raw.drop_measured_failures(dst)
    result.failures = raw.copy_new_failures(src, dst)
    result.logs = raw.copy_new_logs(src, dst)
    result.traces = _copy_new_traces(src, dst, lies_here)
    sync_rows(case, data)
    return result


def merge_into(case: str, source: Path, data: Path) -> list[str]:
    """Copy the finished raw points, the failures (``raw.copy_new_failures``) and server logs of ``case`` that
    ``source`` (the data folder of a ``run.parallel`` worker, or what a ``run.ray_grid`` task sent) holds and ``data``
    lacks, then append their rows; return the ids of the rows added. Unlike ``import_case`` a point is never
    renumbered: one whose folder is here already is the same measurement, and is skipped. Recorded points are never
    overwritten; a failure kept for a point that is now measured is removed."""

    src, dst = case_dir(case, source), case_dir(case, data)
    for point in raw.finished_points(src):
        target = raw.raw_root(dst) / point.relative_to(raw.raw_root(src))
        if not target.exists():
            raw.copy_point(point, target)
    raw.drop_measured_failures(dst)
    raw.copy_new_failures(src, dst)
    raw.copy_new_logs(src, dst)
    return sync_rows(case, data) if raw.finished_points(dst) else []


def _copy_new_traces(source_case_dir: Path, target_case_dir: Path, lies_here: dict[str, str]) -> int:
    """Copy the live-search traces of ``source_case_dir`` that ``target_case_dir`` lacks (by name), each ``point_id``
    in them changed by ``lies_here`` (a source point's id → its id here); return how many were copied."""
    source = source_case_dir / TRACE_FOLDER
    if not source.is_dir():
        return 0
    target = target_case_dir / TRACE_FOLDER
    copied = 0
    for trace in sorted(source.glob(f"*{TRACE_SUFFIX}")):
        if (target / trace.name).exists():
            continue
        records = [json.loads(line) for line in read_text(trace).splitlines() if line.strip()]
        target.mkdir(parents=True, exist_ok=True)
        atomic_write_text(
            target / trace.name,
            "".join(json.dumps(_point_ids_moved(record, lies_here), allow_nan=False) + "\n" for record in records),
        )
        copied += 1
    return copied


def _point_ids_moved(value: Any, lies_here: dict[str, str]) -> Any:
    """``value`` (a trace record, walked through its dicts and lists) with every ``point_id`` that ``lies_here`` maps
    changed to its id here."""
    if isinstance(value, dict):
        return {
            key: lies_here.get(item, item)
            if key == "point_id" and isinstance(item, str)
            else _point_ids_moved(item, lies_here)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_point_ids_moved(item, lies_here) for item in value]
    return value


def cases_to_import(source: Path, cases: Sequence[str] = ()) -> list[str]:
    """The cases to import from the data folder ``source`` (``cases``, or every case folder there), each checked whole
    before the first copy (``run.import_check``); ``ConfigError`` where ``source`` is no data folder, is this one, or
    lacks a case, and where a case there is unfit to import."""
    resolved = source.resolve()
    if not (resolved / "runs").is_dir():
        raise ConfigError(f"{source} is not a data folder: it has no runs/ folder")
    if resolved == paths.data_dir().resolve():
        raise ConfigError(f"{source} is this data folder: import from another one")
    chosen = list(cases) or sorted(p.name for p in (resolved / "runs").iterdir() if p.is_dir())
    for case in chosen:
        check_case_name(case, source)
    missing = [case for case in chosen if not case_dir(case, resolved).is_dir()]
    if missing:
        raise ConfigError(f"{source} has no runs of {', '.join(missing)}")
    for case in chosen:
        check_source_case(case, case_dir(case, resolved))
    return chosen
