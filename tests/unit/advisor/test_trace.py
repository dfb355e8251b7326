"""A live search's trace: written line by line as the search goes, read back whole or cut short, the latest found."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from vllm_playbooks.advisor.goodput import Slo
from vllm_playbooks.advisor.search import BASELINE_UNMEASURED, Advice
from vllm_playbooks.advisor.trace import TraceWriter, latest_trace, read_trace, trace_steps
from vllm_playbooks.book.advisor_page import live_section, stop_text, trace_summary

SLO = Slo(tpot_p99_ms=8.0)
ROW = {
    "point_id": "h/a-id/in1-out1-c4-r0",
    "tpot_p99_ms": np.float64(7.5),
    "ttft_p99_ms": 50.0,
    "request_throughput_rps": 3.0,
}


def _started(data: Path, at: str = "2026-12-05T10:15:00+00:00") -> TraceWriter:
    trace = TraceWriter.create("c", at, data)
    trace.search(
        case="c",
        grid={"case": "c", "model_shape": "m", "input_len": 1, "output_len": 1, "load_kind": "concurrency"},
        hardware=["h"],
        slo=SLO,
        budget_gpu_s=600.0,
        points=4,
        grid_gpu_s=900.0,
        recorded_count=True,
        started_at=at,
    )
    return trace


def test_each_line_is_json_as_it_happens_and_a_line_cut_short_is_left_out(tmp_path: Path) -> None:
    trace = _started(tmp_path)
    assert trace.path == tmp_path / "runs" / "c" / "advisor" / "2026-12-05T101500+0000.jsonl"
    trace.payment(
        number=1,
        point="a @ c4",
        repeat=0,
        recorded=False,
        row=ROW,
        gpu_s=160.0,
        startup_gpu_s=120.0,
        held_gpu_s=math.nan,
        spent_gpu_s=160.0,
        slo=SLO,
    )
    lines = trace.path.read_text().splitlines()
    assert [json.loads(line)["record"] for line in lines] == ["search", "payment"]
    paid = json.loads(lines[1])
    assert paid["measured_goodput_rps"] == 3.0 and paid["held_gpu_s"] is None  # numpy read, NaN stored as null
    with trace.path.open("a") as handle:  # the process killed while writing its next line
        handle.write('{"record": "payment", "numb')
    read = read_trace(trace.path)
    assert len(read.payments) == 1 and not read.finished
    assert read.stop_reason is None and stop_text(read).startswith("did not finish")
    assert trace_steps(read)["source"].tolist() == ["measured"]


def test_the_latest_search_is_shown_and_without_one_the_page_says_so(tmp_path: Path) -> None:
    text, table = live_section("c", tmp_path)
    assert text.startswith("No live search of c is recorded yet") and table is None
    first, second = _started(tmp_path), _started(tmp_path)  # the same second: the second gets its own name
    assert second.path.name == "2026-12-05T101500+0000-2.jsonl"
    later = _started(tmp_path, "2026-12-06T08:00:00+00:00")
    later.stopped("interrupted")
    assert latest_trace("c", tmp_path).path == later.path  # type: ignore[union-attr]
    text, table = live_section("c", tmp_path)
    assert text.startswith("A live search of c (m, 1 in / 1 out, closed loop) on h, started 2026-12-06T08:00:00")
    assert "it stopped: did not finish: interrupted." in text and table is not None and table.empty
    assert first.path.exists()


def test_a_page_that_found_no_trace_lists_the_case_folder_so_the_first_trace_makes_it_run_again(tmp_path: Path) -> None:
    """The book's cache records what a page's kernel opens or lists (``book.cache.record_reads``), not what it only
    looked for: a page whose run found no trace must have listed the folder a first trace appears in."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    (tmp_path / "runs" / "c").mkdir(parents=True)
    log = tmp_path / "reads.log"
    script = (
        "import sys; from pathlib import Path; from vllm_playbooks.book.cache import record_reads; "
        "from vllm_playbooks.advisor.trace import latest_trace; data = Path(sys.argv[1]); "
        "record_reads(Path(sys.argv[2]), data); assert latest_trace('c', data) is None"
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path), str(log)], cwd=ROOT, check=True)
    assert "dir\truns/c" in log.read_text().splitlines()


def test_a_finished_search_that_never_measured_the_baseline_says_so(tmp_path: Path) -> None:
    chosen = {"point": "draft @ c1", "goodput_rps": 1.5, "runs": 1}
    for unmeasured in (True, False):
        trace = _started(tmp_path, f"2026-12-0{7 if unmeasured else 8}T08:00:00+00:00")
        trace.advice(
            Advice(slo=SLO, chosen=chosen, runner_up=None, stop_reason="budget", baseline_unmeasured=unmeasured)
        )
        summary = trace_summary(read_trace(trace.path))
        assert summary.endswith("runner-up: nothing.") != unmeasured
        assert (BASELINE_UNMEASURED in summary) == unmeasured
