"""Recorded text files (``/metrics`` scrapes, server and bench logs), kept plain or gzip-compressed.

A scrape or a server log is mostly repeated text (histogram buckets, tracebacks of requests a time limit cut), so the
runner stores them as ``<name>.gz``: gzip shrinks them ten- to a hundredfold, which keeps the recorded data small
enough to travel with the tree to a GPU machine. Readers ask for the plain name and get whichever form is on disk;
``<name>`` and ``<name>.gz`` never both exist for one recorded file. The compressed bytes are deterministic (no time
stamp or file name in the gzip header), so compressing the same text twice gives the same file.

``vllm-playbooks compress DIR …`` compresses every plain ``*.prom`` and ``*.log`` under each folder.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterable
from pathlib import Path

from vllm_playbooks.errors import SchemaError

GZ = ".gz"
#: The recorded files that are stored compressed: suffixes of plain names.
COMPRESSED_KINDS = (".prom", ".log")


def stored_path(path: Path) -> Path | None:
    """Where the recorded file ``path`` (a plain name) is on disk: itself, ``path.gz``, or None when neither exists."""
    if path.name.endswith(GZ):
        return path if path.exists() else None
    for candidate in (path, path.with_name(path.name + GZ)):
        if candidate.exists():
            return candidate
    return None


def plain_name(path: Path) -> str:
    """A recorded file's name without ``.gz``: the name its readers and tables use, whichever form is stored."""
    return path.name.removesuffix(GZ)


def read_text(path: Path) -> str:
    """The text of a recorded file, given its plain name or its ``.gz`` name (undecodable bytes replaced)."""
    found = stored(path)
    return stored_text(found, found.read_bytes())


def stored(path: Path) -> Path:
    """:func:`stored_path`, or ``SchemaError`` naming both forms when neither exists."""
    found = stored_path(path)
    if found is None:
        raise SchemaError(f"{path}: no such recorded file (nor {path.name}{GZ})")
    return found


def stored_text(found: Path, data: bytes) -> str:
    """The text of the bytes ``data`` read from the stored file ``found`` (a ``.gz`` name is decompressed)."""
    return (gzip.decompress(data) if found.name.endswith(GZ) else data).decode("utf-8", errors="replace")


def compressed_bytes(text: str) -> bytes:
    """``text`` as UTF-8, gzip-compressed with no time stamp, so equal text gives equal bytes."""
    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


def compress_file(path: Path) -> Path:
    """Replace the plain file ``path`` by ``path.gz`` (written under a temporary name, then renamed; the plain file
    is removed only once the compressed one is in place). Returns the new path."""
    target = path.with_name(path.name + GZ)
    if target.exists():
        raise SchemaError(f"{target} exists beside {path.name}: a recorded file is stored in one form only")
    staging = path.with_name(f".{path.name}{GZ}.tmp")
    staging.write_bytes(compressed_bytes(path.read_text(encoding="utf-8", errors="replace")))
    os.replace(staging, target)
    path.unlink()
    return target


def compress_tree(roots: Iterable[Path]) -> list[Path]:
    """Compress every plain ``*.prom`` and ``*.log`` file under ``roots`` (hidden staging folders skipped); returns
    the files written."""
    written = []
    for root in roots:
        for path in sorted(root.rglob("*")):
            hidden = any(part.startswith(".") for part in path.relative_to(root).parts)
            if path.is_file() and path.suffix in COMPRESSED_KINDS and not hidden:
                written.append(compress_file(path))
    return written
