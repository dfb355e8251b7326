"""How large a difference must be before the book calls it a gain or a loss: the one place that says so.

A point measured several times has a *spread*: how far its clean runs lie apart, (highest − lowest) / median. A
comparison of two points (speculation against its baseline, one config against another) uses the median of each
side's runs and a *band*: the larger of the two sides' spreads, and at least ``MIN_BAND_PCT``. A difference inside
the band is "within noise"; only one larger than the band is a gain or a loss. A side measured fewer than
``MIN_CLEAN_REPEATS`` times has no spread to trust (none for one run, a lucky one for two that agree): its band is at
least the widest spread its configuration showed in the same setting (``analysis.compare.borrowed_spread``), and only
where there is none does the floor alone guard it. Such a point is an anecdote, and pages say how many runs a verdict
rests on.

Three other margins live here too, because they are choices a reader should find in one place, but they are not
noise: ``SIZE_TOLERANCE`` (how close a measured ratio must come to a claimed one to count as the same size) and
``THRESHOLD_PCT`` (by how much PP=2 must beat PP=1 for issue #27462's claim).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

#: The smallest band, in percent: a difference within ±5 % is never called a gain or a loss, however close the runs
#: of both sides lie (and it is the whole band of a side measured once). A stated choice, not a measurement.
MIN_BAND_PCT = 5.0
#: A verdict rests on points measured at least this many times without a stall; fewer, and it says so.
MIN_CLEAN_REPEATS = 3

#: A measured (or modelled) ratio within ±10 % of the claimed ratio, or of the ends of a claimed range, counts as the
#: same size.
SIZE_TOLERANCE = 0.10
#: Issue #27462's margin: PP=2 at N counts as "not faster" than PP=1 at N within this many percent.
THRESHOLD_PCT = 20.0


#: A run's host counts as disturbed (``host_disturbances``) when the hypervisor took at least this share of the CPU
#: time (steal), percent of all cores over the run;
DISTURBED_STEAL_PCT = 2.0
#: or when more tasks than logical CPUs were runnable or waiting (the 1-minute load at its highest over the run);
DISTURBED_LOAD_PER_CPU = 1.0
#: or when the engine's GPUs ran this share or more below the highest mean SM clock of the same GPU model's runs.
DISTURBED_GPU_CLOCK_DROP = 0.10


class Disturbance(StrEnum):
    """Why a run's host or GPU counts as disturbed: the cause a wide spread should be traced to first."""

    STEAL = "CPU steal"
    LOAD = "host load"
    GPU_CLOCK = "GPU clock"


def host_disturbances(
    steal_pct: float | None,
    load_1m_max: float | None,
    cpu_count: float | None,
    sm_clock_mhz: float | None,
    top_sm_clock_mhz: float | None,
) -> tuple[Disturbance, ...]:
    """The disturbances one run's readings show (``results.conditions``): steal of ``DISTURBED_STEAL_PCT`` or more, a
    load of ``DISTURBED_LOAD_PER_CPU`` per CPU or more, a mean SM clock ``DISTURBED_GPU_CLOCK_DROP`` or more below
    ``top_sm_clock_mhz``; a reading that is missing (``None`` or NaN) shows none."""

    nan = float("nan")
    steal, load, cpus, clock, top = (
        nan if v is None else float(v) for v in (steal_pct, load_1m_max, cpu_count, sm_clock_mhz, top_sm_clock_mhz)
    )
    found = []  # every comparison with NaN (a missing reading) is False
    if steal >= DISTURBED_STEAL_PCT:
        found.append(Disturbance.STEAL)
    if load >= DISTURBED_LOAD_PER_CPU * cpus:
        found.append(Disturbance.LOAD)
    if clock <= (1 - DISTURBED_GPU_CLOCK_DROP) * top:
        found.append(Disturbance.GPU_CLOCK)
    return tuple(found)


class Effect(StrEnum):
    """What a difference is called: a gain or a loss beyond the band, else within noise."""

    GAIN = "gain"
    NONE = "within noise"
    LOSS = "loss"


@dataclass(frozen=True)
class Spread:
    """The clean runs of one point: how many, their median, lowest and highest value."""

    runs: int
    median: float
    lowest: float
    highest: float

    @property
    def spread_pct(self) -> float:
        """(highest − lowest) / median in percent; 0 for a single run (its spread is unknown, not zero: see
        ``band_pct``)."""
        return 100.0 * (self.highest - self.lowest) / self.median if self.runs > 1 and self.median else 0.0


def spread_of(values: Iterable[float]) -> Spread:
    """The ``Spread`` of the values of one point's clean runs; ``ValueError`` for none."""
    ordered = sorted(float(v) for v in values)
    if not ordered:
        raise ValueError("a spread needs at least one run")
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return Spread(len(ordered), median, ordered[0], ordered[-1])


def cross_ratios(references: Iterable[float], values: Iterable[float]) -> list[float]:
    """Every value over every reference: the ratios two sides' runs give when no run is known to go with another (an
    unpaired comparison). Their spread holds the drift between the times the two sides were measured, which each
    side's own spread does not show."""
    references = [float(r) for r in references]
    return [float(v) / r for v in values for r in references]


def band_pct(*spreads_pct: float) -> float:
    """The band a difference must exceed: the largest spread of the sides compared, at least ``MIN_BAND_PCT``."""
    return max((MIN_BAND_PCT, *spreads_pct))


def effect_of_speedup(speedup: float, band: float = MIN_BAND_PCT) -> Effect:
    """What a speed-up is called (a ratio where above 1 is better: this / reference for a throughput, reference /
    this for a latency): ``GAIN`` above 1 + band, ``LOSS`` below 1 − band, else ``NONE`` (within noise)."""
    if speedup > 1.0 + band / 100.0:
        return Effect.GAIN
    if speedup < 1.0 - band / 100.0:
        return Effect.LOSS
    return Effect.NONE
