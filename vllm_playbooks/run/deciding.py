"""The points a claim's verdict rests on: the part of its case file that decides it, and that part's points."""

from __future__ import annotations

import functools

from vllm_playbooks.config.case_file import grid_names
from vllm_playbooks.run.plan import named_parts, quiet_plan


def deciding_part(case: str, claim_id: str) -> str | None:
    """The part of packaged case ``case`` that measures the points ``claim_id``'s verdict rests on, or None where
    none does (or ``case`` has no grid, like the rules of thumb)."""
    if case not in grid_names():
        return None
    return next((named.name for named in named_parts(case) if claim_id in named.decides), None)


@functools.cache
def deciding_points(case: str, claim_id: str) -> frozenset[tuple[str, str]] | None:
    """The points ``claim_id``'s verdict rests on, as (engine label, load slug): its deciding part's (``deciding_part``)
    and its ``earlier_engines``' at the part's loads; None where no part decides it. Labels, not config ids, name the
    engines, so a re-run with another model or engine flags under the case's labels is judged at the same points."""
    part = deciding_part(case, claim_id)
    if part is None:
        return None
    named = next(named for named in named_parts(case) if named.name == part)
    earlier = [{**named.overrides, "engines": list(named.earlier_engines)}] if named.earlier_engines else []
    return frozenset(
        (point.engine.label, point.load.slug())
        for overrides in [named.overrides, *earlier]
        for point in quiet_plan(case, **overrides)[0].points()
    )
