"""A schema migration rebuilds each row from its raw folder and changes nothing the old table recorded."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from vllm_playbooks.errors import SchemaError
from vllm_playbooks.paths import data_dir
from vllm_playbooks.results.migrate import migrate_runs_file
from vllm_playbooks.results.schema import RUN_COLUMNS

CASE = "llama-8b-draft-model"
ADDED_IN_2 = ("random_range_ratio", "host_cpu", "host_cpu_count")


def _old_table(tmp_path: Path, edit: dict[str, str] | None = None) -> Path:
    """A copy of one recorded case whose table has schema 1's columns (optionally one value changed in row 1)."""
    data = tmp_path / "data"
    shutil.copytree(data_dir() / "runs" / CASE, data / "runs" / CASE)
    table = data / "runs" / CASE / "runs.csv"
    with table.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    old_columns = [c for c in RUN_COLUMNS if c not in ADDED_IN_2]
    with table.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=old_columns, lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        for number, row in enumerate(rows):
            writer.writerow({**row, "schema_version": "1", **(edit if edit and number == 0 else {})})
    return data


@pytest.mark.recorded_data
def test_an_old_table_is_rebuilt_into_the_current_schema_unchanged(tmp_path: Path) -> None:
    recorded = (data_dir() / "runs" / CASE / "runs.csv").read_text(encoding="utf-8")
    data = _old_table(tmp_path)
    assert migrate_runs_file(CASE, data) == len(recorded.splitlines()) - 1  # every row, none twice
    migrated = (data / "runs" / CASE / "runs.csv").read_text(encoding="utf-8")
    assert migrated == recorded
    assert migrate_runs_file(CASE, data) == 0  # current already: nothing to do


@pytest.mark.recorded_data
def test_a_recorded_value_its_raw_files_do_not_give_stops_the_migration(tmp_path: Path) -> None:
    data = _old_table(tmp_path, edit={"output_tok_s": "999.0"})
    before = (data / "runs" / CASE / "runs.csv").read_text(encoding="utf-8")
    with pytest.raises(SchemaError, match=r"row 1: .*\['output_tok_s'\] differ"):
        migrate_runs_file(CASE, data)
    assert (data / "runs" / CASE / "runs.csv").read_text(encoding="utf-8") == before
