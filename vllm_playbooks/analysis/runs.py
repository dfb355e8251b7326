"""Where and when the rows ran: provenance, time windows, runs that overlapped on one host, runs shorter than the
duration rule, and what was measured per case and hardware (``vllm-playbooks runs``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_playbooks.analysis.noise import MIN_CLEAN_REPEATS, host_disturbances
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.hardware import REFERENCE_GPU
from vllm_playbooks.results.raw import split_point_id
from vllm_playbooks.results.stalls import unstalled

if TYPE_CHECKING:
    import pandas as pd


#: The ``hardware`` value that puts every recorded GPU's rows side by side.
ALL_HARDWARE = "all"

#: What ``overlapping_points`` tells of a row and of each row it overlapped (those as ``beside_<column>``).
OVERLAP_KEYS = ("point_id", "engine_label", "concurrency", "request_rate_qps")


def rows_on_hardware(df: pd.DataFrame, hardware: str | None = None, mode: str = "replay") -> pd.DataFrame:
    """The rows a case page shows: those of the GPU named ``hardware`` (as the ``gpu_name`` column has it), every
    GPU's side by side (``"all"``), or by default the reference GPU's (``REFERENCE_GPU``) in replay and every GPU's in
    live mode (the rows just measured beside the reference). ``ConfigError`` in one line, naming the recorded GPUs,
    for a GPU without rows."""
    if hardware is None:
        hardware = ALL_HARDWARE if mode == "live" else REFERENCE_GPU
    if hardware == ALL_HARDWARE or df.empty:
        return df
    recorded = sorted(str(name) for name in df["gpu_name"].unique())
    if hardware not in recorded:
        raise ConfigError(
            f"no rows recorded on hardware {hardware!r}; recorded: {', '.join(recorded)} "
            f"(or {ALL_HARDWARE!r} for every one side by side)"
        )
    return df[df["gpu_name"] == hardware]


def with_hardware_series(df: pd.DataFrame, label: str = "engine_label") -> pd.DataFrame:
    """``df`` with ``series``: the ``label`` column, followed by ``on <GPU>`` when the rows come from more than one
    GPU, so that a plot draws one line per config and hardware."""
    if df.empty or "gpu_name" not in df or df["gpu_name"].nunique() < 2:
        return df.assign(series=df[label]) if label in df else df
    return df.assign(series=df[label].astype(str) + " on " + df["gpu_name"].astype(str))


def provenance_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Where the rows were measured: one line per (GPU, count, driver, vLLM, torch, load format) with the dates."""
    keys = ["gpu_name", "gpu_count", "driver_version", "vllm_version", "torch_version", "load_format"]
    grouped = df.groupby(keys, dropna=False)
    return grouped.agg(
        rows=("point_id", "count"),
        first_measured=("measured_at", "min"),
        last_measured=("measured_at", "max"),
        measured_seconds=("duration_s", "sum"),
    ).reset_index()


def measured_windows(df: pd.DataFrame) -> pd.DataFrame:
    """Each row's measured run as a time window: ``started_at`` = ``measured_at`` (its end) − ``duration_s``."""
    import pandas as pd

    out = df[["point_id", "engine_label", "concurrency", "request_rate_qps", "measured_at", "duration_s"]].copy()
    out["ended_at"] = pd.to_datetime(out["measured_at"], utc=True)
    out["started_at"] = out["ended_at"] - pd.to_timedelta(out["duration_s"].astype(float), unit="s")
    return out.drop(columns=["measured_at"])


def overlapping_points(df: pd.DataFrame) -> pd.DataFrame:
    """Rows whose measured run overlapped another row's in time (two servers, one per GPU group, on one host: they
    share its CPUs, so each may have run slower than alone): one line per such row and each row it overlapped
    (``beside_…``), in the order of ``df``."""
    import pandas as pd

    windows = measured_windows(df).reset_index(drop=True)
    records = []
    for i, row in windows.iterrows():
        others = windows[
            (windows.index != i) & (windows["started_at"] < row["ended_at"]) & (windows["ended_at"] > row["started_at"])
        ]
        for other in others.itertuples():
            records.append(
                {
                    **{column: row[column] for column in OVERLAP_KEYS},
                    **{f"beside_{column}": getattr(other, column) for column in OVERLAP_KEYS},
                }
            )
    return pd.DataFrame(records, columns=[*OVERLAP_KEYS, *(f"beside_{c}" for c in OVERLAP_KEYS)])


