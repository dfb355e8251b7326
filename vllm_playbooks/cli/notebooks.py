"""``vllm-playbooks notebooks``: for contributors, check the notebook pattern, compare or refresh the regression-check
outputs, strip outputs."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from vllm_playbooks.book import cache
from vllm_playbooks.book.notebooks import (
    book_parameters,
    changed_check_outputs,
    check_notebook,
    data_changed_note,
    execute,
    list_notebooks,
    store_check_outputs,
    strip_outputs,
)
from vllm_playbooks.errors import ConfigError


@dataclass(frozen=True)
class Args:
    """The action (``check``, ``compare``, ``refresh`` or ``strip``), the executed copies' folder, the notebook names
    to refresh and the notebook paths to strip."""

    action: str
    executed: Path = Path("book") / "executed"
    names: tuple[str, ...] = ()
    paths: tuple[Path, ...] = ()

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """``check``, ``compare --executed DIR``, ``refresh NAME… [--executed DIR]`` or ``strip PATH…``."""
        sub = parser.add_subparsers(dest="action", required=True, parser_class=type(parser))
        sub.add_parser("check", help="check every source notebook against the pattern")
        compare = sub.add_parser(
            "compare", help="compare the regression-check cells' recorded text with an executed copy"
        )
        compare.add_argument("--executed", type=Path, required=True, help="the folder `book` wrote, e.g. book/executed")
        refresh = sub.add_parser(
            "refresh", help="store what the notebooks' check cells print now, with the data digest"
        )
        refresh.add_argument("names", nargs="+", metavar="NAME", help="notebook name without .ipynb")
        refresh.add_argument(
            "--executed",
            type=Path,
            default=Path("book") / "executed",
            help="the executed copies, reused while current (default: book/executed)",
        )
        strip = sub.add_parser("strip", help="strip outputs except regression-check cells")
        strip.add_argument("paths", nargs="+", type=Path)

    @classmethod
    def from_cli_args(cls, namespace: argparse.Namespace) -> Self:
        """The parsed arguments as typed values (each action's own; the others keep their defaults)."""
        return cls(
            action=str(namespace.action),
            executed=getattr(namespace, "executed", cls.executed),
            names=tuple(getattr(namespace, "names", ())),
            paths=tuple(getattr(namespace, "paths", ())),
        )


def refresh(names: tuple[str, ...], executed_dir: Path) -> None:
    """Execute each notebook into ``executed_dir`` (reusing a current copy), then store its check outputs; one line
    per notebook executed and per notebook refreshed."""
    sources = {p.stem: p for p in list_notebooks()}
    unknown = [name for name in names if name not in sources]
    if unknown:
        raise ConfigError(f"no notebook {', '.join(map(repr, unknown))}; known: {', '.join(sources)}")
    for name in names:
        source, executed = sources[name], executed_dir / f"{name}.ipynb"
        parameters = book_parameters(source)
        reason = cache.stale_reason(source, executed, parameters)
        if reason is not None:
            print(f"papermill {source.name} (replay): {reason}", flush=True)
            execute(source, executed, parameters)
        changed = store_check_outputs(source, executed)
        print(f"refreshed {source}: {changed} check cell(s) print other text than was stored", flush=True)


def compare(executed: Path) -> int:
    """Print each notebook whose data changed since its check outputs were stored (without failing), then each check
    output that changed; 1 where one did, else 0."""
    missing = [p.name for p in list_notebooks() if not (executed / p.name).exists()]
    if missing:
        raise ConfigError(f"{executed} lacks {', '.join(missing)}: run `vllm-playbooks book --out {executed}`")
    for note in filter(None, (data_changed_note(p, executed / p.name) for p in list_notebooks())):
        print(note, file=sys.stderr)
    changed = [line for p in list_notebooks() for line in changed_check_outputs(p, executed / p.name)]
    for line in changed:
        print(line, file=sys.stderr)
    return 1 if changed else 0


def run(args: Args) -> int:
    """Run the contributor action: exit 1 where the pattern is broken or a check output is stale."""
    if args.action == "check":
        bad = {p.name: check_notebook(p) for p in list_notebooks()}
        for name, problems in bad.items():
            for problem in problems:
                print(f"{name}: {problem}", file=sys.stderr)
        return 1 if any(bad.values()) else 0
    if args.action == "compare":
        return compare(args.executed)
    if args.action == "refresh":
        refresh(args.names, args.executed)
        return 0
    for path in args.paths:
        strip_outputs(path)
    return 0
