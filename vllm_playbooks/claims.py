"""The claims ledger: every published claim the book checks, each with a verdict computed from the recorded rows.

The claims are listed in ``data/reference/claims.csv``, one per line: an id, the anchor case, the claim in words, the
rows of ``data/reference/published.csv`` it rests on (``sources``, claim ids of that case) and the name of its check.
A check is a function registered here under that name (``@check``). It reads the published numbers, the recorded rows
(``Evidence``) and the theory, and returns a ``CheckResult``: what was published, what our rows show, a ``Verdict``,
and what the model in ``vllm_playbooks.theory`` (or the capacity calculator) says. ``build_ledger`` runs every check,
so a verdict changes by itself when new rows are recorded; nothing in a verdict is typed in.

Config-only shapes with dummy weights and imposed acceptance reproduce compute and memory physics, not model quality:
a verdict here says whether the *mechanism* behind a claim shows up on our hardware, never whether a model's drafts
would really be accepted that often.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_playbooks import analysis, paths
from vllm_playbooks.errors import ConfigError, SchemaError
from vllm_playbooks.results.stalls import describe_load

if TYPE_CHECKING:
    import pandas as pd

    from vllm_playbooks.theory import EfficiencyFit


# --------------------------------------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------------------------------------


class Verdict(StrEnum):
    """What the evidence says about a claim. The words are the case pages' (``book/intro.md``) plus two for claims
    our rows cannot settle. Meanings: ``VERDICT_MEANINGS``."""

    REPRODUCED = "reproduced"
    DIRECTION_ONLY = "direction only"
    NOT_REPRODUCED = "not reproduced"
    NOT_MEASURED = "not measured yet"
    MODEL_ONLY = "model only"


#: One sentence per verdict, the definition the ledger page shows.
VERDICT_MEANINGS: dict[Verdict, str] = {
    Verdict.REPRODUCED: "Recorded rows at the claim's conditions show the claimed effect, and where the claim gives a "
    "size, a size within the tolerance below.",
    Verdict.DIRECTION_ONLY: "Recorded rows show the effect in the claimed direction, but its size is outside the "
    "tolerance (expected where our GPU or model scale differs from the source's).",
    Verdict.NOT_REPRODUCED: "Recorded rows at the claim's conditions show no such effect, or the opposite one. For a rule "
    "of thumb, one recorded row that goes against it is enough.",
    Verdict.NOT_MEASURED: "No recorded row is at the claim's conditions yet; the model column says what theory expects. "
    "The verdict changes by itself when such rows are recorded.",
    Verdict.MODEL_ONLY: "The claim is about a quantity the book computes rather than measures (a roofline crossover, a "
    "default in vLLM's code); the model column carries the verdict.",
}

#: Verdicts that rest on recorded rows; a model's verdict is always one of these (or absent).
DATA_VERDICTS = (Verdict.REPRODUCED, Verdict.DIRECTION_ONLY, Verdict.NOT_REPRODUCED)

#: A speed-up within 1 ± this counts as no change (break-even). The book has not measured its run-to-run spread, so
#: this band is a stated choice, not a measured one.
BREAK_EVEN_BAND = 0.05
#: A measured (or modelled) ratio within ±10 % of the claimed ratio, or of the ends of a claimed range, counts as the
#: same size.
SIZE_TOLERANCE = 0.10
#: A load (concurrency) within this factor of the load a claim was made at counts as the claim's load.
LOAD_FACTOR = 2.0
#: The GPU whose peaks the roofline checks use: every row recorded so far comes from an H200.
ROOFLINE_GPU = "H200-SXM"


class Effect(StrEnum):
    """The sign of a speed-up (a ratio where above 1 is better), with ``BREAK_EVEN_BAND`` as no change."""

    GAIN = "gain"
    NONE = "no change"
    LOSS = "loss"


def effect(speedup: float) -> Effect:
    """``GAIN`` above 1 + ``BREAK_EVEN_BAND``, ``LOSS`` below 1 − ``BREAK_EVEN_BAND``, ``NONE`` in between."""
    if speedup > 1.0 + BREAK_EVEN_BAND:
        return Effect.GAIN
    if speedup < 1.0 - BREAK_EVEN_BAND:
        return Effect.LOSS
    return Effect.NONE


def judge(measured: float, claimed_low: float, claimed_high: float | None = None) -> Verdict:
    """Verdict for one measured speed-up against a claimed one (or a claimed range; higher is better in both).

    The effects (``effect``) must agree, else ``NOT_REPRODUCED``; then ``REPRODUCED`` when the measured value lies
    within ``SIZE_TOLERANCE`` of the claimed range, ``DIRECTION_ONLY`` when it does not. A claimed range whose ends
    have different effects counts as a match for either.
    """
    high = claimed_low if claimed_high is None else claimed_high
    low, high = min(claimed_low, high), max(claimed_low, high)
    if effect(measured) not in {effect(low), effect(high)}:
        return Verdict.NOT_REPRODUCED
    if low * (1 - SIZE_TOLERANCE) <= measured <= high * (1 + SIZE_TOLERANCE):
        return Verdict.REPRODUCED
    return Verdict.DIRECTION_ONLY


def combine(verdicts: Iterable[Verdict]) -> Verdict:
    """One verdict for several judged points: the worst of them (``NOT_REPRODUCED`` < ``DIRECTION_ONLY`` <
    ``REPRODUCED``); ``NOT_MEASURED`` for none."""
    found = list(verdicts)
    for worst in (Verdict.NOT_REPRODUCED, Verdict.DIRECTION_ONLY, Verdict.REPRODUCED):
        if worst in found:
            return worst
    return Verdict.NOT_MEASURED


def _best(verdicts: Iterable[Verdict]) -> Verdict:
    found = list(verdicts)
    for best in (Verdict.REPRODUCED, Verdict.DIRECTION_ONLY, Verdict.NOT_REPRODUCED):
        if best in found:
            return best
    return Verdict.NOT_MEASURED


# --------------------------------------------------------------------------------------------------------------------
# Claims, evidence, results
# --------------------------------------------------------------------------------------------------------------------

CLAIMS_COLUMNS = ("claim", "case", "text", "sources", "check")


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

    def __post_init__(self) -> None:
        if (self.verdict in DATA_VERDICTS) != (self.rows > 0):
            raise ValueError(f"verdict {self.verdict!r} with rows={self.rows}: data verdicts need rows, others none")
        if self.model_verdict is not None and self.model_verdict not in DATA_VERDICTS:
            raise ValueError(f"a model verdict is one of {[str(v) for v in DATA_VERDICTS]}, got {self.model_verdict!r}")
        if self.verdict is Verdict.MODEL_ONLY and self.model_verdict is None:
            raise ValueError("a 'model only' verdict needs the model's verdict")


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

    def rows(self, case: str) -> pd.DataFrame:
        """The recorded rows of ``case`` (an empty frame with the schema's columns when none are recorded)."""
        import pandas as pd

        from vllm_playbooks.results.schema import RUN_COLUMNS

        frame = self.runs.get(case)
        return frame if frame is not None else pd.DataFrame(columns=RUN_COLUMNS)

    def all_rows(self) -> pd.DataFrame:
        """Every recorded row of every case, in one frame."""
        import pandas as pd

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


CheckFn = Callable[[Claim, Evidence], CheckResult]

#: The registered checks, by the name ``claims.csv`` uses.
CHECKS: dict[str, CheckFn] = {}


def check(name: str) -> Callable[[CheckFn], CheckFn]:
    """Register a check under ``name`` (a decorator)."""

    def register(function: CheckFn) -> CheckFn:
        if name in CHECKS:
            raise ValueError(f"check {name!r} is registered twice")
        CHECKS[name] = function
        return function

    return register


def get_check(name: str) -> CheckFn:
    """The check called ``name``; ``ConfigError`` naming the known checks otherwise."""
    if name not in CHECKS:
        raise ConfigError(f"unknown check {name!r}; known checks: {', '.join(sorted(CHECKS))}")
    return CHECKS[name]


def claims_file(start: Path | None = None) -> Path:
    """``data/reference/claims.csv``."""
    return paths.data_dir(start) / "reference" / "claims.csv"


def load_claims(path: Path | None = None, published: pd.DataFrame | None = None) -> list[Claim]:
    """The claims, validated: the exact columns, unique ids, a known check for each (``ConfigError`` otherwise), and,
    when ``published`` is given, every source present in its case (``SchemaError`` otherwise)."""
    source = path if path is not None else claims_file()
    with source.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != CLAIMS_COLUMNS:
            raise SchemaError(f"{source}: columns must be {', '.join(CLAIMS_COLUMNS)}; got {reader.fieldnames}")
        records = list(reader)
    claims: list[Claim] = []
    for number, record in enumerate(records, start=1):
        where = f"{source} row {number} ({record.get('claim')!r})"
        if any(not (record.get(c) or "").strip() for c in CLAIMS_COLUMNS):
            raise SchemaError(f"{where}: every column needs a value")
        if any(c.claim_id == record["claim"] for c in claims):
            raise SchemaError(f"{where}: claim id appears twice")
        if record["check"] not in CHECKS:
            raise ConfigError(f"{where}: unknown check {record['check']!r}; known checks: {', '.join(sorted(CHECKS))}")
        claims.append(
            Claim(claim_id=record["claim"], case=record["case"], text=record["text"].strip(),
                  sources=tuple(record["sources"].split()), check=record["check"])
        )  # fmt: skip
    if published is not None:
        for claim in claims:
            Evidence(published=published).sources(claim)
    return claims


def recorded_startups(data: Path) -> pd.DataFrame:
    """One line per recorded vLLM start-up (server log) of every case: the engine that started, the KV-cache tokens
    vLLM reported, and the rows measured while that server was up (its config's rows measured from its launch until
    the next launch of the same config; none for a server stopped before its first point) with the preemptions they
    saw. A log without the KV-cache lines (a server that did not start), or whose config has no recorded point, is
    left out."""
    import pandas as pd

    from vllm_playbooks.config.capacity import kv_budget
    from vllm_playbooks.results.server_logs import parse_log_name
    from vllm_playbooks.results.store import load_runs
    from vllm_playbooks.startup import engine_for_log, read_startup, server_logs

    records = []
    runs = data / "runs"
    for case_dir in sorted(p for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []:
        rows = load_runs(case_dir.name, data)
        measured_at = pd.to_datetime(rows["measured_at"], utc=True)
        logs = server_logs(case_dir)  # reads every log once to see which servers started
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
            records.append({
                "case": case_dir.name, "engine_label": engine.label, "engine": engine,
                "total_memory_gib": start.total_memory_gib, "max_num_seqs": resolved.max_num_seqs,
                "max_model_len": engine.max_model_len, "kv_cache_tokens": start.kv_cache_tokens,
                "measured_rows": len(mine), "preemptions": int(pd.to_numeric(mine["num_preemptions"]).fillna(0).sum()),
            })  # fmt: skip
    columns = ["case", "engine_label", "engine", "total_memory_gib", "max_num_seqs", "max_model_len",
               "kv_cache_tokens", "measured_rows", "preemptions"]  # fmt: skip
    return pd.DataFrame(records, columns=columns)


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts with None for missing values (the theory functions read ``None``, not NaN)."""
    return [{k: (None if _missing(v) else v) for k, v in row.items()} for row in frame.to_dict("records")]


def _missing(value: Any) -> bool:
    import pandas as pd

    return value is None or (not isinstance(value, str | list | dict) and bool(pd.isna(value)))


def load_evidence(data: Path | None = None) -> Evidence:
    """Read everything the checks need from ``data`` (default: the repository's ``data/``): the published numbers,
    every case's rows rebuilt from their raw files (replay, as the case pages do) less the stalled ones, which the
    pages leave out of their verdicts too (``results.stalls``), the start-ups, and the roofline fit on the H200 rows
    of ``theory.CALIBRATION_CASES`` that ``theory.calibrates`` (None with fewer than three without speculation)."""
    from vllm_playbooks import theory
    from vllm_playbooks.results.stalls import unstalled
    from vllm_playbooks.results.store import load_reference, runs_file
    from vllm_playbooks.runner import replay_case

    folder = data if data is not None else paths.data_dir()
    published = load_reference(path=folder / "reference" / "published.csv")
    runs_root = folder / "runs"
    cases = sorted(p.name for p in runs_root.iterdir() if p.is_dir()) if runs_root.is_dir() else []
    runs = {case: unstalled(replay_case(case, folder), folder) for case in cases if runs_file(case, folder).exists()}
    fit = None
    calibration = [
        r for case in theory.CALIBRATION_CASES if case in runs for r in _records(runs[case])
        if "H200" in str(r["gpu_name"]) and theory.calibrates(r)
    ]  # fmt: skip
    if sum(not r["num_speculative_tokens"] for r in calibration) >= 3:
        # the roofline on the speculation-off rows, the per-draft-forward overhead on the speculation-on rows
        fit = theory.fit_efficiency(calibration, "H200-SXM", draft_overhead=any(r["num_speculative_tokens"] for r in calibration))
    from vllm_playbooks.results.engine_steps import step_summary

    steps = {case: step_summary(frame, folder) for case, frame in runs.items()}
    return Evidence(published=published, runs=runs, startups=recorded_startups(folder), fit=fit, engine_steps=steps)


# --------------------------------------------------------------------------------------------------------------------
# Helpers the checks share
# --------------------------------------------------------------------------------------------------------------------


def _pairs(rows: pd.DataFrame, metric: str, extra: Iterable[str] = ()) -> pd.DataFrame:
    """Speculative rows beside their baseline (``analysis.versus_baseline``), with ``speedup`` (above 1 is better:
    spec / baseline for throughputs, baseline / spec for latencies) and the extra columns named."""
    import pandas as pd

    from vllm_playbooks.analysis import higher_is_better, versus_baseline

    carried = list(dict.fromkeys(["case", *extra]))
    if rows.empty:
        return pd.DataFrame(columns=["engine_label", "spec_method", "k", "imposed_alpha", "model_shape", "concurrency",
                                     "request_rate_qps", "baseline", "speculative", "ratio", "speedup", *carried])  # fmt: skip
    out = versus_baseline(rows, metric, extra=carried)
    out["speedup"] = out["ratio"] if higher_is_better(metric) else 1.0 / out["ratio"]
    return out


def _pct(speedup: float) -> str:
    return f"{100 * (speedup - 1):+.1f} %"


def _levels(values: Iterable[Any]) -> str:
    return ", ".join(f"{v:g}" for v in values)


def _break_even_by_config(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """Per recorded speculative config, its draft cost c from the TPOTs at its lowest paired concurrency
    (``theory.draft_cost_from_tpot``), the break-even α (``theory.break_even_alpha``) and vLLM's acceptance rate at
    that α (``theory.acceptance_rate_of_alpha``, which equals c)."""
    from vllm_playbooks import theory

    pairs = _pairs(rows, "tpot_mean_ms", extra=["mean_acceptance_length", "model_shape", "draft_model"])
    pairs = pairs[pairs["mean_acceptance_length"].notna() & pairs["concurrency"].notna()]
    out = []
    for (case, label), group in pairs.groupby(["case", "engine_label"], sort=True):
        first = group.sort_values("concurrency").iloc[0]
        k = int(first["k"])
        c = theory.draft_cost_from_tpot(first["speculative"], first["baseline"], float(first["mean_acceptance_length"]), k)
        alpha = theory.break_even_alpha(k, c)
        rate = theory.acceptance_rate_of_alpha(alpha, k) if alpha is not None else None
        out.append({"case": case, "engine_label": label, "target": first["model_shape"], "draft": first["draft_model"],
                    "k": k, "concurrency": int(first["concurrency"]), "c": c, "alpha": alpha, "rate": rate})  # fmt: skip
    return out


def _describe_break_even(configs: list[dict[str, Any]]) -> str:
    parts = []
    for cfg in configs:
        where = f"{cfg['target']} + {cfg['draft']}, k={cfg['k']}"
        if cfg["rate"] is None:
            parts.append(f"{where}: c={cfg['c']:.2f}, never breaks even")
        else:
            parts.append(f"{where}: c={cfg['c']:.2f}, break-even acceptance rate {cfg['rate']:.2f} (α {cfg['alpha']:.2f})")
    return "; ".join(parts)


def _model_error(function: Callable[[], Any]) -> str | None:
    """The message of the ``ConfigError`` (``CapacityError`` included) a model call raises, or None when it succeeds:
    an MoE shape the roofline does not model, or a model directory that is not a shape."""
    try:
        function()
    except ConfigError as error:
        return str(error)
    return None


# --------------------------------------------------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------------------------------------------------


@check("spec_slower_at_reported_load")
def spec_slower_at_reported_load(claim: Claim, ev: Evidence) -> CheckResult:
    """Discussion #13834: speculation lowered output throughput.

    The report's load is what its own numbers imply by Little's law (``reported.implied_13834``: streams in flight =
    output tok/s × ITL). The check takes the recorded pair with the report's k and acceptance whose concurrency is
    nearest that load, within ``LOAD_FACTOR``, and judges its output-throughput ratio against the reported one. The
    model: the H200-fitted roofline moved to the A100's peaks (``theory.predict_13834_a100``) at that load.
    """
    from vllm_playbooks import reported, theory

    off, on = ev.value(claim, "output-tok-s-spec-off"), ev.value(claim, "output-tok-s-spec-on")
    k, alpha = int(ev.value(claim, "num-speculative-tokens")), ev.value(claim, "acceptance-rate-author-quoted")
    streams = float(reported.implied_13834(ev.sources(claim))["streams_in_flight_spec_off"])
    claimed = on / off
    published = f"{off:g} → {on:g} output tok/s ({_pct(claimed)}), k={k}, acceptance {alpha:g}, ≈{streams:.0f} streams"
    pairs = _pairs(ev.rows(claim.case), "output_tok_s")
    pairs = pairs[(pairs["k"] == k) & (pairs["imposed_alpha"].astype(float).sub(alpha).abs() < 1e-9)]
    pairs = pairs[pairs["concurrency"].notna()]
    near = pairs[(pairs["concurrency"] >= streams / LOAD_FACTOR) & (pairs["concurrency"] <= streams * LOAD_FACTOR)]
    if near.empty:
        elsewhere = "; ".join(f"{_pct(s)} at concurrency {int(c)}" for c, s in zip(pairs["concurrency"], pairs["speedup"], strict=True))
        measured = f"not yet near {streams:.0f} streams; measured so far: {elsewhere}" if elsewhere else "no paired row yet"
        verdict, rows, point = Verdict.NOT_MEASURED, 0, {}
    else:
        row = near.loc[(near["concurrency"].astype(float).map(math.log) - math.log(streams)).abs().idxmin()]
        measured = (f"concurrency {int(row['concurrency'])}: {row['baseline']:.1f} → {row['speculative']:.1f} output tok/s "
                    f"({_pct(row['speedup'])})")  # fmt: skip
        verdict, rows = judge(float(row["speedup"]), claimed), 1
        point = {"engine_label": str(row["engine_label"]), "concurrency": int(row["concurrency"]), "k": k, "alpha": alpha}
    model_says, model_verdict = "", None
    if ev.fit is not None:
        load = round(streams)
        a100 = theory.predict_13834_a100(ev.fit, concurrency=load, alpha=alpha, k=k)
        predicted = a100["output_tok_s_on"] / a100["output_tok_s_off"]
        model_says = (f"H200-fitted roofline on the A100's peaks at {load} streams: {a100['output_tok_s_off']:.0f} → "
                      f"{a100['output_tok_s_on']:.0f} output tok/s ({_pct(predicted)})")  # fmt: skip
        model_verdict = judge(predicted, claimed)
    return CheckResult(published, measured, verdict, rows, model_says, model_verdict, point)


#: The shape whose MTP layers and target layers give the MTP draft cost c ≈ MTP layers / target layers.
MTP_SHAPE = "deepseek-v3"


def _mtp_cost() -> tuple[float, str]:
    from vllm_playbooks.shapes import get_shape

    shape = get_shape(MTP_SHAPE)
    return shape.num_mtp_layers / shape.num_hidden_layers, f"{shape.num_mtp_layers}/{shape.num_hidden_layers}"


def _at_mtp_scale(pairs: pd.DataFrame) -> pd.DataFrame:
    """The pairs whose target has ``MTP_SHAPE``'s architecture, width and depth (DeepSeek-V3's; the number of routed
    experts may differ): the published MTP numbers are that model's, so MTP rows of another model (MiMo-7B) or of the
    same layout at another scale (V2-Lite's) are shown on the case page, not judged against them."""
    from vllm_playbooks.shapes import get_shape

    wanted = get_shape(MTP_SHAPE)

    def same(name: object) -> bool:
        shape = get_shape(str(name))
        return (shape.architecture, shape.hidden_size, shape.num_hidden_layers) == (
            wanted.architecture, wanted.hidden_size, wanted.num_hidden_layers)  # fmt: skip

    return pairs[pairs["model_shape"].map(same).astype(bool)]


@check("mtp_speedup_at_acceptance")
def mtp_speedup_at_acceptance(claim: Claim, ev: Evidence) -> CheckResult:
    """DeepSeek-V3: about 1.8× tokens per second with one MTP token at 85–90 % second-token acceptance.

    Measured: recorded ``mtp`` rows at DeepSeek-V3's width and depth with k = 1 whose measured acceptance lies in the
    reported range, at their lowest concurrency; the speed-up is the baseline's mean TPOT over the speculative one
    (tokens per second per request).
    Model: ``theory.speedup(α, 1, c)`` at both ends of the range, with c = MTP layers / target layers of the
    DeepSeek-V3 shape (the output head and embeddings left out; the verify step costing one decode step).
    """
    from vllm_playbooks import theory

    low = ev.value(claim, "v3-second-token-acceptance-low") / 100
    high = ev.value(claim, "v3-second-token-acceptance-high") / 100
    claimed = ev.value(claim, "v3-tps-speedup")
    published = f"{claimed:g}× tokens per second at {100 * low:g}–{100 * high:g} % second-token acceptance (one MTP token)"
    pairs = _at_mtp_scale(_pairs(ev.rows(claim.case), "tpot_mean_ms", extra=["acceptance_rate"]))
    pairs = pairs[(pairs["spec_method"] == "mtp") & (pairs["k"] == 1) & pairs["concurrency"].notna()]
    pairs = pairs[pairs["acceptance_rate"].astype(float).between(low, high)]
    if pairs.empty:
        measured, verdict, rows = "no recorded MTP row at that acceptance yet", Verdict.NOT_MEASURED, 0
    else:
        lowest = pairs[pairs["concurrency"] == pairs["concurrency"].min()]
        measured = "; ".join(
            f"concurrency {int(r['concurrency'])}, acceptance {r['acceptance_rate']:.2f}: {r['speedup']:.2f}× "
            f"({r['engine_label']})" for _, r in lowest.iterrows()
        )
        verdict, rows = combine(judge(float(s), claimed) for s in lowest["speedup"]), len(lowest)
    c, layers = _mtp_cost()
    ends = [theory.speedup(a, 1, c) for a in (low, high)]
    model_says = f"theory.speedup with k=1, c={layers} (MTP layers / target layers): {ends[0]:.2f}–{ends[1]:.2f}×"
    return CheckResult(published, measured, verdict, rows, model_says, combine(judge(s, claimed) for s in ends))


_QPS = re.compile(r"-qps(\d+)$")


@check("mtp_gain_falls_with_qps")
def mtp_gain_falls_with_qps(claim: Claim, ev: Evidence) -> CheckResult:
    """vLLM PR #12755: one MTP token gave a TPOT speed-up at every QPS below 8 (1.63× at QPS 1, 1.18× at QPS 2) and
    none at QPS 8.

    Measured: recorded ``mtp`` k = 1 rows at DeepSeek-V3's width and depth at the published request rates (every
    imposed acceptance), judged QPS by QPS against the published speed-up; rows at or above the published bound must
    show no gain. Model: the Leviathan bound for k = 1 at the PR's acceptance, and the draft cost the QPS 1 speed-up
    implies; the model has no load term.
    """
    from vllm_playbooks import theory

    sources = ev.sources(claim)
    claimed = {int(_QPS.search(r["claim_id"]).group(1)): ev.value(claim, r["claim_id"])  # type: ignore[union-attr]
               for _, r in sources.iterrows() if _QPS.search(r["claim_id"]) and r["quantity"] == "speedup"}  # fmt: skip
    bound = ev.value(claim, "pr12755-qps-bound-for-gain")
    low = ev.value(claim, "pr12755-acceptance-low") / 100
    high = ev.value(claim, "pr12755-acceptance-high") / 100
    published = (", ".join(f"{s:g}× at QPS {q}" for q, s in sorted(claimed.items()))
                 + f"; a gain only below QPS {bound:g} (k=1, acceptance {100 * low:g}–{100 * high:g} %)")  # fmt: skip
    pairs = _at_mtp_scale(_pairs(ev.rows(claim.case), "tpot_mean_ms"))
    pairs = pairs[(pairs["spec_method"] == "mtp") & (pairs["k"] == 1) & pairs["request_rate_qps"].notna()]
    verdicts, notes = [], []
    for _, r in pairs.sort_values(["request_rate_qps", "engine_label"]).iterrows():
        qps, speedup = float(r["request_rate_qps"]), float(r["speedup"])
        if qps in claimed:
            verdicts.append(judge(speedup, claimed[qps]))
        elif qps >= bound:
            verdicts.append(Verdict.NOT_REPRODUCED if effect(speedup) is Effect.GAIN else Verdict.REPRODUCED)
        else:
            continue
        notes.append(f"{speedup:.2f}× at QPS {qps:g} ({r['engine_label']})")
    measured = "; ".join(notes) if notes else "no recorded MTP row at the PR's request rates yet"
    c_model, layers = _mtp_cost()
    tops = [theory.speedup(a, 1, c_model) for a in (low, high)]
    implied = [(1 + a) / claimed[min(claimed)] - 1 for a in (low, high)]
    model_says = (f"theory.speedup with k=1, c={layers}: at most {tops[0]:.2f}–{tops[1]:.2f}× at any load; "
                  f"{claimed[min(claimed)]:g}× at QPS {min(claimed)} implies c={implied[0]:.2f}–{implied[1]:.2f}. "
                  "The model has no load term, so it cannot say where the gain ends")  # fmt: skip
    return CheckResult(published, measured, combine(verdicts), len(verdicts), model_says, None)


#: The target and EAGLE-3 head shapes whose layer counts give the head's draft cost c ≈ head layers / target layers.
EAGLE3_SHAPES = ("gpt-oss-120b", "gpt-oss-120b-eagle3")
#: Acceptances the draft-token model sweeps: the speculator card's acceptance table could not be read.
ALPHA_SWEEP = (0.6, 0.7, 0.8)
#: The draft lengths the draft-token model tries.
MODEL_K_RANGE = tuple(range(1, 11))


def _with_length_profile(case: str, rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with a ``profile`` column (``verdicts.with_profile`` after the case file's length profiles), naming a
    row of no profile of the case ``"<input_len> in / <output_len> out"``."""
    from vllm_playbooks.errors import ConfigError
    from vllm_playbooks.plan import load_plan
    from vllm_playbooks.verdicts import with_profile

    try:
        profiles = {name: (i, o) for name, i, o in load_plan(case).profiles}
    except ConfigError:
        profiles = {}
    out = with_profile(rows, profiles)
    unnamed = out["profile"].isna()
    out.loc[unnamed, "profile"] = [f"{int(i)} in / {int(o)} out"
                                   for i, o in zip(out.loc[unnamed, "input_len"], out.loc[unnamed, "output_len"], strict=True)]  # fmt: skip
    return out


@check("gain_up_to_concurrency")
def gain_up_to_concurrency(claim: Claim, ev: Evidence) -> CheckResult:
    """Red Hat, gpt-oss-120B + EAGLE3: output-throughput gains held up to 200 concurrent requests.

    Measured: recorded ``eagle3`` rows up to the claimed concurrency, judged against the published gain range. Each
    EAGLE3 config on each length profile is judged over its loads, and only where some row is within ``LOAD_FACTOR``
    of the claimed concurrency (a profile measured only at low load says nothing on where the gain ends); the best
    such verdict stands (the source chose its own config). Model: the roofline models dense decoders only.
    """
    from vllm_playbooks import theory
    from vllm_playbooks.shapes import get_shape

    top = ev.value(claim, "max-concurrency-with-gain")
    low = 1 + ev.value(claim, "output-throughput-gain-low") / 100
    high = 1 + ev.value(claim, "output-throughput-gain-high") / 100
    published = f"gains up to {top:g} concurrent requests; output throughput {_pct(low)} to {_pct(high)}"
    pairs = _pairs(ev.rows(claim.case), "output_tok_s")
    pairs = pairs[(pairs["spec_method"] == "eagle3") & pairs["concurrency"].notna() & (pairs["concurrency"] <= top)]
    if pairs.empty or pairs["concurrency"].max() < top / LOAD_FACTOR:
        so_far = f" (highest so far: {pairs['concurrency'].max():g})" if not pairs.empty else ""
        measured, verdict, rows = f"no EAGLE3 row near {top:g} concurrent requests yet{so_far}", Verdict.NOT_MEASURED, 0
    else:
        pairs = _with_length_profile(claim.case, pairs)
        groups = list(pairs.groupby(["engine_label", "profile"]))
        reaching = [g for _, g in groups if g["concurrency"].max() >= top / LOAD_FACTOR]
        verdict = _best(combine(judge(float(s), low, high) for s in g["speedup"]) for g in reaching)
        rows = sum(len(g) for g in reaching)
        several_profiles = pairs["profile"].nunique() > 1
        names = [f"{label} ({profile})" if several_profiles else label for (label, profile), _ in groups]
        measured = "; ".join(
            f"{name}: " + ", ".join(f"{_pct(s)} at {int(c)}" for c, s in zip(g["concurrency"], g["speedup"], strict=True))
            for name, (_, g) in zip(names, groups, strict=True)
        )
    error = _model_error(lambda: theory.decode_step_flops(get_shape(EAGLE3_SHAPES[0]), 1))
    model_says = f"no roofline answer: {error}" if error else ""
    return CheckResult(published, measured, verdict, rows, model_says, None)


@check("best_draft_tokens")
def best_draft_tokens(claim: Claim, ev: Evidence) -> CheckResult:
    """Red Hat (via summaries): 2–3 draft tokens are best for gpt-oss + EAGLE3; 4 adds overhead (−8 %, the blog).

    Measured: at each load (length profile, concurrency, imposed α) with recorded ``eagle3`` rows at k = 4 and at
    least one other k, the best k by output throughput must be in the claimed range and k = 4 a loss against it, of
    about the claimed size. Model: the k maximising ``theory.speedup`` for α in ``ALPHA_SWEEP`` with
    c = head layers / target layers.
    """
    from vllm_playbooks import theory
    from vllm_playbooks.shapes import get_shape

    k_low, k_high = int(ev.value(claim, "draft-tokens-best-low")), int(ev.value(claim, "draft-tokens-best-high"))
    four = 1 + ev.value(claim, "output-throughput-change-4-tokens") / 100
    published = f"best at {k_low}–{k_high} draft tokens; 4 tokens {_pct(four)} against the best"
    rows = ev.rows(claim.case)
    spec = rows[(rows["spec_method"] == "eagle3") & rows["concurrency"].notna()].copy()
    verdicts, notes = [], []
    if not spec.empty:
        spec = _with_length_profile(claim.case, spec)
        spec["alpha_key"] = spec["imposed_alpha"].astype(float).fillna(-1.0)
        several_profiles = spec["profile"].nunique() > 1
        for (profile, conc, alpha), group in spec.groupby(["profile", "concurrency", "alpha_key"]):
            by_k = group.groupby("num_speculative_tokens")["output_tok_s"].median()
            if 4 not in by_k.index or len(by_k) < 2:
                continue
            best = int(by_k.idxmax())
            ratio = float(by_k.loc[4] / by_k.max())
            if k_low <= best <= k_high:
                verdicts.append(judge(ratio, four) if effect(ratio) is Effect.LOSS else Verdict.NOT_REPRODUCED)
            else:
                verdicts.append(Verdict.NOT_REPRODUCED)
            alpha_words = f", α {alpha:g}" if alpha >= 0 else ""
            profile_words = f"{profile}, " if several_profiles else ""
            notes.append(f"{profile_words}concurrency {int(conc)}{alpha_words}: best k={best}, k=4 {_pct(ratio)}")
    measured = "; ".join(notes) if notes else "no recorded EAGLE3 sweep over k yet"
    target, head = (get_shape(n) for n in EAGLE3_SHAPES)
    c = head.num_hidden_layers / target.num_hidden_layers
    best_k = {a: max(MODEL_K_RANGE, key=lambda k, a=a: theory.speedup(a, k, c)) for a in ALPHA_SWEEP}
    model_says = (f"theory.speedup with c={head.num_hidden_layers}/{target.num_hidden_layers} (head layers / target "
                  f"layers), verify cost flat in k, k from {MODEL_K_RANGE[0]} to {MODEL_K_RANGE[-1]}: best k "
                  + ", ".join(f"{k}{' (the largest tried)' if k == MODEL_K_RANGE[-1] else ''} at α {a:g}"
                              for a, k in best_k.items()))  # fmt: skip
    model_verdict = Verdict.REPRODUCED if all(k_low <= k <= k_high for k in best_k.values()) else Verdict.NOT_REPRODUCED
    return CheckResult(published, measured, combine(verdicts), len(verdicts), model_says, model_verdict)


#: The #27462 page's verdict labels (``pipeline.verdict_label``) as the ledger's verdicts.
_PAGE_VERDICTS = {"Reproduced": Verdict.REPRODUCED, "Direction only": Verdict.DIRECTION_ONLY,
                  "Not reproduced": Verdict.NOT_REPRODUCED}  # fmt: skip


@check("pp_cap_starves_stages")
def pp_cap_starves_stages(claim: Claim, ev: Evidence) -> CheckResult:
    """vLLM issue #27462: ``--max-num-seqs`` caps every running sequence, not one micro-batch, so pipeline stages
    run under-filled.

    Measured: the #27462 page's own comparison (``pipeline.pp_comparison`` and ``pipeline.verdict_label``) over the
    rows of the claim's case and of ``pipeline.CASE``: at each cap N, PP=2 at N against PP=1 at N (the stages starve)
    and PP=2 at 2N against PP=1 at N (the fix), on rows whose measured fill (``Evidence.engine_steps``) shows that the
    cap, not the request path, set the batch. Model: theory.py has no pipeline-parallel model. Published: the related
    issue #41682's PP numbers.
    """
    import pandas as pd

    from vllm_playbooks import pipeline

    sources = ev.sources(claim)
    published = "; ".join(f"{r['setting']}: {r['value']:g} {r['unit']}" for _, r in sources.iterrows())
    cases = list(dict.fromkeys([claim.case, pipeline.CASE]))
    frames = [frame for frame in (ev.rows(case) for case in cases) if not frame.empty]
    rows = pd.concat(frames, ignore_index=True) if frames else ev.rows(claim.case)
    steps = [ev.engine_steps[case] for case in cases if case in ev.engine_steps]
    comparison = pipeline.pp_comparison(rows, steps=pd.concat(steps, ignore_index=True) if steps else None)
    label = pipeline.verdict_label(comparison)
    verdict = _PAGE_VERDICTS.get(label, Verdict.NOT_MEASURED)
    judged = comparison.dropna(subset=["pp2_vs_pp1_pct", "pp2_at_2n_vs_pp1_pct"])
    notes = [f"{r.model_shape} N={int(r.max_num_seqs)}: PP=2 at N {r.pp2_vs_pp1_pct:+.1f} %, at 2N "
             f"{r.pp2_at_2n_vs_pp1_pct:+.1f} % against PP=1 at N" for r in judged.itertuples()]  # fmt: skip
    measured = "; ".join(notes) if notes else "no cap N with PP=1 at N, PP=2 at N and PP=2 at 2N all saturated yet"
    if ev.fit is None:
        return CheckResult(published, measured, verdict, len(judged), "no roofline fit (too few recorded rows)", None)
    from vllm_playbooks.plan import load_plan

    predicted = pipeline.pp_comparison(pipeline.predicted_rows(pipeline.planned_grid(load_plan(pipeline.CASE), ev.fit)))
    model_label = pipeline.verdict_label(predicted)
    model_judged = predicted.dropna(subset=["pp2_vs_pp1_pct", "pp2_at_2n_vs_pp1_pct"])
    model_says = ("pipeline.predicted_throughput (the fitted roofline split over the stages, no communication): "
                  + "; ".join(f"{r.model_shape} N={int(r.max_num_seqs)}: PP=2 at N {r.pp2_vs_pp1_pct:+.1f} %, at 2N "
                              f"{r.pp2_at_2n_vs_pp1_pct:+.1f} %" for r in model_judged.itertuples()))  # fmt: skip
    model_verdict = _PAGE_VERDICTS.get(model_label)
    return CheckResult(published, measured, verdict, len(judged), model_says, model_verdict)


def _as_float(value: Any) -> float | None:
    """A cell as a float, None when missing (or the '—' placeholder of a grouping key)."""
    if _missing(value) or value == "—":
        return None
    return float(value)


@check("acceptance_bands")
def acceptance_bands(claim: Claim, ev: Evidence) -> CheckResult:
    """Rule of thumb: vLLM's draft acceptance rate below 0.5 is a net loss, 0.5–0.65 breaks even, 0.65 or more helps.

    Measured: every recorded speculative row of every case with its baseline at the same load; its measured acceptance
    rate (accepted / drafted, the metric the rule names) puts it in a band, and its output-throughput change must have
    that band's effect (``effect``). Model: per recorded config, the break-even acceptance rate from the draft cost c
    the TPOTs imply (``_break_even_by_config``); the bands hold if every one falls in the break-even band.
    """
    loss_below = ev.value(claim, "acceptance-net-loss-below")
    even_low, even_high = ev.value(claim, "acceptance-break-even-low"), ev.value(claim, "acceptance-break-even-high")
    helps_from = ev.value(claim, "acceptance-helps-from")
    published = (f"acceptance rate below {loss_below:g}: a net loss; {even_low:g}–{even_high:g}: break-even; "
                 f"{helps_from:g} or more: helps")  # fmt: skip
    rows = ev.all_rows()
    drafting = rows[~analysis.scheduled_off(rows)]  # a schedule's k = 0 points drafted too little to judge
    pairs = _pairs(drafting, "output_tok_s", extra=["acceptance_rate"])
    pairs = pairs[pairs["acceptance_rate"].notna()]
    verdicts, notes = [], []
    for _, r in pairs.iterrows():
        rate, speedup = float(r["acceptance_rate"]), float(r["speedup"])
        expected = Effect.LOSS if rate < loss_below else Effect.GAIN if rate >= helps_from else Effect.NONE
        agrees = effect(speedup) is expected
        verdicts.append(Verdict.REPRODUCED if agrees else Verdict.NOT_REPRODUCED)
        if not agrees:
            load = describe_load(r["request_rate_qps"], r["concurrency"])
            notes.append(f"{r['case']} at {load}: acceptance {rate:.2f} (expects {expected}) gave {_pct(speedup)}")
    if verdicts:
        against = f"; against it: {'; '.join(notes)}" if notes else ""
        measured = f"{len(verdicts) - len(notes)} of {len(verdicts)} paired rows behave as their band says{against}"
    else:
        measured = "no recorded speculative row with a measured acceptance rate yet"
    configs = _break_even_by_config(rows)
    model_verdict = None
    if configs:
        inside = all(cfg["rate"] is not None and even_low <= cfg["rate"] <= even_high for cfg in configs)
        model_verdict = Verdict.REPRODUCED if inside else Verdict.NOT_REPRODUCED
    model_says = _describe_break_even(configs) if configs else ""
    return CheckResult(published, measured, combine(verdicts), len(verdicts), model_says, model_verdict)


@check("compute_bound_batch")
def compute_bound_batch(claim: Claim, ev: Evidence) -> CheckResult:
    """Rule of thumb: from about 64 sequences per step, plain decoding nears the roofline's ridge (compute-bound).

    Model only: for every recorded (target shape, KV dtype, mean context) the batch at which a plain decode step turns
    compute-bound on ``ROOFLINE_GPU`` (``theory.compute_bound_batch``), and for speculative configs the verify step's
    (k + 1 query tokens). The rule holds if every plain-decode batch lies within ``LOAD_FACTOR`` of the claimed one.
    """
    from vllm_playbooks import theory
    from vllm_playbooks.shapes import resolve_model

    claimed = ev.value(claim, "compute-bound-batch-size")
    published = f"compute-bound from about {claimed:g} sequences per step (no GPU or model stated)"
    rows = ev.all_rows()
    configs: dict[tuple[str, str, float], set[int]] = {}
    for _, r in rows.iterrows():
        context = float(r["input_len"]) + float(r["output_len"]) / 2
        configs.setdefault((str(r["model_shape"]), str(r["kv_cache_dtype"]), context), set()).add(int(r["num_speculative_tokens"]))
    notes, agree = [], []
    for (shape_name, kv, context), ks in sorted(configs.items()):
        error = _model_error(
            lambda n=shape_name, kv=kv, ctx=context: theory.compute_bound_batch(resolve_model(n), ROOFLINE_GPU, ctx, kv)
        )
        if error:
            notes.append(f"{shape_name}: not modelled ({error})")
            continue
        shape = resolve_model(shape_name)
        plain = theory.compute_bound_batch(shape, ROOFLINE_GPU, context, kv)
        agree.append(plain is not None and claimed / LOAD_FACTOR <= plain <= claimed * LOAD_FACTOR)
        words = f"{plain:,}" if plain is not None else "never (KV reads grow as fast as the FLOPs)"
        verify = "".join(
            f", verify k={k}: {theory.compute_bound_batch(shape, ROOFLINE_GPU, context, kv, q=k + 1)}" for k in sorted(ks) if k
        )
        notes.append(f"{shape_name} ({kv} KV, {context:g} tokens of context): decode {words}{verify}")
    model_says = f"batch at which a step turns compute-bound on {ROOFLINE_GPU}: " + "; ".join(notes) if notes else ""
    if agree:
        model_verdict = Verdict.REPRODUCED if all(agree) else Verdict.NOT_REPRODUCED
    else:
        model_verdict = Verdict.NOT_REPRODUCED if notes else None
    if model_verdict is None:
        return CheckResult(published, "", Verdict.NOT_MEASURED, 0, "no recorded shape to model yet", None)
    measured = "no run measures where a step turns compute-bound; the roofline computes it for the recorded shapes"
    return CheckResult(published, measured, Verdict.MODEL_ONLY, 0, model_says, model_verdict)


@check("temperature_rule")
def temperature_rule(claim: Claim, ev: Evidence) -> CheckResult:
    """Rule of thumb: a (median) sampling temperature above 0.7 makes drafts rejected often enough that speculation
    is not recommended.

    Not measurable on rows with imposed acceptance: the synthetic sampler accepts drafts at the imposed rates whatever
    the temperature, and the row schema does not record a temperature. The check counts the speculative rows whose
    acceptance was earned (real weights, nothing imposed) so the page says what exists. Model: theory has no
    temperature term; temperature acts through α only, against the break-even α of each recorded config.
    """
    threshold = ev.value(claim, "temperature-discourages-above")
    published = f"speculation not recommended above a median temperature of {threshold:g}"
    rows = ev.all_rows()
    earned = rows[(rows["spec_method"] != "none") & rows["imposed_acceptance_rates"].isna()]
    measured = (f"{len(earned)} recorded speculative row(s) with earned acceptance; every other one imposes its "
                "acceptance, and no row records a temperature")  # fmt: skip
    configs = _break_even_by_config(rows)
    model_says = ""
    if configs:
        model_says = ("no temperature term: temperature matters only through α, and speculation pays while α stays "
                      "above the break-even: " + _describe_break_even(configs))  # fmt: skip
    return CheckResult(published, measured, Verdict.NOT_MEASURED, 0, model_says, None)


@check("kv_product_fits")
def kv_product_fits(claim: Claim, ev: Evidence) -> CheckResult:
    """Rule of thumb: max_num_seqs × max_model_len must fit the KV-cache budget, else OOM or preemption.

    Measured: every recorded vLLM start-up, with the KV-cache tokens vLLM itself logged. A start-up whose product
    exceeds the cache tests the rule: it agrees if its measured rows saw preemptions, and goes against it if the
    server started and served its rows without any. Model: the capacity calculator's reading of vLLM 0.26
    (``config.capacity.check_fits``), which refuses only a cache smaller than one max_model_len sequence.
    """
    from vllm_playbooks.config.capacity import check_fits

    minimum = ev.value(claim, "kv-fit-min-ratio")
    published = f"KV-cache tokens ≥ {minimum:g} × max_num_seqs × max_model_len"
    starts = ev.startups if ev.startups is not None else None
    verdicts, notes, model_notes = [], [], []
    for _, s in (starts.iterrows() if starts is not None else iter(())):
        product = int(s["max_num_seqs"]) * int(s["max_model_len"])
        ratio = int(s["kv_cache_tokens"]) / product
        if ratio >= minimum:
            continue
        served = int(s["measured_rows"]) > 0
        if not served:
            continue
        verdicts.append(Verdict.REPRODUCED if int(s["preemptions"]) > 0 else Verdict.NOT_REPRODUCED)
        notes.append(f"{s['case']} {s['engine_label']}: {int(s['kv_cache_tokens']):,} KV tokens for {int(s['max_num_seqs'])} × "
                     f"{int(s['max_model_len'])} = {product:,} ({ratio:.2f}×); started, {int(s['measured_rows'])} measured row(s), "
                     f"{int(s['preemptions'])} preemptions")  # fmt: skip
        budget = check_fits(s["engine"], float(s["total_memory_gib"]))
        model_notes.append(f"{s['case']} {s['engine_label']}: holds {budget.max_concurrency:.1f} sequences of "
                           f"{budget.max_model_len} < max_num_seqs {budget.max_num_seqs}, and check_fits lets it start")  # fmt: skip
    if verdicts:
        measured = "; ".join(notes)
    elif starts is not None and not starts.empty:
        measured = f"all {len(starts)} recorded start-ups fit the product, so none tests the rule"
    else:
        measured = "no recorded start-up yet"
    model_says = ("vLLM 0.26 (capacity.check_fits) refuses only a cache smaller than one max_model_len sequence; "
                  + "; ".join(model_notes)) if model_notes else ""  # fmt: skip
    model_verdict = Verdict.NOT_REPRODUCED if model_notes else None
    return CheckResult(published, measured, combine(verdicts), len(verdicts), model_says, model_verdict)


_DEFAULTS = re.compile(r"^defaults-(max-num-seqs|max-num-batched-tokens)-(large|small)-(offline|server)$")
#: GPUs of ``data/reference/hardware.csv`` standing for the table's 'large-memory GPU' and 'other GPU' rows.
DEFAULT_TABLE_GPUS = {"large": ("H100-SXM", "MI300X"), "small": ("A100-80GB",)}


@check("batching_defaults_table")
def batching_defaults_table(claim: Claim, ev: Evidence) -> CheckResult:
    """The blog's table of vLLM's ``max_num_seqs`` / ``max_num_batched_tokens`` defaults and the throughput-mode
    doubling, against ``config.capacity.batch_defaults`` (vLLM 0.26's engine/arg_utils.py) for the GPUs of
    ``DEFAULT_TABLE_GPUS``. Model only: every recorded run sets both values itself."""
    from vllm_playbooks.config.capacity import GIB, batch_defaults
    from vllm_playbooks.hardware import get_gpu

    sources = ev.sources(claim)
    mismatches, cells, table = [], 0, 0
    for _, r in sources.iterrows():
        match = _DEFAULTS.match(r["claim_id"])
        if not match:
            continue
        table += 1
        knob, size, context = match.groups()
        for name in DEFAULT_TABLE_GPUS[size]:
            gpu = get_gpu(name)
            tokens, seqs = batch_defaults(gpu.memory_gb * 1e9 / GIB, name, context)  # type: ignore[arg-type]
            ours = seqs if knob == "max-num-seqs" else tokens
            cells += 1
            if ours != r["value"]:
                mismatches.append(f"{r['claim_id']} on {name}: table {r['value']:g}, vLLM 0.26 {ours}")
    factor = ev.value(claim, "defaults-throughput-mode-factor")
    for size, names in DEFAULT_TABLE_GPUS.items():
        for name in names:
            gib = get_gpu(name).memory_gb * 1e9 / GIB
            for context in ("offline", "server"):
                base = batch_defaults(gib, name, context)  # type: ignore[arg-type]
                doubled = batch_defaults(gib, name, context, "throughput")  # type: ignore[arg-type]
                cells += 1
                if any(d != factor * b for d, b in zip(doubled, base, strict=True)):
                    mismatches.append(f"throughput mode on {name} ({context}): {base} → {doubled}")
    published = (f"{table} defaults (large-memory and other GPUs × offline and server) and ×{factor:g} in "
                 "throughput mode")  # fmt: skip
    model_says = (f"capacity.batch_defaults (vLLM 0.26) for {', '.join(n for ns in DEFAULT_TABLE_GPUS.values() for n in ns)}: "
                  + (f"{cells - len(mismatches)} of {cells} values agree; " + "; ".join(mismatches) if mismatches
                     else f"all {cells} values agree"))  # fmt: skip
    model_verdict = Verdict.NOT_REPRODUCED if mismatches else Verdict.REPRODUCED
    measured = "every recorded run sets max_num_seqs and max_num_batched_tokens itself, so no run shows a default"
    return CheckResult(published, measured, Verdict.MODEL_ONLY, 0, model_says, model_verdict)


# --------------------------------------------------------------------------------------------------------------------
# The ledger
# --------------------------------------------------------------------------------------------------------------------

LEDGER_COLUMNS = [
    "claim", "case", "text", "sources", "source_urls", "source_kind", "published", "measured", "rows", "verdict",
    "model_says", "model_verdict",
]  # fmt: skip


def source_kind(flags: Iterable[bool]) -> str:
    """'primary', 'secondary only' or 'primary and secondary', from the sources' ``secondary_only`` flags."""
    values = set(bool(f) for f in flags)
    if values == {False}:
        return "primary"
    if values == {True}:
        return "secondary only"
    return "primary and secondary"


def build_ledger(evidence: Evidence | None = None, claims: list[Claim] | None = None) -> pd.DataFrame:
    """One line per claim, its check run on ``evidence`` (default: ``load_evidence()``), in ``LEDGER_COLUMNS``."""
    import pandas as pd

    ev = evidence if evidence is not None else load_evidence()
    items = claims if claims is not None else load_claims(published=ev.published)
    records = []
    for claim in items:
        result = get_check(claim.check)(claim, ev)
        sources = ev.sources(claim)
        records.append({
            "claim": claim.claim_id, "case": claim.case, "text": claim.text, "sources": " ".join(claim.sources),
            "source_urls": " ".join(dict.fromkeys(sources["source_url"])),
            "source_kind": source_kind(sources["secondary_only"]), "published": result.published,
            "measured": result.measured, "rows": result.rows, "verdict": str(result.verdict),
            "model_says": result.model_says, "model_verdict": str(result.model_verdict) if result.model_verdict else "",
        })  # fmt: skip
    return pd.DataFrame(records, columns=LEDGER_COLUMNS)


def result_for(claim_id: str, evidence: Evidence | None = None) -> CheckResult:
    """The check of one claim of ``claims.csv`` run on ``evidence`` (default: ``load_evidence()``), for a case page
    that states the same verdict as the ledger."""
    ev = evidence if evidence is not None else load_evidence()
    for claim in load_claims(published=ev.published):
        if claim.claim_id == claim_id:
            return get_check(claim.check)(claim, ev)
    raise ConfigError(f"no claim {claim_id!r} in {claims_file().name}")


def verdict_legend() -> str:
    """The verdict vocabulary as a Markdown table, then the tolerances the checks use (what the page shows)."""
    lines = ["| verdict | meaning |", "|---|---|"]
    lines += [f"| {v} | {meaning} |" for v, meaning in VERDICT_MEANINGS.items()]
    lines += [
        "",
        f"A speed-up within ±{100 * BREAK_EVEN_BAND:g} % counts as no change (break-even); a size within "
        f"±{100 * SIZE_TOLERANCE:g} % of the claimed one (or of the ends of a claimed range) counts as the same size; "
        f"a load within a factor of {LOAD_FACTOR:g} of the claim's counts as the claim's load. The book has not measured "
        "its run-to-run spread, so these are stated choices, not measured ones.",
    ]
    return "\n".join(lines)


def _link_label(url: str) -> str:
    match = re.match(r"https://github\.com/([^/]+/[^/]+)/(?:issues|pull|discussions)/(\d+)", url)
    if match:
        return f"{match.group(1)}#{match.group(2)}"
    return re.sub(r"^https?://(www\.)?", "", url).split("/")[0]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("$", "\\$") or "—"


def ledger_markdown(ledger: pd.DataFrame) -> str:
    """The ledger as MyST Markdown: a summary table, then each claim's published numbers, our rows and the model."""
    lines = ["| claim | source | verdict | model's verdict |", "|---|---|---|---|"]
    for r in ledger.itertuples():
        links = ", ".join(f"[{_link_label(u)}]({u})" for u in r.source_urls.split())
        marker = " **[secondary]**" if r.source_kind == "secondary only" else ""
        lines.append(f"| **{r.claim}**: {_cell(r.text)} | {links}{marker} | **{r.verdict}** | {_cell(r.model_verdict)} |")
    for r in ledger.itertuples():
        lines += [
            "", f"**{r.claim}** ({r.case}; sources: {r.source_kind}): {_cell(r.text)}", "",
            f"- *Published:* {_cell(r.published)}",
            f"- *Our rows:* {_cell(r.measured)} → **{r.verdict}**",
            f"- *Model says:* {_cell(r.model_says)}" + (f" → {r.model_verdict}" if r.model_verdict else ""),
        ]  # fmt: skip
    return "\n".join(lines)


def verdict_counts(ledger: pd.DataFrame) -> str:
    """How many claims got each verdict, in the vocabulary's order (a line for the page's regression check)."""
    counts = ledger["verdict"].value_counts()
    return ", ".join(f"{v}: {int(counts.get(str(v), 0))}" for v in Verdict)
