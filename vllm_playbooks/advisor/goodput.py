"""What the advisor maximises: goodput under an SLO, from the per-run percentiles the book records.

The raw point folders keep vLLM's summary ``bench.json`` (percentiles only, no per-request latencies), so goodput is
defined on a point's percentiles: a point *meets* an SLO when the median over its repeats of its TPOT p99 (and/or
TTFT p99) is at or below the SLO's bound, and its goodput is then the median of its request throughput (requests/s),
else 0. That is stricter than per-request goodput (the requests of a point that misses by a little still count 0) and
the same rule for every config, so it ranks configs fairly.

A *point* is one engine config at one load (input/output lengths and a closed-loop concurrency or a request rate);
a *grid* is every point of one case on one hardware for one model shape, one pair of lengths and one kind of load:
the set a user with that workload chooses from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from vllm_playbooks.errors import ConfigError

#: The columns that name a point (with the hardware, which a grid holds fixed).
POINT_COLUMNS = ("config_id", "input_len", "output_len", "concurrency", "request_rate_qps")
#: The columns the measured SLO metrics and goodput come from.
METRIC_COLUMNS = ("tpot_p99_ms", "ttft_p99_ms", "request_throughput_rps")
#: What names a grid: one workload on one hardware and one model shape.
GRID_COLUMNS = ("case", "hardware", "model_shape", "input_len", "output_len", "load_kind")
#: The SLO levels of the offline evaluation and the quantile of a grid's TPOT p99 values each sits at.
SLO_LEVELS = (("tight", 0.25), ("medium", 0.5), ("loose", 0.75))


@dataclass(frozen=True)
class Slo:
    """Bounds on a point's p99 latencies in ms; None leaves that latency free. At least one must be set."""

    tpot_p99_ms: float | None = None
    ttft_p99_ms: float | None = None

    def __post_init__(self) -> None:
        if self.tpot_p99_ms is None and self.ttft_p99_ms is None:
            raise ConfigError("an SLO needs a TPOT p99 bound, a TTFT p99 bound, or both (ms)")
        for name, value in (("TPOT p99", self.tpot_p99_ms), ("TTFT p99", self.ttft_p99_ms)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigError(f"the SLO's {name} bound must be a positive number of ms, got {value}")

    def met(self, tpot_p99_ms: float, ttft_p99_ms: float) -> bool:
        """Whether p99 latencies of ``tpot_p99_ms`` and ``ttft_p99_ms`` meet every bound set."""
        return (self.tpot_p99_ms is None or tpot_p99_ms <= self.tpot_p99_ms) and (
            self.ttft_p99_ms is None or ttft_p99_ms <= self.ttft_p99_ms
        )

    def label(self) -> str:
        """'TPOT p99 ≤ 12.5 ms' and/or 'TTFT p99 ≤ 400 ms'."""
        bounds = (("TPOT", self.tpot_p99_ms), ("TTFT", self.ttft_p99_ms))
        parts = [f"{name} p99 ≤ {value:g} ms" for name, value in bounds if value is not None]
        return ", ".join(parts)


def given(value: object) -> bool:
    """Whether a load column holds a positive number (not None, not NaN, above 0)."""
    return isinstance(value, (int, float)) and not math.isnan(value) and value > 0


def goodput_rps(slo: Slo, tpot_p99_ms: float, ttft_p99_ms: float, request_throughput_rps: float) -> float:
    """Requests/s meeting ``slo``: the point's request throughput when its p99s meet it, else 0."""
    return float(request_throughput_rps) if slo.met(tpot_p99_ms, ttft_p99_ms) else 0.0


def with_grid_columns(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with ``load_kind`` added (what ``GRID_COLUMNS`` needs)."""
    return rows.assign(load_kind=rows["request_rate_qps"].map(lambda r: "rate" if given(r) else "concurrency"))


def point_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per point of ``rows`` (``POINT_COLUMNS``): the medians over its repeats of ``METRIC_COLUMNS``, its
    number of runs (``runs``) and its engine label, model shape and max_num_seqs."""
    keys = list(POINT_COLUMNS)
    filled = rows.assign(
        concurrency=rows["concurrency"].fillna(-1), request_rate_qps=rows["request_rate_qps"].fillna(-1)
    )
    table = (
        filled.groupby(keys, sort=True)
        .agg(
            engine_label=("engine_label", "first"),
            model_shape=("model_shape", "first"),
            max_num_seqs=("max_num_seqs", "first"),
            runs=("repeat", "size"),
            **{m: (m, "median") for m in METRIC_COLUMNS},
        )
        .reset_index()
    )
    return table.replace({"concurrency": {-1: float("nan")}, "request_rate_qps": {-1: float("nan")}})


def with_goodput(points: pd.DataFrame, slo: Slo) -> pd.DataFrame:
    """``points`` (a ``point_table``) with ``goodput_rps`` under ``slo``."""
    values = [goodput_rps(slo, p.tpot_p99_ms, p.ttft_p99_ms, p.request_throughput_rps) for p in points.itertuples()]
    return points.assign(goodput_rps=values)


def grid_best(points: pd.DataFrame, slo: Slo) -> pd.Series | None:
    """The point of highest goodput under ``slo`` among ``points`` (a ``point_table`` of every recorded row: medians
    of all repeats), None when no point meets it. Ties go to the first in ``point_table``'s order."""
    scored = with_goodput(points, slo)
    if not (scored["goodput_rps"] > 0).any():
        return None
    return scored.loc[scored["goodput_rps"].idxmax()]


def slo_levels(points: pd.DataFrame) -> list[tuple[str, Slo]]:
    """The evaluation's SLOs for one grid: TPOT p99 bounds at the ``SLO_LEVELS`` quantiles of its points' TPOT p99
    (tight: a quarter of the points meet it, medium: half, loose: three quarters), rounded to 0.1 ms. Derived from the
    grid by this fixed rule, not chosen per grid."""
    values = points["tpot_p99_ms"].dropna()
    return [(name, Slo(tpot_p99_ms=round(float(values.quantile(q)), 1))) for name, q in SLO_LEVELS]


def point_name(engine_label: str, concurrency: float, rate: float) -> str:
    """'spec-off @ c16' or 'mtp-k1 @ 4 req/s'."""
    if given(rate):
        return f"{engine_label} @ {rate:g} req/s"
    return f"{engine_label} @ c{int(concurrency)}"


def workload_text(key: dict[str, Any]) -> str:
    """A grid's workload in words (``key`` holds ``GRID_COLUMNS``' lengths and load kind): '230 in / 203 out, closed
    loop' or '…, request rate'."""
    kind = "closed loop" if key["load_kind"] == "concurrency" else "request rate"
    return f"{int(key['input_len'])} in / {int(key['output_len'])} out, {kind}"
