"""A case file's ``loads`` read into load points: one mapping or a list of named length profiles, with a plan's
overrides applied and every load level checked."""

from __future__ import annotations

import itertools
from typing import Any

from pydantic import ValidationError

from vllm_playbooks.config.load import LoadPoint
from vllm_playbooks.errors import ConfigError

_LOAD_KEYS = {
    "profile",
    "input_len",
    "output_len",
    "concurrency",
    "request_rate_qps",
    "burstiness",
    "seed",
    "temperature",
    "random_range_ratio",
}


def as_list(value: Any) -> list[Any]:
    """A case file's value as a list: ``[]`` for None, a list or tuple as a list, anything else as the one item."""
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def load_points(spec: dict[str, Any], case: str) -> list[LoadPoint]:
    """The load points of one ``loads`` mapping: every rate and concurrency level, each under every length spread
    given; ``ConfigError`` naming the case for an unknown key, no load level, a bad value or a repeated point."""
    unknown = set(spec) - _LOAD_KEYS
    if unknown:
        raise ConfigError(f"case {case}: unknown load keys {sorted(unknown)}; known: {sorted(_LOAD_KEYS)}")
    base = {k: spec[k] for k in ("input_len", "output_len", "burstiness", "seed", "temperature") if k in spec}
    concurrencies = as_list(spec.get("concurrency"))
    rates = as_list(spec.get("request_rate_qps"))
    combos: list[dict[str, Any]] = [{"request_rate_qps": r} for r in rates] + [
        {"concurrency": c} for c in concurrencies
    ]
    if not combos:
        raise ConfigError(f"case {case}: loads need a concurrency list, a request_rate_qps list, or both")
    # one value or a list: each load level is measured under every length spread given, one after the other
    ratios = [{"random_range_ratio": r} for r in as_list(spec.get("random_range_ratio"))] or [{}]
    points = []
    for combo, ratio in itertools.product(combos, ratios):
        try:
            point = LoadPoint(**base, **ratio, **combo)
        except ValidationError as error:
            shown = combo if ratio.get("random_range_ratio") in (None, 0.0) else combo | ratio  # fixed lengths: no news
            raise ConfigError(f"case {case}: bad load {shown}: {error.errors()[0]['msg']}") from None
        if point in points:
            raise ConfigError(f"case {case}: the load {point.slug()} is listed more than once")
        points.append(point)
    return points


def load_profiles(
    raw: Any, overrides: dict[str, Any], case: str
) -> tuple[list[LoadPoint], tuple[tuple[str, int, int], ...]]:
    """Load levels from ``loads``: one mapping, or a list of mappings each naming a length ``profile``.

    Overrides of concurrency, request_rate_qps, input_len and output_len apply to every selected profile; ``profiles``
    selects profiles by name. Identical load points are kept once, in the order they first appear.
    """
    specs = [dict(item or {}) for item in raw] if isinstance(raw, list) else [dict(raw or {})]
    names = [item.get("profile") for item in specs]
    if len(specs) > 1 and (None in names or len(set(names)) != len(names)):
        raise ConfigError(f"case {case}: a list of loads needs a distinct 'profile' name in each entry, got {names}")
    wanted = as_list(overrides.get("profiles"))
    unknown = [w for w in wanted if w not in names]
    if unknown:
        raise ConfigError(f"case {case}: no load profile named {unknown}; known: {[n for n in names if n]}")
    loads: list[LoadPoint] = []
    profiles: list[tuple[str, int, int]] = []
    for load_spec in specs:
        if wanted and load_spec.get("profile") not in wanted:
            continue
        name = load_spec.pop("profile", None)
        for key in ("concurrency", "request_rate_qps", "input_len", "output_len", "random_range_ratio"):
            if key in overrides:
                load_spec[key] = overrides[key]
        if "request_rate_qps" in overrides and "concurrency" not in overrides:
            load_spec.pop("concurrency", None)
        if "concurrency" in overrides and "request_rate_qps" not in overrides:
            load_spec.pop("request_rate_qps", None)
        points = load_points(load_spec, case)
        if name is not None:
            profiles.append((str(name), points[0].input_len, points[0].output_len))
        loads += [point for point in points if point not in loads]
    lengths = [(i, o) for _, i, o in profiles]
    if len(set(lengths)) != len(lengths):
        raise ConfigError(
            f"case {case}: two load profiles have the same input and output lengths: {profiles}; select one with "
            "profiles=[...]"
        )
    return loads, tuple(profiles)
