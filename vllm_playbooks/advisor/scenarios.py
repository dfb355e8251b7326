"""Acceptance scenarios: the engine configs of a grid that one model on one workload could all be.

The recorded speculative configs impose their acceptance (``synthetic_acceptance_rates``, or this package's
``acceptance_alpha``). Acceptance is what a model's drafts achieve on one's prompts, not a setting one chooses: a grid
that imposes several acceptances holds several worlds side by side, and a recommendation must choose inside one of
them ("EAGLE-3 with k=3 at acceptance 0.81" is no answer to a user whose drafts are accepted 71 % of the time).

A *scenario* of a grid holds every config without speculation, every speculative config whose acceptance is not
imposed (real weights: what its drafts achieve is part of what is measured), and, for each drafter (method and draft
model), the configs whose imposed rates are a prefix of one longest profile: k=1 at [0.85] belongs with k=3 at
[0.85, 0.53, 0.34] (the same drafts, fewer of them), not with k=1 at [0.90]. Rates are unconditional per position
(p_i, the chance that the first i drafts are all accepted), so the prefix is what the shorter chain imposes. An
imposed mean acceptance length is a profile of its own. A grid with several drafters has one scenario per
combination of their longest profiles; a grid without imposed acceptance is one scenario.

A scenario's label is its drafters' first-position rates ('0.71'; '0.85' for the k=1/k=3 pair above), with the whole
profile where two scenarios would share it, and ``NO_IMPOSED`` when nothing is imposed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from vllm_playbooks.config.engine import EngineConfig

#: The label of the one scenario of a grid that imposes no acceptance.
NO_IMPOSED = "none imposed"
#: Rates closer than this count as equal (the case files give them to 4 decimals).
RATE_TOLERANCE = 1e-3

#: An imposed acceptance: ("rates", p_1, …, p_k) or ("length", mean acceptance length).
Profile = tuple[object, ...]


@dataclass(frozen=True)
class Scenario:
    """One acceptance scenario of a grid: its label and the config ids it holds."""

    label: str
    config_ids: frozenset[str]


def imposed_profile(engine: EngineConfig) -> Profile | None:
    """What ``engine`` imposes on its drafts' acceptance; None without speculation or when nothing is imposed."""
    spec = engine.speculative
    if spec is None or spec.rejection_sample_method != "synthetic":
        return None
    if spec.synthetic_acceptance_rates is not None:
        return ("rates", *(float(r) for r in spec.synthetic_acceptance_rates))
    return ("length", float(spec.synthetic_acceptance_length or 0.0))


def _drafter(engine: EngineConfig) -> tuple[str, str]:
    spec = engine.speculative
    assert spec is not None
    return spec.method, spec.model or ""


def _within(shorter: Profile, longer: Profile) -> bool:
    """Whether ``shorter`` is ``longer`` or a prefix of it (rates; a length profile has one value, so only the same
    length is within another)."""
    if shorter[0] != longer[0] or len(shorter) > len(longer):
        return False
    return all(
        math.isclose(float(a), float(b), abs_tol=RATE_TOLERANCE)  # type: ignore[arg-type]
        for a, b in zip(shorter[1:], longer[1:], strict=False)
    )


def _first(profile: Profile) -> str:
    value = float(profile[1])  # type: ignore[arg-type]
    return f"{value:g}" if profile[0] == "rates" else f"length {value:g}"


def _whole(profile: Profile) -> str:
    if profile[0] == "length":
        return _first(profile)
    return "/".join(f"{float(r):.4g}" for r in profile[1:])  # type: ignore[arg-type]


def acceptance_scenarios(engines: Mapping[str, EngineConfig]) -> list[Scenario]:
    """The acceptance scenarios of the grid of ``engines`` (engine configs by config id; see the module's docstring),
    ordered by label."""
    shared = {cid for cid, engine in engines.items() if imposed_profile(engine) is None}
    by_drafter: dict[tuple[str, str], dict[str, Profile]] = {}
    for cid, engine in engines.items():
        profile = imposed_profile(engine)
        if profile is not None:
            by_drafter.setdefault(_drafter(engine), {})[cid] = profile
    if not by_drafter:
        return [Scenario(NO_IMPOSED, frozenset(shared))]
    longest: dict[tuple[str, str], list[Profile]] = {}
    for drafter, profiles in sorted(by_drafter.items()):
        distinct: list[Profile] = []
        for profile in profiles.values():
            if not any(_within(profile, kept) and _within(kept, profile) for kept in distinct):
                distinct.append(profile)
        longest[drafter] = [p for p in distinct if not any(q is not p and _within(p, q) for q in distinct)]
    combos = list(itertools.product(*longest.values()))
    firsts = [", ".join(_first(p) for p in combo) for combo in combos]
    scenarios = []
    for combo, first in zip(combos, firsts, strict=True):
        label = first if firsts.count(first) == 1 else ", ".join(_whole(p) for p in combo)
        members = set(shared)
        for drafter, top in zip(longest, combo, strict=True):
            members |= {cid for cid, profile in by_drafter[drafter].items() if _within(profile, top)}
        scenarios.append(Scenario(label, frozenset(members)))
    return sorted(scenarios, key=lambda s: s.label)


def label_matches(label: str, wanted: str) -> bool:
    """Whether a user's ``wanted`` names the scenario ``label``: the same text, or the same number ('0.710' names
    '0.71')."""
    if label.strip() == wanted.strip():
        return True
    try:
        return math.isclose(float(label), float(wanted), abs_tol=RATE_TOLERANCE)
    except ValueError:
        return False


def scenario_text(label: str | None) -> str:
    """', imposed acceptance 0.71' for a scenario's label, to follow a model shape in a sentence; '' when nothing is
    imposed (or the label is unknown: a trace written before scenarios)."""
    return "" if label in (None, NO_IMPOSED) else f", imposed acceptance {label}"
