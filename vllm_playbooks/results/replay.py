"""Replay: every row of a case rebuilt from its raw folders and checked against the recorded table."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from vllm_playbooks import paths
from vllm_playbooks.errors import SchemaError
from vllm_playbooks.results import raw, store
from vllm_playbooks.results.schema import RUN_COLUMNS, RunRow
from vllm_playbooks.results.store import append_run_row, load_run_rows, rows_to_frame


def sync_rows(case: str, data: Path) -> list[str]:
    """Append rows for raw points that have no row yet (a crash between the two writes); return their ids."""
    case_dir = store.case_dir(case, data)
    recorded = {r.point_id for r in load_run_rows(case, data)}
    added = []
    for folder in raw.finished_points(case_dir):
        pid = folder.relative_to(raw.raw_root(case_dir)).as_posix()
        if pid not in recorded:
            append_run_row(raw.row_from_point(folder, data), data)
            added.append(pid)
    return added


def replay_rows(case: str, data: Path | None = None) -> list[RunRow]:
    """Every row of a case rebuilt from its raw folders, checked against the recorded table.

    Raises ``SchemaError`` when a recorded row has no raw folder, a raw folder has no row, or the two disagree.
    """
    data = data if data is not None else paths.data_dir()
    case_dir = store.case_dir(case, data)
    recorded = {r.point_id: r for r in load_run_rows(case, data)}
    rebuilt = {}
    for folder in raw.finished_points(case_dir):
        row = raw.row_from_point(folder, data)
        rebuilt[row.point_id] = row
    only_table = sorted(set(recorded) - set(rebuilt))
    only_raw = sorted(set(rebuilt) - set(recorded))
    if only_table:
        raise SchemaError(f"{case}: rows without raw files (commit them): {only_table}")
    if only_raw:
        raise SchemaError(f"{case}: raw points without rows (run vllm_playbooks.results.replay.sync_rows): {only_raw}")
    for pid, row in rebuilt.items():
        if row != recorded[pid]:
            diff = [k for k in RunRow.model_fields if getattr(row, k) != getattr(recorded[pid], k)]
            raise SchemaError(f"{case}: row {pid} differs from its raw files in {diff}")
    return [recorded[pid] for pid in recorded]


def replay_case(case: str, data: Path | None = None) -> pd.DataFrame:
    """A case's measured rows, rebuilt from raw files and checked, as a DataFrame (replay mode: no GPU)."""
    return rows_to_frame(replay_rows(case, data), RUN_COLUMNS)


def with_gpu_cards(rows: pd.DataFrame, data: Path | None = None) -> pd.DataFrame:
    """``rows`` (recorded rows: ``case`` and ``point_id``) with ``gpu_cards``, each row's ``raw.gpu_cards`` read from
    its point folder in ``data`` (default: the book's data folder)."""
    cards = [
        raw.gpu_cards(raw.raw_root(store.case_dir(case, data)) / pid)
        for case, pid in zip(rows["case"], rows["point_id"], strict=True)
    ]
    return rows.assign(gpu_cards=cards)
