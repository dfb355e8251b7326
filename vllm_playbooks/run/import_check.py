"""A source data folder checked whole before ``import-runs`` copies anything from it.

Another machine's folder is input like a case file: it may hold links to files elsewhere, a point of another case,
a truncated raw file, a failure file that is not JSON, an engine whose label the runner would refuse. Each of those
is a ``SchemaError`` naming the point (or file) here, raised before the first copy, so a bad folder adds nothing."""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any

from vllm_playbooks.config.case_file import CASE_NAME
from vllm_playbooks.errors import ConfigError, SchemaError
from vllm_playbooks.results import raw
from vllm_playbooks.results.identity import read_json
from vllm_playbooks.results.store import TRACE_FOLDER, TRACE_SUFFIX
from vllm_playbooks.results.textfiles import read_text

#: What reading a damaged file may raise (a truncated gzip: EOFError or zlib.error; JSON of the wrong shape:
#: AttributeError, KeyError or TypeError; a pydantic refusal: ValueError).
_DAMAGE = (ValueError, TypeError, KeyError, AttributeError, EOFError, OSError, zlib.error, SchemaError, ConfigError)


def check_case_name(case: str, source: Path) -> None:
    """``ConfigError`` unless ``case`` is a plain case name (never a path that leaves ``source/runs``)."""
    if not CASE_NAME.match(case):
        raise ConfigError(f"{source}: {case!r} is not a case name (letters, digits, '-', '_' and '.')")


def check_source_case(case: str, source_case_dir: Path) -> None:
    """Check everything ``import_case`` would copy from ``source_case_dir`` (a case's folder in another data folder):
    no symbolic link anywhere in it; every finished point complete and parseable as the row it would add, recorded
    for ``case``, with the id and engine its folder says; every failure file a JSON object naming its own point and
    an error; every live-search trace JSON lines. ``SchemaError`` naming the first bad point or file."""
    _no_links(source_case_dir)
    root = raw.raw_root(source_case_dir)
    for point in raw.finished_points(source_case_dir):
        pid = point.relative_to(root).as_posix()
        try:
            _check_point(point, pid, case, source_case_dir.parent.parent)
        except _DAMAGE as error:
            reason = str(error).removeprefix(f"{point}: ")
            raise SchemaError(f"import refused: point {pid} of {source_case_dir}: {reason}"[:600]) from None
    for failure in sorted(root.glob(f"*/*/*{raw.FAILURE_SUFFIX}")) if root.is_dir() else []:
        _check_failure(failure, failure.relative_to(root).as_posix().removesuffix(raw.FAILURE_SUFFIX))
    traces = source_case_dir / TRACE_FOLDER
    for trace in sorted(traces.glob(f"*{TRACE_SUFFIX}")) if traces.is_dir() else []:
        try:
            records = [json.loads(line) for line in read_text(trace).splitlines() if line.strip()]
        except _DAMAGE as error:
            raise SchemaError(f"import refused: trace {trace}: not JSON lines ({error})"[:600]) from None
        if not all(isinstance(record, dict) for record in records):
            raise SchemaError(f"import refused: trace {trace}: a line is not a JSON object")


def _no_links(folder: Path) -> None:
    """``SchemaError`` naming the first symbolic link under ``folder`` (or ``folder`` itself): its target lies
    outside what the import may read."""
    if folder.is_symlink():
        raise SchemaError(f"import refused: {folder} is a symbolic link")
    for parent, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            if (Path(parent) / name).is_symlink():
                raise SchemaError(f"import refused: {Path(parent) / name} is a symbolic link")


def _check_point(point: Path, pid: str, case: str, source: Path) -> None:
    """Raise (one of ``_DAMAGE``) unless ``point`` parses as a row of ``case`` at ``pid``."""
    record = read_json(point / raw.POINT_FILE)
    if not isinstance(record, dict):
        raise SchemaError("point.json is not a JSON object")
    if record.get("case") != case:
        raise SchemaError(f"point.json names case {record.get('case')!r}, not {case!r}")
    hardware, config_id = raw.point_identity(point)
    if (point.parent.parent.name, point.parent.name) != (hardware, config_id):
        raise SchemaError(f"its files say {hardware}/{config_id}; run `vllm-playbooks migrate` on the source first")
    named = record.get("point_id", pid)  # a repeat renumbered here keeps the point (all but its repeat number)
    if not isinstance(named, str) or raw.split_point_id(named)[0] != raw.split_point_id(pid)[0]:
        raise SchemaError(f"point.json names point {named!r}, its folder {pid!r}")
    raw.row_from_point(point, source)


def _check_failure(path: Path, pid: str) -> None:
    """``SchemaError`` unless failure file ``path`` is a JSON object naming point ``pid`` and an error."""
    try:
        record: Any = json.loads(path.read_text(encoding="utf-8"))
    except _DAMAGE as error:
        raise SchemaError(f"import refused: failure file {path}: not JSON ({type(error).__name__})") from None
    if not raw.is_failure_record(record, pid):
        raise SchemaError(f"import refused: failure file {path}: not a failure record of point {pid}")
