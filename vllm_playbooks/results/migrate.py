"""Move a case's ``runs.csv`` to the current schema by rebuilding every row from its raw folder.

A row is never typed or edited: each one is rebuilt from the raw files it names (as replay does), and every column
the old table already had must come out the same, so the only change a migration makes is the columns the schema
added (and ``schema_version``). Run it as ``vllm-playbooks migrate [case ...]``.
"""

from __future__ import annotations

import argparse
import csv
import io
from pathlib import Path

from vllm_playbooks import paths
from vllm_playbooks.errors import SchemaError
from vllm_playbooks.results import raw
from vllm_playbooks.results.schema import RUN_COLUMNS, SCHEMA_VERSION
from vllm_playbooks.results.store import atomic_write_text, csv_cell, runs_file

#: Columns a migration may change: the version stamp itself.
_RESTAMPED = {"schema_version"}


def migrate_runs_file(case: str, data: Path | None = None) -> int:
    """Rewrite ``data/runs/<case>/runs.csv`` in the current schema, rows in their recorded order; return how many
    rows were rebuilt (0: the table is current already, or absent).

    Raises ``SchemaError`` when a row's raw folder is missing or a rebuilt value differs from the recorded one.
    """
    data = data if data is not None else paths.data_dir()
    path = runs_file(case, data)
    if not path.exists():
        return 0
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        header, records = list(reader.fieldnames or []), list(reader)
    if header == RUN_COLUMNS:
        return 0
    unknown = sorted(set(header) - set(RUN_COLUMNS))
    if unknown:
        raise SchemaError(f"{path}: columns {unknown} are not in schema {SCHEMA_VERSION}; no migration drops a column")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=RUN_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for number, record in enumerate(records, start=1):
        folder = data / record["raw_path"]
        if not folder.is_dir():
            raise SchemaError(f"{path} row {number}: its raw folder {folder} is missing")
        rebuilt = {k: csv_cell(v) for k, v in raw.row_from_point(folder, data).model_dump().items()}
        changed = [c for c in header if c not in _RESTAMPED and rebuilt[c] != record[c]]
        if changed:
            raise SchemaError(f"{path} row {number}: rebuilt from {folder}, {changed} differ from the recorded values")
        writer.writerow(rebuilt)
    atomic_write_text(path, buffer.getvalue())
    return len(records)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The cases to migrate."""
    parser.add_argument("cases", nargs="*", help="case names (default: every case folder under data/runs)")


def main(args: argparse.Namespace) -> int:
    """Migrate the named cases (default: every case folder under ``data/runs``)."""
    root = paths.data_dir() / "runs"
    cases = args.cases or sorted(p.name for p in root.iterdir() if (p / "runs.csv").exists())
    unknown = [case for case in cases if not runs_file(case).exists()]
    if unknown:
        raise SchemaError(f"no recorded table for {', '.join(unknown)} under {root}")
    for case in cases:
        print(f"{case}: {migrate_runs_file(case)} rows rebuilt in schema {SCHEMA_VERSION}")
    return 0
