"""Reading the claims and their evidence: every case folder's ``claims.csv``, validated, and the published numbers,
recorded rows, server start-ups and roofline fit the checks read."""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from vllm_playbooks import paths
from vllm_playbooks.analysis.runs import usable_runs
from vllm_playbooks.analysis.whatif import calibrates
from vllm_playbooks.claims.claim import Check, Claim, Evidence
from vllm_playbooks.config.capacity import kv_budget
from vllm_playbooks.config.case_file import CLAIMS_FILE, calibration_cases, case_folder, case_names, case_of_folder
from vllm_playbooks.errors import ConfigError, SchemaError
from vllm_playbooks.hardware import REFERENCE_DATASHEET, measured_on
from vllm_playbooks.model.calibration import fit_efficiency
from vllm_playbooks.results.engine_steps import step_summary
from vllm_playbooks.results.failed_starts import failed_starts
from vllm_playbooks.results.replay import RECORDED_FOR, replay_case_with_same_points
from vllm_playbooks.results.server_logs import parse_log_name, read_startup, server_logs
from vllm_playbooks.results.store import case_dir, cases_with_runs, load_reference, load_runs, recorded_cases
from vllm_playbooks.run.budget import engine_for_log, recorded_engine_json
from vllm_playbooks.run.deciding import deciding_points

#: The columns of a case folder's ``claims.csv`` (the case is the folder's).
CLAIMS_COLUMNS = ("claim", "text", "sources", "check")


def load_claims(
    published: pd.DataFrame | None = None, checks: Mapping[str, Check] | None = None, path: Path | None = None
) -> list[Claim]:
    """The claims of every case folder (each one's ``claims.csv``), validated: the exact columns, ids unique across
    cases, a known check for each where ``checks`` is given (``ConfigError`` otherwise), and, when ``published`` is
    given, every source present in its case (``SchemaError`` otherwise). ``path`` reads one such file alone, as its
    folder's case."""
    if path is not None:
        sources = [(case_of_folder(path.parent), path)]
    else:
        sources = [
            (case, folder / CLAIMS_FILE)
            for case in case_names()
            if ((folder := case_folder(case)) / CLAIMS_FILE).is_file()
        ]
    claims: list[Claim] = []
    for case, source in sources:
        with source.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            if tuple(reader.fieldnames or ()) != CLAIMS_COLUMNS:
                raise SchemaError(f"{source}: columns must be {', '.join(CLAIMS_COLUMNS)}; got {reader.fieldnames}")
            records = list(reader)
        for number, record in enumerate(records, start=1):
            where = f"{source} row {number} ({record.get('claim')!r})"
            if any(not (record.get(c) or "").strip() for c in CLAIMS_COLUMNS):
                raise SchemaError(f"{where}: every column needs a value")
            if any(c.claim_id == record["claim"] for c in claims):
                raise SchemaError(f"{where}: claim id appears twice")
            if checks is not None and record["check"] not in checks:
                raise ConfigError(
                    f"{where}: unknown check {record['check']!r}; known checks: {', '.join(sorted(checks))}"
                )
            claims.append(
                Claim(
                    claim_id=record["claim"],
                    case=case,
                    text=record["text"].strip(),
                    sources=tuple(record["sources"].split()),
                    check=record["check"],
                )
            )
    if published is not None:
        for claim in claims:
            Evidence(published=published).sources(claim)
    return claims


