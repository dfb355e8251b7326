"""Faults injected into real runs of the command line (the stand-in server, tests/fakes): each must leave no process
of ours behind, lose or duplicate no row, say what happened in one line, and the rerun must finish the grid with every
point recorded exactly once.
"""

from __future__ import annotations

import http.server
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from tests.conftest import ROOT
from tests.faults.conftest import CASE, PARALLEL, PLANNED, WORKER, Runner, row_ids, tree_digest, wait_until
from vllm_playbooks.results import raw

pytestmark = pytest.mark.faults

#: A measured run long enough to be interrupted mid-load.
SLOW = {"FAULT_BENCH_S": "0.4"}


def _interrupted_mid_grid(runner: Runner, args: list[str], **extra: str) -> None:
    runner.start(args, **SLOW, **extra)
    wait_until(lambda: runner.recorded_anywhere() >= 1, 60, "a first point recorded")


# -- the runner (one worker: run_case) ---------------------------------------------------------------------------


def test_sigkill_of_the_runner_leaves_no_server_and_the_rerun_finishes(runner: Runner) -> None:
    _interrupted_mid_grid(runner, WORKER)
    runner.signal(signal.SIGKILL)
    runner.assert_nothing_left()
    assert 1 <= len(row_ids(runner.case_dir / "runs.csv")) < len(PLANNED)
    runner.rerun_completes()


def test_sigkill_with_the_servers_record_left_the_next_run_stops_leftovers(runner: Runner) -> None:
    """The guard stops a server whose runner was killed; when the guard itself is killed as well, the record the
    run left in the case folder lets the next run stop that server before it starts its own."""
    _interrupted_mid_grid(runner, WORKER)
    guards = [pid for pid, cmd in runner.ours().items() if "guard.py" in cmd]
    assert len(guards) == 1
    for pid in (guards[0], runner.process.pid):  # type: ignore[union-attr]
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: any("fake_vllm_server" in cmd for cmd in runner.ours().values()), 5, "the orphaned server")
    time.sleep(0.5)
    assert any("fake_vllm_server" in cmd for cmd in runner.ours().values())  # orphaned, still serving
    code, err = runner.run(WORKER, FAULT_BENCH_S="0.02")
    assert code == 0, err
    assert [line for line in err.splitlines() if "left running by an earlier run" in line]
    runner.assert_complete()
    runner.assert_nothing_left()


def test_sigterm_of_the_runner_stops_cleanly_in_seconds(runner: Runner) -> None:
    _interrupted_mid_grid(runner, WORKER)
    began = time.monotonic()
    runner.signal(signal.SIGTERM)
    assert runner.process.wait(timeout=30) == 130  # type: ignore[union-attr]
    assert time.monotonic() - began < 10
    assert len(runner.error_lines()) == 1 and runner.error_lines()[0].startswith("interrupted:")
    runner.assert_nothing_left()
    runner.rerun_completes()


def test_a_second_sigint_escalates_to_sigkill(runner: Runner) -> None:
    """The server ignores SIGTERM, so the first interrupt's stop would wait its whole grace period (30 s); the second
    interrupt kills the group at once instead of aborting the stop."""
    _interrupted_mid_grid(runner, WORKER, FAULT_SERVER_ARGS="--ignore-sigterm")
    began = time.monotonic()
    runner.signal(signal.SIGINT)
    time.sleep(1.0)
    runner.signal(signal.SIGINT)
    assert runner.process.wait(timeout=20) == 130  # type: ignore[union-attr]
    assert time.monotonic() - began < 10
    assert len(runner.error_lines()) == 1
    runner.assert_nothing_left(timeout_s=5)
    runner.rerun_completes()


