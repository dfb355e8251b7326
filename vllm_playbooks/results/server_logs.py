"""What a recorded server log's name and line stamps say: one reading for every module that reads server logs.

The runner names each server log ``<config id>-<UTC launch time, 2026-11-30T194243+0000>.log`` (its load generator's
log is the same name ending ``.bench.log``); vLLM stamps its lines ``MM-DD HH:MM:SS`` without a year, in the machine's
clock (UTC on the machines the recorded runs used). The runner stores a finished log gzip-compressed (``<name>.log.gz``,
``vllm_playbooks.results.textfiles``); names are read without the ``.gz``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from vllm_playbooks import paths
from vllm_playbooks.errors import SchemaError
from vllm_playbooks.files import atomic_write_text
from vllm_playbooks.results.replay import RECORDED_FOR
from vllm_playbooks.results.store import case_dir, load_runs, recorded_cases
from vllm_playbooks.results.textfiles import GZ, plain_name, read_text, stored, stored_text

#: A server log's name: the engine's config id, then the UTC time the runner opened it (bench logs do not match).
LOG_NAME = re.compile(r"^(?P<config_id>.+)-(?P<started>\d{4}-\d{2}-\d{2}T\d{6}\+0000)(?:-p\d+n\d+)?\.log$")


#: The time stamp of one vLLM log line: month, day and time, no year.
LINE_STAMP = re.compile(r"\b(?P<stamp>\d{2}-\d{2} \d{2}:\d{2}:\d{2})\b")


def parse_log_name(name: str) -> tuple[str, dt.datetime] | None:
    """(config id, launch time) from a server log's file name, plain or ``.gz``; None for any other name (a bench
    log's)."""
    match = LOG_NAME.match(name.removesuffix(GZ))
    if match is None:
        return None
    return match["config_id"], dt.datetime.strptime(match["started"], "%Y-%m-%dT%H%M%S%z")


def server_log_files(logs: Path) -> list[Path]:
    """The server logs in a case's ``logs/`` folder: every ``*.log``, plain or compressed, but the bench logs, in
    name order (a name the runner did not write is the reader's to refuse)."""
    if not logs.is_dir():
        return []
    names = ((plain_name(p), p) for p in logs.iterdir())
    return [p for name, p in sorted(names) if name.endswith(".log") and not name.endswith(".bench.log")]


#: Beside each server log the runner writes ``<log name without .log>.server.json``: the hardware key, GPU name and
#: vLLM version of the machine it launched on, so that a server stopped before its first point (no row names its
#: GPU) is counted on its own hardware. Logs recorded before the runner wrote it have none.
SERVER_RECORD = ".server.json"
#: What a server record holds.
SERVER_RECORD_KEYS = ("hardware", "gpu_name", "vllm_version")


def server_record_path(log: Path) -> Path:
    """Where the record of ``log``'s server (plain or ``.gz`` name) lies: beside it, ``<name>.server.json``."""
    return log.with_name(plain_name(log).removesuffix(".log") + SERVER_RECORD)


