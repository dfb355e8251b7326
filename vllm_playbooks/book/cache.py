"""The book's execution cache: what a notebook's run read, and whether its executed copy is still current.

An executed notebook (``book/executed/<name>.ipynb``) carries in its metadata, under ``vllm_playbooks.execution``,
the record of the run that made it (:class:`ExecutionRecord`): a digest of the source notebook, the papermill
parameters, every file of the package (``vllm_playbooks/``) the run loaded or opened and every package folder it
listed, and every data file the kernel opened and every data folder it listed, each with a digest of what it holds
now (a folder: its sorted entry names, so a new raw folder, server log or case folder counts). ``vllm-playbooks
book`` executes a notebook again only when one of these changed (:func:`stale_reason`): a change to a module no
page loads (the live runner, the site check, the command line) executes none.

The kernel records its own reads: with ``VLLM_PLAYBOOKS_READ_LOG=<file>`` in its environment (papermill's kernel
inherits it, :func:`reads_logged`), the page's import cell installs an audit hook (:func:`record_reads`) that
appends each path under the data folder or the package folder that is opened (audit event ``open``; an import opens
the module's bytecode or source, and a bytecode file counts as its source) or listed (``os.listdir``,
``os.scandir``: ``glob``, ``os.walk`` and ``Path.glob`` list through ``os.scandir``), after the package modules
already imported. A bare existence check (``Path.exists``, ``os.stat``) raises no audit event, so a file the notebook
only looked for is not in the record. The process that runs papermill adds the package modules it has loaded
(:func:`loaded_code`): what it does to the executed copy counts too.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vllm_playbooks import paths
from vllm_playbooks.errors import ConfigError

#: Environment variable naming the file a kernel appends its data reads to.
READ_LOG_ENV = "VLLM_PLAYBOOKS_READ_LOG"
#: The notebook metadata key under which the package keeps its records.
METADATA_KEY = "vllm_playbooks"
#: Digest of a path that did not exist when it was read (a failed open) or hashed.
ABSENT = "absent"
_LISTING_EVENTS = frozenset({"os.listdir", "os.scandir"})
_EVENTS = _LISTING_EVENTS | {"open"}
#: The package's folder, whose files a run's record names relative to it.
PACKAGE = Path(__file__).resolve().parents[1]
#: Entries of a package folder its listing digest leaves out: Python writes them as it imports.
BYTECODE = frozenset({"__pycache__"})
#: The kinds of a read log's lines: (file, folder) under the data folder, then under the package folder.
_DATA_KINDS, _CODE_KINDS = ("file", "dir"), ("code", "codedir")


def _package_file(path: str, package: str) -> str:
    """``path`` under the package folder, relative to it; a bytecode file (``x/__pycache__/m.cpython-311.pyc``) as
    its source (``x/m.py``)."""
    relative = Path(path[len(package) :])
    if relative.parent.name == "__pycache__":
        relative = relative.parent.parent / (relative.name.split(".", 1)[0] + ".py")
    return relative.as_posix()


def loaded_code(package: Path = PACKAGE) -> frozenset[str]:
    """The source files, relative to ``package``, of the modules under it this process has imported."""
    prefix = str(package) + os.sep
    files = (getattr(module, "__file__", None) for module in list(sys.modules.values()))
    return frozenset(_package_file(f, prefix) for f in files if isinstance(f, str) and f.startswith(prefix))


def record_reads(log: Path, data: Path | None, package: Path = PACKAGE) -> None:
    """Append to ``log`` the package modules this process has imported, then every path under ``data`` (where there
    is one) or ``package`` it opens or lists from now on, each once.

    Lines are ``file<TAB><path>`` or ``dir<TAB><path>``, the path relative to ``data``, and ``code<TAB><path>`` or
    ``codedir<TAB><path>``, relative to ``package``. An audit hook cannot be removed: call this only in a process
    whose reads are to be recorded (the notebook kernel).
    """
    roots = [(str(package.resolve()) + os.sep, _CODE_KINDS)]
    if data is not None:
        roots.append((str(data.resolve()) + os.sep, _DATA_KINDS))
    out = open(log, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - written to until the process ends
    seen: set[tuple[str, str]] = set()

    def write(kind: str, relative: str) -> None:
        if (kind, relative) not in seen:
            seen.add((kind, relative))
            out.write(f"{kind}\t{relative}\n")

    for relative in sorted(loaded_code(package.resolve())):
        write("code", relative)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event not in _EVENTS:
            return
        target = args[0] if args else None
        if isinstance(target, int):  # a file descriptor: its path was recorded when it was opened
            return
        path = os.path.abspath(os.fsdecode(target if target is not None else "."))
        for prefix, (file_kind, dir_kind) in roots:
            if path.startswith(prefix):
                listed = event in _LISTING_EVENTS
                relative = path[len(prefix) :] if listed or file_kind == "file" else _package_file(path, prefix)
                write(dir_kind if listed else file_kind, relative)
                return

    sys.addaudithook(hook)


def record_reads_from_environment() -> None:
    """:func:`record_reads` into ``$VLLM_PLAYBOOKS_READ_LOG`` when it is set (a page's import cell calls this through
    ``book.page_kernel``).

    The data folder is :func:`vllm_playbooks.paths.data_dir` seen from the working directory (papermill starts the
    kernel in the notebook's folder); where there is none, only the package's files are recorded.
    """
    log = os.environ.get(READ_LOG_ENV)
    if not log:
        return
    try:
        data: Path | None = paths.data_dir()
    except ConfigError:
        data = None
    record_reads(Path(log), data)


@contextmanager
def reads_logged() -> Iterator[Path]:
    """A fresh read log, named in ``$VLLM_PLAYBOOKS_READ_LOG`` while the block runs (kernels started in it inherit it).

    Yields the log's path; the log is deleted and the variable restored afterwards.
    """
    handle, name = tempfile.mkstemp(prefix="vllm-playbooks-reads-", suffix=".log")
    os.close(handle)
    before = os.environ.get(READ_LOG_ENV)
    os.environ[READ_LOG_ENV] = name
    try:
        yield Path(name)
    finally:
        if before is None:
            os.environ.pop(READ_LOG_ENV, None)
        else:
            os.environ[READ_LOG_ENV] = before
        Path(name).unlink(missing_ok=True)


@dataclass(frozen=True)
class Reads:
    """The paths a run read: data files opened and data folders listed (relative to the data folder), package files
    loaded or opened and package folders listed (relative to the package folder)."""

    files: frozenset[str] = frozenset()
    dirs: frozenset[str] = frozenset()
    code: frozenset[str] = frozenset()
    code_dirs: frozenset[str] = frozenset()


def read_log(log: Path) -> Reads:
    """The paths recorded in a read log written by :func:`record_reads`."""
    kinds: dict[str, set[str]] = {kind: set() for kind in (*_DATA_KINDS, *_CODE_KINDS)}
    for line in log.read_text(encoding="utf-8").splitlines():
        kind, _, path = line.partition("\t")
        kinds.get(kind, kinds["file"]).add(path)
    return Reads(*(frozenset(kinds[kind]) for kind in (*_DATA_KINDS, *_CODE_KINDS)))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_digest(path: Path) -> str:
    """The sha256 of a file's bytes; a folder's :func:`listing_digest`; :data:`ABSENT` when there is nothing."""
    if path.is_dir():
        return listing_digest(path)
    try:
        return _sha256(path.read_bytes())
    except FileNotFoundError:
        return ABSENT


def listing_digest(path: Path, left_out: frozenset[str] = frozenset()) -> str:
    """The sha256 of a folder's sorted entry names but ``left_out``, one a line; :data:`ABSENT` when it does not
    exist."""
    try:
        names = sorted(set(os.listdir(path)) - left_out)
    except (FileNotFoundError, NotADirectoryError):
        return ABSENT
    return _sha256("\n".join(names).encode())


def digest_json(value: Any) -> str:
    """The sha256 of ``value`` as canonical JSON (sorted keys, no spaces)."""
    return _sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode())


def notebook_digest(path: Path) -> str:
    """A digest of what an execution of the notebook depends on: its cells and metadata.

    The outputs stored in the source (check cells keep theirs) and the package's own metadata key (the data digest
    stored with them) are left out: papermill clears outputs before it runs, so refreshing stored check outputs
    does not make an executed copy stale.
    """
    nb = json.loads(path.read_text(encoding="utf-8"))
    nb.get("metadata", {}).pop(METADATA_KEY, None)
    for cell in nb.get("cells", []):
        cell.pop("outputs", None)
        cell.pop("execution_count", None)
    return digest_json(nb)


@dataclass(frozen=True)
class ExecutionRecord:
    """What one execution of a notebook depended on (see the module's docstring): the notebook's digest, the
    parameters, and a digest per package file and folder (``code``, ``code_dirs``) and per data file and folder
    (``files``, ``dirs``) it read."""

    notebook: str
    parameters: dict[str, Any]
    code: dict[str, str] = field(default_factory=dict)
    code_dirs: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    dirs: dict[str, str] = field(default_factory=dict)

    @property
    def data(self) -> str:
        """One digest of the data the run read: every path with the digest of what it held."""
        return digest_json({"files": self.files, "dirs": self.dirs})


def make_record(
    source: Path, parameters: dict[str, Any], reads: Reads, data: Path, package: Path = PACKAGE
) -> ExecutionRecord:
    """The record of a run of ``source`` with ``parameters`` that read ``reads`` under ``data`` and ``package``,
    hashed now."""
    return ExecutionRecord(
        notebook=notebook_digest(source),
        parameters=parameters,
        code={p: file_digest(package / p) for p in sorted(reads.code)},
        code_dirs={p: listing_digest(package / p, BYTECODE) for p in sorted(reads.code_dirs)},
        files={p: file_digest(data / p) for p in sorted(reads.files)},
        dirs={p: listing_digest(data / p) for p in sorted(reads.dirs)},
    )


def record_in(nb: Any) -> ExecutionRecord | None:
    """The execution record in a notebook's metadata (a dict or ``nbformat`` node), or None where it has none."""
    stored = nb.get("metadata", {}).get(METADATA_KEY, {}).get("execution")
    if not stored or "package" in stored:  # none, or of the form that named the whole package by one digest
        return None
    return ExecutionRecord(**{k: v for k, v in stored.items() if k != "data"})


def store_record(nb: Any, record: ExecutionRecord) -> None:
    """Put ``record`` (and its :attr:`~ExecutionRecord.data` digest) into a notebook's metadata.

    It replaces whatever the package kept there: an executed copy carries its run's record only.
    """
    nb["metadata"][METADATA_KEY] = {"execution": {**asdict(record), "data": record.data}}


def read_record(executed: Path) -> ExecutionRecord | None:
    """The execution record of an executed notebook file, or None where it has none (or is not there)."""
    try:
        return record_in(json.loads(executed.read_text(encoding="utf-8")))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _changed(
    files: dict[str, str], dirs: dict[str, str], root: Path, left_out: frozenset[str] = frozenset()
) -> list[str]:
    """The paths of ``files`` and ``dirs`` (relative to ``root``) whose digest differs now, sorted; folders (their
    entries but ``left_out``) end with '/'."""
    changed_files = [p for p, digest in files.items() if file_digest(root / p) != digest]
    changed_dirs = [f"{p}/" for p, digest in dirs.items() if listing_digest(root / p, left_out) != digest]
    return sorted(changed_files + changed_dirs)


def _named(paths: list[str]) -> str:
    """The first three of ``paths``, and how many more."""
    return ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


def changed_data(record: ExecutionRecord, data: Path) -> list[str]:
    """The recorded data paths whose content (a folder: whose entries) differs now, sorted; folders end with '/'."""
    return _changed(record.files, record.dirs, data)


def changed_code(record: ExecutionRecord, package: Path = PACKAGE) -> list[str]:
    """The recorded package paths whose content (a folder: whose entries) differs now, sorted; folders end with
    '/'."""
    return _changed(record.code, record.code_dirs, package, BYTECODE)


def stale_reason(source: Path, executed: Path, parameters: dict[str, Any], package: Path = PACKAGE) -> str | None:
    """Why ``executed`` is not a current run of ``source`` with ``parameters``; None when it is.

    The data folder is the one the kernel sees from the notebook's folder. Reasons: no executed copy, no record (or
    one of an older form), the notebook, the package files the run read, the parameters, or the data read (the
    first changed paths named).
    """
    record = read_record(executed)
    if record is None:
        return "no executed copy" if not executed.exists() else "its executed copy has no execution record"
    if record.notebook != notebook_digest(source):
        return "the notebook changed"
    code = changed_code(record, package)
    if code:
        return f"the package's source changed: {_named(code)}"
    if record.parameters != parameters:
        return f"parameters changed (were {record.parameters})"
    changed = changed_data(record, paths.data_dir(source.parent))
    if changed:
        return f"data changed: {_named(changed)}"
    return None
