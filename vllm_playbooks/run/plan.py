"""A case's grid (engine configs × load levels × repeats), read from its YAML and checked before any GPU time."""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError

from vllm_playbooks.config.capacity import refusal, refused_engines
from vllm_playbooks.config.case_file import CASE_NAME, check_structure, grid_file, grid_names, read_case_file
from vllm_playbooks.config.engine import EngineConfig, check_engine_against_shapes, routing_simulation_problem
from vllm_playbooks.config.load import MIN_DURATION_S, LoadPoint
from vllm_playbooks.config.pairing import pair_engines
from vllm_playbooks.config.spec_detection import SpeculativeConfigWarning
from vllm_playbooks.config.speculative import build_speculative_config
from vllm_playbooks.config.yaml_limits import bounded_yaml
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.results.identity import point_key
from vllm_playbooks.shapes import resolve_model

_PLAN_KEYS = {
    "case",
    "title",
    "engine_defaults",
    "engines",
    "loads",
    "repeats",
    "min_duration_s",
    "gpu_memory_gib",
    "parts",
    "paired",
    "calibrates_whatif",
    "page_order",
}
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
#: The most repeats of a point, and the longest measured run a case may ask for (a day): beyond them a plan is a
#: typing slip (``repeats: 1000000000`` would list a billion points before any check could name it).
MAX_REPEATS, MAX_DURATION_S = 100, 86_400.0
#: Load keys an engine entry may set for itself (its own load levels instead of the case's ``loads`` list).
ENGINE_LOAD_KEYS = ("concurrency",)
#: What a notebook (papermill parameter) or ``make reproduce`` may change in a case's grid.
OVERRIDE_KEYS = (
    "model",
    "draft_model",
    "load_format",
    "tokenizer",
    "engines",
    "concurrency",
    "request_rate_qps",
    "input_len",
    "output_len",
    "repeats",
    "min_duration_s",
    "max_model_len",
    "gpu_memory_utilization",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "distributed_executor_backend",
    "gpu_memory_gib",
    "profiles",
    "random_range_ratio",
    "paired",
)


@dataclass(frozen=True)
class PlannedPoint:
    """One point of the grid."""

    engine: EngineConfig
    load: LoadPoint
    repeat: int

    @property
    def point_id(self) -> str:
        """``<config_id>/<load slug>-r<repeat>``: the point's id within one hardware's rows (its raw folder under
        ``raw/<hardware>/``)."""
        return point_key(self.engine.config_id(), self.load.slug(), self.repeat)


@dataclass(frozen=True)
class CasePlan:
    """Engine configs × load levels × repeats of one case.

    ``loads`` are the case's load levels; ``engine_loads`` holds, for an engine label whose YAML entry sets its own
    ``concurrency``, that engine's levels instead.
    """

    case: str
    title: str
    engines: tuple[EngineConfig, ...]
    loads: tuple[LoadPoint, ...]
    repeats: int = 1
    min_duration_s: float = MIN_DURATION_S
    #: (name, input_len, output_len) of each named length profile in ``loads`` (a case with one unnamed profile: empty)
    profiles: tuple[tuple[str, int, int], ...] = ()
    #: (engine label, its own load levels) for engines that set their own concurrency
    engine_loads: tuple[tuple[str, tuple[LoadPoint, ...]], ...] = ()
    #: how a paired plan runs its configs (``config.pairing``: together, or by restart); ``None``: not paired
    pairing: str | None = None

    def profile_of(self, load: LoadPoint) -> str | None:
        """The name of the length profile ``load`` belongs to, or ``None`` in a case without named profiles."""
        for name, input_len, output_len in self.profiles:
            if (load.input_len, load.output_len) == (input_len, output_len):
                return name
        return None

    def concurrency_by_profile(self) -> dict[str | None, list[int]]:
        """The closed-loop concurrency levels of each length profile (``None``: a case without named profiles)."""
        out: dict[str | None, list[int]] = {}
        for load in self.loads:
            if load.concurrency is not None and load.request_rate_qps is None:
                out.setdefault(self.profile_of(load), []).append(load.concurrency)
        return out

    def loads_for(self, engine: EngineConfig) -> tuple[LoadPoint, ...]:
        """The load levels ``engine`` is measured at: its own, or the case's."""
        return dict(self.engine_loads).get(engine.label, self.loads)

    def points(self) -> list[PlannedPoint]:
        """Every point, grouped by engine config (one server lifetime each), loads in the given order."""
        return [
            PlannedPoint(engine, load, repeat)
            for engine in self.engines
            for load, repeat in itertools.product(self.loads_for(engine), range(self.repeats))
        ]


