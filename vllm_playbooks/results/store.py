"""Tidy tables on disk: load with schema checks, append one row at a time atomically, never rewrite a row."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TypeVar

import pandas as pd
from pydantic import BaseModel, ValidationError

from vllm_playbooks import paths
from vllm_playbooks.config.case_file import PUBLISHED_FILE, case_folder, case_names, case_of_folder
from vllm_playbooks.errors import SchemaError
from vllm_playbooks.files import atomic_write_text, file_lock
from vllm_playbooks.results.schema import (
    PROVENANCE_COLUMNS,
    PUBLISHED_COLUMNS,
    REFERENCE_COLUMNS,
    RUN_COLUMNS,
    ReferenceRow,
    RunRow,
)

RowT = TypeVar("RowT", bound=BaseModel)

RUNS_FILE = "runs.csv"
#: The folder of a case's runs that holds the advisor's live-search traces (``advisor.trace``), one file a search.
TRACE_FOLDER = "advisor"
TRACE_SUFFIX = ".jsonl"


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "row"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def validate_records(records: Iterable[dict], model: type[RowT], source: str) -> list[RowT]:
    """Validate raw records against ``model``; the first bad record raises with its source and row number.

    Row numbers count data rows from 1 (the CSV header is line 1, so row ``n`` is on line ``n + 1``).
    """
    rows: list[RowT] = []
    for number, record in enumerate(records, start=1):
        if model is RunRow:
            missing = [c for c in PROVENANCE_COLUMNS if record.get(c) in (None, "")]
            if missing:
                raise SchemaError(
                    f"{source} row {number} (line {number + 1}): no provenance for {', '.join(missing)}. "
                    "Every measured row needs them; rows come from `run_case`, never by hand."
                )
        try:
            rows.append(model.model_validate(record))
        except ValidationError as error:
            raise SchemaError(f"{source} row {number} (line {number + 1}): {_describe(error)}") from None
    return rows


def read_csv_records(path: Path, columns: Sequence[str]) -> list[dict[str, str]]:
    """Read a CSV into dicts after checking that its header is exactly ``columns``."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        if list(header) != list(columns):
            unknown = sorted(set(header) - set(columns))
            absent = [c for c in columns if c not in header]
            raise SchemaError(
                f"{path}: header does not match the schema (unknown: {unknown or 'none'}; missing: "
                f"{absent or 'none'}). A changed schema needs a new SCHEMA_VERSION and a loader for the old one."
            )
        return list(reader)


def csv_cell(value: object) -> str:
    """A value as a CSV cell: empty for ``None``, else ``str``."""
    return "" if value is None else str(value)


def rows_to_frame(rows: Sequence[BaseModel], columns: Sequence[str]) -> pd.DataFrame:
    """Validated rows as a DataFrame with exactly ``columns`` (no rows give an empty frame)."""
    return pd.DataFrame([row.model_dump() for row in rows], columns=list(columns))


def runs_root(data: Path | None = None) -> Path:
    """The folder of every case's measured runs: ``data/runs/`` (the book's data folder unless ``data`` is given)."""
    return (data if data is not None else paths.data_dir()) / "runs"


def recorded_cases(data: Path | None = None) -> list[str]:
    """The names of the case folders under ``runs_root``, sorted; [] where it does not exist."""
    root = runs_root(data)
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def cases_with_runs(data: Path | None = None) -> list[str]:
    """The ``recorded_cases`` whose folder holds a recorded table (``runs_file``), sorted."""
    return [case for case in recorded_cases(data) if runs_file(case, data).is_file()]


def case_dir(case: str, data: Path | None = None) -> Path:
    """One case's folder of measured runs: ``data/runs/<case>/``; ``SchemaError`` for a name that would lead
    anywhere else (a path, ``..``)."""
    root = runs_root(data)
    if not case or "/" in case or "\\" in case or case in {".", ".."} or case.startswith("."):
        raise SchemaError(f"case name {case!r} is not a folder name under {root}")
    return root / case


def runs_file(case: str, data: Path | None = None) -> Path:
    """The tidy table of one case: ``data/runs/<case>/runs.csv``."""
    return case_dir(case, data) / RUNS_FILE


def load_run_rows(case: str, data: Path | None = None) -> list[RunRow]:
    """Every measured row of a case, validated; an absent table is an empty list (nothing measured yet)."""
    path = runs_file(case, data)
    if not path.exists():
        return []
    rows = validate_records(read_csv_records(path, RUN_COLUMNS), RunRow, str(path))
    seen: set[str] = set()
    for number, row in enumerate(rows, start=1):
        if row.point_id in seen:
            raise SchemaError(f"{path} row {number} (line {number + 1}): point {row.point_id} is recorded twice")
        seen.add(row.point_id)
    return rows


def load_runs(case: str, data: Path | None = None) -> pd.DataFrame:
    """A case's measured rows as a DataFrame with the schema's columns (empty when nothing was measured)."""
    return rows_to_frame(load_run_rows(case, data), RUN_COLUMNS)


def append_run_row(row: RunRow, data: Path | None = None) -> Path:
    """Append one row to its case's table, atomically: the file is either the old one or the old one plus the row,
    and appenders in other processes wait their turn (``files.file_lock``).

    A row whose ``point_id`` is already in the table is refused: recorded rows are never rewritten. A table whose
    last line lacks its final newline gets one before the row, so the row is never glued onto the last one.
    """
    path = runs_file(row.case, data)
    with file_lock(path):
        existing = path.read_text(encoding="utf-8") if path.exists() else ""
        if existing:
            known = {r.point_id for r in load_run_rows(row.case, data)}
            if row.point_id in known:
                raise SchemaError(
                    f"{path}: point {row.point_id} is already recorded; recorded rows are never rewritten."
                )
        if existing and not existing.endswith("\n"):  # a last line without its newline: never glue the row on
            existing += "\n"
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=RUN_COLUMNS, lineterminator="\n")
        if not existing:
            writer.writeheader()
        writer.writerow({k: csv_cell(v) for k, v in row.model_dump().items()})
        atomic_write_text(path, existing + buffer.getvalue())
    return path


def load_reference(case: str | None = None, path: Path | None = None) -> pd.DataFrame:
    """Published numbers, validated: every case folder's ``published.csv`` (``config.case_file``), each row with the
    case it belongs to, or one case's. ``path`` reads one such file as ``case``'s (default: its folder's case)."""
    if path is not None:
        sources = [(case or case_of_folder(path.parent), path)]
    else:
        cases = [case] if case is not None else case_names()
        sources = [
            (name, folder / PUBLISHED_FILE)
            for name in cases
            if ((folder := case_folder(name)) / PUBLISHED_FILE).is_file()
        ]
    rows: list[ReferenceRow] = []
    for name, source in sources:
        records = [{"case": name, **record} for record in read_csv_records(source, PUBLISHED_COLUMNS)]
        case_rows = validate_records(records, ReferenceRow, str(source))
        seen: set[str] = set()
        for number, row in enumerate(case_rows, start=1):
            if row.claim_id in seen:
                raise SchemaError(f"{source} row {number}: claim_id {row.claim_id!r} appears twice in case {name!r}")
            seen.add(row.claim_id)
        rows += case_rows
    return rows_to_frame(rows, REFERENCE_COLUMNS)
