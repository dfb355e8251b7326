"""Replay: every row of a case rebuilt from its raw folders and checked against the recorded table."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from vllm_playbooks import paths
from vllm_playbooks.errors import SchemaError
from vllm_playbooks.results import raw, store
from vllm_playbooks.results.schema import RUN_COLUMNS, RunRow
from vllm_playbooks.results.store import append_run_row, load_run_rows, rows_to_frame

#: The column ``replay_case_with_same_points`` adds: the case whose folder holds a row's raw files.
RECORDED_FOR = "recorded_for"
#: ``replay_case_with_same_points`` renumbers another case's repeats of a point from this many times that case's place.
BORROWED_REPEAT_OFFSET = 1000


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


def replay_case_with_same_points(case: str, data: Path | None = None) -> pd.DataFrame:
    """A case's measured rows and the runs other cases recorded of the same points, as one DataFrame.

    A point is its hardware, engine config id and load (``split_point_id``'s first part); two cases that measured the
    same point ran the same server at the same load on the same GPU model, so their runs are repeats of one point and
    a comparison judges them together. In the frame, every row's ``case`` is ``case`` (comparisons match rows by
    case) and ``RECORDED_FOR`` names the case whose folder holds its raw files (``raw_path`` leads there). An added
    run's repeat index is offset by ``BORROWED_REPEAT_OFFSET`` times the other case's place among the recorded cases
    (1, 2, …), so each row's ``point_id`` stays unique in the frame and still names its point.
    """
    data = data if data is not None else paths.data_dir()
    own = replay_case(case, data).assign(**{RECORDED_FOR: case})
    points = {raw.split_point_id(pid)[0] for pid in own["point_id"]}
    borrowed = []
    for place, other in enumerate(store.cases_with_runs(data), start=1):
        if other == case or not points:
            continue
        rows = [row for row in replay_rows(other, data) if raw.split_point_id(row.point_id)[0] in points]
        if rows:
            frame = rows_to_frame(rows, RUN_COLUMNS)
            split = [raw.split_point_id(pid) for pid in frame["point_id"]]
            offset = BORROWED_REPEAT_OFFSET * place
            renumbered = [f"{point}-r{repeat + offset}" for point, repeat in split]
            borrowed.append(frame.assign(**{"case": case, RECORDED_FOR: other, "point_id": renumbered}))
    return pd.concat([own, *borrowed], ignore_index=True) if borrowed else own


def point_folders(rows: pd.DataFrame, data: Path | None = None) -> list[Path]:
    """The raw point folder of each of ``rows`` (recorded rows: their ``raw_path``, relative to the data folder) in
    ``data`` (default: the book's data folder)."""
    base = data if data is not None else paths.data_dir()
    return [base / str(path) for path in rows["raw_path"]]


def with_gpu_cards(rows: pd.DataFrame, data: Path | None = None) -> pd.DataFrame:
    """``rows`` (recorded rows: ``case`` and ``point_id``) with ``gpu_cards``, each row's ``raw.gpu_cards`` read from
    its point folder in ``data`` (default: the book's data folder)."""
    cards = [raw.gpu_cards(folder) for folder in point_folders(rows, data)]
    return rows.assign(gpu_cards=cards)