def set_aside_overlapped(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (clean runs: ``usable_runs``) without the runs that overlapped another run in time
    (``overlapping_points``) at points that have at least ``MIN_CLEAN_REPEATS`` runs that ran alone. Such a point is
    compared under one condition, alone on its host, as its baseline usually was; its overlapped runs stay recorded
    and listed on the page. A point with fewer runs that ran alone keeps every run."""
    return _without_settled(df, set(overlapping_points(df)["point_id"]))


def _without_settled(df: pd.DataFrame, overlapped: set[str]) -> pd.DataFrame:
    """``set_aside_overlapped`` with the overlapped runs' point ids given."""
    if not overlapped:
        return df
    points = df["point_id"].astype(str).map(lambda pid: split_point_id(pid)[0])
    alone = points[~df["point_id"].isin(overlapped)].value_counts()
    settled = points.map(lambda point: alone.get(point, 0) >= MIN_CLEAN_REPEATS)
    return df[~(df["point_id"].isin(overlapped) & settled)]


def usable_runs(df: pd.DataFrame, data: Path | None = None) -> pd.DataFrame:
    """The runs of ``df`` that verdicts and comparisons use: without stalled runs (``results.stalls.unstalled``,
    read from ``data``'s raw scrapes where ``df`` has no ``stalled`` column), and without the overlapped runs of
    points measured often enough alone (``set_aside_overlapped``)."""
    return set_aside_overlapped(unstalled(df, data))


def duration_rule_breaches(df: pd.DataFrame, min_duration_s: float = 30.0) -> pd.DataFrame:
    """Rows whose measured run lasted less than ``min_duration_s`` (the duration rule, book: methodology).

    The runner measures a short point a second time with more requests; rows recorded before it did so, or
    still short after the second attempt, are listed here so a page can say which numbers rest on short runs.
    """
    short = df[df["duration_s"] < min_duration_s]
    return short[["engine_label", "concurrency", "request_rate_qps", "num_prompts", "duration_s", "point_id"]]


#: The columns of ``summarize_runs`` and ``recorded_runs``, in order.
RECORDED_COLUMNS = [
    "case",
    "gpu_name",
    "gpus_per_server",
    "vllm_version",
    "host_cpu",
    "gpu_cards",
    "first_measured",
    "last_measured",
    "rows",
    "points",
    "repeats",
    "disturbed",
    "servers",
    "gpu_minutes",
]
#: ``host_cpu`` of rows measured before the runner recorded the host.
HOST_NOT_RECORDED = "not recorded"


def mark_disturbed(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (with ``results.conditions.CONDITION_COLUMNS``) with ``disturbed``: the ``noise.Disturbance`` values
    each run's readings show, joined by ', ' ('' for none). A GPU's clock is held against the highest mean SM clock
    among the runs of the same GPU model."""
    import pandas as pd

    top = pd.to_numeric(rows["gpu_sm_clock_mhz_mean"], errors="coerce").groupby(rows["gpu_name"]).transform("max")
    readings = [
        pd.to_numeric(rows[c], errors="coerce")
        for c in ("host_steal_pct", "host_load_1m_max", "host_cpu_count", "gpu_sm_clock_mhz_mean")
    ]
    found = [", ".join(host_disturbances(*values)) for values in zip(*readings, top, strict=True)]
    return rows.assign(disturbed=found)


def _host(cpu: object, count: object) -> str:
    """A row's host CPU as one string: its model and logical CPUs, or ``HOST_NOT_RECORDED``."""
    import pandas as pd

    if pd.isna(cpu):
        return HOST_NOT_RECORDED
    return f"{cpu}, {int(count)} CPUs" if not pd.isna(count) else str(cpu)


def summarize_runs(rows: pd.DataFrame, servers: pd.DataFrame) -> pd.DataFrame:
    """One case's recorded rows summed up per hardware: one line per (GPU name, GPUs per server, vLLM version, host
    CPU) with ``gpu_cards``, how many GPU cards its rows ran on (from the ``gpu_cards`` column of ``rows``,
    ``results.replay.with_gpu_cards``; a row with '' adds none), the first and last measurement date (UTC), the rows,
    the distinct points among them (an engine config at a load, whatever its repeats), ``repeats`` (rows that are a
    later run of a point), ``disturbed`` (rows whose host or GPU readings show a disturbance: ``mark_disturbed``; 0
    where ``rows`` lack the readings), and the servers whose logs ``servers`` (``run.budget.server_time``) holds with
    the GPU-minutes they held. A server counts toward the line of the row measured nearest in time to its launch
    among the rows of the hardware its log's record names (``run.budget.nearest_rows``; for a log without one, among
    the rows with as many GPUs as the server used), so a server stopped before its first point is counted too; servers
    on a hardware none of the rows ran on get a line of their own, with no rows. ``rows`` may be empty."""
    import pandas as pd

    from vllm_playbooks.results.raw import count_cards, split_point_id
    from vllm_playbooks.run.budget import nearest_rows

    if rows.empty:
        return pd.DataFrame(columns=RECORDED_COLUMNS)
    rows = rows.reset_index(drop=True)
    table = rows.assign(
        host_cpu=[_host(cpu, count) for cpu, count in zip(rows["host_cpu"], rows["host_cpu_count"], strict=True)],
        gpus_per_server=rows["gpu_count"].astype(int),
        at=pd.to_datetime(rows["measured_at"], utc=True),
        point=[split_point_id(pid)[0] for pid in rows["point_id"]],
    )
    keys = ["case", "gpu_name", "gpus_per_server", "vllm_version", "host_cpu"]
    line_of = dict(zip(table.index, table.groupby(keys, sort=False).ngroup(), strict=True))
    minutes: dict[int, float] = {}
    starts: dict[int, int] = {}
    own: dict[tuple[str, int, str], list[Any]] = {}  # servers on a hardware no row of the case ran on
    for server, nearest in zip(servers.itertuples(), nearest_rows(table, servers), strict=True):
        if nearest is None:
            own.setdefault((server.gpu_name, int(server.gpus), server.vllm_version), []).append(server)
            continue
        line = line_of[nearest]
        minutes[line] = minutes.get(line, 0.0) + float(server.gpu_minutes)
        starts[line] = starts.get(line, 0) + 1
    records = []
    for line, (key, group) in enumerate(table.groupby(keys, sort=False)):
        records.append(
            {
                **dict(zip(keys, key, strict=True)),
                "gpu_cards": count_cards(group["gpu_cards"]),
                "first_measured": group["at"].min().strftime("%Y-%m-%d"),
                "last_measured": group["at"].max().strftime("%Y-%m-%d"),
                "rows": len(group),
                "points": group["point"].nunique(),
                "repeats": int((group["repeat"] > 0).sum()),
                "disturbed": int((group["disturbed"] != "").sum()) if "disturbed" in group else 0,
                "servers": starts.get(line, 0),
                "gpu_minutes": minutes.get(line, 0.0),
            }
        )
    for (gpu_name, gpus, vllm_version), held in own.items():
        launched = pd.to_datetime([server.launched_at for server in held], utc=True)
        records.append(
            {
                "case": rows["case"].iloc[0],
                "gpu_name": gpu_name,
                "gpus_per_server": gpus,
                "vllm_version": vllm_version,
                "host_cpu": HOST_NOT_RECORDED,
                "gpu_cards": 0,
                "first_measured": launched.min().strftime("%Y-%m-%d"),
                "last_measured": launched.max().strftime("%Y-%m-%d"),
                "rows": 0,
                "points": 0,
                "repeats": 0,
                "disturbed": 0,
                "servers": len(held),
                "gpu_minutes": sum(float(server.gpu_minutes) for server in held),
            }
        )
    return pd.DataFrame(records, columns=RECORDED_COLUMNS).sort_values(
        ["first_measured", "last_measured"], ignore_index=True
    )


def recorded_runs(cases: Sequence[str] | None = None, data: Path | None = None) -> pd.DataFrame:
    """What was measured, from the data alone: ``summarize_runs`` of each recorded case (default: every case with a
    table under ``data/runs/``), its runs' host and GPU readings read (``mark_disturbed``), one line per case and
    hardware, cases in name order."""
    import pandas as pd

    from vllm_playbooks.results.conditions import with_run_conditions
    from vllm_playbooks.results.replay import with_gpu_cards
    from vllm_playbooks.results.store import cases_with_runs, load_runs
    from vllm_playbooks.run.budget import server_time

    def read(case: str) -> pd.DataFrame:
        rows = with_gpu_cards(load_runs(case, data), data)
        return mark_disturbed(with_run_conditions(rows, data)) if not rows.empty else rows

    parts = [
        summarize_runs(read(case), server_time(case, data))
        for case in (cases if cases is not None else cases_with_runs(data))
    ]
    parts = [part for part in parts if not part.empty]
    if not parts:
        return pd.DataFrame(columns=RECORDED_COLUMNS)
    return pd.concat(parts, ignore_index=True)


def check_cases_recorded(cases: Sequence[str], data: Path | None = None) -> None:
    """``ConfigError`` naming each of ``cases`` with no recorded runs under ``data`` (default: the book's data/)."""
    from vllm_playbooks.results.store import cases_with_runs

    known = cases_with_runs(data)
    unknown = [case for case in cases if case not in known]
    if unknown:
        raise ConfigError(f"no recorded runs of {', '.join(unknown)}; recorded: {', '.join(known) or 'none'}")
