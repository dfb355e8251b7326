"""A case's grid (engine configs × load levels × repeats), read from its YAML and checked before any GPU time."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from vllm_playbooks.config.capacity import refusal, refused_engines
from vllm_playbooks.config.case_file import CASE_NAME, check_structure, grid_file, read_case_file
from vllm_playbooks.config.engine import (
    ROUTING_SIMULATION_ENV,
    EngineConfig,
    check_engine_against_shapes,
    lacks_routing_simulation,
)
from vllm_playbooks.config.load import MIN_DURATION_S, LoadPoint
from vllm_playbooks.config.pairing import pair_engines
from vllm_playbooks.config.spec_detection import SpeculativeConfigWarning
from vllm_playbooks.config.speculative import build_speculative_config
from vllm_playbooks.config.yaml_limits import bounded_yaml
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.results.identity import point_key
from vllm_playbooks.run.plan_loads import as_list, load_profiles
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
    wanted = as_list(overrides.get("engines"))
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
        if lacks_routing_simulation(engine):
            shape = resolve_model(engine.model)
            raise ConfigError(
                f"case {case}: engine {engine.label}: {shape.name} is an MoE model ({shape.architecture}) with dummy "
                f"weights; set env {{{ROUTING_SIMULATION_ENV}: uniform_random}} so its router does not route "
                "degenerately (book: methodology, MoE routing)"
            )
        engines.append(engine)
    if not engines:
        raise ConfigError(f"case {case}: no engine configs")
    if wanted:  # the servers start in the order asked for (a shape's later servers reuse its compile caches)
        engines.sort(key=lambda engine: wanted.index(engine.label))
    raw_loads = spec.get("loads")
    every_engine_has_its_own = bool(engines) and all(e.label in own_concurrency for e in engines)
    load_specs = raw_loads if isinstance(raw_loads, list) else [raw_loads or {}]
    case_levels = any(k in overrides for k in ("concurrency", "request_rate_qps")) or any(
        as_list(dict(item or {}).get("concurrency")) or as_list(dict(item or {}).get("request_rate_qps"))
        for item in load_specs
    )
    if every_engine_has_its_own and not case_levels:
        loads, profiles = [], ()
    else:
        loads, profiles = load_profiles(raw_loads, overrides, case)
    engine_loads: dict[str, tuple[LoadPoint, ...]] = {}
    for label, value in own_concurrency.items():
        own = {**{k: v for k, v in overrides.items() if k != "request_rate_qps"}, "concurrency": value}
        engine_loads[label] = tuple(load_profiles(raw_loads, own, case)[0])
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


def load_part(case: str, part: str, **overrides: Any) -> CasePlan:
    """``load_plan(case, **<the part's overrides>, **overrides)``: one part of the case's grid, or its quick check."""
    return load_plan(case, **{**part_overrides(case, part), **overrides})


def paired_for_memory(case: str, plan: CasePlan, gpu_memory_gib: float, **overrides: Any) -> CasePlan:
    """``plan`` (``load_plan(case, **overrides)``; ``case`` a packaged case's name or a case file's path, as given)
    with a paired plan's servers together or by restart as they fit GPUs of ``gpu_memory_gib``
    (``config.pairing.pair_engines``), as the live runner decides on the GPU at hand; a plan that is not paired,
    unchanged."""
    if plan.pairing is None:
        return plan
    unshared = load_plan(case, **{**overrides, "paired": False})
    engines, pairing = pair_engines(unshared.engines, gpu_memory_gib, plan.case)
    return replace(plan, engines=engines, pairing=pairing)


def quiet_plan(case: str, **overrides: Any) -> tuple[CasePlan, list[str]]:
    """``load_plan`` with the speculative advisories collected instead of warned: (plan, distinct advisories), so a
    page can list them as prose rather than print warnings."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SpeculativeConfigWarning)
        plan = load_plan(case, **overrides)
    advisories = list(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, SpeculativeConfigWarning)))
    return plan, advisories


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


def parse_parameter_pairs(pairs: list[list[str]] | None) -> dict[str, Any]:
    """``-p name value`` pairs → a dict; values are read as YAML (``4`` → int, ``[1, 4]`` → list, ``null``)."""
    out: dict[str, Any] = {}
    for name, value in pairs or []:
        out[name] = bounded_yaml(value, f"parameter {name}")
    return out
