"""The migration moves recorded points to their identity (hardware, stable config id), renumbers repeats that were
recorded under two ids, renames server logs, and rebuilds each row from its raw folder without changing a measured
value; a second run changes nothing."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT
from vllm_playbooks.errors import SchemaError
from vllm_playbooks.paths import data_dir
from vllm_playbooks.results import raw
from vllm_playbooks.results.replay import replay_rows
from vllm_playbooks.results.schema import RUN_COLUMNS
from vllm_playbooks.run.migrate import IDENTITY_COLUMNS, legacy_config_id, migrate_case, target_folders
from vllm_playbooks.run.plan import quiet_plan

CASE = "llama-8b-draft-model"
#: The draft rows of llama-8b-draft-model as recorded before config ids hashed only what the server sees: c1-c64 of
#: 2026-11-30 under one id, three more c1 runs of 2026-12-04 under the id the code of that day computed.
PREMIGRATION = ROOT / "tests" / "fixtures" / "premigration"
OLD_IDS = ("draft-1b-k4-a0.8-b1d514d62b", "draft-1b-k4-a0.8-dcc4dba872")


def _copy(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(PREMIGRATION / "runs", data / "runs")
    return data


def _contents(folder: Path) -> list[str]:
    """Every file's content hash under ``folder`` but the tables: what a migration may move and never change."""
    return sorted(
        hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file() and p.name != "runs.csv"
    )


def _rows(data: Path) -> list[dict[str, str]]:
    with (data / "runs" / CASE / "runs.csv").open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_two_ids_of_one_config_become_one_with_four_runs_at_concurrency_1(tmp_path: Path) -> None:
    data = _copy(tmp_path)
    before, files = _rows(data), _contents(data)
    done = migrate_case(CASE, data)
    after = _rows(data)
    assert done.rows == len(before) == len(after) and done.moved == len(before)
    assert _contents(data) == files  # no raw file or log lost or changed, only moved
    (config_id,) = {row["config_id"] for row in after}
    assert config_id not in OLD_IDS
    engine = next(e for e in quiet_plan(CASE)[0].engines if e.label == "draft-1b-k4-a0.8")
    assert config_id == engine.config_id()  # what today's runner computes, so it skips these points
    c1 = sorted((r["measured_at"], int(r["repeat"])) for r in after if r["concurrency"] == "1")
    assert [repeat for _, repeat in c1] == [0, 1, 2, 3]  # renumbered by the time measured: the old r0 first
    assert c1[0][0].startswith("2026-11-30")
    assert all(
        r["point_id"] == f"nvidia-h200-x1-vllm0.26.0/{config_id}/in512-out128-c{r['concurrency']}-r{r['repeat']}"
        for r in after
    )
    assert {r["raw_path"] for r in after} == {f"runs/{CASE}/raw/{r['point_id']}" for r in after}
    logs = sorted(p.name for p in (data / "runs" / CASE / "logs").iterdir())
    assert logs and all(name.startswith(f"{config_id}-") for name in logs)
    replay_rows(CASE, data)  # every row rebuilds from its folder where it now lies


def test_every_measured_value_comes_out_as_the_old_table_had_it(tmp_path: Path) -> None:
    data = _copy(tmp_path)
    before = {r["measured_at"]: r for r in _rows(data)}
    migrate_case(CASE, data)
    for row in _rows(data):
        old = before[row["measured_at"]]
        assert {c: row[c] for c in old if c not in IDENTITY_COLUMNS} == {
            c: v for c, v in old.items() if c not in IDENTITY_COLUMNS
        }
    assert list(_rows(data)[0]) == RUN_COLUMNS


def test_a_second_migration_changes_nothing(tmp_path: Path) -> None:
    data = _copy(tmp_path)
    migrate_case(CASE, data)
    table = (data / "runs" / CASE / "runs.csv").read_text(encoding="utf-8")
    tree = sorted(p.relative_to(data).as_posix() for p in data.rglob("*"))
    again = migrate_case(CASE, data)
    assert (again.moved, again.logs_renamed, again.table_rewritten) == (0, 0, False)
    assert (data / "runs" / CASE / "runs.csv").read_text(encoding="utf-8") == table
    assert sorted(p.relative_to(data).as_posix() for p in data.rglob("*")) == tree


