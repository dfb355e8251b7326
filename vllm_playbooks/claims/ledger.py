"""The claims ledger: the claims of every case folder (its ``claims.csv``), the evidence they are checked on, how a
check is declared (``check``; ``vllm_playbooks.cases.checks`` finds them), and the ledger table."""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from vllm_playbooks import paths
from vllm_playbooks.analysis.compare import higher_is_better, versus_baseline
from vllm_playbooks.analysis.noise import MIN_CLEAN_REPEATS
from vllm_playbooks.analysis.runs import usable_runs
from vllm_playbooks.analysis.whatif import calibrates
from vllm_playbooks.claims.lead import lead_gpu
from vllm_playbooks.claims.verdict import DATA_VERDICTS, Verdict
from vllm_playbooks.config.capacity import kv_budget
from vllm_playbooks.config.case_file import CLAIMS_FILE, calibration_cases, case_folder, case_names, case_of_folder
from vllm_playbooks.errors import ConfigError, SchemaError
from vllm_playbooks.hardware import REFERENCE_DATASHEET, REFERENCE_GPU, measured_on
from vllm_playbooks.model.calibration import EfficiencyFit, fit_efficiency
from vllm_playbooks.results.engine_steps import step_summary
from vllm_playbooks.results.failed_starts import failed_starts
from vllm_playbooks.results.raw import split_point_id
from vllm_playbooks.results.replay import replay_case
from vllm_playbooks.results.schema import RUN_COLUMNS
from vllm_playbooks.results.server_logs import parse_log_name, read_startup, server_logs
from vllm_playbooks.results.store import case_dir, cases_with_runs, load_reference, load_runs, recorded_cases
from vllm_playbooks.run.budget import engine_for_log
from vllm_playbooks.run.plan import deciding_part, deciding_points

#: The columns of a case folder's ``claims.csv`` (the case is the folder's).
CLAIMS_COLUMNS = ("claim", "text", "sources", "check")


@dataclass(frozen=True)
class Claim:
    """One line of ``claims.csv``: ``sources`` are claim ids of ``case`` in ``published.csv``."""

    claim_id: str
    case: str
    text: str
    sources: tuple[str, ...]
    check: str


@dataclass(frozen=True)
class CheckResult:
    """What a check returns.

    ``published``: the source's numbers, as computed from ``published.csv``. ``measured``: what our recorded rows show
    (empty when nothing bears on it). ``rows``: how many recorded rows or start-ups the verdict rests on; ``verdict`` is
    a data verdict exactly when ``rows`` > 0. ``model_says`` / ``model_verdict``: what theory (or the capacity
    calculator) computes, and whether that agrees with the claim; ``model_verdict`` is None where the model cannot say.
    """

    published: str
    measured: str
    verdict: Verdict
    rows: int = 0
    model_says: str = ""
    model_verdict: Verdict | None = None
    #: the recorded point the data verdict rests on, where it rests on one (e.g. engine_label, concurrency)
    point: Mapping[str, Any] = field(default_factory=dict)
    #: the compared points the data verdict rests on (``analysis.compare.versus_baseline`` rows: their runs, spreads
    #: and bands); None where the check compares no speculative point with a baseline
    pairs: pd.DataFrame | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.verdict in DATA_VERDICTS) != (self.rows > 0):
            raise ValueError(f"verdict {self.verdict!r} with rows={self.rows}: data verdicts need rows, others none")
        if self.model_verdict is not None and self.model_verdict not in DATA_VERDICTS:
            raise ValueError(f"a model verdict is one of {[str(v) for v in DATA_VERDICTS]}, got {self.model_verdict!r}")
        if self.verdict is Verdict.MODEL_ONLY and self.model_verdict is None:
            raise ValueError("a 'model only' verdict needs the model's verdict")

    @property
    def noise(self) -> dict[str, Any]:
        """What the points this verdict compares say of their noise (``noise_of``: runs, largest spread and band)."""
        return noise_of(self.pairs)

    @property
    def fewest_runs(self) -> int | None:
        """The fewest clean runs of any side of any point this verdict compares; None where it compares none."""
        return self.noise["min_clean_repeats"]

    @property
    def re_measured(self) -> bool | None:
        """Whether this data verdict rests on at least ``MIN_CLEAN_REPEATS`` clean runs of every point it compares
        (``re_measured``); None where it compares no recorded points."""
        return re_measured(str(self.verdict), self.fewest_runs)