def _case_yaml(case: str) -> dict[str, Any]:
    """A packaged case by name, or a case file of your own by its path (``my-case.yaml``)."""
    if case.endswith((".yaml", ".yml")):
        own = Path(case)
        if not own.is_file():
            raise ConfigError(f"no case file {case}")
        return read_case_file(own, case)
    return read_case_file(grid_file(case), case)  # a name, never a path: it reads only a packaged case's grid


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def _loads(spec: dict[str, Any], case: str) -> list[LoadPoint]:
    unknown = set(spec) - _LOAD_KEYS
    if unknown:
        raise ConfigError(f"case {case}: unknown load keys {sorted(unknown)}; known: {sorted(_LOAD_KEYS)}")
    base = {k: spec[k] for k in ("input_len", "output_len", "burstiness", "seed", "temperature") if k in spec}
    concurrencies = _as_list(spec.get("concurrency"))
    rates = _as_list(spec.get("request_rate_qps"))
    combos: list[dict[str, Any]] = [{"request_rate_qps": r} for r in rates] + [
        {"concurrency": c} for c in concurrencies
    ]
    if not combos:
        raise ConfigError(f"case {case}: loads need a concurrency list, a request_rate_qps list, or both")
    # one value or a list: each load level is measured under every length spread given, one after the other
    ratios = [{"random_range_ratio": r} for r in _as_list(spec.get("random_range_ratio"))] or [{}]
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


def load_plan(case: str, **overrides: Any) -> CasePlan:
    """Read ``vllm_playbooks/cases/<case>/case.yaml`` (or a case file of your own, given by its path ending in
    ``.yaml``), apply overrides, and check every config and load.

    ``None`` overrides are ignored, so notebook parameters can default to ``None``. An ``engines`` override keeps
    those engine configs in the order it names them (the order their servers start). A ``concurrency`` (or
    ``request_rate_qps``) override replaces the case's load levels and any engine's own. Every error is a
    ``ConfigError`` raised here, before a server is started.
    """
    unknown = set(overrides) - set(OVERRIDE_KEYS)
    if unknown:
        raise ConfigError(f"unknown override(s) {sorted(unknown)}; known: {', '.join(OVERRIDE_KEYS)}")
    given = {k: v for k, v in overrides.items() if v is not None}
    spec = _case_yaml(case)
    return plan_from_dict(spec, **given)


