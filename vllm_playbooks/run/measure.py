"""One point measured on a running server, and what the runner keeps when a point fails.

``measure_point`` calibrates (an uncounted warm-up), measures one load level between two ``/metrics`` scrapes with
the engine's GPUs (NVML) and the host's CPU (``engine.host_sampler``) sampled, and writes the raw point folder, then
its row. ``record_failed_point`` keeps a failure beside the finished points, so the next run measures it again.
The live runner (``run.case``, ``run.paired``) and the live advisor (``advisor.live``) measure through these.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.engine.gpu_sampler import GpuSampler, nvml_sampler
from vllm_playbooks.engine.host_sampler import HostSampler
from vllm_playbooks.engine.metrics import ScrapeFault, parse_metrics, scrape, untrusted_scrape
from vllm_playbooks.engine.server import VllmServer
from vllm_playbooks.errors import PlaybookError, ServerError, StorageError
from vllm_playbooks.load.bench import BenchClient, bench_argv
from vllm_playbooks.results import raw, store
from vllm_playbooks.results.identity import engine_gpus, hardware_key
from vllm_playbooks.results.provenance import Provenance, utc_now
from vllm_playbooks.results.schema import RunRow
from vllm_playbooks.results.server_logs import has_started, read_failed_startup
from vllm_playbooks.results.stalls import STALL_S, STALL_SHARE, gaps_between
from vllm_playbooks.results.store import append_run_row
from vllm_playbooks.results.textfiles import stored_path
from vllm_playbooks.run.engine_server import EngineServer, ServerFactory
from vllm_playbooks.run.plan import CasePlan, PlannedPoint
from vllm_playbooks.shapes import resolve_model, vllm_path

#: Builds the sampler for one measured run: (number of GPUs the engine uses, the server's environment) → sampler.
SamplerFactory = Callable[[int, dict[str, str]], GpuSampler]


#: A load run's deadline is this many times its planned duration ...
LOAD_DEADLINE_FACTOR = 10.0
#: ... and never shorter than this (seconds): a warm-up's duration is not known before it runs.
LOAD_DEADLINE_FLOOR_S = 900.0


def load_deadline_s(planned_s: float, floor_s: float = LOAD_DEADLINE_FLOOR_S) -> float:
    """How long one ``bench serve`` run planned to take ``planned_s`` seconds may run before it is given up as hung:
    ``LOAD_DEADLINE_FACTOR`` times the plan, at least ``floor_s``."""
    return max(floor_s, LOAD_DEADLINE_FACTOR * planned_s)


#: The words of a ``ServerError`` refusing a scrape, by its fault.
_SCRAPE_FAULTS = {
    ScrapeFault.EMPTY: "it is empty",
    ScrapeFault.HTML: "it is HTML, not Prometheus text",
    ScrapeFault.NOT_PROMETHEUS: "it is not Prometheus text",
    ScrapeFault.NO_VLLM_COUNTER: "it holds no vllm: counter",
    ScrapeFault.NO_SPEC_COUNTERS: "speculation is on but it lacks the speculative-decoding counters",
}


def trusted_scrape(base_url: str, speculative: bool, when: str) -> str:
    """The server's ``/metrics`` text (``scrape``), refused with ``ServerError`` in one line when it cannot be trusted
    (``untrusted_scrape``): the point then fails and is measured again, instead of a row built on it."""
    text = scrape(base_url)
    fault = untrusted_scrape(text, speculative)
    if fault is not None:
        code, detail = fault
        why = _SCRAPE_FAULTS[code] + (f" ({detail})" if detail else "")
        raise ServerError(f"the /metrics scrape {when} the measured run cannot be trusted: {why}; not recorded")
    return text


def _sampler_for(engine: EngineConfig, factory: SamplerFactory | None) -> GpuSampler | None:
    if factory is None:
        return None
    return factory(engine_gpus(engine), {**os.environ, **engine.env})


@dataclass
class RunReport:
    """What a live run did, by recorded point id (``<hardware>/<config id>/<load>-r<n>``): points measured, points
    skipped because they were already recorded on this hardware, failures."""

    measured: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    server_startup_s: dict[str, float] = field(default_factory=dict)

    def raise_for_failures(self) -> None:
        """Raise ``PlaybookError`` naming the failed points (finished ones are already on disk)."""
        if self.failed:
            lines = "\n".join(f"- {pid}: {err.splitlines()[0]}" for pid, err in self.failed.items())
            raise PlaybookError(
                f"{len(self.failed)} point(s) failed; {len(self.measured)} measured and kept. "
                f"Rerun the same call to retry only what is missing.\n{lines}"
            )


def hardware_of(engine: EngineConfig, provenance: Provenance) -> str:
    """The hardware key of the points ``engine`` measures on the machine ``provenance`` describes."""
    return hardware_key(provenance.gpu_name, engine_gpus(engine), provenance.vllm_version)


def server_hardware(engine: EngineConfig, provenance: Provenance) -> tuple[str, str, str]:
    """What ``engine``'s server records beside its log on the machine ``provenance`` describes
    (``results.server_logs.write_server_record``): the hardware key, the GPU name and the vLLM version."""
    return hardware_of(engine, provenance), provenance.gpu_name, provenance.vllm_version


def _point_record(point: PlannedPoint, plan: CasePlan, hardware: str, **extra: Any) -> dict[str, Any]:
    shape = resolve_model(point.engine.model)
    return {
        "case": plan.case,
        "hardware": hardware,
        "point_id": f"{hardware}/{point.point_id}",
        "config_id": point.engine.config_id(),
        "repeat": point.repeat,
        "model_shape": shape.name,
        "quantization": shape.quantization,
        "engine": point.engine.resolved(),
        "load": point.load.model_dump(mode="json"),
        **extra,
    }


def measure_point(
    point: PlannedPoint,
    plan: CasePlan,
    server: VllmServer,
    bench: BenchClient,
    provenance: Provenance,
    data: Path,
    gpu_sampler: SamplerFactory | None = nvml_sampler,
    pairing: dict[str, Any] | None = None,
    load_floor_s: float = LOAD_DEADLINE_FLOOR_S,
) -> RunRow:
    """Calibrate (uncounted warm-up), then measure one load level between two ``/metrics`` scrapes; record it.

    The engine's GPUs are sampled (``gpu_sampler``; ``None``: not at all) from just before the first scrape to just
    after the second; the samples go into the raw folder as ``gpu_samples.csv`` and ``point.json`` says how it went.
    The host's CPU is read over the same span (``HostSampler``: steal, busy and I/O-wait shares, load, clock) into
    ``point.json``'s ``host_signals``. ``pairing`` (``run.paired.pairing_record``: the paired session, its mode and
    the point's place in it) goes into ``point.json`` as it is; ``None`` for a point measured on its own.

    Each ``bench serve`` run has a deadline (``load_deadline_s``: the warm-up ``load_floor_s``, the measured run ten
    times its planned duration, at least ``load_floor_s``); a scrape that breaks HTTP or cannot be trusted
    (``trusted_scrape``) fails the point (``ServerError``) before anything is written.
    """
    engine, load = point.engine, point.load
    speculative = engine.speculative is not None

    tokenizer = engine.tokenizer_path()
    model_arg = str(vllm_path(resolve_model(engine.model), create=True))
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        work = Path(tmp)

        def run(num_prompts: int, filename: str, planned_s: float) -> tuple[list[str], str]:
            argv = bench_argv(
                load,
                base_url=server.base_url,
                model=model_arg,
                tokenizer=str(tokenizer) if tokenizer else model_arg,
                num_prompts=num_prompts,
                result_dir=work,
                result_filename=filename,
            )
            bench(argv, timeout_s=load_deadline_s(planned_s, load_floor_s))
            return argv, (work / filename).read_text(encoding="utf-8")

        warmup_prompts = load.warmup_prompts()
        _, warmup_text = run(warmup_prompts, raw.WARMUP_FILE, 0.0)
        warmup = json.loads(warmup_text)
        rps = warmup["completed"] / warmup["duration"] if warmup.get("duration") else None
        num_prompts = load.measured_prompts(rps, plan.min_duration_s)
        remeasured_because: list[str] = []
        for attempt in (1, 2):
            sampler, host = _sampler_for(engine, gpu_sampler), HostSampler()
            if sampler is not None:
                sampler.start()
            host.start()
            try:
                before = trusted_scrape(server.base_url, speculative, "before")
                argv, bench_text = run(
                    num_prompts, raw.BENCH_FILE, max(num_prompts / rps if rps else 0.0, plan.min_duration_s)
                )
                after = trusted_scrape(server.base_url, speculative, "after")
            finally:
                host.stop()
                if sampler is not None:
                    sampler.stop()
            result = json.loads(bench_text)
            incomplete_run_check(result, num_prompts)
            duration = float(result["duration"])
            short = duration < plan.min_duration_s and load.request_rate_qps is None
            gaps = gaps_between(parse_metrics(before), parse_metrics(after))
            share = gaps.share_of(result["completed"], result["mean_e2el_ms"]) if gaps is not None else 0.0
            stalled = share >= STALL_SHARE
            if attempt == 2 or not (short or stalled):
                break
            # Either run becomes more warm-up and the point is measured once more. A short run: the calibration
            # under-estimated the steady rate (the first requests are the slowest), so the next run gets the count
            # its own rate asks for. A stalled run (output-token gaps of seconds, results/stalls.py): same count.
            if short:
                remeasured_because.append(f"short: {duration:.1f} s < {plan.min_duration_s:g} s")
                num_prompts = max(num_prompts + 1, math.ceil(num_prompts * 1.1 * plan.min_duration_s / duration))
            if stalled and gaps is not None:
                remeasured_because.append(
                    f"stalled: {gaps.stalled} output-token gaps over {STALL_S:g} s, "
                    f"at least {share:.1%} of the requests' time"
                )
    hardware = hardware_of(engine, provenance)
    record = _point_record(
        point,
        plan,
        hardware,
        num_warmup_prompts=warmup_prompts,
        measured_at=utc_now(),
        measurement_attempts=attempt,
        remeasured_because=remeasured_because,
        server_argv=server.argv,
        bench_argv=["vllm", "bench", "serve", *argv],
        server_startup_s=server.startup_s,
        gpu_sampling=sampler.record() if sampler is not None else {"status": "disabled", "reason": "no sampler given"},
        host_signals=host.record(),
        **({"pairing": pairing} if pairing is not None else {}),
    )
    files = {
        raw.POINT_FILE: json.dumps(record, indent=2, sort_keys=True),
        raw.PROVENANCE_FILE: provenance.model_dump_json(indent=2),
        raw.WARMUP_FILE: warmup_text,
        raw.BENCH_FILE: bench_text,
        raw.METRICS_BEFORE: before,
        raw.METRICS_AFTER: after,
    }
    if sampler is not None and sampler.samples:
        files[raw.GPU_SAMPLES_FILE] = sampler.csv_text()
    case_dir = store.case_dir(plan.case, data)
    try:
        folder = raw.write_point(case_dir, f"{hardware}/{point.point_id}", files)
        row = raw.row_from_point(folder, data)
        append_run_row(row, data)
    except OSError as error:
        raise StorageError(
            f"cannot write to {case_dir}: {error.strerror or error}. The points recorded before are "
            "kept; make room (or make it writable) and run the same command again"
        ) from error
    return row


def incomplete_run_check(result: dict[str, Any], sent: int) -> None:
    """Refuse a measured run whose requests did not all complete: ``ServerError`` (the point is kept as a failure
    file and measured again by the next run), never a row of partial or zero throughput."""
    completed, failed = int(result.get("completed") or 0), int(result.get("failed") or 0)
    if failed or completed < sent:
        raise ServerError(
            f"the measured run completed {completed} of {sent} requests ({failed} failed): not recorded "
            "as a point; the next run measures it again"
        )


def startup_cause(error: BaseException, log: Path) -> str | None:
    """For a ``ServerError`` of a server that did not start, the first error its log ``log`` names
    (``read_failed_startup``); None for any other error, or where the log names none."""
    if not isinstance(error, ServerError):
        return None
    found = stored_path(log)
    if found is None or not found.is_file() or has_started(log):
        return None
    return read_failed_startup(log).error


def record_failed_point(
    case_dir: Path,
    point: PlannedPoint,
    error: BaseException,
    report: RunReport,
    log: Path,
    hardware: str,
    cause: str | None = None,
) -> None:
    """Note ``point`` as failed in ``report`` and keep its error beside the finished points
    (``raw/<hardware>/<point id>.failure.json``, naming the server log ``log``): the next run measures it again. A
    ``cause`` (``startup_cause``: why a server did not start) goes in front, so that the one line a failure gets says
    why."""
    name, recorded_id = type(error).__name__, f"{hardware}/{point.point_id}"
    message = f"{name} ({cause}): {error}" if cause else f"{name}: {error}"
    report.failed[recorded_id] = message
    raw.record_failure(case_dir, recorded_id, message, {"server_log": str(log)})


class ServerGone(StrEnum):
    """Why the points left on a server cannot be measured after one failed (``server_gone``)."""

    DIED = "died"
    UNHEALTHY = "unhealthy"


#: The error each point left on a gone server fails with, by ``ServerGone``: ``scope`` is what the server was serving
#: ('config', or 'paired run' for the servers of a paired run).
GONE_ERRORS = {
    ServerGone.DIED: "server died earlier in this {scope}",
    ServerGone.UNHEALTHY: "server stopped answering /health earlier in this {scope}",
}


def server_gone(server: VllmServer) -> ServerGone | None:
    """Why the points left on ``server`` cannot be measured after one failed, or None when it still serves: it
    died, or it no longer answers ``/health`` with 200 in time (hung, stopped, or answering what breaks HTTP)."""
    if not server.alive():
        return ServerGone.DIED
    if not server.healthy():
        return ServerGone.UNHEALTHY
    return None


#: What a failed point is kept for (a failure file) rather than ending the run: the server, the load generator or
#: the data it returned went wrong. A ``StorageError`` (nothing can be kept) ends the run.
POINT_ERRORS = (PlaybookError, OSError, KeyError, ValueError, RuntimeError)


@dataclass
class LiveRun:
    """What every server lifetime of one live run shares: the plan, how its servers start (``lifetime``), where its
    points go, the machine's provenance, the GPU sampler, the report it fills and its progress bar."""

    plan: CasePlan
    bench: BenchClient | None
    server_factory: ServerFactory
    python: str | None
    health_timeout_s: float
    provenance: Provenance
    data: Path
    report: RunReport
    bar: Any
    gpu_sampler: SamplerFactory | None
    #: The shortest deadline of one ``bench serve`` run (``load_deadline_s``).
    load_floor_s: float = LOAD_DEADLINE_FLOOR_S

    @property
    def case_dir(self) -> Path:
        """The case's data folder."""
        return store.case_dir(self.plan.case, self.data)

    def lifetime(self, engine: EngineConfig) -> EngineServer:
        """One server lifetime of ``engine``, not started yet."""
        return EngineServer(
            engine,
            self.case_dir,
            self.bench,
            self.server_factory,
            self.python,
            self.health_timeout_s,
            hardware=server_hardware(engine, self.provenance),
        )

    def measure(
        self, point: PlannedPoint, lifetime: EngineServer, server: VllmServer, pairing: dict[str, Any] | None = None
    ) -> bool:
        """Measure ``point`` on ``server`` (``measure_point``) and note it in the report; a point that fails
        (``POINT_ERRORS``) is kept as a failure file instead. True when it was measured."""
        hardware = hardware_of(point.engine, self.provenance)
        try:
            measure_point(
                point,
                self.plan,
                server,
                lifetime.bench,
                self.provenance,
                self.data,
                self.gpu_sampler,
                pairing,
                self.load_floor_s,
            )
        except StorageError:
            raise
        except POINT_ERRORS as error:
            self.fail(point, error, lifetime)
            return False
        self.report.measured.append(f"{hardware}/{point.point_id}")
        return True

    def fail(self, point: PlannedPoint, error: BaseException, lifetime: EngineServer, cause: str | None = None) -> None:
        """Keep ``point`` as failed (``record_failed_point``) with the log of the server ``lifetime`` it was on."""
        hardware = hardware_of(point.engine, self.provenance)
        record_failed_point(self.case_dir, point, error, self.report, lifetime.log_path, hardware, cause)