@dataclass(frozen=True)
class Evidence:
    """Everything the checks read: the published numbers, the recorded rows of every case, the recorded server
    start-ups and the roofline's efficiencies fitted on the H200 rows (None when too few rows exist)."""

    published: pd.DataFrame
    runs: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    startups: pd.DataFrame | None = None
    fit: EfficiencyFit | None = None
    #: Per case, the engine steps of its rows (``results.engine_steps.step_summary``), where read from raw files.
    engine_steps: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    #: Per claim id, the points its verdict rests on, as (engine label, load slug): those of the part of its case
    #: that decides it (``run.plan.deciding_points``). A claim not named rests on all its case's rows.
    deciding: Mapping[str, frozenset[tuple[str, str]]] = field(default_factory=dict)
    #: Per case, the servers that did not start (``results.failed_starts.failed_starts``).
    failed_starts: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    #: The checks of every case, by the name ``claims.csv`` uses (``vllm_playbooks.cases.checks``).
    checks: Mapping[str, Check] = field(default_factory=dict)

    def check(self, name: str) -> Check:
        """The check called ``name``; ``ConfigError`` naming the known checks otherwise."""
        if name not in self.checks:
            raise ConfigError(
                f"unknown check {name!r}; known checks: {', '.join(sorted(self.checks)) or 'none'}{_NO_CHECKS_HINT}"
            )
        return self.checks[name]

    def rows(self, case: str) -> pd.DataFrame:
        """The recorded rows of ``case`` (an empty frame with the schema's columns when none are recorded)."""
        frame = self.runs.get(case)
        return frame if frame is not None else pd.DataFrame(columns=RUN_COLUMNS)

    def deciding_rows(self, claim: Claim) -> pd.DataFrame:
        """The recorded rows of ``claim``'s case at the points its verdict rests on (``deciding``), on any hardware
        and in every repeat; all the case's rows where ``deciding`` does not name the claim."""
        rows = self.rows(claim.case)
        points = self.deciding.get(claim.claim_id)
        if points is None or rows.empty:
            return rows
        # a recorded point id ends in <load slug>-r<repeat>
        loads = rows["point_id"].astype(str).map(lambda pid: split_point_id(pid.rsplit("/", 1)[-1])[0])
        return rows[[key in points for key in zip(rows["engine_label"].astype(str), loads, strict=True)]]

    def deciding_gpus(self, claim: Claim) -> list[str]:
        """The GPUs whose recorded rows hold points ``claim``'s verdict rests on (``deciding_rows``), the reference GPU
        (``hardware.REFERENCE_GPU``) first, the others in name order; empty for a claim that names no deciding
        points, whose check weighs every GPU's rows at once."""
        if claim.claim_id not in self.deciding:
            return []
        gpus = sorted(set(self.deciding_rows(claim)["gpu_name"].astype(str)))
        return sorted(gpus, key=lambda gpu: gpu != REFERENCE_GPU)

    def not_started(self, claim: Claim, gpu: str) -> list[str]:
        """The engines of the points ``claim``'s verdict rests on (``deciding``) whose server did not start on ``gpu``
        (a kept failure on the hardware of that GPU's rows) and that have no row there, in label order."""
        points, failed = self.deciding.get(claim.claim_id), self.failed_starts.get(claim.case)
        if not points or failed is None or failed.empty:
            return []
        rows = self.rows(claim.case)
        on_gpu = rows[rows["gpu_name"].astype(str) == gpu]
        labels = {label for label, _ in points}
        hardware = set(on_gpu["hardware"].astype(str))
        stopped = failed[failed["hardware"].isin(hardware) & failed["engine_label"].isin(labels)]
        return sorted(set(stopped["engine_label"]) - set(on_gpu["engine_label"].astype(str)))

    def on_gpu(self, gpu: str) -> Evidence:
        """This evidence with every case's rows narrowed to those measured on ``gpu`` (the published numbers, the
        start-ups and the roofline fit unchanged): what a claim is judged on for one GPU."""
        narrowed = {case: frame[frame["gpu_name"].astype(str) == gpu] for case, frame in self.runs.items()}
        return replace(self, runs=narrowed)

    def all_rows(self) -> pd.DataFrame:
        """Every recorded row of every case, in one frame."""
        frames = [f for f in self.runs.values() if not f.empty]
        return pd.concat(frames, ignore_index=True) if frames else self.rows("")

    def sources(self, claim: Claim) -> pd.DataFrame:
        """The published rows ``claim`` rests on, in the order ``claims.csv`` lists them."""
        case = self.published[self.published["case"] == claim.case].set_index("claim_id")
        missing = [s for s in claim.sources if s not in case.index]
        if missing:
            raise SchemaError(f"claim {claim.claim_id!r}: no published row {missing} in case {claim.case!r}")
        return case.loc[list(claim.sources)].reset_index()

    def value(self, claim: Claim, claim_id: str) -> float:
        """One published number of ``claim``; a check may read only the rows its claim lists as sources."""
        if claim_id not in claim.sources:
            raise SchemaError(
                f"the check {claim.check!r} reads {claim_id!r}, which claims.csv does not list as a source of "
                f"{claim.claim_id!r}: add it there"
            )
        frame = self.sources(claim)
        return float(frame.loc[frame["claim_id"] == claim_id, "value"].iloc[0])