def test_points_recorded_after_a_migration_in_the_old_layout_join_the_migrated_ones(tmp_path: Path) -> None:
    """Re-runnable: a branch that recorded new points with the old code meanwhile is migrated again."""
    data = _copy(tmp_path)
    late = data / "runs" / CASE / "raw" / OLD_IDS[1] / "in512-out128-c1-r2"
    parked = tmp_path / "late"
    shutil.move(late, parked)
    table = data / "runs" / CASE / "runs.csv"
    lines = table.read_text(encoding="utf-8").splitlines(keepends=True)
    late_line = next(line for line in lines if f"{OLD_IDS[1]}/in512-out128-c1-r2," in line)
    table.write_text("".join(line for line in lines if line != late_line), encoding="utf-8")
    migrate_case(CASE, data)
    late.parent.mkdir(parents=True)
    shutil.move(parked, late)  # the old code's next point, and its row, in the old schema's table
    migrated = _rows(data)
    with table.open("a", encoding="utf-8", newline="") as handle:
        old_row = next(csv.DictReader([lines[0], late_line]))
        csv.DictWriter(handle, fieldnames=RUN_COLUMNS, lineterminator="\n").writerow(
            {c: old_row.get(c, "") for c in RUN_COLUMNS}
        )
    done = migrate_case(CASE, data)
    assert done.moved == 1 and len(_rows(data)) == len(migrated) + 1
    assert sorted(int(r["repeat"]) for r in _rows(data) if r["concurrency"] == "1") == [0, 1, 2, 3]


def test_a_recorded_value_its_raw_files_do_not_give_stops_the_migration(tmp_path: Path) -> None:
    data = _copy(tmp_path)
    table = data / "runs" / CASE / "runs.csv"
    rows = _rows(data)
    rows[0]["output_tok_s"] = "999.0"
    with table.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(SchemaError, match=r"\['output_tok_s'\] differ"):
        migrate_case(CASE, data)


def test_a_table_that_lacks_a_raw_folders_row_is_refused_before_anything_moves(tmp_path: Path) -> None:
    data = _copy(tmp_path)
    table = data / "runs" / CASE / "runs.csv"
    table.write_text("".join(table.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]), encoding="utf-8")
    with pytest.raises(SchemaError, match="rows but .* raw point folders"):
        migrate_case(CASE, data)
    assert all((data / "runs" / CASE / "raw" / old).is_dir() for old in OLD_IDS)


def test_a_log_of_a_server_that_finished_no_point_is_renamed_through_the_old_formula(tmp_path: Path) -> None:
    data = _copy(tmp_path)
    engine = next(e for e in quiet_plan(CASE)[0].engines if e.label == "spec-off")
    logs = data / "runs" / CASE / "logs"
    (logs / f"{legacy_config_id(engine)}-2026-12-01T000000+0000.log").write_text("stopped while starting\n")
    migrate_case(CASE, data)
    assert (logs / f"{engine.config_id()}-2026-12-01T000000+0000.log").is_file()


@pytest.mark.recorded_data
def test_every_recorded_point_lies_where_its_identity_puts_it() -> None:
    """Rebuilds every recorded point's hardware and config id from its point.json and provenance.json and finds the
    folder (and so its row) unchanged: the recorded data is migrated, and the ids are stable."""
    for case_dir in sorted(p for p in (data_dir() / "runs").iterdir() if p.is_dir()):
        root = raw.raw_root(case_dir)
        targets = target_folders(root)
        assert targets, case_dir
        assert all(folder == target for folder, target in targets.items()), case_dir
        for folder in targets:
            record = json.loads((folder / raw.POINT_FILE).read_text(encoding="utf-8"))
            assert folder.parent.name.startswith(record["engine"]["label"] + "-")
