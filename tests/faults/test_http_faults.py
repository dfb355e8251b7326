"""The server's HTTP answers broken or untrustworthy, and the server hung (SIGSTOP), in real runs of the command line
against the stand-in server (tests/fakes): the bad point is kept as a failure file (written atomically, measured
again by the next run) with one line saying why, no row is recorded for it, the rest of the grid goes on, nothing is
left running, and each ends within its measured time bound.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.faults.conftest import PARALLEL, PLANNED, WORKER, Runner, row_ids, wait_until

pytestmark = pytest.mark.faults

#: The grid's configs in plan order: spec-off's three points, then ngram-k2's (speculation on).
SPEC_OFF, NGRAM = PLANNED[:3], PLANNED[3:]


def failures(runner: Runner) -> dict[str, str]:
    """The failure files of the case (by point id) and their error lines; fails on a temporary file left over."""
    raw_root = runner.case_dir / "raw"
    assert not [p for p in raw_root.rglob("*") if p.name.startswith(".") or p.name.endswith(".tmp")]
    found = {}
    for path in raw_root.rglob("*.failure.json"):
        record = json.loads(path.read_text())
        found[record["point_id"]] = record["error"]
    return found


def servers(runner: Runner) -> list[int]:
    """The stand-in servers of the run, not their guards."""
    return [pid for pid, cmd in runner.ours().items() if "fake_vllm_server" in cmd and "guard.py" not in cmd]


def assert_failed_points(runner: Runner, code: int, failed: list[str], why: str) -> None:
    """Exit 2 with one ``error:`` line naming the failures, each failed point kept as a failure file saying ``why``
    and without a row, every other point recorded once, nothing left running."""
    err = runner.stderr()
    assert code == 2 and len(runner.error_lines()) == 1, err
    assert f"{len(failed)} point(s) failed" in runner.error_lines()[0] and "Traceback" not in err
    kept = failures(runner)
    assert sorted(kept) == sorted(failed), kept
    assert all(why in line and "\n" not in line for line in kept.values()), kept
    assert row_ids(runner.case_dir / "runs.csv") == [pid for pid in PLANNED if pid not in failed]
    runner.assert_nothing_left()


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("cut", "the answer was cut short"),
        ("garbage", "the answer is not HTTP"),
        ("reset", "closed the connection without an answer"),
        ("html", "it is HTML, not Prometheus text"),
        ("empty", "it is empty"),
    ],
)
def test_a_metrics_scrape_that_breaks_http_or_is_no_scrape_fails_its_point(runner: Runner, mode: str, why: str) -> None:
    """The second scrape of each server (after the first point's measured run) answers badly: that point of each
    config fails, the others are measured on the same server."""
    began = time.monotonic()
    code, _ = runner.run(WORKER, FAULT_BENCH_S="0.02", FAULT_SERVER_ARGS=f"--bad-metrics {mode} --bad-metrics-at 2")
    assert time.monotonic() - began < 30
    assert_failed_points(runner, code, [SPEC_OFF[0], NGRAM[0]], why)
    runner.rerun_completes()
    assert not failures(runner)


@pytest.mark.parametrize("at", [1, 2], ids=["before", "after"])
def test_a_scrape_without_the_spec_counters_fails_a_speculative_point_only(runner: Runner, at: int) -> None:
    """Missing before the run, a row would count every draft since start-up; missing after, none: the speculative
    config's point fails, the point of the config without speculation is recorded."""
    code, _ = runner.run(WORKER, FAULT_BENCH_S="0.02", FAULT_SERVER_ARGS=f"--bad-metrics no-spec --bad-metrics-at {at}")
    assert_failed_points(runner, code, [NGRAM[0]], "lacks the speculative-decoding counters")
    runner.rerun_completes()


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("cut", "the answer was cut short"),
        ("garbage", "the answer is not HTTP"),
        ("reset", "closed the connection without an answer"),
    ],
)
def test_a_health_answer_that_breaks_http_fails_the_config_in_seconds(runner: Runner, mode: str, why: str) -> None:
    """A server whose ``/health`` answers break HTTP is given up after three such answers (not the 900 s start-up
    timeout), and every point of its config is kept as a failure."""
    began = time.monotonic()
    code, _ = runner.run(WORKER, FAULT_SERVER_ARGS=f"--bad-health {mode}")
    took = time.monotonic() - began
    assert took < 20, took
    assert_failed_points(runner, code, PLANNED, why)
    runner.rerun_completes()


def test_a_stopped_server_fails_its_config_within_the_load_deadline_and_is_killed(runner: Runner) -> None:
    """SIGSTOP of the server mid-grid, no time limit: the load in progress ends at its deadline (3 s floor here), the
    server no longer answers /health, so the rest of its config fails at once; the stopped server is continued and
    killed in seconds (not the 30 s grace), and the next config is measured on a new server."""
    runner.start(WORKER, FAULT_BENCH_S="0.4", FAULT_LOAD_FLOOR_S="3")
    wait_until(lambda: row_ids(runner.case_dir / "runs.csv"), 60, "a first point recorded")
    (server,) = servers(runner)
    os.kill(server, signal.SIGSTOP)
    stopped = time.monotonic()
    wait_until(lambda: server not in runner.ours(), 25, "the stopped server killed")
    killed = time.monotonic() - stopped
    code = runner.process.wait(timeout=60)  # type: ignore[union-attr]
    took = time.monotonic() - stopped
    assert killed < 20 and took < 30, (killed, took)
    recorded = row_ids(runner.case_dir / "runs.csv")
    hung = [pid for pid in SPEC_OFF if pid not in recorded]
    assert 1 <= len(hung) <= 2
    assert_failed_points(runner, code, hung, "")
    assert all(
        ("did not end within" in line or "stopped answering" in line or "no answer within" in line)
        for line in failures(runner).values()
    ), failures(runner)
    runner.rerun_completes()


def test_a_stopped_server_under_a_time_limit_ends_within_seconds_of_the_limit(runner: Runner) -> None:
    """``run --time-limit-s 8`` with its servers stopped (SIGSTOP) mid-grid and the load's own deadline far off
    (900 s): the workers stop at the limit, their servers are continued and killed, exit 124 within seconds."""
    began = time.monotonic()
    runner.start([*PARALLEL, "--time-limit-s", "8"], FAULT_BENCH_S="0.4")
    wait_until(lambda: runner.recorded_anywhere() >= 1, 60, "a first point recorded")
    for pid in servers(runner):
        os.kill(pid, signal.SIGSTOP)
    code = runner.process.wait(timeout=60)  # type: ignore[union-attr]
    took = time.monotonic() - began
    assert code == 124 and 8 <= took < 16, (code, took)  # 9-11 s alone; 14.5 s seen with both cores busy elsewhere
    assert len(runner.error_lines()) == 1 and "time limit" in runner.error_lines()[0], runner.stderr()
    assert "Traceback" not in runner.stderr()
    runner.assert_nothing_left(timeout_s=5)
    merged = row_ids(runner.case_dir / "runs.csv")
    assert merged and len(merged) < len(PLANNED) and len(set(merged)) == len(merged)
    runner.rerun_completes([*PARALLEL])