CheckFn = Callable[[Claim, "Evidence"], CheckResult]
#: Evidence loaded without the cases' checks cannot run one; the cases layer loads it with them.
_NO_CHECKS_HINT = " (load the evidence with its checks: vllm_playbooks.cases.load_evidence())"


@dataclass(frozen=True)
class Check:
    """A claim's check: ``function`` judges a claim on the evidence; ``name`` is what ``claims.csv`` calls it."""

    name: str
    function: CheckFn

    def __call__(self, claim: Claim, evidence: Evidence) -> CheckResult:
        return self.function(claim, evidence)


def check(name: str) -> Callable[[CheckFn], Check]:
    """Declare a case's check under ``name`` (a decorator); ``vllm_playbooks.cases.checks`` finds it in its case's
    module."""

    def declare(function: CheckFn) -> Check:
        return Check(name, function)

    return declare


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
        names = {log: parse_log_name(log.name) for log in logs}
        launches = sorted(name for name in names.values() if name is not None)
        for log in logs:
            name = names[log]
            if name is None:  # not a name the runner writes (engine_for_log would refuse it too)
                continue
            try:
                start = read_startup(log)
                engine = engine_for_log(log, data)
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
    runs = {case: usable_runs(replay_case(case, folder), folder) for case in cases_with_runs(folder)}
    fit = None
    calibration = [
        r
        for case in calibration_cases()
        if case in runs
        for r in _records(runs[case])
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


def speedup_pairs(rows: pd.DataFrame, metric: str, extra: Iterable[str] = ()) -> pd.DataFrame:
    """Speculative points beside their baseline (``analysis.versus_baseline``: repeats as medians, with their runs,
    spreads and band), with ``speedup`` (above 1 is better: spec / baseline for throughputs, baseline / spec for
    latencies) and the extra columns named."""
    carried = list(dict.fromkeys(["case", *extra]))
    out = versus_baseline(rows, metric, extra=carried)
    out["speedup"] = out["ratio"] if higher_is_better(metric) else 1.0 / out["ratio"]
    return out


def percent_change(speedup: float) -> str:
    """A speed-up as a signed change in percent: 1.05 → '+5.0 %'."""
    return f"{100 * (speedup - 1):+.1f} %"


def model_error(function: Callable[[], Any]) -> str | None:
    """The message of the ``ConfigError`` (``CapacityError`` included) a model call raises, or None when it succeeds:
    an MoE shape the roofline does not model, or a model directory that is not a shape."""
    try:
        function()
    except ConfigError as error:
        return str(error)
    return None


LEDGER_COLUMNS = [
    "claim",
    "case",
    "text",
    "sources",
    "source_urls",
    "source_kind",
    "published",
    "measured",
    "rows",
    "verdict",
    "model_says",
    "model_verdict",
    "hardware",
    "points",
    "min_clean_repeats",
    "spread_pct",
    "band_pct",
    "deciding_part",
    "headline",
]
#: The machine-readable export (``vllm-playbooks ledger --format csv``): one row per claim and GPU it is judged on
#: (``build_ledger``), the same numbers the ledger page shows. ``verdict`` is a word of ``Verdict`` alone;
#: ``runs_per_side`` the fewest clean runs of any side of any point it compares (blank where it compares none or its
#: check does not count them); ``headline`` is true on the line the book leads with (``judged_per_gpu``);
#: ``deciding_part`` names the part of the claim's case that measures the points its verdict rests on (blank: none).
EXPORT_COLUMNS = [
    "claim_id",
    "hardware",
    "headline",
    "verdict",
    "runs_per_side",
    "re_measured",
    "points",
    "spread_pct",
    "band_pct",
    "deciding_part",
]


def re_measured(verdict: str, min_clean_repeats: int | None) -> bool | None:
    """Whether a data verdict rests on at least ``MIN_CLEAN_REPEATS`` clean runs of every point it compares; None for
    a verdict that compares no recorded points (model only, not measured yet) or whose check does not count runs."""
    if verdict not in {str(v) for v in DATA_VERDICTS} or min_clean_repeats is None:
        return None
    return min_clean_repeats >= MIN_CLEAN_REPEATS


def noise_of(pairs: pd.DataFrame | None) -> dict[str, Any]:
    """What a data verdict's compared points say of their noise: ``hardware`` (the GPUs), ``points``,
    ``min_clean_repeats`` (the fewest runs of any side of any point), ``spread_pct`` (the largest spread) and
    ``band_pct`` (the largest band used); empty values without pairs."""
    if pairs is None or pairs.empty:
        return {"hardware": "", "points": 0, "min_clean_repeats": None, "spread_pct": None, "band_pct": None}
    spreads = pairs[["baseline_spread_pct", "speculative_spread_pct"]].astype(float)
    return {
        "hardware": ", ".join(sorted(set(pairs["gpu_name"].astype(str)))) if "gpu_name" in pairs else "",
        "points": len(pairs),
        "min_clean_repeats": int(pairs[["baseline_runs", "speculative_runs"]].min().min()),
        "spread_pct": round(float(spreads.max().max()), 1),
        "band_pct": round(float(pairs["band_pct"].astype(float).max()), 1),
    }


def ledger_export(ledger: pd.DataFrame) -> pd.DataFrame:
    """The ledger in ``EXPORT_COLUMNS``: one row per line of the ledger (a claim, on a GPU where it is judged per GPU),
    as ``vllm-playbooks ledger --format csv`` prints it. The verdict is a word of the book's vocabulary (``Verdict``)
    and ``runs_per_side`` the runs it rests on; ``re_measured`` says whether those are at least ``MIN_CLEAN_REPEATS``
    (blank for the verdicts that compare no recorded points)."""
    out = ledger.rename(columns={"claim": "claim_id", "min_clean_repeats": "runs_per_side"})
    out = out.astype({"points": int, "runs_per_side": "Int64", "headline": bool})
    fewest = _fewest_runs(ledger)
    out["re_measured"] = pd.array(
        [re_measured(v, n) for v, n in zip(out["verdict"], fewest, strict=True)], dtype="boolean"
    )
    return out[EXPORT_COLUMNS]


def source_kind(flags: Iterable[bool]) -> str:
    """'primary', 'secondary only' or 'primary and secondary', from the sources' ``secondary_only`` flags."""
    values = set(bool(f) for f in flags)
    if values == {False}:
        return "primary"
    if values == {True}:
        return "secondary only"
    return "primary and secondary"


def noting_not_started(result: CheckResult, engines: list[str]) -> CheckResult:
    """``result`` with the engines whose server did not start on its GPU (``Evidence.not_started``) named after what
    it measured: a comparison on that GPU could not include them."""
    if not engines:
        return result
    measured = f"{result.measured}; " if result.measured else ""
    return replace(result, measured=f"{measured}did not start on this GPU: {', '.join(engines)}")


def judged_per_gpu(claim: Claim, evidence: Evidence) -> list[tuple[str, CheckResult]]:
    """``claim``'s check, once per GPU of ``Evidence.deciding_gpus`` on that GPU's rows alone: no GPU's rows move
    another's verdict. The GPU the book leads with comes first (``claims.lead.lead_gpu``: the most clean runs a side
    at the compared points; a tie, the reference GPU), the others follow in ``deciding_gpus``' order. A claim without
    deciding points (a rule of thumb weighed on every recorded row), or with none of them recorded yet, is checked
    once on all the evidence, under the GPU ``""``."""
    check = evidence.check(claim.check)
    gpus = evidence.deciding_gpus(claim)
    if not gpus:
        return [("", check(claim, evidence))]
    judged = [
        (gpu, noting_not_started(check(claim, evidence.on_gpu(gpu)), evidence.not_started(claim, gpu))) for gpu in gpus
    ]
    lead = lead_gpu({gpu: result.fewest_runs for gpu, result in judged})
    return sorted(judged, key=lambda line: line[0] != lead)


def build_ledger(evidence: Evidence, claims: list[Claim] | None = None) -> pd.DataFrame:
    """One line per claim (default: every case's) and GPU it is judged on (``judged_per_gpu``: the line the book leads
    with first, marked ``headline``; one line for a claim judged on every GPU's rows at once), its check run on
    ``evidence``, in ``LEDGER_COLUMNS``. ``hardware`` names the GPU a line was judged on, else the GPUs of
    the points it compares."""
    items = claims if claims is not None else load_claims(published=evidence.published)
    records = []
    for claim, (gpu, result) in ((c, judged) for c in items for judged in judged_per_gpu(c, evidence)):
        sources = evidence.sources(claim)
        records.append(
            {
                "claim": claim.claim_id,
                "case": claim.case,
                "text": claim.text,
                "sources": " ".join(claim.sources),
                "source_urls": " ".join(dict.fromkeys(sources["source_url"])),
                "source_kind": source_kind(sources["secondary_only"]),
                "published": result.published,
                "measured": result.measured,
                "rows": result.rows,
                "verdict": str(result.verdict),
                "model_says": result.model_says,
                "model_verdict": str(result.model_verdict) if result.model_verdict else "",
                **result.noise,
                **({"hardware": gpu} if gpu else {}),
                "deciding_part": (deciding_part(claim.case, claim.claim_id) or "")
                if claim.claim_id in evidence.deciding
                else "",
                "headline": not records or records[-1]["claim"] != claim.claim_id,  # judged_per_gpu puts the lead first
            }
        )
    return pd.DataFrame(records, columns=LEDGER_COLUMNS)


def headline_lines(ledger: pd.DataFrame) -> pd.DataFrame:
    """One line per claim of ``build_ledger``'s ledger: its ``headline`` line, the best-evidenced GPU's where a claim
    is judged per GPU (what the book's key findings and the re-measure commands state)."""
    return ledger[ledger["headline"].astype(bool)]


def result_for(claim_id: str, evidence: Evidence) -> CheckResult:
    """The check of one claim run on ``evidence``: the verdict the ledger leads with for that claim
    (``judged_per_gpu``'s first), for a page that states the same."""
    return judged_per_gpu(claim_of(claim_id, evidence), evidence)[0][1]


def claim_of(claim_id: str, evidence: Evidence) -> Claim:
    """The line of ``claims.csv`` with ``claim_id`` (its sources checked against ``evidence``'s published numbers);
    ``ConfigError`` where there is none."""
    for claim in load_claims(published=evidence.published):
        if claim.claim_id == claim_id:
            return claim
    raise ConfigError(f"no claim {claim_id!r} in any case's {CLAIMS_FILE}")


def _link_label(url: str) -> str:
    match = re.match(r"https://github\.com/([^/]+/[^/]+)/(?:issues|pull|discussions)/(\d+)", url)
    if match:
        return f"{match.group(1)}#{match.group(2)}"
    return re.sub(r"^https?://(www\.)?", "", url).split("/")[0]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("$", "\\$") or "—"


def _fewest_runs(ledger: pd.DataFrame) -> list[int | None]:
    """Each claim's ``min_clean_repeats`` as a whole number, None where its check counts none."""
    return [None if pd.isna(n) else int(n) for n in ledger["min_clean_repeats"]]


def remeasure_command(case: str, part: str) -> str:
    """The command that measures one part of ``case`` on this machine's first GPU: for a claim, its deciding part."""
    return f"vllm-playbooks run --case {case} --gpus 0 --part {part}"


def ledger_markdown(ledger: pd.DataFrame) -> str:
    """The ledger as MyST Markdown: a summary table, then each line's published numbers, our rows, the noise its
    verdict rests on and the model in a collapsed section of its own. Each verdict names the GPU and the clean runs a
    side it rests on; a claim judged on more than one GPU leads with its ``headline`` line, the others below it."""
    judged = [_judged_on(r) for r in ledger.itertuples()]
    lines = ["| claim | source | verdict | judged on | model's verdict |", "|---|---|---|---|---|"]
    for r, on in zip(ledger.itertuples(), judged, strict=True):
        links = ", ".join(f"[{_link_label(u)}]({u})" for u in r.source_urls.split())
        marker = " **[secondary]**" if r.source_kind == "secondary only" else ""
        claim, verdict = (
            (f"**{r.claim}**: {_cell(r.text)}", f"**{r.verdict}**") if r.headline else (f"↳ {r.claim}", r.verdict)
        )
        lines.append(f"| {claim} | {links}{marker} | {verdict} | {_cell(on)} | {_cell(r.model_verdict)} |")
    for r, on in zip(ledger.itertuples(), judged, strict=True):  # one collapsed section per line
        noise = None
        if r.points and not pd.isna(r.min_clean_repeats):
            spread = (
                "no spread yet (single runs)"
                if r.spread_pct == 0 and r.min_clean_repeats < 2
                else f"widest spread {r.spread_pct:.1f} %"
            )
            noise = (
                f"- *Noise:* {int(r.points)} compared point{'s' if r.points != 1 else ''} on {r.hardware}; the "
                f"fewest clean runs of a point: {int(r.min_clean_repeats)}; {spread}; band {r.band_pct:.1f} %"
            )
        lines += [
            "",
            f":::{{dropdown}} {r.claim}: {r.verdict}" + (f" ({on})" if on else ""),
            f"{_cell(r.text)} ({r.case}; sources: {r.source_kind})",
            "",
            f"- *Published:* {_cell(r.published)}",
            f"- *Our rows:* {_cell(r.measured)} → **{r.verdict}**",
            *([noise] if noise else []),
            *(
                [
                    f"- *Re-measure:* `{remeasure_command(r.case, r.deciding_part)}` measures again the points this "
                    "verdict rests on"
                ]
                if r.deciding_part
                else []
            ),
            f"- *Model says:* {_cell(r.model_says)}" + (f" → {r.model_verdict}" if r.model_verdict else ""),
            ":::",
        ]
    return "\n".join(lines)


def _judged_on(line: Any) -> str:
    """What a ledger line's data verdict rests on, in a few words: its GPU(s) and clean runs a side ('' for a verdict
    on no rows)."""
    if line.verdict not in {str(v) for v in DATA_VERDICTS}:
        return ""
    runs = (
        "runs not counted"
        if pd.isna(line.min_clean_repeats)
        else (f"{int(line.min_clean_repeats)} run{'' if int(line.min_clean_repeats) == 1 else 's'} a side")
    )
    return ", ".join(part for part in (line.hardware, runs) if part)