def plan_from_dict(spec: dict[str, Any], **overrides: Any) -> CasePlan:
    """Build a checked plan from a case mapping (what the YAML holds) and overrides."""
    check_structure(spec)
    case = spec.get("case", "?")
    if not isinstance(case, str) or not CASE_NAME.match(case):
        raise ConfigError(
            f"case name {case!r}: use letters, digits, '-', '_' and '.' only (it names a folder under data/runs)"
        )
    unknown = set(spec) - _PLAN_KEYS
    if unknown:
        raise ConfigError(f"case {case}: unknown keys {sorted(unknown)}; known: {sorted(_PLAN_KEYS)}")
    defaults = dict(spec.get("engine_defaults") or {})
    engine_overrides = {
        k: overrides[k]
        for k in (
            "load_format",
            "tokenizer",
            "max_model_len",
            "gpu_memory_utilization",
            "tensor_parallel_size",
            "pipeline_parallel_size",
            "distributed_executor_backend",
        )
        if k in overrides
    }
    wanted = _as_list(overrides.get("engines"))
    labels = [e.get("label") for e in spec.get("engines", [])]
    twice = sorted({str(label) for label in labels if labels.count(label) > 1})
    if twice:
        raise ConfigError(f"case {case}: engine labels must be unique; repeated: {twice}")
    missing = [w for w in wanted if w not in labels]
    if missing:
        raise ConfigError(f"case {case}: no engine config named {missing}; known: {labels}")
    engines = []
    own_concurrency: dict[str, Any] = {}
    for raw in spec.get("engines", []):
        if wanted and raw.get("label") not in wanted:
            continue
        raw = dict(raw)
        own = {k: raw.pop(k) for k in ENGINE_LOAD_KEYS if k in raw}
        if "concurrency" in own and "concurrency" not in overrides and "request_rate_qps" not in overrides:
            own_concurrency[str(raw.get("label"))] = own["concurrency"]
        merged = {**defaults, **raw, **engine_overrides}
        if "env" in defaults or "env" in raw:  # an engine's env adds to the defaults' env rather than replacing it
            merged["env"] = {**dict(defaults.get("env") or {}), **dict(raw.get("env") or {})}
        if "model" in overrides:
            merged["model"] = overrides["model"]
        if merged.get("speculative"):
            spec_dict = dict(merged["speculative"])
            if "draft_model" in overrides and spec_dict.get("model"):
                spec_dict["model"] = overrides["draft_model"]
            merged["speculative"] = build_speculative_config(spec_dict)
        try:
            engine = EngineConfig(**merged)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
            raise ConfigError(f"case {case}, engine {raw.get('label')!r}: {problems}") from None
        check_engine_against_shapes(engine)
        problem = routing_simulation_problem(engine)
        if problem:
            raise ConfigError(f"case {case}: {problem}")
        engines.append(engine)
    if not engines:
        raise ConfigError(f"case {case}: no engine configs")
    if wanted:  # the servers start in the order asked for (a shape's later servers reuse its compile caches)
        engines.sort(key=lambda engine: wanted.index(engine.label))
    raw_loads = spec.get("loads")
    every_engine_has_its_own = bool(engines) and all(e.label in own_concurrency for e in engines)
    load_specs = raw_loads if isinstance(raw_loads, list) else [raw_loads or {}]
    case_levels = any(k in overrides for k in ("concurrency", "request_rate_qps")) or any(
        _as_list(dict(item or {}).get("concurrency")) or _as_list(dict(item or {}).get("request_rate_qps"))
        for item in load_specs
    )
    if every_engine_has_its_own and not case_levels:
        loads, profiles = [], ()
    else:
        loads, profiles = _load_profiles(raw_loads, overrides, case)
    engine_loads: dict[str, tuple[LoadPoint, ...]] = {}
    for label, value in own_concurrency.items():
        own = {**{k: v for k, v in overrides.items() if k != "request_rate_qps"}, "concurrency": value}
        engine_loads[label] = tuple(_load_profiles(raw_loads, own, case)[0])
    for engine in engines:
        draft_positions = _draft_positions(engine)
        for load in engine_loads.get(engine.label, loads):
            longest = load.longest_request()
            spread = f" (lengths within ±{100 * load.random_range_ratio:g} %)" if load.random_range_ratio else ""
            if draft_positions is not None and longest > draft_positions:
                raise ConfigError(
                    f"case {case}, engine {engine.label}: its draft "
                    f"{engine.speculative.model} has "  # type: ignore[union-attr]
                    f"max_position_embeddings={draft_positions}, fewer than the longest request's input + output = "
                    f"{longest}{spread}; vLLM 0.26 caps the draft's max_model_len there. Use a draft config with more "
                    "positions or shorter loads."
                )
            if longest > engine.max_model_len:
                raise ConfigError(
                    f"case {case}, engine {engine.label}: the longest request's input + output = {longest}{spread} "
                    f"exceeds max_model_len {engine.max_model_len}"
                )
    gpu_memory = overrides.get("gpu_memory_gib", spec.get("gpu_memory_gib"))
    if gpu_memory is not None and not _positive_number(gpu_memory):
        raise ConfigError(f"case {case}: gpu_memory_gib must be a number > 0, got {gpu_memory!r}")
    refused = refused_engines(engines, float(gpu_memory)) if gpu_memory is not None else {}
    if refused:
        raise refusal(refused, engines)
    paired = overrides.get("paired", spec.get("paired", False))
    if not isinstance(paired, bool):
        raise ConfigError(f"case {case}: paired must be true or false, got {paired!r}")
    pairing = None
    if paired:
        paired_engines, pairing = pair_engines(engines, None if gpu_memory is None else float(gpu_memory), case)
        engines = list(paired_engines)
    repeats = overrides.get("repeats", spec.get("repeats", 1))
    min_duration = overrides.get("min_duration_s", spec.get("min_duration_s", MIN_DURATION_S))
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS:
        raise ConfigError(f"case {case}: repeats must be a whole number from 1 to {MAX_REPEATS}, got {repeats!r}")
    if not _positive_number(min_duration) or min_duration > MAX_DURATION_S:
        raise ConfigError(
            f"case {case}: min_duration_s must be a number > 0 and <= {MAX_DURATION_S:g}, got {min_duration!r}"
        )
    return CasePlan(
        case=case,
        title=str(spec.get("title", case)),
        engines=tuple(engines),
        loads=tuple(loads),
        repeats=repeats,
        min_duration_s=min_duration,
        profiles=profiles,
        engine_loads=tuple(engine_loads.items()),
        pairing=pairing,
    )


