"""Server logs: a GPU's memory as vLLM logged it at a recorded start-up on that GPU."""

from __future__ import annotations

import datetime as dt
import gzip
import re
import shutil
from pathlib import Path

from tests.conftest import FROZEN
from vllm_playbooks.results.server_logs import logged_gpu_memory, running_samples, server_log_of
from vllm_playbooks.results.store import load_runs


def test_the_memory_comes_from_the_log_of_the_latest_row_on_that_gpu(tmp_path: Path) -> None:
    shutil.copytree(FROZEN / "runs" / "pp-27462", tmp_path / "runs" / "pp-27462")
    rows = load_runs("pp-27462", tmp_path)
    latest = rows.loc[rows["measured_at"].astype(str).idxmax()]
    log = server_log_of(
        tmp_path / "runs" / "pp-27462" / "logs",
        str(latest["config_id"]),
        dt.datetime.fromisoformat(str(latest["measured_at"])),
    )
    assert log is not None and log.name.endswith(".gz")
    text = gzip.decompress(log.read_bytes()).decode()
    logged = re.compile(r"Free memory on device \(([0-9.]+)/139\.8 GiB\)")  # as every H200 start-up here logged it
    assert logged.search(text)
    log.write_bytes(gzip.compress(logged.sub("Free memory on device (77.0/77.77 GiB)", text).encode()))
    assert logged_gpu_memory(str(latest["gpu_name"]), tmp_path) == 77.77  # that log's, not an older server's 139.8
    assert logged_gpu_memory("NVIDIA B200", tmp_path) is None  # no row was measured on one
    assert logged_gpu_memory("NVIDIA H200", tmp_path / "nothing") is None  # no recorded runs at all


def test_a_log_read_again_after_it_grew_gives_its_new_samples(tmp_path: Path) -> None:
    """A live server keeps writing its log: the stats lines read from it are those it holds now, not those of an
    earlier read of the same file."""
    log = tmp_path / "spec-off-0123456789-2026-11-30T100000+0000.log"
    stats = "INFO 11-30 10:00:{:02d} [loggers.py:1] Running: {} reqs, Waiting: 0 reqs\n"
    log.write_text(stats.format(10, 4))
    at = dt.datetime(2026, 11, 30, 10, 0, 10, tzinfo=dt.UTC)
    assert running_samples(log) == [(at, 4)]
    with log.open("a") as more:
        more.write(stats.format(20, 7))
    assert running_samples(log) == [(at, 4), (at + dt.timedelta(seconds=10), 7)]
    log.write_text(stats.format(10, 5))  # as long as the first version: a new read all the same
    assert running_samples(log) == [(at, 5)]
