"""The case folders and a case file's structure.

A case is one folder of ``vllm_playbooks/cases/``: its grid (``case.yaml``: engine configs × loads, read by
``run.plan``), the claims it checks (``claims.csv``), the published numbers they rest on (``published.csv``) and its
Python (``__init__.py``: its checks and what its page computes). Listing the folders finds every case; nothing else
names one. A case's name is its folder's name with ``-`` for ``_`` (Python's rule for a package name): the name the
YAML, the notebook, the data folder and the command line use.

A case file's structure is checked before ``run.plan`` reads it: every section has the type the plan expects, so a
wrong one is a ``ConfigError`` naming it, never a traceback from deep inside the plan."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from vllm_playbooks.config.yaml_limits import bounded_yaml, read_bounded
from vllm_playbooks.errors import ConfigError

#: A case's name names its folder under data/runs (and a packaged case's YAML): a plain name, never a path.
CASE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
#: The sections of an engine entry (or of ``engine_defaults``) that must be mappings where given.
_ENGINE_MAPPINGS = ("speculative", "env")


#: The folder holding one folder per case.
CASES_DIR = Path(__file__).resolve().parents[1] / "cases"
#: The files of a case folder: its grid, its claims and the published numbers they rest on (each optional).
GRID_FILE, CLAIMS_FILE, PUBLISHED_FILE = "case.yaml", "claims.csv", "published.csv"


#: Where a case goes among the others (its page in the book, its claims in the ledger) when its grid sets no
#: ``page_order``, or it has no grid.
DEFAULT_PAGE_ORDER = 100


def case_names() -> list[str]:
    """The name of every case: each folder of ``CASES_DIR`` that is a Python package, ``_`` read as ``-``; in the
    order of their grids' ``page_order`` (``DEFAULT_PAGE_ORDER`` where none is set), then by name. That order is the
    book's (its case pages) and the ledger's (its claims)."""
    folders = [
        folder
        for folder in CASES_DIR.iterdir()
        if (folder / "__init__.py").is_file() and not folder.name.startswith("_")
    ]

    def order(folder: Path) -> tuple[int, str]:
        grid = folder / GRID_FILE
        if not grid.is_file():
            return DEFAULT_PAGE_ORDER, folder.name
        stat = grid.stat()
        return _page_order(str(grid), stat.st_size, stat.st_mtime_ns), folder.name

    return [case_of_folder(folder) for folder in sorted(folders, key=order)]


@functools.lru_cache(maxsize=256)
def _page_order(grid: str, size: int, mtime_ns: int) -> int:
    """The ``page_order`` of the grid file ``grid`` (``DEFAULT_PAGE_ORDER`` where it sets none, or none that is a
    whole number); read once per size and modification time of the file (``size``, ``mtime_ns``: the cache key)."""
    spec = yaml.safe_load(Path(grid).read_text(encoding="utf-8"))
    page_order = spec.get("page_order", DEFAULT_PAGE_ORDER) if isinstance(spec, dict) else DEFAULT_PAGE_ORDER
    return page_order if isinstance(page_order, int) else DEFAULT_PAGE_ORDER


def case_of_folder(folder: Path) -> str:
    """The case a folder of ``CASES_DIR`` (or a file's folder named as one) belongs to: its name, ``_`` read as ``-``;
    ``package_name``'s inverse."""
    return folder.name.replace("_", "-")


def grid_names() -> list[str]:
    """The cases with a grid to measure (a ``case.yaml``), in ``case_names``' order."""
    return [case for case in case_names() if (case_folder(case) / GRID_FILE).is_file()]


def package_name(case: str) -> str:
    """The Python package of ``case``'s folder (``discussion-13834`` → ``discussion_13834``)."""
    return case.replace("-", "_")


def case_folder(case: str) -> Path:
    """The folder of packaged case ``case``; ``ConfigError`` naming the known cases for any other name."""
    check_packaged_name(case)
    folder = CASES_DIR / package_name(case)
    if "_" in case or not (folder / "__init__.py").is_file() or folder.name.startswith("_"):
        raise ConfigError(
            f"Unknown case {case!r}. Known: {', '.join(sorted(case_names()))}. Cases live in "
            "vllm_playbooks/cases/<case>/."
        )
    return folder


def grid_file(case: str) -> Path:
    """The grid of packaged case ``case`` (``<folder>/case.yaml``); ``ConfigError`` for a case without one."""
    path = case_folder(case) / GRID_FILE
    if not path.is_file():
        raise ConfigError(
            f"case {case!r} has no grid to measure (no {GRID_FILE}); cases with one: {', '.join(grid_names())}"
        )
    return path


def calibration_cases() -> list[str]:
    """The cases whose rows calibrate the what-if's step-time model: those whose grid sets
    ``calibrates_whatif: true``."""
    return [
        case
        for case in grid_names()
        if (yaml.safe_load(grid_file(case).read_text(encoding="utf-8")) or {}).get("calibrates_whatif") is True
    ]


def check_packaged_name(case: str) -> None:
    """Refuse a packaged case name that is not a plain name (``../x``, ``/abs``): a name is looked up among the
    packaged cases only; a case file of one's own is given by its path ending in ``.yaml``."""
    if not isinstance(case, str) or not CASE_NAME.match(case):
        raise ConfigError(
            f"case {case!r} is not a case name (letters, digits, '-', '_' and '.'); give a case file of your own by "
            "its path ending in .yaml"
        )


def read_case_file(path: Path, shown: str) -> dict[str, Any]:
    """The mapping a case file of one's own holds, its structure checked (``check_structure``); ``ConfigError`` for
    a file that is not UTF-8, not YAML, beyond ``config.yaml_limits``' bounds, or not a mapping with a ``case`` name."""
    spec = bounded_yaml(read_bounded(path, shown), shown)
    if not isinstance(spec, dict) or not spec.get("case"):
        raise ConfigError(f"{shown}: a case file is a mapping with a 'case' name (see vllm_playbooks/cases/)")
    check_structure(spec)
    return spec


def check_structure(spec: Any) -> None:
    """``ConfigError`` unless ``spec`` is a mapping whose ``engine_defaults`` is a mapping, ``engines`` a list of
    mappings, each one's (and the defaults') ``speculative`` and ``env`` mappings, ``loads`` a mapping or a list of
    mappings and ``parts`` a list of mappings (each where given)."""
    if not isinstance(spec, Mapping):
        raise ConfigError(f"a case is a mapping (see vllm_playbooks/cases/), got {_kind(spec)}")
    case = spec.get("case", "?")
    defaults = spec.get("engine_defaults")
    _mapping_or_none(defaults, f"case {case}: engine_defaults")
    for key in _ENGINE_MAPPINGS:
        _mapping_or_none((defaults or {}).get(key), f"case {case}: engine_defaults.{key}")
    engines = spec.get("engines", [])
    _list_of_mappings(engines, f"case {case}: engines")
    for number, engine in enumerate(engines, start=1):
        for key in _ENGINE_MAPPINGS:
            _mapping_or_none(engine.get(key), f"case {case}, engine {number} ({engine.get('label')!r}): {key}")
    loads = spec.get("loads")
    if isinstance(loads, list):
        _list_of_mappings(loads, f"case {case}: loads")
        if not loads:
            raise ConfigError(f"case {case}: loads is an empty list: give at least one load")
    else:
        _mapping_or_none(loads, f"case {case}: loads (a mapping, or a list of mappings)")
    _list_of_mappings(spec.get("parts") or [], f"case {case}: parts")


def _kind(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:120]


def _mapping_or_none(value: Any, what: str) -> None:
    if value is not None and not isinstance(value, Mapping):
        raise ConfigError(f"{what} must be a mapping, got {_kind(value)}")


def _list_of_mappings(value: Any, what: str) -> None:
    if not isinstance(value, list):
        raise ConfigError(f"{what} must be a list of mappings, got {_kind(value)}")
    bad = [item for item in value if not isinstance(item, Mapping)]
    if bad:
        raise ConfigError(f"{what} must be a list of mappings; entry {value.index(bad[0]) + 1} is {_kind(bad[0])}")
