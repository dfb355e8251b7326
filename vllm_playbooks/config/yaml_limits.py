"""YAML read within bounds: the size, depth, string length and alias expansion of a document are checked on its
event stream (one pass of LibYAML's parser, linear in the text) before any object is built, so a hostile file (an
alias bomb, a nesting ten thousand deep, a megabyte title) is a ``ConfigError`` in milliseconds, never minutes of CPU
and gigabytes of memory in whatever later walks the objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from vllm_playbooks.errors import ConfigError

#: The most bytes a YAML document (a case file, a parameter value) may have; the largest packaged grid has 8 KB.
MAX_BYTES = 256 * 1024
#: The deepest nesting of mappings and sequences.
MAX_DEPTH = 32
#: The longest scalar (a key or a value), in characters.
MAX_SCALAR_CHARS = 16 * 1024
#: The most nodes (scalars, mappings, sequences) the document holds with every alias expanded.
MAX_NODES = 100_000
#: The most characters its scalars hold with every alias expanded.
MAX_CHARS = 4 * 1024 * 1024

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def bounded_yaml(text: str, shown: str) -> Any:
    """The object the YAML ``text`` holds (``yaml.safe_load``'s), after checking it is within ``MAX_BYTES``,
    ``MAX_DEPTH``, ``MAX_SCALAR_CHARS`` and, aliases expanded, ``MAX_NODES`` and ``MAX_CHARS``. ``ConfigError``
    naming ``shown`` and the limit for text beyond one, or that is not YAML."""
    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise ConfigError(f"{shown}: larger than {MAX_BYTES // 1024} KiB, the most a case file or parameter may hold")
    try:
        _check_events(text, shown)
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a safe loader: CSafeLoader or SafeLoader)
    except yaml.YAMLError as error:
        start = text if len(text) <= 40 else text[:37] + "..."
        raise ConfigError(f"{shown}: cannot read {start!r} as YAML ({' '.join(str(error).split())[:300]})") from None
    except RecursionError:  # a depth the event check allows cannot reach this; kept for a loader without LibYAML
        raise ConfigError(f"{shown}: nested deeper than {MAX_DEPTH} levels") from None


def read_bounded(path: Path, shown: str) -> str:
    """The UTF-8 text of file ``path``, read no further than ``MAX_BYTES`` + 1 bytes; ``ConfigError`` naming
    ``shown`` for a larger file, one that is not UTF-8 or cannot be read."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as error:
        raise ConfigError(f"{shown}: cannot be read ({error.strerror})") from None
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{shown}: larger than {MAX_BYTES // 1024} KiB, the most a case file or parameter may hold")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{shown}: not UTF-8 text (byte {error.start} cannot be read)") from None


def _check_events(text: str, shown: str) -> None:
    """Walk the parser's events: depth, scalar length, and the expanded size of every anchored node, so an alias
    adds what it stands for; ``ConfigError`` at the first limit passed."""
    anchors: dict[str, tuple[int, int]] = {}
    # one frame per open collection: [anchor or None, nodes, chars] of what it holds so far
    stack: list[list[Any]] = [[None, 0, 0]]
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.CollectionStartEvent):
            if len(stack) > MAX_DEPTH:
                raise ConfigError(f"{shown}: nested deeper than {MAX_DEPTH} levels")
            stack.append([event.anchor, 1, 0])
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, nodes, chars = stack.pop()
        elif isinstance(event, yaml.ScalarEvent):
            if len(event.value) > MAX_SCALAR_CHARS:
                raise ConfigError(f"{shown}: a value of {len(event.value)} characters, more than {MAX_SCALAR_CHARS}")
            anchor, nodes, chars = event.anchor, 1, len(event.value)
        elif isinstance(event, yaml.AliasEvent):
            if event.anchor not in anchors:
                raise ConfigError(f"{shown}: alias *{event.anchor} names no anchor before it")
            anchor, (nodes, chars) = None, anchors[event.anchor]
        else:
            continue
        if anchor is not None:
            anchors[anchor] = (nodes, chars)
        frame = stack[-1]
        frame[1] += nodes
        frame[2] += chars
        if sum(f[1] for f in stack) > MAX_NODES or sum(f[2] for f in stack) > MAX_CHARS:
            raise ConfigError(
                f"{shown}: its aliases expand to more than {MAX_NODES} values or {MAX_CHARS // 2**20} "
                "MiB of text (an alias bomb?)"
            )
