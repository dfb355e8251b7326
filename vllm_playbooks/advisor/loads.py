"""What a config's paid loads say of its other loads, for the advisor's search (``advisor.search``).

- Within a config, p99 latencies and throughput rise with the load: a point at or above a paid load that missed the
  SLO, or below a paid load that met it, cannot win (``dominated``).
- Except above a *transient* miss (``transients``): under a request rate, a paid load that missed the SLO while the
  server kept up with the rate offered (its requests/s within the noise band of the rate, ``analysis.noise.band_pct``:
  no queue built up over the run), by a p99 above what the model predicts for it from every other paid point (the
  refit without it: the config's other loads, else its family's or the prior) by more than the model's own band there
  (a factor 1 + u, two standard deviations), missed by a transient, not by its load. Nothing that kept up with the rate
  explains the jump, so it rules out no load above it, and the config's next load up is left to the measurement
  (``above_transients``): one run settles it. The test is made again each round, on what is paid by then: a miss that
  the config's later loads bring in line rules the loads above out again. A closed loop always queues its clients,
  and a rate the server fell behind builds a queue, so their misses keep ruling out the loads above. On the
  V2-Lite-scale grid at a request rate, speculation off's TPOT p99 at 4 req/s was 17.6 ms (the median of its three
  runs, which kept up with the rate), where the refit from its 1 and 2 req/s predicted 7.9 ms (u 0.40) and the prior
  alone 2.7 ms (u 1.5); at 8 req/s it met the loose SLO and was the grid's best, and the search that ruled
  out 8 req/s by the miss at 4 answered half the best's goodput.
- Below its misses, a started config is walked down by measurement, not ruled out by the model: while it has met the
  SLO at none of its paid points, its next load down is left to the measurement (``below_misses``). The model's shape
  over load is the least reliable thing it has: on the #13834 grid at acceptance 0.72 the 2-token draft's miss at 16
  clients, carried down, ruled the draft family out at 8 clients, where the 3-token draft is the grid's best.

Every step of either walk costs one run and no start-up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vllm_playbooks.advisor.goodput import Slo
from vllm_playbooks.advisor.oracle import PointKey
from vllm_playbooks.analysis.noise import band_pct


def _same_axis(key: PointKey, other: PointKey) -> bool:
    """Whether two points are of one config and one kind of load (a rate, or a concurrency)."""
    return key[0] == other[0] and (key[4] >= 0) == (other[4] >= 0)


def transients(
    paid: dict[PointKey, dict[str, Any]],
    slo: Slo,
    expected: Callable[[PointKey], tuple[dict[str, float], float]],
) -> set[PointKey]:
    """The paid points of ``paid`` (``search.point_summary``s by point) that missed ``slo`` by a transient (see the
    module's docstring): at a request rate the server kept up with, a missed p99 above ``expected``'s prediction for
    the point (the model's, from every other paid point, and its uncertainty u) by more than a factor 1 + u."""
    bounds = [(m, b) for m, b in (("tpot_p99_ms", slo.tpot_p99_ms), ("ttft_p99_ms", slo.ttft_p99_ms)) if b is not None]
    out = set()
    for key, summary in paid.items():
        rate = key[4]
        if rate < 0 or summary["goodput_rps"] > 0:
            continue
        if summary["request_throughput_rps"] < rate * (1.0 - band_pct(summary["spread_pct"]) / 100.0):
            continue  # it fell behind the rate: a queue built up, its load's own miss
        predicted, u = expected(key)
        if any(summary[m] > bound and summary[m] > predicted[m] * (1.0 + u) for m, bound in bounds):
            out.add(key)
    return out


def dominated(
    lines: dict[PointKey, dict[str, Any]], paid: dict[PointKey, dict[str, Any]], transient: set[PointKey] = frozenset()
) -> set[PointKey]:
    """Points that cannot win, by monotonicity in load within a config (p99 latencies and throughput rise with the
    load): those at or above a paid load of the same config that missed the SLO, unless that miss is in
    ``transient`` (``transients``), and those below a paid load of the same config that met it (less throughput at
    no gain)."""
    out = set()
    for done, summary in paid.items():
        missed = summary["goodput_rps"] <= 0
        if missed and done in transient:
            continue
        at = lines[done]["load"]
        for key, line in lines.items():
            if key == done or not _same_axis(key, done):
                continue
            if (missed and line["load"] >= at) or (not missed and line["load"] < at):
                out.add(key)
    return out


def _open(lines: dict[PointKey, dict[str, Any]], paid: dict[PointKey, Any], ruled_out: set[PointKey]) -> list[PointKey]:
    """The points neither paid for, ruled out nor pruned by the calculator."""
    return [key for key, line in lines.items() if key not in paid and key not in ruled_out and not line["pruned"]]


def below_misses(
    lines: dict[PointKey, dict[str, Any]], paid: dict[PointKey, dict[str, Any]], ruled_out: set[PointKey]
) -> set[PointKey]:
    """For each started config that met the SLO at none of its paid points, per kind of load, its next load down:
    the highest load neither paid for nor in ``ruled_out`` (``dominated``'s points: every such load lies below the
    config's lowest miss)."""
    out = set()
    for config in {key[0] for key in paid}:
        if any(summary["goodput_rps"] > 0 for key, summary in paid.items() if key[0] == config):
            continue
        for rate in (True, False):
            below = [key for key in _open(lines, paid, ruled_out) if key[0] == config and (key[4] >= 0) == rate]
            if below:
                out.add(max(below, key=lambda key: lines[key]["load"]))
    return out


def above_transients(
    lines: dict[PointKey, dict[str, Any]], paid: dict[PointKey, Any], ruled_out: set[PointKey], transient: set[PointKey]
) -> set[PointKey]:
    """For each ``transient`` miss (``transients``), its config's next load up: the lowest load above it neither paid
    for nor in ``ruled_out``."""
    out = set()
    for done in transient:
        above = [
            k for k in _open(lines, paid, ruled_out) if _same_axis(k, done) and lines[k]["load"] > lines[done]["load"]
        ]
        if above:
            out.add(min(above, key=lambda k: lines[k]["load"]))
    return out
