"""What a recorded server log's name and line stamps say: one reading for every module that reads server logs.

The runner names each server log ``<config id>-<UTC launch time, 2026-11-30T194243+0000>.log`` (its load generator's
log is the same name ending ``.bench.log``); vLLM stamps its lines ``MM-DD HH:MM:SS`` without a year, in the machine's
clock (UTC on the lent GPUs). The runner stores a finished log gzip-compressed (``<name>.log.gz``,
``vllm_playbooks.results.textfiles``); names are read without the ``.gz``.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from vllm_playbooks.results.textfiles import GZ, plain_name

#: A server log's name: the engine's config id, then the UTC time the runner opened it (bench logs do not match).
LOG_NAME = re.compile(r"^(?P<config_id>.+)-(?P<started>\d{4}-\d{2}-\d{2}T\d{6}\+0000)\.log$")
#: The time stamp of one vLLM log line: month, day and time, no year.
LINE_STAMP = re.compile(r"\b(?P<stamp>\d{2}-\d{2} \d{2}:\d{2}:\d{2})\b")


def parse_log_name(name: str) -> tuple[str, dt.datetime] | None:
    """(config id, launch time) from a server log's file name, plain or ``.gz``; None for any other name (a bench
    log's)."""
    match = LOG_NAME.match(name.removesuffix(GZ))
    if match is None:
        return None
    return match["config_id"], dt.datetime.strptime(match["started"], "%Y-%m-%dT%H%M%S%z")


def server_log_files(logs: Path) -> list[Path]:
    """The server logs in a case's ``logs/`` folder: every ``*.log``, plain or compressed, but the bench logs, in
    name order (a name the runner did not write is the reader's to refuse)."""
    if not logs.is_dir():
        return []
    names = ((plain_name(p), p) for p in logs.iterdir())
    return [p for name, p in sorted(names) if name.endswith(".log") and not name.endswith(".bench.log")]


def stamp_time(stamp: str, started: dt.datetime) -> dt.datetime:
    """The UTC time of a line stamped ``MM-DD HH:MM:SS`` in a log opened at ``started`` (timezone-aware), which gives
    the year: the next one for a stamp more than a day before ``started`` (a log that ran past New Year)."""
    at = dt.datetime.strptime(f"{started.year}-{stamp}", "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.UTC)
    if at < started - dt.timedelta(days=1):
        at = at.replace(year=started.year + 1)
    return at