def test_a_server_killed_mid_load_fails_its_points_and_the_rerun_measures_them(runner: Runner) -> None:
    _interrupted_mid_grid(runner, WORKER)
    servers = [pid for pid, cmd in runner.ours().items() if "fake_vllm_server" in cmd and "guard.py" not in cmd]
    assert len(servers) == 1
    os.kill(servers[0], signal.SIGKILL)
    code = runner.process.wait(timeout=60)  # type: ignore[union-attr]
    assert code == 2 and len(runner.error_lines()) == 1 and "point(s) failed" in runner.error_lines()[0]
    runner.assert_nothing_left()
    assert len(set(row_ids(runner.case_dir / "runs.csv"))) == len(row_ids(runner.case_dir / "runs.csv"))
    assert list((runner.case_dir / "raw").glob("*/*/*.failure.json"))
    runner.rerun_completes()
    assert not list((runner.case_dir / "raw").glob("*/*/*.failure.json"))


# -- the port ----------------------------------------------------------------------------------------------------


@pytest.fixture
def plain_listener() -> Iterator[int]:
    """A port held by a socket that listens and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.fixture
def foreign_server() -> Iterator[int]:
    """A port held by another HTTP server whose /health answers 200."""

    class Healthy(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Healthy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


@pytest.mark.parametrize("holder", ["plain_listener", "foreign_server"])
def test_a_taken_port_is_retried_on_another_with_one_line(
    runner: Runner, holder: str, request: pytest.FixtureRequest
) -> None:
    port = request.getfixturevalue(holder)
    code, err = runner.run(WORKER, FAULT_FIRST_PORT=str(port), FAULT_BENCH_S="0.02")
    assert code == 0, err
    moved = [line for line in err.splitlines() if f"port {port}" in line]
    assert len(moved) == 1 and moved[0].endswith("trying another port"), err
    runner.assert_complete()
    runner.assert_nothing_left()


# -- the data folder ---------------------------------------------------------------------------------------------


def test_a_read_only_data_folder_is_refused_before_any_server(runner: Runner) -> None:
    runner.run(WORKER, FAULT_BENCH_S="0.02")  # something recorded already
    shutil.rmtree(runner.case_dir / "raw" / PLANNED[-1].rsplit("/", 1)[0])  # its config's points
    before = row_ids(runner.case_dir / "runs.csv")
    code, err = runner.run(WORKER, FAULT_FS="readonly")
    assert code == 2 and len(runner.error_lines()) == 1, err
    assert "Read-only file system" in runner.error_lines()[0] and "nothing was started" in runner.error_lines()[0]
    assert "Traceback" not in err
    assert row_ids(runner.case_dir / "runs.csv") == before
    runner.assert_nothing_left()


def test_a_full_disk_stops_the_run_keeping_what_it_recorded(runner: Runner) -> None:
    code, err = runner.run(WORKER, FAULT_FS="full:3", FAULT_BENCH_S="0.02")
    assert code == 2 and len(runner.error_lines()) == 1, err
    assert "No space left on device" in runner.error_lines()[0] and "Traceback" not in err
    assert row_ids(runner.case_dir / "runs.csv") == PLANNED[:2]
    assert not list((runner.case_dir / "raw").glob("**/.*"))  # no half-written point folder
    runner.assert_nothing_left()
    runner.rerun_completes()


@pytest.mark.parametrize("damage", ["bench.json", "point.json", "metrics_after.prom.gz"])
def test_a_truncated_raw_file_is_named_in_one_line_and_nothing_changes(runner: Runner, damage: str) -> None:
    runner.run(WORKER, FAULT_BENCH_S="0.02")
    (runner.case_dir / "runs.csv").write_text((runner.case_dir / "runs.csv").read_text().rsplit("\n", 2)[0] + "\n")
    point = runner.case_dir / "raw" / PLANNED[-1]
    target = point / damage
    target.write_bytes(target.read_bytes()[: len(target.read_bytes()) // 2])
    before = tree_digest(runner.data)
    code, err = runner.run(WORKER)
    assert code == 2 and len(runner.error_lines()) == 1, err
    assert str(point) in runner.error_lines()[0] and "Traceback" not in err
    assert tree_digest(runner.data) == before
    runner.assert_nothing_left()
    # the damaged folder moved aside (as its owner would), the rerun measures that point again
    shutil.move(point, runner.tmp / "damaged")
    runner.rerun_completes()


def test_concurrent_runners_appending_to_one_table_lose_no_row(runner: Runner) -> None:
    """Two runners of the same case, one config each, at once: both append to one runs.csv."""
    first = runner.start(["worker", "--case", WORKER[2], "--engines", "spec-off"], FAULT_BENCH_S="0.02")
    second = subprocess.Popen(
        [sys.executable, "-m", "tests.faults.harness", "worker", "--case", WORKER[2], "--engines", "ngram-k2"],
        cwd=ROOT,
        env=runner.env(FAULT_BENCH_S="0.02"),
        stderr=subprocess.DEVNULL,
    )
    assert first.wait(timeout=90) == 0 and second.wait(timeout=90) == 0
    runner.assert_complete()
    runner.assert_nothing_left()


# -- the parallel runner (vllm-playbooks run: one worker per GPU group) ------------------------------------------


def test_sigkill_of_the_parallel_parent_stops_workers_and_the_next_run_merges_their_points(runner: Runner) -> None:
    _interrupted_mid_grid(runner, PARALLEL)
    runner.signal(signal.SIGKILL)
    runner.assert_nothing_left()
    finished = runner.recorded_anywhere()
    assert finished >= 1 and not row_ids(runner.case_dir / "runs.csv")  # nothing merged yet
    # a merge killed half-way left a stale copy of one point: it must not block that point's merge
    worker_points = sorted((runner.tmp / "tmp").glob(f"{CASE}-parallel-*/gpus*/runs/{CASE}/raw/*/*/*/point.json"))
    point = worker_points[0].parent
    stale = runner.case_dir / "raw" / point.parent.parent.name / point.parent.name / f".{point.name}{raw.COPYING}"
    stale.mkdir(parents=True)
    (stale / "point.json").write_text("{")
    code, err = runner.run(PARALLEL, FAULT_BENCH_S="0.02")
    assert code == 0, err
    assert "left by an earlier run" in err, (err, list(runner.case_dir.iterdir()))
    runner.assert_complete()
    runner.assert_nothing_left()


@pytest.mark.parametrize(
    "signals", [[signal.SIGTERM], [signal.SIGINT, signal.SIGINT]], ids=["sigterm", "double-sigint"]
)
def test_sigterm_or_double_sigint_of_the_parallel_parent_merges_and_stops(runner: Runner, signals: list[int]) -> None:
    _interrupted_mid_grid(runner, PARALLEL)
    for sig in signals:
        runner.signal(sig)
        time.sleep(0.3)
    assert runner.process.wait(timeout=30) == 130  # type: ignore[union-attr]
    assert len(runner.error_lines()) == 1 and runner.error_lines()[0].startswith("interrupted:")
    runner.assert_nothing_left()
    merged = row_ids(runner.case_dir / "runs.csv")
    assert merged and len(set(merged)) == len(merged)
    assert not list((runner.tmp / "tmp").glob(f"{CASE}-parallel-*/gpus*/"))  # merged worker folders removed
    runner.rerun_completes(PARALLEL)


def test_a_second_run_of_the_same_case_is_refused_while_the_first_measures(runner: Runner) -> None:
    """Two runs of one case at once: the second is refused in one line naming the first (its pid) before it starts a
    server, and the first finishes the grid with every point recorded exactly once."""
    # 3 s a bench call (a point's warm-up and its run): once a point is in, each worker has two more to measure (over
    # 10 s), which outlasts the second run's start-up on a loaded machine (at 0.4 s the first run once finished first)
    first = runner.start(PARALLEL, FAULT_BENCH_S="3")
    wait_until(lambda: runner.recorded_anywhere() >= 1, 90, "a first point recorded")
    began = time.monotonic()
    second = subprocess.run(
        [sys.executable, "-m", runner.module, *PARALLEL],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=runner.env(FAULT_BENCH_S="0.02"),
        timeout=60,
    )
    assert time.monotonic() - began < 15
    assert second.returncode == 2, second.stderr
    errors = [line for line in second.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"pid {first.pid}" in errors[0], second.stderr
    assert first.wait(timeout=120) == 0, runner.stderr()
    runner.assert_complete()
    runner.assert_nothing_left()
