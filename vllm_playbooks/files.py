"""Files that survive a crash and writers that take turns: an atomic, fsynced replace and an exclusive file lock,
shared by the tables of recorded runs and the runner's records of its servers and workers."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _hidden(path: Path, suffix: str) -> Path:
    """The hidden file beside ``path`` named after it: ``runs.csv`` → ``.runs.csv<suffix>``, ``.servers.json`` →
    ``.servers.json<suffix>``."""
    return path.parent / f".{path.name.lstrip('.')}{suffix}"


def fsync_folder(folder: Path) -> None:
    """Flush a folder's entries to disk (a rename inside it is durable only after this)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (a temporary file, fsynced, renamed, its folder fsynced)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_hidden(path, ".").name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_folder(path.parent)


def atomic_copy(source: Path, target: Path) -> None:
    """Copy file ``source`` to ``target`` atomically (a hidden temporary beside ``target``, fsynced, renamed), its
    modification time kept: a copy stopped half-way leaves no partial ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=_hidden(target, ".").name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle, source.open("rb") as read:
            shutil.copyfileobj(read, handle)
            handle.flush()
            os.fsync(handle.fileno())
        shutil.copystat(source, tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_folder(target.parent)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` while it is read and replaced, so that writers in other processes take
    turns instead of each replacing the other's change (``flock`` on the hidden ``.<name>.lock`` beside it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _hidden(path, ".lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