def write_server_record(log: Path, hardware: str, gpu_name: str, vllm_version: str) -> None:
    """Record, beside ``log``, the hardware key, GPU name and vLLM version its server launches on (atomically)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    record = {"hardware": hardware, "gpu_name": gpu_name, "vllm_version": vllm_version}
    atomic_write_text(server_record_path(log), json.dumps(record, indent=2))


def read_server_record(log: Path) -> dict[str, str]:
    """``log``'s server record (``hardware``, ``gpu_name``, ``vllm_version``), or ``{}`` where there is none or it
    cannot be read (a log recorded before the runner wrote one; a damaged file)."""
    try:
        record = json.loads(server_record_path(log).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict):
        return {}
    return {key: record[key] for key in SERVER_RECORD_KEYS if isinstance(record.get(key), str) and record[key]}


def stamp_time(stamp: str, started: dt.datetime) -> dt.datetime:
    """The UTC time of a line stamped ``MM-DD HH:MM:SS`` in a log opened at ``started`` (timezone-aware), which gives
    the year: the next one for a stamp more than a day before ``started`` (a log that ran past New Year)."""
    at = dt.datetime.strptime(f"{started.year}-{stamp}", "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.UTC)
    if at < started - dt.timedelta(days=1):
        at = at.replace(year=started.year + 1)
    return at


_FLOAT = r"([0-9][0-9,]*\.?[0-9]*)"


_PATTERNS = {
    "weights_gib": rf"Actual usage is {_FLOAT} GiB for weight",
    "peak_activation_gib": rf"{_FLOAT} GiB for peak activation",
    "non_torch_gib": rf"{_FLOAT} GiB for non-torch memory",
    "total_memory_gib": rf"Free memory on device \({_FLOAT}/{_FLOAT} GiB\)",
    "requested_memory_gib": rf"Desired GPU memory utilization is \([0-9.]+, {_FLOAT} GiB\)",
    "gpu_memory_utilization": r"Desired GPU memory utilization is \(([0-9.]+),",
    "available_kv_gib": rf"Available KV cache memory: {_FLOAT} GiB",
    "kv_cache_tokens": rf"GPU KV cache size: {_FLOAT} tokens",
    "max_concurrency": rf"Maximum concurrency for {_FLOAT} tokens per request: {_FLOAT}x",
    "cudagraph_estimate_gib": rf"Estimated CUDA graph memory: {_FLOAT} GiB",
    "cudagraph_actual_gib": rf"CUDA graph pool memory: {_FLOAT} GiB \(actual\)",
}


#: The lines a start-up that reached its KV cache always logs.
_REQUIRED = ("total_memory_gib", "requested_memory_gib", "available_kv_gib", "kv_cache_tokens", "max_concurrency")


@dataclass(frozen=True)
class StartupMemory:
    """Memory figures one vLLM start-up logged (GiB as vLLM prints them, to two decimals)."""

    log: str
    total_memory_gib: float
    gpu_memory_utilization: float
    requested_memory_gib: float
    weights_gib: float | None
    peak_activation_gib: float | None
    non_torch_gib: float | None
    cudagraph_estimate_gib: float | None
    cudagraph_actual_gib: float | None
    available_kv_gib: float
    kv_cache_tokens: int
    max_model_len: int
    max_concurrency: float


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def read_startup(log: Path) -> StartupMemory:
    """Parse one server log; raises ``SchemaError`` when the KV-cache lines are missing (a start-up that failed)."""
    text = read_text(log)
    found: dict[str, re.Match[str] | None] = {k: re.search(p, text) for k, p in _PATTERNS.items()}
    missing = [k for k in _REQUIRED if found[k] is None]
    if missing:
        raise SchemaError(f"{log}: no start-up memory lines for {', '.join(missing)} (did the server start?)")

    def group(key: str, index: int = 1) -> float | None:
        match = found[key]
        return _number(match.group(index)) if match else None

    return StartupMemory(
        log=plain_name(log),
        total_memory_gib=group("total_memory_gib", 2) or 0.0,
        gpu_memory_utilization=group("gpu_memory_utilization") or 0.0,
        requested_memory_gib=group("requested_memory_gib") or 0.0,
        weights_gib=group("weights_gib"),
        peak_activation_gib=group("peak_activation_gib"),
        non_torch_gib=group("non_torch_gib"),
        cudagraph_estimate_gib=group("cudagraph_estimate_gib"),
        cudagraph_actual_gib=group("cudagraph_actual_gib"),
        available_kv_gib=group("available_kv_gib") or 0.0,
        kv_cache_tokens=int(group("kv_cache_tokens") or 0),
        max_model_len=int(group("max_concurrency", 1) or 0),
        max_concurrency=group("max_concurrency", 2) or 0.0,
    )


#: The first exception a log names at level ERROR: the root cause of a failed start-up (what follows only says the
#: engine stopped; a warning that quotes an exception's name is not one).
_FIRST_ERROR = re.compile(r" ERROR \d\d-\d\d [0-9:]+ \[[^]]+\] ([A-Z]\w*(?:Error|Exception)): (.+)$", re.MULTILINE)


#: What vLLM 0.26 says when it sets the CUDA-graph estimate aside: the utilization asked for, and what it amounts to.
_UTILIZATION_WITHOUT_GRAPHS = re.compile(
    r"--gpu-memory-utilization=([0-9.]+) is equivalent to --gpu-memory-utilization=([0-9.]+) without CUDA graph"
)


#: What a server that did not start logged of its weights, and of the KV-cache memory left (below zero where the
#: weights and activations took more than the memory asked for).
_WEIGHTS_LOADED = rf"Model loading took {_FLOAT} GiB"
_KV_LEFT = r"Available KV cache memory: (-?[0-9][0-9,]*\.?[0-9]*) GiB"


@dataclass(frozen=True)
class FailedStartup:
    """What the log of a server that did not start says: the first error, and the memory figures vLLM logged before
    it (None where it logged none)."""

    log: str
    #: The first exception and its first sentence, e.g. "ValueError: No available memory for the cache blocks".
    error: str | None
    weights_gib: float | None
    cudagraph_estimate_gib: float | None
    #: Negative where the weights, activations and CUDA graphs left nothing of the memory asked for.
    available_kv_gib: float | None
    gpu_memory_utilization: float | None
    #: The utilization that remains for weights, activations and the KV cache once the CUDA-graph estimate is set aside.
    utilization_without_cudagraphs: float | None


def read_failed_startup(log: Path) -> FailedStartup:
    """Parse the log of a server that did not start (one without the KV-cache lines: ``has_started``)."""
    text = read_text(log)
    error = _FIRST_ERROR.search(text)
    utilization = _UTILIZATION_WITHOUT_GRAPHS.search(text)

    def first(pattern: str) -> float | None:
        match = re.search(pattern, text)
        return _number(match.group(1)) if match else None

    return FailedStartup(
        log=plain_name(log),
        error=f"{error.group(1)}: {error.group(2).split('. ')[0].rstrip('.')}" if error else None,
        weights_gib=first(_WEIGHTS_LOADED),
        cudagraph_estimate_gib=first(_PATTERNS["cudagraph_estimate_gib"]),
        available_kv_gib=first(_KV_LEFT),
        gpu_memory_utilization=float(utilization.group(1)) if utilization else None,
        utilization_without_cudagraphs=float(utilization.group(2)) if utilization else None,
    )


def all_server_logs(case_dir: Path) -> list[Path]:
    return server_log_files(case_dir / "logs")


def has_started(log: Path) -> bool:
    """Whether ``log`` holds vLLM's KV-cache start-up lines; a server stopped or failed during start-up has none."""
    text = read_text(log)
    return all(re.search(_PATTERNS[key], text) for key in _REQUIRED)


