"""The package reads top-down: each module imports only from its own layer or those below, no import circle, and no
module over 500 lines (CONTRIBUTING.md names the layers)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "vllm_playbooks"
#: The layers, lowest first: a module's layer is its top-level name under vllm_playbooks ("" for the package's
#: __init__, which imports nothing).
LAYERS = (
    ("", "errors", "files", "paths", "text"),
    ("hardware", "shapes", "tokenizer"),
    ("config",),
    ("engine", "load"),
    ("results",),
    ("run",),
    ("model",),
    ("analysis",),
    ("advisor",),
    ("claims",),
    ("cases",),
    ("book",),
    ("cli", "__main__"),
)
MAX_LINES = 500


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(path: Path) -> set[str]:
    """The package modules ``path`` imports anywhere in it (function bodies too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("vllm_playbooks"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("vllm_playbooks"))
    return {m for m in found if m in MODULES}


def layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    for number, names in enumerate(LAYERS):
        if top in names:
            return number
    raise AssertionError(f"{module}: its top-level name {top!r} is in no layer of {LAYERS}")


GRAPH = {module: imports_of(path) - {module} for module, path in MODULES.items()}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """'a -> b' for each import of a module from a layer above its own (the package's __init__ imports nothing)."""
    return [f"{m} -> {d}" for m, deps in graph.items() for d in sorted(deps) if layer(d) > layer(m)]


def import_circle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle (its modules, the first repeated at the end), or [] where there is none."""
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> list[str]:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return []
        for dep in sorted(graph.get(module, ())):
            if circle := visit(dep, (*path, module)):
                return circle
        done.add(module)
        return []

    for module in sorted(graph):
        if circle := visit(module, ()):
            return circle
    return []


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer(module)


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    assert upward_imports(GRAPH) == []


def test_no_import_circle() -> None:
    assert import_circle(GRAPH) == []


def test_the_checks_find_an_upward_import_and_a_circle() -> None:
    engine, plots, replay = "vllm_playbooks.config.engine", "vllm_playbooks.book.plots", "vllm_playbooks.results.replay"
    assert upward_imports({engine: {plots}, plots: {engine}}) == [f"{engine} -> {plots}"]
    assert import_circle({engine: {replay}, replay: {plots}, plots: {engine}}) == [plots, engine, replay, plots]
    assert import_circle({plots: {replay}, replay: {engine}, engine: set()}) == []


def test_no_module_is_longer_than_500_lines() -> None:
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, long