def recorded_startups(data: Path) -> pd.DataFrame:
    """One line per recorded vLLM start-up (server log) of every case: the engine that started, the KV-cache tokens
    vLLM reported, and the rows measured while that server was up (its config's rows measured from its launch until
    the next launch of the same config; none for a server stopped before its first point) with the preemptions they
    saw and the GPU they ran on (None without rows). A log without the KV-cache lines (a server that did not start),
    or whose config has no recorded point, is left out."""
    records = []
    for case in recorded_cases(data):
        rows = load_runs(case, data)
        measured_at = pd.to_datetime(rows["measured_at"], utc=True)
        logs = server_logs(case_dir(case, data))  # reads every log once to see which servers started
        recorded = recorded_engine_json(case, data) if logs else {}
        names = {log: parse_log_name(log.name) for log in logs}
        launches = sorted(name for name in names.values() if name is not None)
        for log in logs:
            name = names[log]
            if name is None:  # not a name the runner writes (engine_for_log would refuse it too)
                continue
            try:
                start = read_startup(log)
                engine = engine_for_log(log, data, recorded)
            except SchemaError:
                continue
            resolved = kv_budget(engine, start.total_memory_gib)
            config_id, launched = name
            later = [moment for other, moment in launches if other == config_id and launched < moment]
            until = min(later) if later else pd.Timestamp.max.tz_localize("UTC")
            mine = rows[(rows["config_id"] == config_id) & (measured_at >= launched) & (measured_at < until)]
            records.append(
                {
                    "case": case,
                    "engine_label": engine.label,
                    "engine": engine,
                    "total_memory_gib": start.total_memory_gib,
                    "max_num_seqs": resolved.max_num_seqs,
                    "max_model_len": engine.max_model_len,
                    "kv_cache_tokens": start.kv_cache_tokens,
                    "measured_rows": len(mine),
                    "preemptions": int(pd.to_numeric(mine["num_preemptions"]).fillna(0).sum()),
                    "gpu_name": mine["gpu_name"].iloc[0] if len(mine) else None,
                }
            )
    columns = [
        "case",
        "engine_label",
        "engine",
        "total_memory_gib",
        "max_num_seqs",
        "max_model_len",
        "kv_cache_tokens",
        "measured_rows",
        "preemptions",
        "gpu_name",
    ]
    return pd.DataFrame(records, columns=columns)


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts with None for missing values (the theory functions read ``None``, not NaN)."""
    return [{k: (None if is_missing(v) else v) for k, v in row.items()} for row in frame.to_dict("records")]


def is_missing(value: Any) -> bool:
    """True for None and a missing number (NaN, ``pd.NA``); strings, lists and dicts are values."""
    return value is None or (not isinstance(value, str | list | dict) and bool(pd.isna(value)))


def load_evidence(data: Path | None = None, checks: Mapping[str, Check] | None = None) -> Evidence:
    """Read everything the checks need from ``data`` (default: the repository's ``data/``): the published numbers,
    every case's rows rebuilt from their raw files (replay, as the case pages do) as the verdicts use them
    (``analysis.runs.usable_runs``: no stalled runs, no overlapped runs of points measured often enough alone), the
    start-ups, and the roofline fit on the H200 rows
    of the cases that calibrate the what-if (``config.case_file.calibration_cases``) that ``analysis.whatif.calibrates``
    (None with fewer than three without speculation), the points each claim's verdict rests on (``Evidence.deciding``,
    from the case files' deciding parts) and ``checks`` (``vllm_playbooks.cases.load_evidence`` gives every case's)."""

    folder = data if data is not None else paths.data_dir()
    published = load_reference()
    runs = {case: usable_runs(replay_case_with_same_points(case, folder), folder) for case in cases_with_runs(folder)}
    fit = None
    calibration = [
        r
        for case in calibration_cases()
        if case in runs
        for r in _records(runs[case][runs[case][RECORDED_FOR] == case])  # its own runs: each row once in the fit
        if measured_on(str(r["gpu_name"]), REFERENCE_DATASHEET) and calibrates(r)
    ]
    if sum(not r["num_speculative_tokens"] for r in calibration) >= 3:
        # the roofline on the speculation-off rows, the per-draft-forward overhead on the speculation-on rows
        drafts = any(r["num_speculative_tokens"] for r in calibration)
        fit = fit_efficiency(calibration, REFERENCE_DATASHEET, draft_overhead=drafts)

    steps = {case: step_summary(frame, folder) for case, frame in runs.items()}
    claims = load_claims(published=published)
    deciding = {
        claim.claim_id: points
        for claim in claims
        if (points := deciding_points(claim.case, claim.claim_id)) is not None
    }
    failed = {case: failed_starts(case, folder) for case in runs}
    return Evidence(
        published=published,
        runs=runs,
        startups=recorded_startups(folder),
        fit=fit,
        engine_steps=steps,
        deciding=deciding,
        failed_starts=failed,
        checks=dict(checks or {}),
    )
