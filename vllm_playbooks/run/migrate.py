"""Move a case's recorded points to where their identity puts them, and rebuild its ``runs.csv`` from the raw files.

A point's folder is ``raw/<hardware>/<config id>/<load>-r<repeat>`` (``vllm_playbooks.results.identity``). Points
recorded under an older layout (``raw/<config id>/<load>-r<repeat>``) or under a config id an older code computed
are moved there; the repeats of one hardware, config and load keep their numbers unless two collide (two sets
recorded under different ids), when the later-measured one takes the next free number. Server logs are renamed to
their config's id. Then every row is rebuilt from its raw folder (as replay does), and every measured column must come
out as the old table had it: only the identity columns (and the schema version) may change. No file is edited or
dropped; a second run finds everything in place and changes nothing. Run it as ``vllm-playbooks migrate [case ...]``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vllm_playbooks import paths
from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.errors import ConfigError, SchemaError
from vllm_playbooks.files import atomic_write_text, fsync_folder
from vllm_playbooks.results import raw
from vllm_playbooks.results.identity import point_id, read_json
from vllm_playbooks.results.schema import RUN_COLUMNS, SCHEMA_VERSION
from vllm_playbooks.results.server_logs import parse_log_name
from vllm_playbooks.results.store import case_dir, csv_cell, runs_file
from vllm_playbooks.results.textfiles import GZ
from vllm_playbooks.run.plan import load_plan

#: Columns a migration may change: a point's identity and the version stamp; every other must come out the same.
IDENTITY_COLUMNS = frozenset({"schema_version", "hardware", "point_id", "config_id", "repeat", "raw_path"})
#: Where points wait while they move (a name no config id has; a stopped migration finds them on its next run).
MOVING = "_moving"


@dataclass
class Migration:
    """What migrating one case did."""

    rows: int = 0
    moved: int = 0
    logs_renamed: int = 0
    table_rewritten: bool = False


def legacy_config_id(engine: EngineConfig) -> str:
    """The config id the code computed before ids hashed only what the server sees: the label and a hash of the
    whole stored config. It names the logs of servers that stopped before finishing a point."""
    body = {k: v for k, v in engine.resolved().items() if k != "label"}
    return f"{engine.label}-{hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:10]}"


def _recorded_points(root: Path) -> list[Path]:
    """Every complete point folder under ``raw/``, in either layout (and any left in ``MOVING``)."""
    found = [*root.glob(f"*/*/{raw.POINT_FILE}"), *root.glob(f"*/*/*/{raw.POINT_FILE}")]
    return sorted(p.parent for p in found if not any(part.startswith(".") for part in p.relative_to(root).parts))


def target_folders(root: Path) -> dict[Path, Path]:
    """Each recorded point folder under ``root`` (a case's ``raw/``) and the folder its identity puts it in. Taken in
    the order they were measured, the repeats of one hardware, config id and load keep their numbers; one whose number
    an earlier-measured repeat already has (two sets recorded under different ids) takes the next free number."""
    groups: dict[tuple[str, str, str], list[tuple[str, Path]]] = {}
    for folder in _recorded_points(root):
        hardware, config_id = raw.point_identity(folder)
        load_slug = raw.split_point_id(folder.name)[0]
        measured_at = read_json(folder / raw.POINT_FILE)["measured_at"]
        groups.setdefault((hardware, config_id, load_slug), []).append((measured_at, folder))
    targets = {}
    for (hardware, config_id, load_slug), members in groups.items():
        taken: set[int] = set()
        for _, folder in sorted(members, key=lambda m: (m[0], m[1].as_posix())):
            repeat = raw.split_point_id(folder.name)[1]
            if repeat in taken:
                repeat = max(taken) + 1
            taken.add(repeat)
            targets[folder] = root / point_id(hardware, config_id, load_slug, repeat)
    return targets


def _move_points(root: Path, targets: dict[Path, Path]) -> int:
    """Move every folder to its target, through ``MOVING`` so that no move lands on a folder still to move."""
    moving = [(folder, target) for folder, target in targets.items() if folder != target]
    parked = []
    for number, (folder, target) in enumerate(moving):
        spot = root / MOVING / str(number) / folder.name
        spot.parent.mkdir(parents=True, exist_ok=True)
        folder.rename(spot)
        parked.append((spot, target))
    for spot, target in parked:
        if target.exists():
            raise SchemaError(f"{target} exists: two points claim it")
        target.parent.mkdir(parents=True, exist_ok=True)
        spot.rename(target)
        fsync_folder(target.parent)
    for folder in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(folder.iterdir()):
            folder.rmdir()
    return len(moving)


def _log_ids(case: str, moved_from: dict[str, str]) -> dict[str, str]:
    """Old config id → new, from the points' own records, then from the packaged case's engine configs (the logs
    of servers that never finished a point)."""
    ids = dict(moved_from)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            engines = load_plan(case).engines
        except ConfigError:  # a case of one's own, not packaged
            engines = ()
    for engine in engines:
        ids.setdefault(legacy_config_id(engine), engine.config_id())
    return ids


def _rename_logs(logs: Path, ids: dict[str, str]) -> int:
    """Rename each server log (and its load generator's) to its config's id; a log already named so stays."""
    renamed = 0
    for log in sorted(logs.iterdir()) if logs.is_dir() else []:
        name = log.name.removesuffix(GZ)
        bench = name.endswith(".bench.log")
        parsed = parse_log_name(name.replace(".bench.log", ".log") if bench else name)
        if parsed is None or parsed[0] not in ids or ids[parsed[0]] == parsed[0]:
            continue
        target = logs / log.name.replace(parsed[0], ids[parsed[0]], 1)
        if target.exists():
            raise SchemaError(f"{target} exists: two server logs claim it")
        log.rename(target)
        renamed += 1
    return renamed


def migrate_case(case: str, data: Path | None = None) -> Migration:
    """Move ``case``'s points and logs to their identity and rebuild its ``runs.csv`` from the raw files.

    Raises ``SchemaError`` when the table and the raw folders do not hold the same points, or a rebuilt row differs
    from the recorded one in a column other than ``IDENTITY_COLUMNS``.
    """
    data = data if data is not None else paths.data_dir()
    folder, table = case_dir(case, data), runs_file(case, data)
    root = raw.raw_root(folder)
    records = []
    if table.exists():
        with table.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            header, records = list(reader.fieldnames or []), list(reader)
        unknown = sorted(set(header) - set(RUN_COLUMNS))
        if unknown:
            raise SchemaError(f"{table}: columns {unknown} are not in schema {SCHEMA_VERSION}; no migration drops one")
    targets = target_folders(root) if root.is_dir() else {}
    if len(targets) != len(records):
        raise SchemaError(
            f"{table}: {len(records)} rows but {len(targets)} raw point folders; rows come from raw "
            "folders one to one (vllm_playbooks.results.replay.sync_rows adds missing rows)"
        )
    old_ids = {folder: read_json(folder / raw.POINT_FILE)["config_id"] for folder in targets}
    new_path = {f.relative_to(data).as_posix(): t.relative_to(data).as_posix() for f, t in targets.items()}
    report = Migration(rows=len(records), moved=_move_points(root, targets))
    moved_from = {old_ids[f]: t.parent.name for f, t in targets.items()}
    report.logs_renamed = _rename_logs(folder / "logs", _log_ids(case, moved_from))
    rows = sorted((raw.row_from_point(t, data) for t in targets.values()), key=lambda r: (r.measured_at, r.point_id))
    rebuilt = {row.raw_path: {k: csv_cell(v) for k, v in row.model_dump().items()} for row in rows}
    for number, record in enumerate(records, start=1):
        now = rebuilt.get(new_path.get(record["raw_path"], ""))
        if now is None:
            raise SchemaError(f"{table} row {number}: no raw folder {record['raw_path']}")
        changed = [c for c in header if c not in IDENTITY_COLUMNS and now[c] != record[c]]
        if changed:
            raise SchemaError(f"{table} row {number}: rebuilt from {now['raw_path']}, {changed} differ from the table")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=RUN_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rebuilt.values())
    if rows and (not table.exists() or table.read_text(encoding="utf-8") != buffer.getvalue()):
        atomic_write_text(table, buffer.getvalue())
        report.table_rewritten = True
    return report


def cases_to_migrate(cases: Sequence[str] = ()) -> list[str]:
    """``cases``, or every case folder under ``data/runs`` with a recorded table; ``SchemaError`` naming a case
    without one."""
    root = paths.data_dir() / "runs"
    chosen = list(cases) or sorted(p.name for p in root.iterdir() if (p / "runs.csv").exists())
    unknown = [case for case in chosen if not (root / case / "runs.csv").exists()]
    if unknown:
        raise SchemaError(f"no recorded table for {', '.join(unknown)} under {root}")
    return chosen
