"""A claim and how it is checked: the claim (a line of a case folder's ``claims.csv``), the evidence a check
reads, what it returns, how a check is declared (``check``; ``vllm_playbooks.cases.checks`` finds them), and the
helpers checks share (speed-up pairs, the noise of compared points)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from vllm_playbooks.analysis.compare import higher_is_better, versus_baseline
from vllm_playbooks.analysis.noise import MIN_CLEAN_REPEATS
from vllm_playbooks.claims.verdict import DATA_VERDICTS, Verdict
from vllm_playbooks.errors import ConfigError, SchemaError
from vllm_playbooks.hardware import REFERENCE_GPU
from vllm_playbooks.model.calibration import EfficiencyFit
from vllm_playbooks.results.raw import split_point_id
from vllm_playbooks.results.schema import RUN_COLUMNS


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
    #: the engines of the claim's deciding points whose server did not start on the GPU judged (a comparison there
    #: could not include them); the pages name them after ``measured``
    not_started: tuple[str, ...] = ()

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
    #: that decides it (``run.deciding.deciding_points``). A claim not named rests on all its case's rows.
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
        """Every recorded run of every case, in one frame, each once: a run that two cases count (the same point,
        ``replay_case_with_same_points``) stays with the first case in name order that has it, so a rule over all
        cases judges each point once, on all its runs."""
        frames = [self.runs[case] for case in sorted(self.runs) if not self.runs[case].empty]
        if not frames:
            return self.rows("")
        combined = pd.concat(frames, ignore_index=True)
        if "raw_path" not in combined.columns:  # rows built by hand: nothing to tell apart
            return combined
        named = combined["raw_path"].notna() & (combined["raw_path"].astype(str) != "")
        return combined[~(named & combined.duplicated("raw_path"))].reset_index(drop=True)

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