def server_logs(case_dir: Path) -> list[Path]:
    """A case's server logs (not the bench logs) of servers that finished starting, oldest first."""
    return [log for log in all_server_logs(case_dir) if has_started(log)]


def unstarted_server_logs(case_dir: Path) -> list[Path]:
    """A case's server logs of servers that never finished starting (stopped by a time limit, or failed):
    kept as the record of the attempt, left out of every start-up check."""
    return [log for log in all_server_logs(case_dir) if not has_started(log)]


def log_name_parts(log: Path):  # type: ignore[no-untyped-def]
    """(config id, launch time) of a server log, from its file name; ``SchemaError`` for a name the runner did not
    write."""

    parsed = parse_log_name(log.name)
    if parsed is None:
        raise SchemaError(f"{log}: no launch time in the file name (the runner writes <config id>-<launch>.log)")
    return parsed


_ASYNC_SCHEDULING = re.compile(r"Asynchronous scheduling is (enabled|disabled)")


_CUDAGRAPH_MODE = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.([A-Z_]+)")


#: vLLM 0.26 logs this when it runs Model Runner V2; the V1 runner's lines come from gpu_model_runner.py.
_V2_RUNNER = "Using V2 Model Runner"


_V1_RUNNER = "[gpu_model_runner.py:"


def server_modes(case: str, data: Path | None = None) -> pd.DataFrame:
    """How each started server of ``case`` ran, as its log says: one row per server log with its ``config_id`` and
    ``engine_label`` (the config id without its hash), ``model_runner`` ("V2" where vLLM said it used Model Runner
    V2, "V1" where the V1 runner logged, e.g. after falling back for draft_model; None where neither shows),
    ``cudagraph_mode`` (from the engine config vLLM printed, e.g. FULL_AND_PIECEWISE, or PIECEWISE where a speculative
    schedule forced it) and ``async_scheduling`` (True/False; None where the log does not say)."""
    folder = case_dir(case, data)
    records = []
    for log in server_logs(folder) if (folder / "logs").is_dir() else []:
        text = read_text(log)
        modes = _CUDAGRAPH_MODE.findall(text)
        scheduling = _ASYNC_SCHEDULING.findall(text)
        config_id = log_name_parts(log)[0]
        runner = "V2" if _V2_RUNNER in text else "V1" if _V1_RUNNER in text else None
        records.append(
            {
                "log": plain_name(log),
                "config_id": config_id,
                "engine_label": config_id.rsplit("-", 1)[0],
                "model_runner": runner,
                "cudagraph_mode": modes[-1] if modes else None,
                "async_scheduling": scheduling[-1] == "enabled" if scheduling else None,
            }
        )
    columns = ["log", "config_id", "engine_label", "model_runner", "cudagraph_mode", "async_scheduling"]
    return pd.DataFrame(records, columns=columns)


#: vLLM's periodic stats line (every ~10 s while it serves): how many requests run and wait at that moment.
RUNNING_LINE = re.compile(r"Running: (?P<running>\d+) reqs, Waiting: (?P<waiting>\d+) reqs")


#: :func:`running_samples` of the logs read in this process, by stored path and a digest of the stored bytes: every
#: measured row asks for its server's log, and a server measures many rows. A log that grew gets a new key.
_SAMPLES: dict[tuple[str, bytes], tuple[tuple[dt.datetime, int], ...]] = {}
_SAMPLES_MAX = 1024


