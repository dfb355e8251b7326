"""Run the case notebooks with papermill, and check that they follow the book's notebook pattern.

``vllm-playbooks book`` is what ``make book`` runs (replay mode): it executes the notebooks whose executed copy is
stale (``vllm_playbooks.book.cache``) and reuses the others; ``vllm-playbooks reproduce <notebook> -p name value …``
is ``make reproduce`` (live mode); ``vllm-playbooks notebooks compare --executed book/executed`` says which
regression-check cells (tagged ``nbval-check-output``) now print something other than what their source notebook
recorded.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path
from typing import Any

from vllm_playbooks import paths
from vllm_playbooks.book import cache
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.run.plan import parse_parameter_pairs

PARAMETERS_TAG = "parameters"
CHECK_TAG = "nbval-check-output"
#: The papermill parameters the book's pages are executed with.
BOOK_PARAMETERS = {"mode": "replay"}


def require_mode(mode: str, live: bool = True) -> None:
    """Refuse a ``mode`` parameter other than 'replay' (and 'live' where the page has a live part)."""
    allowed = ("replay", "live") if live else ("replay",)
    if mode not in allowed:
        raise ConfigError(f"mode must be one of {allowed} on this page, got {mode!r}")


def notebook_dir(root: Path | None = None) -> Path:
    """``<repo>/notebooks``."""
    return (root or paths.find_repo_root()) / "notebooks"


def list_notebooks(root: Path | None = None) -> list[Path]:
    """The source notebooks, sorted."""
    return sorted(notebook_dir(root).glob("*.ipynb"))


def _tags(cell: Any) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def default_parameters(path: Path) -> dict[str, Any]:
    """The names and default values assigned in the ``parameters`` cell (literals only)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code" and PARAMETERS_TAG in _tags(c)]
    if len(cells) != 1:
        raise ConfigError(f"{path}: needs exactly one cell tagged '{PARAMETERS_TAG}', found {len(cells)}")
    values: dict[str, Any] = {}
    for node in ast.parse(cells[0].source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = ast.literal_eval(node.value)
    return values


def check_notebook(path: Path) -> list[str]:
    """Problems with a source notebook, as sentences; an empty list means it follows the pattern.

    The pattern: the first code cell is the only one tagged ``parameters`` and sets ``mode = "replay"``; a later
    cell finds the repository through ``vllm_playbooks``; no cell keeps outputs except those tagged
    ``nbval-check-output`` (regression checks), whose outputs are printed text only; no cell defines functions or
    classes (logic lives in the package).
    """
    import nbformat

    problems: list[str] = []
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    if not code or PARAMETERS_TAG not in _tags(code[0]):
        problems.append("the first code cell must be tagged 'parameters'")
    try:
        params = default_parameters(path)
        if params.get("mode") != "replay":
            problems.append("the parameters cell must set mode = \"replay\" (the book's default)")
    except (ConfigError, ValueError, SyntaxError) as error:
        problems.append(str(error))
    if not any("vllm_playbooks" in c.source for c in code[1:2]):
        problems.append("the cell after the parameters must import vllm_playbooks")
    for index, cell in enumerate(code):
        if cell.get("outputs") and CHECK_TAG not in _tags(cell):
            problems.append(f"code cell {index} keeps outputs but is not tagged '{CHECK_TAG}'")
        if CHECK_TAG in _tags(cell) and any(o.get("output_type") != "stream" for o in cell.get("outputs", [])):
            problems.append(f"code cell {index} is tagged '{CHECK_TAG}' but keeps more than printed text "
                            "(make test compares what a check cell prints): print the numbers")
        tree = ast.parse(cell.source) if cell.source.strip() and not cell.source.lstrip().startswith(("%", "!")) else None
        if tree and any(isinstance(n, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef) for n in ast.walk(tree)):
            problems.append(f"code cell {index} defines a function or class: move it into vllm_playbooks")
    return problems


def strip_outputs(path: Path) -> None:
    """Drop every output except those of ``nbval-check-output`` cells; clear papermill's metadata."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nb.cells = [c for c in nb.cells if "injected-parameters" not in _tags(c)]
    for cell in nb.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code" and CHECK_TAG not in _tags(cell):
            cell.outputs = []
            cell.execution_count = None
    nb.metadata.pop("papermill", None)
    nbformat.write(nb, path)


def _printed(cell: Any) -> dict[str, str]:
    """A code cell's stream outputs joined per stream (papermill and Jupyter may split one print into chunks)."""
    text: dict[str, str] = {}
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            text[output["name"]] = text.get(output["name"], "") + output["text"]
    return text


def changed_check_outputs(source: Path, executed: Path) -> list[str]:
    """Regression-check cells whose printed text in ``executed`` differs from what ``source`` recorded, as sentences.

    ``source`` is a notebook under ``notebooks/`` (its ``nbval-check-output`` cells keep their outputs); ``executed``
    is the copy papermill ran (cells keep their ids). Each sentence names the cell and the first line that differs.
    An empty list means every check cell printed what the source recorded.
    """
    import nbformat

    recorded = nbformat.read(source, as_version=4)
    ran = {cell.get("id"): cell for cell in nbformat.read(executed, as_version=4).cells}
    problems: list[str] = []
    for cell in recorded.cells:
        if cell.cell_type != "code" or CHECK_TAG not in _tags(cell):
            continue
        if cell.get("id") not in ran:
            problems.append(f"{source.name}: check cell {cell.get('id')!r} is missing from {executed}")
            continue
        want, got = _printed(cell), _printed(ran[cell["id"]])
        for stream in sorted(set(want) | set(got)):
            want_lines = want.get(stream, "").splitlines()
            got_lines = got.get(stream, "").splitlines()
            if want_lines == got_lines:
                continue
            line = next((i for i, pair in enumerate(zip(want_lines, got_lines)) if pair[0] != pair[1]),
                        min(len(want_lines), len(got_lines)))  # fmt: skip
            problems.append(
                f"{source.name}: check cell {cell['id']!r} ({stream}) line {line + 1}: recorded "
                f"{(want_lines[line:line + 1] or ['<nothing>'])[0]!r}, now {(got_lines[line:line + 1] or ['<nothing>'])[0]!r}"
            )
    return problems


def execute(source: Path, target: Path, parameters: dict[str, Any], timeout_s: int = 600,
            package: str | None = None) -> cache.ExecutionRecord:  # fmt: skip
    """Execute ``source`` into ``target`` with papermill; unknown parameter names are refused, not warned about.

    The kernel records the data files it opens and the folders it lists; ``target`` keeps the run's execution
    record in its metadata (``vllm_playbooks.book.cache``), which is also returned. ``package``: the package's
    digest where the caller has it already. Kernel settings: ``vllm_playbooks.book.kernel``.
    """
    import papermill as pm

    from vllm_playbooks.book.kernel import kernel_options

    known = default_parameters(source)
    unknown = sorted(set(parameters) - set(known))
    if unknown:
        raise ConfigError(f"{source.name}: unknown parameter(s) {unknown}; this notebook takes: {', '.join(known)}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with cache.reads_logged() as log:
        pm.execute_notebook(
            str(source),
            str(target),
            parameters=parameters,
            cwd=str(source.parent),
            kernel_name="python3",
            progress_bar=False,
            execution_timeout=timeout_s,
            **kernel_options(),
        )
        reads = cache.read_log(log)
    data = paths.data_dir(source.parent)
    record = cache.make_record(source, parameters, reads, data, package or cache.package_digest())
    _finish_executed(target, record)
    return record


def _finish_executed(path: Path, record: cache.ExecutionRecord) -> None:
    """Tag papermill's injected cell ``remove-cell`` so the book shows the parameters cell once; store ``record``."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        tags = cell.metadata.setdefault("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
    cache.store_record(nb, record)
    nbformat.write(nb, path)


def add_book_arguments(parser: argparse.ArgumentParser) -> None:
    """``--out``: the folder the executed notebooks go to; ``--force``: execute every notebook."""
    parser.add_argument("--out", type=Path, default=Path("book") / "executed",
                        help="folder for the executed notebooks (default: book/executed)")  # fmt: skip
    parser.add_argument("--force", action="store_true",
                        help="execute every notebook, also those whose executed copy is current")  # fmt: skip


def book_main(args: argparse.Namespace) -> int:
    """Execute in replay mode into ``args.out`` every notebook whose executed copy is stale; reuse the others.

    A copy is stale when the notebook, the package's source, the parameters or the data its last run read changed
    (``vllm_playbooks.book.cache``); ``--force`` executes all. Copies whose source notebook is gone are removed.
    Each notebook gets one line saying whether it was reused or executed, and why.
    """
    sources = list_notebooks()
    names = {source.name for source in sources}
    for old in sorted(args.out.glob("*.ipynb")):
        if old.name not in names:
            old.unlink()
            print(f"removed {old}: no notebooks/{old.name}", flush=True)
    package = cache.package_digest()
    executed = 0
    for source in sources:
        target = args.out / source.name
        reason = "--force" if args.force else cache.stale_reason(source, target, BOOK_PARAMETERS, package)
        if reason is None:
            print(f"reused {source.name}: nothing it depends on changed", flush=True)
            continue
        print(f"papermill {source.name} (replay): {reason}", flush=True)
        execute(source, target, BOOK_PARAMETERS, package=package)
        executed += 1
    print(f"book: {executed} executed, {len(sources) - executed} reused", flush=True)
    return 0


def add_reproduce_arguments(parser: argparse.ArgumentParser) -> None:
    """The notebook, ``--out`` and ``-p NAME VALUE`` parameters."""
    parser.add_argument("notebook", help="notebook name without .ipynb, e.g. llama_8b_draft_model")
    parser.add_argument("--out", type=Path, default=None, help="the executed notebook (default: _build/reproduce/)")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"),
                        help="a notebook parameter, its value read as YAML (e.g. -p concurrency '[1, 16]')")  # fmt: skip


def reproduce_main(args: argparse.Namespace) -> int:
    """Execute one notebook in live mode on this machine's GPUs."""
    source = notebook_dir() / f"{args.notebook}.ipynb"
    if not source.exists():
        names = ", ".join(p.stem for p in list_notebooks())
        raise ConfigError(f"no notebook {args.notebook!r}; known: {names}")
    params = {**parse_parameter_pairs(args.parameter), "mode": "live"}
    out = args.out or Path("_build") / "reproduce" / source.name
    execute(source, out, params, timeout_s=3600)
    print(f"executed notebook: {out}")
    return 0


def add_notebooks_arguments(parser: argparse.ArgumentParser) -> None:
    """``check``, ``compare --executed DIR`` or ``strip PATH…``."""
    sub = parser.add_subparsers(dest="action", required=True, parser_class=type(parser))
    sub.add_parser("check", help="check every source notebook against the pattern")
    compare = sub.add_parser("compare", help="compare the regression-check cells' recorded text with an executed copy")
    compare.add_argument("--executed", type=Path, required=True, help="the folder `book` wrote, e.g. book/executed")
    strip = sub.add_parser("strip", help="strip outputs except regression-check cells")
    strip.add_argument("paths", nargs="+", type=Path)


def notebooks_main(args: argparse.Namespace) -> int:
    """Run the contributor action: exit 1 where the pattern is broken or a check output is stale."""
    if args.action == "check":
        bad = {p.name: check_notebook(p) for p in list_notebooks()}
        for name, problems in bad.items():
            for problem in problems:
                print(f"{name}: {problem}", file=sys.stderr)
        return 1 if any(bad.values()) else 0
    if args.action == "compare":
        missing = [p.name for p in list_notebooks() if not (args.executed / p.name).exists()]
        if missing:
            raise ConfigError(f"{args.executed} lacks {', '.join(missing)}: run `vllm-playbooks book --out {args.executed}`")
        changed = [line for p in list_notebooks() for line in changed_check_outputs(p, args.executed / p.name)]
        for line in changed:
            print(line, file=sys.stderr)
        return 1 if changed else 0
    for path in args.paths:
        strip_outputs(path)
    return 0