def _positive_number(value: Any) -> bool:
    """True for a finite number above 0 (not a bool, NaN or infinity)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _draft_positions(engine: EngineConfig) -> int | None:
    """``max_position_embeddings`` of the engine's separate draft (model or head), or ``None`` without one."""

    if engine.speculative is None or not engine.speculative.model:
        return None
    config = resolve_model(engine.speculative.model).config()
    nested = config.get("transformer_layer_config")
    value = config.get("max_position_embeddings") or (nested or {}).get("max_position_embeddings")
    return int(value) if value else None


def _load_profiles(
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
    wanted = _as_list(overrides.get("profiles"))
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
        points = _loads(load_spec, case)
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


#: The part that checks a case's claim on a GPU of one's own in one sitting: the fewest points that decide it, with the
#: repeats the noise rules ask for. It overlaps the grid, so it is not one of the parts that cover it.
QUICK_PART = "quick"


@dataclass(frozen=True)
class NamedPart:
    """One entry of a case's ``parts``: its ``name``, the ``overrides`` it passes to ``load_plan``, its ``note`` (what
    it decides, what it needs) and ``decides``: the claims of ``claims.csv`` whose verdict rests on
    exactly its points (and those of ``earlier_engines``, an earlier shape's labels, at its loads). A part that
    decides claims, like ``quick``, overlaps the grid and is not one of the parts that cover it."""

    name: str
    overrides: dict[str, Any]
    note: str | None = None
    decides: tuple[str, ...] = ()
    earlier_engines: tuple[str, ...] = ()

    @property
    def covers_grid(self) -> bool:
        """Whether the part is one of the parts that measure the grid once between them."""
        return self.name != QUICK_PART and not self.decides


def named_parts(case: str) -> list[NamedPart]:
    """Every entry of the case's ``parts``, checked, in the case file's order; ``quick`` and the deciding parts
    included."""
    out = []
    for item in _case_yaml(case).get("parts") or []:
        item = dict(item)
        name = item.pop("name", None)
        note = item.pop("note", None)
        decides, earlier = item.pop("decides", None) or [], item.pop("earlier_engines", None) or []
        if not name:
            raise ConfigError(f"case {case}: every part needs a 'name'")
        for key, value, what in (("decides", decides, "claim ids"), ("earlier_engines", earlier, "engine labels")):
            if not isinstance(value, list) or not all(isinstance(c, str) and c for c in value):
                raise ConfigError(f"case {case}, part {name}: {key!r} is a list of {what}, got {value!r}")
        unknown = set(item) - set(OVERRIDE_KEYS)
        if unknown:
            raise ConfigError(f"case {case}, part {name}: unknown override(s) {sorted(unknown)}")
        out.append(NamedPart(str(name), item, None if note is None else str(note), tuple(decides), tuple(earlier)))
    return out


def case_parts(case: str) -> list[tuple[str, dict[str, Any]]]:
    """The parts that cover the case's grid: (name, overrides) in the order a GPU session should run them; each
    part's overrides go to ``load_plan`` as they are (``load_part`` does that). A case without such parts has one,
    ``all``, with none. ``quick`` and the parts that decide a claim are not among them (``part_overrides`` finds
    them)."""
    parts = [(part.name, part.overrides) for part in named_parts(case) if part.covers_grid]
    return parts or [("all", {})]


def part_overrides(case: str, part: str) -> dict[str, Any]:
    """The overrides of one part by name: one of ``case_parts``, ``quick`` or a deciding part; ``ConfigError`` naming
    the known ones."""
    parts = dict(case_parts(case)) | {named.name: named.overrides for named in named_parts(case)}
    if part not in parts:
        raise ConfigError(f"case {case}: no part {part!r}; known: {', '.join(parts)}")
    return dict(parts[part])


def part_note(case: str, part: str) -> str | None:
    """The ``note`` of one of the case's parts (what it decides, what it needs), or ``None`` without one."""
    part_overrides(case, part)  # refuses an unknown part
    return next((named.note for named in named_parts(case) if named.name == part), None)


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


def load_part(case: str, part: str, **overrides: Any) -> CasePlan:
    """``load_plan(case, **<the part's overrides>, **overrides)``: one part of the case's grid, or its quick check."""
    return load_plan(case, **{**part_overrides(case, part), **overrides})


def quiet_plan(case: str, **overrides: Any) -> tuple[CasePlan, list[str]]:
    """``load_plan`` with the speculative advisories collected instead of warned: (plan, distinct advisories), so a
    page can list them as prose rather than print warnings."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SpeculativeConfigWarning)
        plan = load_plan(case, **overrides)
    advisories = list(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, SpeculativeConfigWarning)))
    return plan, advisories


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


#: Overrides that take a list; a notebook may get one as text (``papermill -p concurrency '[1, 16]'`` passes a string).
LIST_KEYS = ("engines", "concurrency", "request_rate_qps", "profiles", "random_range_ratio")


def text_list(name: str, value: Any) -> Any:
    """``value`` read as YAML when it is the text of a list (``'[1, 16]'``, as plain ``papermill -p`` passes a list),
    else unchanged; ``ConfigError`` naming parameter ``name`` for text that is not YAML."""
    if not isinstance(value, str) or not value.lstrip().startswith("["):
        return value
    return parse_parameter_pairs([[name, value]])[name]


def overrides_for(case: str, part: str | None = None, **given: Any) -> dict[str, Any]:
    """What a notebook passes to ``load_plan``: the overrides of ``part`` (none for ``None``), then every ``given``
    override that is not ``None`` on top (papermill parameters default to ``None``), lists given as text read
    (``text_list``)."""
    base = part_overrides(case, part) if part is not None else {}
    return {**base, **{k: text_list(k, v) if k in LIST_KEYS else v for k, v in given.items() if v is not None}}


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


def parse_parameter_pairs(pairs: list[list[str]] | None) -> dict[str, Any]:
    """``-p name value`` pairs → a dict; values are read as YAML (``4`` → int, ``[1, 4]`` → list, ``null``)."""
    out: dict[str, Any] = {}
    for name, value in pairs or []:
        out[name] = bounded_yaml(value, f"parameter {name}")
    return out