def running_samples(log: Path) -> list[tuple[dt.datetime, int]]:
    """(UTC time, running requests) of every periodic stats line of a server log (``RUNNING_LINE``), in order."""
    parsed = parse_log_name(plain_name(log))
    if parsed is None:
        raise SchemaError(f"{log}: not a server log name (<config id>-<launch time>.log)")
    found = stored(log)
    data = found.read_bytes()
    key = (str(found), hashlib.blake2b(data, digest_size=20).digest())
    if key not in _SAMPLES:
        if len(_SAMPLES) >= _SAMPLES_MAX:
            _SAMPLES.clear()
        samples = []
        for line in stored_text(found, data).splitlines():
            running, stamp = RUNNING_LINE.search(line), LINE_STAMP.search(line)
            if running and stamp:
                samples.append((stamp_time(stamp["stamp"], parsed[1]), int(running["running"])))
        _SAMPLES[key] = tuple(samples)
    return list(_SAMPLES[key])


def server_log_of(logs: Path, config_id: str, at: dt.datetime) -> Path | None:
    """The log of the server of ``config_id`` that ran at ``at``: the latest of its logs opened before it."""
    opened = [
        (parsed[1], log)
        for log in server_log_files(logs)
        if (parsed := parse_log_name(plain_name(log))) is not None and parsed[0] == config_id and parsed[1] <= at
    ]
    return max(opened)[1] if opened else None


def logged_running(logs: Path, config_id: str, start: dt.datetime, end: dt.datetime) -> list[int]:
    """The running-request counts the server's own log sampled between ``start`` and ``end`` (a measured run's
    window); [] where no log or no sample covers it."""
    log = server_log_of(logs, config_id, start)
    if log is None:
        return []
    return [running for at, running in running_samples(log) if start <= at <= end]


def startup_memory_of_rows(rows: pd.DataFrame, data: Path | None = None) -> pd.DataFrame:
    """What vLLM logged at the start-up of the server that measured each of ``rows`` (recorded rows of any cases:
    ``server_log_of`` their ``case``'s logs, ``config_id`` and ``measured_at``), indexed like ``rows``: its
    ``kv_cache_tokens`` and ``cudagraph_estimate_gib`` (the memory it set aside for CUDA graphs); NA where no log of a
    started server is found (rows imported without their logs). Each log is read once."""
    base = data if data is not None else paths.data_dir()
    startups: dict[Path, StartupMemory | None] = {}
    tokens, graphs = [], []
    cases = rows[RECORDED_FOR] if RECORDED_FOR in rows.columns else rows["case"]  # the folder of its logs
    for case, config_id, measured_at in zip(cases, rows["config_id"], rows["measured_at"], strict=True):
        at = dt.datetime.fromisoformat(str(measured_at))
        log = server_log_of(case_dir(str(case), base) / "logs", str(config_id), at)
        if log is not None and log not in startups:
            try:
                startups[log] = read_startup(log)
            except SchemaError:  # a server stopped or failed during start-up: no pool
                startups[log] = None
        startup = startups[log] if log is not None else None
        tokens.append(startup.kv_cache_tokens if startup else None)
        graphs.append(startup.cudagraph_estimate_gib if startup else None)
    return pd.DataFrame(
        {
            "kv_cache_tokens": pd.array(tokens, dtype="Int64"),
            "cudagraph_estimate_gib": pd.array(graphs, dtype="Float64"),
        },
        index=rows.index,
    )


def logged_gpu_memory(gpu_name: str, data: Path | None = None) -> float | None:
    """The memory (GiB) of one GPU called ``gpu_name`` (as nvidia-smi names it) as vLLM logged it ("Free memory on
    device (free/total GiB)") at the start-up of the latest server that measured a row on such a GPU, in any case of
    ``data``; None where no row of that GPU has its server's log."""
    latest: list[tuple[str, str, str]] = []  # (measured_at, case, config_id) of every case's latest row on the GPU
    for case in recorded_cases(data):
        rows = load_runs(case, data)
        rows = rows[rows["gpu_name"] == gpu_name] if len(rows) else rows
        if len(rows):
            row = rows.loc[rows["measured_at"].astype(str).idxmax()]
            latest.append((str(row["measured_at"]), case, str(row["config_id"])))
    for measured_at, case, config_id in sorted(latest, reverse=True):
        log = server_log_of(case_dir(case, data) / "logs", config_id, dt.datetime.fromisoformat(measured_at))
        if log is not None and has_started(log):
            return read_startup(log).total_memory_gib
    return None
