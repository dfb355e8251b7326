"""Run the case notebooks with papermill, and check that they follow the book's notebook pattern.

``vllm-playbooks book`` is what ``make book`` runs (replay mode): it executes the notebooks whose executed copy is
stale (``vllm_playbooks.book.cache``) and reuses the others; ``vllm-playbooks reproduce --case <case> -p name
value …`` is ``make reproduce`` (live mode); ``vllm-playbooks notebooks compare --executed book/executed`` says which
regression-check cells (tagged ``nbval-check-output``) now print something other than what their source notebook
recorded, and ``vllm-playbooks notebooks refresh NAME…`` stores what they print now, with a digest of the data the
run read, so that a later comparison on other data says "refresh" instead of failing.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_playbooks import paths
from vllm_playbooks.book import cache
from vllm_playbooks.errors import CapacityError, ConfigError, PlaybookError, SchemaError, ServerError

if TYPE_CHECKING:
    import pandas as pd


PARAMETERS_TAG = "parameters"
CHECK_TAG = "nbval-check-output"
#: The papermill parameters the book's pages are executed with.
BOOK_PARAMETERS = {"mode": "replay"}
#: Parameters the book passes to a page only where its parameters cell has them: a workshop's worked solution is
#: shown in the book (collapsed), not in a learner's run.
BOOK_PAGE_PARAMETERS = {"show_solution": True}
#: Source-notebook metadata (under ``vllm_playbooks``): the data digest its stored check outputs were printed from.
CHECK_DATA_KEY = "check_outputs_data"


def require_mode(mode: str, live: bool = True) -> None:
    """Refuse a ``mode`` parameter other than 'replay' (and 'live' where the page has a live part)."""
    allowed = ("replay", "live") if live else ("replay",)
    if mode not in allowed:
        raise ConfigError(f"mode must be one of {allowed} on this page, got {mode!r}")


def book_parameters(source: Path) -> dict[str, Any]:
    """The papermill parameters the book executes ``source`` with: ``BOOK_PARAMETERS``, and those of
    ``BOOK_PAGE_PARAMETERS`` that its parameters cell sets."""
    known = default_parameters(source)
    return {**BOOK_PARAMETERS, **{k: v for k, v in BOOK_PAGE_PARAMETERS.items() if k in known}}


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
            problems.append('the parameters cell must set mode = "replay" (the book\'s default)')
    except (ConfigError, ValueError, SyntaxError) as error:
        problems.append(str(error))
    if not any("vllm_playbooks" in c.source for c in code[1:2]):
        problems.append("the cell after the parameters must import vllm_playbooks")
    for index, cell in enumerate(code):
        if cell.get("outputs") and CHECK_TAG not in _tags(cell):
            problems.append(f"code cell {index} keeps outputs but is not tagged '{CHECK_TAG}'")
        if CHECK_TAG in _tags(cell) and any(o.get("output_type") != "stream" for o in cell.get("outputs", [])):
            problems.append(
                f"code cell {index} is tagged '{CHECK_TAG}' but keeps more than printed text "
                "(make test compares what a check cell prints): print the numbers"
            )
        try:
            tree = (
                ast.parse(cell.source)
                if cell.source.strip() and not cell.source.lstrip().startswith(("%", "!"))
                else None
            )
        except SyntaxError as error:
            problems.append(f"code cell {index} is not valid Python: {error.msg} (line {error.lineno})")
            continue
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


def _check_cells(nb: Any) -> list[Any]:
    return [c for c in nb.cells if c.cell_type == "code" and CHECK_TAG in _tags(c)]


def _differences(recorded: Any, ran: Any, source: Path, executed: Path) -> list[str]:
    """Sentences naming each check cell of ``recorded`` whose printed text in ``ran`` differs (see below)."""
    ran_cells = {cell.get("id"): cell for cell in ran.cells}
    problems: list[str] = []
    for cell in _check_cells(recorded):
        if cell.get("id") not in ran_cells:
            problems.append(f"{source.name}: check cell {cell.get('id')!r} is missing from {executed}")
            continue
        want, got = _printed(cell), _printed(ran_cells[cell["id"]])
        for stream in sorted(set(want) | set(got)):
            want_lines = want.get(stream, "").splitlines()
            got_lines = got.get(stream, "").splitlines()
            if want_lines == got_lines:
                continue
            line = next(
                (i for i, pair in enumerate(zip(want_lines, got_lines)) if pair[0] != pair[1]),
                min(len(want_lines), len(got_lines)),
            )
            problems.append(
                f"{source.name}: check cell {cell['id']!r} ({stream}) line {line + 1}: recorded "
                f"{(want_lines[line : line + 1] or ['<nothing>'])[0]!r}, "
                f"now {(got_lines[line : line + 1] or ['<nothing>'])[0]!r}"
            )
    return problems


def _data_changed(recorded: Any, ran: Any) -> bool:
    """Whether ``ran``'s run read other data than the data ``recorded``'s check outputs were stored from.

    False where either side lacks its digest (outputs stored by hand, a copy papermill wrote without the book).
    """
    stored = recorded.metadata.get(cache.METADATA_KEY, {}).get(CHECK_DATA_KEY)
    record = cache.record_in(ran)
    return bool(stored) and record is not None and record.data != stored


def _read_pair(source: Path, executed: Path) -> tuple[Any, Any]:
    import nbformat

    return nbformat.read(source, as_version=4), nbformat.read(executed, as_version=4)


def changed_check_outputs(source: Path, executed: Path) -> list[str]:
    """Regression-check cells whose printed text in ``executed`` differs from what ``source`` recorded, as sentences.

    ``source`` is a notebook under ``notebooks/`` (its ``nbval-check-output`` cells keep their outputs); ``executed``
    is the copy papermill ran (cells keep their ids). Each sentence names the cell and the first line that differs.
    An empty list means every check cell printed what the source recorded — or that the data the run read is not
    the data the outputs were stored from (the source's ``check_outputs_data`` digest against the executed copy's
    execution record), so different numbers are expected: :func:`data_changed_note` then says to refresh them.
    With the same data, or without both digests, the comparison is strict: a code change that alters a printed
    number is reported.
    """
    recorded, ran = _read_pair(source, executed)
    return [] if _data_changed(recorded, ran) else _differences(recorded, ran, source, executed)


def data_changed_note(source: Path, executed: Path) -> str | None:
    """A sentence when ``executed``'s run read other data than ``source``'s check outputs were stored from, else None.

    It names the refresh command and how many check outputs (a cell's stream) differ now.
    """
    recorded, ran = _read_pair(source, executed)
    if not _data_changed(recorded, ran):
        return None
    differing = len(_differences(recorded, ran, source, executed))
    return (
        f"{source.stem}: data changed since its check outputs were stored ({differing} check output(s) differ "
        f"now): refresh with `vllm-playbooks notebooks refresh {source.stem}`"
    )


def store_check_outputs(source: Path, executed: Path) -> int:
    """Copy ``executed``'s check-cell outputs into ``source``, with the digest of the data its run read.

    The other code cells of ``source`` keep no outputs (as :func:`strip_outputs`); cells and metadata are
    otherwise left as they are. ``executed`` must carry an execution record (a run by ``vllm-playbooks``).
    Returns how many check cells now store other text than before.
    """
    import nbformat

    recorded, ran = _read_pair(source, executed)
    record = cache.record_in(ran)
    if record is None:
        raise ConfigError(f"{executed} has no execution record: run it with `vllm-playbooks book` first")
    ran_cells = {cell.get("id"): cell for cell in ran.cells}
    changed = 0
    for cell in recorded.cells:
        if cell.cell_type != "code":
            continue
        if CHECK_TAG not in _tags(cell):
            cell.outputs, cell.execution_count = [], None
            continue
        if cell.get("id") not in ran_cells:
            raise ConfigError(f"{source.name}: check cell {cell.get('id')!r} is missing from {executed}")
        new = ran_cells[cell["id"]]
        changed += _printed(cell) != _printed(new)
        cell.outputs = new.outputs
    recorded.metadata.setdefault(cache.METADATA_KEY, {})[CHECK_DATA_KEY] = record.data
    nbformat.write(recorded, source)
    return changed


def execute(source: Path, target: Path, parameters: dict[str, Any], timeout_s: int = 600) -> cache.ExecutionRecord:
    """Execute ``source`` into ``target`` with papermill; unknown parameter names are refused, not warned about.

    The kernel records the data files it opens and the folders it lists; ``target`` keeps the run's execution
    record in its metadata (``vllm_playbooks.book.cache``), which is also returned; the package modules this process
    loaded count as read. Kernel settings: ``vllm_playbooks.book.kernel``.
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
    reads = replace(reads, code=reads.code | cache.loaded_code())
    record = cache.make_record(source, parameters, reads, data)
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


def check_parameters(source: Path, parameters: dict[str, Any]) -> None:
    """Refuse, before a kernel starts, what a case notebook would refuse in its first cells: unknown parameter names,
    and for a notebook with a ``case`` parameter, the case, part, filters and values as ``run.case.case_rows``
    checks them (replay: every filter value against the recorded rows; live: vLLM and a GPU too), and the GPU a
    ``hardware`` parameter names (``_check_hardware``). ``ConfigError``."""
    from vllm_playbooks.run.case import case_rows, checked_choice
    from vllm_playbooks.run.plan import OVERRIDE_KEYS

    known = default_parameters(source)
    unknown = sorted(set(parameters) - set(known))
    if unknown:
        raise ConfigError(f"{source.name}: unknown parameter(s) {unknown}; this notebook takes: {', '.join(known)}")
    values = {**known, **parameters}
    if "case" not in values:
        return
    overrides = {key: values[key] for key in OVERRIDE_KEYS if key in values}
    if values.get("mode") == "replay":
        shown, _ = case_rows(values["case"], "replay", overrides, values.get("part"))
    else:
        checked_choice(values["case"], values.get("mode", "live"), overrides, values.get("part"))
        shown = None
    if values.get("hardware") is not None:
        _check_hardware(values["case"], str(values["hardware"]), values.get("mode", "live"), shown)


def _check_hardware(case: str, hardware: str, mode: str, shown: pd.DataFrame | None) -> None:
    """A page's ``hardware`` parameter: ``"all"``, a GPU that the rows it would show name (``shown``; in live mode,
    None: every recorded row of the case), or in live mode the GPU here. ``ConfigError`` naming the recorded GPUs."""
    from vllm_playbooks.analysis.runs import ALL_HARDWARE, rows_on_hardware
    from vllm_playbooks.results.store import load_runs
    from vllm_playbooks.run.budget import gpu_here
    from vllm_playbooks.run.plan import load_plan

    if hardware == ALL_HARDWARE or (mode == "live" and hardware == gpu_here()):
        return
    rows_on_hardware(shown if shown is not None else load_runs(load_plan(case).case), hardware, "replay")


#: The error classes of ``vllm_playbooks.errors`` by name, as a kernel reports them (``PapermillExecutionError.ename``).
OUR_ERRORS: dict[str, type[PlaybookError]] = {
    kind.__name__: kind for kind in (PlaybookError, ConfigError, CapacityError, SchemaError, ServerError)
}


def reproduce(notebook: str, parameters: dict[str, Any], out: Path | None = None) -> Path:
    """Execute one case notebook (live mode unless ``parameters`` say ``mode: replay``) after ``check_parameters``
    into ``out`` (default ``_build/reproduce/<notebook>.ipynb``) and return that path; an error of this package raised
    inside the notebook is raised here again as itself, so the command line prints one line."""
    from papermill.exceptions import PapermillExecutionError

    source = notebook_dir() / f"{notebook}.ipynb"
    if not source.exists():
        names = ", ".join(p.stem for p in list_notebooks())
        raise ConfigError(f"no notebook {notebook!r}; known: {names}")
    params = {"mode": "live", **parameters}
    check_parameters(source, params)
    target = out or Path("_build") / "reproduce" / source.name
    try:
        execute(source, target, params, timeout_s=3600)
    except PapermillExecutionError as error:
        if error.ename in OUR_ERRORS:
            raise OUR_ERRORS[error.ename](f"{error.evalue} (executed notebook: {target})") from None
        raise
    return target
