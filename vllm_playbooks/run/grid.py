"""A case plan's grid as a page shows it: the planned grid as a table, the Python calls that measure each part, and
the load levels not measured yet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from vllm_playbooks.config.case_file import grid_file
from vllm_playbooks.config.load import LoadPoint
from vllm_playbooks.run.plan import CasePlan, case_parts, quiet_plan


def part_calls(case: str) -> str:
    """The Python calls that measure each part of a case, in order, as a Markdown list (what a GPU session runs)."""
    lines = []
    for name, overrides in case_parts(case):
        args = "".join(f", {key}={value!r}" for key, value in overrides.items())
        plan, _ = quiet_plan(case, **overrides)
        lines.append(
            f"- **{name}** ({len(plan.engines)} server config(s), {len(plan.points())} points): "
            f"`run_case(load_plan({case!r}{args}))`"
        )
    return "\n".join(lines)


def grid_table(plan: CasePlan, case: str | None = None) -> Any:
    """The planned grid as a table: one line per engine config and length profile, with its speculative settings,
    the load levels, the number of points, and (for a packaged case) the part that measures it."""
    part_of: dict[str, str] = {}
    if case is not None:
        for name, overrides in case_parts(case):
            for point in quiet_plan(case, **overrides)[0].points():
                part_of.setdefault(point.point_id, name)
    records = []
    for engine in plan.engines:
        spec = engine.speculative
        rates = list(spec.synthetic_acceptance_rates or ()) if spec else []
        groups: dict[str | None, list[LoadPoint]] = {}
        for load in plan.loads:
            groups.setdefault(plan.profile_of(load), []).append(load)
        for profile, loads in groups.items():
            points = [p for p in plan.points() if p.engine == engine and p.load in loads]
            qps = [f"{l.request_rate_qps:g}" for l in loads if l.request_rate_qps is not None]
            conc = [str(l.concurrency) for l in loads if l.concurrency is not None and l.request_rate_qps is None]
            records.append(
                {
                    "part": ", ".join(sorted({part_of[p.point_id] for p in points if p.point_id in part_of})),
                    "engine_label": engine.label,
                    "model": engine.model,
                    "method": engine.spec_method,
                    "k": engine.num_speculative_tokens,
                    "imposed_rates": ", ".join(f"{r:.4g}" for r in rates),
                    "profile": profile,
                    "input_len": loads[0].input_len,
                    "output_len": loads[0].output_len,
                    "request_rate_qps": ", ".join(qps),
                    "concurrency": ", ".join(conc),
                    "points": len(points),
                }
            )
    table = pd.DataFrame(records)
    return table.sort_values("part", kind="stable").reset_index(drop=True) if case else table


def plan_file(case: str) -> Path:
    """Path of a case's YAML (for the book's 'how to re-run' notes)."""
    return grid_file(case)


def missing_loads(plan: CasePlan, measured: Any) -> dict[str, list[LoadPoint]]:
    """The planned load levels each engine config (by label) still lacks a recorded row at, matched by engine label
    and load, in the plan's order (``run.budget.point_estimates`` counts the runs left, repeats included)."""
    missing = {}
    for engine in plan.engines:
        rows = measured[measured["engine_label"] == engine.label] if len(measured) else measured
        done = {
            (
                int(r.input_len),
                int(r.output_len),
                _maybe(r.concurrency),
                _maybe(r.request_rate_qps),
                float(getattr(r, "random_range_ratio", 0.0)),
            )
            for r in rows.itertuples()
        }
        missing[engine.label] = [
            load
            for load in plan.loads_for(engine)
            if (load.input_len, load.output_len, load.concurrency, load.request_rate_qps, load.random_range_ratio)
            not in done
        ]
    return missing


def unmeasured(plan: CasePlan, measured: Any) -> Any:
    """``missing_loads`` as a table: one line per engine config; ``missing`` names load levels (``c4``, ``qps2``),
    with their lengths where the plan has several."""
    lengths = {(load.input_len, load.output_len) for engine in plan.engines for load in plan.loads_for(engine)}
    missing = missing_loads(plan, measured)
    records = []
    for engine in plan.engines:
        planned, left = plan.loads_for(engine), missing[engine.label]
        records.append(
            {
                "engine_label": engine.label,
                "planned": len(planned),
                "measured": len(planned) - len(left),
                "missing": ", ".join(_short(load) if len(lengths) == 1 else load.slug() for load in left) or "—",
            }
        )
    return pd.DataFrame(records)


def _short(load: LoadPoint) -> str:
    """A load's slug without its lengths: ``c4``, ``qps2``."""
    return "-".join(part for part in load.slug().split("-") if not part.startswith(("in", "out")))


def _maybe(value: Any) -> float | None:
    """A row's concurrency or rate for comparison with a plan's (32.0 == 32): None for a missing value."""
    return None if value is None or pd.isna(value) else float(value)
