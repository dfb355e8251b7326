"""How a paired plan runs its configs: together on one GPU, or by restart (``pair_engines``), and in which order
(``paired_order``). The runner that measures them is ``run.paired``; why pairing matters is said there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from vllm_playbooks.config.capacity import refused_engines
from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.config.load import LoadPoint
from vllm_playbooks.errors import ConfigError

#: Servers of every config up at once, each at its share of the GPU's memory.
CO_RESIDENT = "co-resident"
#: One server at a time, restarted at each switch of config.
BY_RESTART = "restart"


class _Point(Protocol):
    engine: EngineConfig
    load: LoadPoint
    repeat: int


PointT = TypeVar("PointT", bound=_Point)


def pair_engines(
    engines: Sequence[EngineConfig], gpu_memory_gib: float | None, case: str
) -> tuple[tuple[EngineConfig, ...], str]:
    """The engines a paired plan runs and how: each at ``gpu_memory_utilization / n`` and ``CO_RESIDENT`` where the
    KV-budget check passes for all of them at that share of ``gpu_memory_gib`` (or where the GPU's memory is not
    known: a CPU backend sizes its cache by bytes); else unchanged and ``BY_RESTART``. Fewer than two engines:
    ``ConfigError``."""
    if len(engines) < 2:
        raise ConfigError(
            f"case {case}: a paired plan compares two or more engine configs, this one has {len(engines)}"
        )
    share = len(engines)
    together = tuple(
        engine.model_copy(update={"gpu_memory_utilization": round(engine.gpu_memory_utilization / share, 4)})
        for engine in engines
    )
    if gpu_memory_gib is None or not refused_engines(together, float(gpu_memory_gib)):
        return together, CO_RESIDENT
    return tuple(engines), BY_RESTART


def paired_order(points: Sequence[PointT], mode: str) -> list[PointT]:
    """``points`` in the order a paired run measures them, repeat by repeat. ``CO_RESIDENT``: at each load the engines
    in their order, A, B, A, B …, so every run of B follows a run of A by one run and a slow drift shifts every pair's
    ratio alike. ``BY_RESTART``: each engine runs all its loads of a repeat on one server lifetime, in the engines'
    order at even repeats and in reverse at odd ones (A, B, B, A …: the two lifetimes of B in a row are one, which
    saves a start-up per two repeats)."""
    engines = list(dict.fromkeys(point.engine.config_id() for point in points))
    loads = list(dict.fromkeys(point.load.slug() for point in points))
    found = {(p.repeat, p.load.slug(), p.engine.config_id()): p for p in points}
    ordered: list[PointT] = []
    for repeat in sorted({point.repeat for point in points}):
        if mode == CO_RESIDENT:
            keys = [(load, engine) for load in loads for engine in engines]
        else:
            keys = [(load, engine) for engine in (engines if repeat % 2 == 0 else engines[::-1]) for load in loads]
        ordered.extend(found[(repeat, load, engine)] for load, engine in keys if (repeat, load, engine) in found)
    return ordered


def restart_starts(repeats_left: dict[str, int]) -> dict[str, int]:
    """How many times each engine's server starts when a ``BY_RESTART`` plan measures ``repeats_left`` runs of it (its
    label → repeats still to measure; engines in the plan's order): repeat by repeat in ``paired_order``'s order, a
    new lifetime at each switch of engine (A, B, B, A, A, B: A twice, B twice for three repeats)."""
    labels = list(repeats_left)
    order = [
        label
        for repeat in range(max(repeats_left.values(), default=0))
        for label in (labels if repeat % 2 == 0 else labels[::-1])
        if repeats_left[label] > repeat
    ]
    starts = dict.fromkeys(labels, 0)
    for place, label in enumerate(order):
        if place == 0 or order[place - 1] != label:
            starts[label] += 1
    return starts


def pairing_record(mode: str, session: str, position: int, labels: Sequence[str]) -> dict[str, Any]:
    """What a paired point's ``point.json`` keeps: the mode, the session (when its run started), the point's place in
    the session's order, and the engine labels paired in it."""
    return {"mode": mode, "session": session, "position": position, "engines": list(labels)}
