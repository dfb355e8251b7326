"""The live advisor against the stand-in server and a stand-in ``bench serve``: points measured one at a time through
the runner, one server per run of consecutive points of a config, rows and raw folders as ``vllm-playbooks run``
writes them, the trace, recorded rows taken for free, and the checks before any work."""

from __future__ import annotations

import json
import math
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, FakeBench, fake_server_argv
from vllm_playbooks import cli
from vllm_playbooks.advisor import live, live_plan
from vllm_playbooks.advisor.goodput import Slo
from vllm_playbooks.advisor.search import PLAN_MARGIN, STOP_REASONS
from vllm_playbooks.advisor.trace import latest_trace, read_trace, trace_steps
from vllm_playbooks.book.advisor_page import stop_text
from vllm_playbooks.engine.leftovers import SERVERS_FILE, read_record
from vllm_playbooks.engine.server import VllmServer
from vllm_playbooks.errors import PlaybookError
from vllm_playbooks.results import raw
from vllm_playbooks.results.replay import replay_rows
from vllm_playbooks.run import case as runner
from vllm_playbooks.run.case import run_case
from vllm_playbooks.run.plan import load_plan

H200 = "nvidia-h200-x1-vllm0.26.0"
#: A tiny grid: speculation off and n-gram k=2 on the tiny Llama shape, four closed-loop loads.
CASE_FILE = """
case: live-advice
title: "the live advisor's test grid"
engine_defaults:
  model: tiny-llama
  max_model_len: 512
  max_num_seqs: 64
  enforce_eager: true
engines:
  - label: spec-off
  - label: ngram-k2
    speculative: {method: ngram, num_speculative_tokens: 2, prompt_lookup_max: 3}
loads:
  input_len: 64
  output_len: 16
  concurrency: [1, 2, 4, 8]
  random_range_ratio: 0.0
min_duration_s: 0.001
"""
SLO = Slo(tpot_p99_ms=6.0)
RUN_GPU_S, STARTUP_GPU_S = 30.0, 60.0


class Servers:
    """A server factory that starts the stand-in server and notes, per port, whether the engine speculates."""

    def __init__(self) -> None:
        self.started: list[VllmServer] = []
        self.speculative: dict[int, bool] = {}

    def __call__(self, argv: list[str], log: Path, port: int, **kwargs: Any) -> VllmServer:
        self.speculative[port] = any("speculative" in arg for arg in argv)
        server = VllmServer(fake_server_argv(port), log, port, **kwargs)
        self.started.append(server)
        return server


class LoadBench(FakeBench):
    """``bench serve`` results that depend on the load and the config: TPOT p99 grows with the concurrency, and the
    n-gram config decodes faster at the cost of a steeper rise; under ``SLO`` both meet it up to concurrency 4, where
    n-gram serves more requests/s."""

    def __init__(self, servers: Servers, interrupt_on_call: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.servers, self.interrupt_on_call = servers, interrupt_on_call

    def __call__(self, argv: list[str], timeout_s: float | None = None) -> dict[str, Any]:
        if self.interrupt_on_call is not None and len(self.calls) + 1 == self.interrupt_on_call:
            raise KeyboardInterrupt
        result = super().__call__(argv)
        opt = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
        c = int(opt["--max-concurrency"])
        spec = self.servers.speculative[int(opt["--base-url"].rsplit(":", 1)[1])]
        tpot = 3.5 + 0.4 * c if spec else 5.0 + 0.25 * c
        result.update(
            p99_tpot_ms=tpot,
            p99_ttft_ms=40.0 + c,
            request_throughput=c * (1.9 / (1 + c / 24) if spec else 1.5 / (1 + c / 32)),
        )
        Path(opt["--result-dir"], opt["--result-filename"]).write_text(json.dumps(result))
        return result


@pytest.fixture
def data(data: Path) -> Path:
    """The empty data folder of ``tests.conftest.data`` with the book's reference tables (the GPUs' datasheets)."""
    shutil.copytree(ROOT / "data" / "reference", data / "reference")
    return data


@pytest.fixture
def h200(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine's provenance says one H200 and vLLM 0.26.0 (the hardware key of the recorded grids)."""
    here = runner.collect_provenance
    monkeypatch.setattr(
        runner,
        "collect_provenance",
        lambda repo=None: here(repo).model_copy(
            update={"gpu_name": "NVIDIA H200", "gpu_count": 1, "vllm_version": "0.26.0"}
        ),
    )


@pytest.fixture
def case_file(tmp_path: Path) -> Path:
    path = tmp_path / "live-advice.yaml"
    path.write_text(textwrap.dedent(CASE_FILE))
    return path


def _prices(grid: live_plan.LiveGrid) -> live_plan.LivePrices:
    return live_plan.LivePrices(
        run_gpu_s=dict.fromkeys(grid.points, RUN_GPU_S),
        startup_gpu_s={e.config_id(): STARTUP_GPU_S for e in grid.engines()},
    )


def _search(
    case_file: Path, data: Path, servers: Servers | None = None, bench: LoadBench | None = None, **kwargs: Any
) -> tuple[live.LiveSearch, Servers, LoadBench]:
    """A live search of the test grid under ``SLO`` with a budget of 900 GPU-s, against the stand-ins."""
    servers = servers or Servers()
    bench = bench or LoadBench(servers)
    plan = load_plan(str(case_file))
    grid = live_plan.live_grid(plan)
    search = live.advise_live(
        plan,
        grid,
        SLO,
        900.0,
        _prices(grid),
        data=data,
        bench=bench,
        server_factory=servers,
        gpu_sampler=None,
        **kwargs,
    )
    return search, servers, bench


def _label(point: str) -> str:
    return point.split(" @ ")[0]


def _server_logs(data: Path) -> list[Path]:
    logs = data / "runs" / "live-advice" / "logs"
    return sorted(p for p in logs.iterdir() if p.name.endswith(".log.gz") and ".bench." not in p.name)


def test_a_live_search_measures_point_by_point_on_one_server_per_config_and_records_rows_and_its_trace(
    case_file: Path, data: Path, h200: None
) -> None:
    search, servers, bench = _search(case_file, data)
    trace = read_trace(search.trace)
    assert search.trace.parent == data / "runs" / "live-advice" / "advisor" and trace.finished
    assert trace.stop_reason in STOP_REASONS and trace.stop_reason == search.advice.stop_reason
    assert trace.search["slo_label"] == SLO.label() and trace.search["hardware"] == [H200]
    assert trace.search["budget_gpu_s"] == 900.0 and trace.search["points"] == 8
    # every run was measured: a row and a raw folder each, in the order paid, two bench calls each (warm-up, run)
    rows = replay_rows("live-advice", data)
    assert [r.point_id for r in rows] == search.report.measured == [p["point_id"] for p in trace.payments]
    assert len(rows) == len(search.advice.steps) >= 3 and len(bench.calls) == 2 * len(rows)
    assert all(r.hardware == H200 and r.point_id.startswith(f"{H200}/") for r in rows)
    assert all((data / r.raw_path / raw.POINT_FILE).is_file() for r in rows)
    for row in rows:  # the repeats of a point are numbered 0, 1, … in the order measured
        same = [r.repeat for r in rows if raw.split_point_id(r.point_id)[0] == raw.split_point_id(row.point_id)[0]]
        assert same == list(range(len(same)))
    # one server per run of consecutive points of one config, each stopped, none left listed
    labels = [_label(p["point"]) for p in trace.payments]
    runs_of_a_config = 1 + sum(a != b for a, b in zip(labels, labels[1:], strict=False))
    assert any(a == b for a, b in zip(labels, labels[1:], strict=False))  # a server was kept for the next point
    assert len(servers.started) == len(_server_logs(data)) == runs_of_a_config
    assert not any(s.alive() for s in servers.started)
    assert read_record(data / "runs" / "live-advice" / SERVERS_FILE) == []
    # charged: the estimates, a start-up with each server; never past the budget
    assert [p["gpu_s"] for p in trace.payments] == [
        RUN_GPU_S + (STARTUP_GPU_S if i == 0 or labels[i] != labels[i - 1] else 0.0) for i in range(len(labels))
    ]
    assert search.advice.spent_gpu_s == trace.payments[-1]["spent_gpu_s"] <= 900.0
    assert all(p["held_gpu_s"] > 0 for p in trace.payments)
    # the steps as the page shows them: why each, the goodput expected and measured
    steps = trace_steps(trace)
    assert (steps["why"] != "").all() and (steps["source"] == "measured").all()
    assert steps["measured_goodput_rps"].tolist() == [s.measured_goodput_rps for s in search.advice.steps]
    chosen = search.advice.chosen
    assert chosen is not None and chosen["goodput_rps"] == max(steps["measured_goodput_rps"])
    assert latest_trace("live-advice", data).path == search.trace  # type: ignore[union-attr]


def test_rows_recorded_on_this_hardware_count_as_measured_and_cost_nothing(
    case_file: Path, data: Path, h200: None
) -> None:
    servers = Servers()
    recorded = run_case(
        load_plan(str(case_file), engines=["spec-off"]),
        data=data,
        bench=LoadBench(servers),
        server_factory=servers,
        progress=False,
        gpu_sampler=None,
    )
    assert len(recorded.measured) == 4
    search, servers, bench = _search(case_file, data)
    trace = read_trace(search.trace)
    free = [p for p in trace.payments if p["recorded"]]
    assert free and all(p["gpu_s"] == 0.0 and p["held_gpu_s"] == 0.0 for p in free)
    assert {p["point_id"] for p in free} <= set(recorded.measured)  # the recorded rows themselves
    measured = [p for p in trace.payments if not p["recorded"]]
    assert len(bench.calls) == 2 * len(measured) and len(servers.started) <= len(measured)
    assert {_label(p["point"]) for p in free} == {"spec-off"}
    # a recorded point measured again is its next repeat (r0 is recorded); the other config's start at r0
    assert all((raw.split_point_id(p["point_id"])[1] >= 1) == (_label(p["point"]) == "spec-off") for p in measured)
    assert len(replay_rows("live-advice", data)) == len(recorded.measured) + len(measured)

    again, servers, bench = _search(case_file, data, use_recorded=False)
    assert not any(p["recorded"] for p in read_trace(again.trace).payments) and bench.calls


def test_rows_of_other_hardware_are_not_taken_as_measured_here(
    case_file: Path, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    servers = Servers()
    run_case(
        load_plan(str(case_file)),
        data=data,
        bench=LoadBench(servers),
        server_factory=servers,
        progress=False,
        gpu_sampler=None,
    ).raise_for_failures()  # this machine's own hardware key (no GPU here)
    plan = load_plan(str(case_file))
    here = runner.collect_provenance
    h200 = here().model_copy(update={"gpu_name": "NVIDIA H200", "gpu_count": 1, "vllm_version": "0.26.0"})
    grid = live_plan.live_grid(plan)
    assert live.recorded_rows(grid, h200, data).empty
    assert len(live.recorded_rows(grid, here(), data)) == 8


def test_ctrl_c_stops_the_server_keeps_the_rows_and_ends_the_trace(case_file: Path, data: Path, h200: None) -> None:
    servers = Servers()
    with pytest.raises(KeyboardInterrupt):
        _search(case_file, data, servers, LoadBench(servers, interrupt_on_call=3))  # the second point's warm-up
    assert servers.started and not any(s.alive() for s in servers.started)
    assert read_record(data / "runs" / "live-advice" / SERVERS_FILE) == []
    trace = latest_trace("live-advice", data)
    assert trace is not None and not trace.finished and str(trace.stop_reason).startswith("interrupted")
    assert len(trace.payments) == 1 == len(replay_rows("live-advice", data))
    assert math.isnan(trace_steps(trace)["expected_goodput_rps"].iloc[0])  # no advice line: no model numbers


def test_a_point_that_fails_ends_the_search_and_is_kept_as_a_failure(case_file: Path, data: Path, h200: None) -> None:
    servers = Servers()
    with pytest.raises(PlaybookError, match="failed .RuntimeError: bench serve failed"):
        _search(case_file, data, servers, LoadBench(servers, fail_on_call=2))
    assert not any(s.alive() for s in servers.started)
    failures = list((data / "runs" / "live-advice" / "raw").glob(f"{H200}/*/*{raw.FAILURE_SUFFIX}"))
    assert len(failures) == 1 and replay_rows("live-advice", data) == []
    trace = latest_trace("live-advice", data)
    assert trace is not None and "bench serve failed" in str(trace.stop_reason) and trace.payments == []


def _advise(*argv: str) -> list[str]:
    return ["advise", "--mode", "live", *argv]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (_advise("--case", "llama-8b-draft-model", "--slo-tpot-p99-ms", "8"), "a live search needs --budget-gpu-min"),
        (_advise("--case", "llama-8b-draft-model", "--budget-gpu-min", "20"), "an SLO needs a TPOT p99 bound"),
        (
            _advise("--case", "llama-8b-draft-model", "--slo-tpot-p99-ms", "8", "--budget-gpu-min", "-1"),
            "--budget-gpu-min must be positive",
        ),
        (
            _advise(
                "--case", "llama-8b-draft-model", "--slo-tpot-p99-ms", "8", "--budget-gpu-min", "20", "--hardware", H200
            ),
            "--hardware picks recorded rows to replay",
        ),
        (_advise("--case", "no-such-case", "--slo-tpot-p99-ms", "8", "--budget-gpu-min", "20"), "Unknown case"),
        (
            _advise("--case", "gpt-oss-eagle3", "--slo-tpot-p99-ms", "8", "--budget-gpu-min", "20"),
            "6 planned grids of gpt-oss-eagle3 match",
        ),
        (
            _advise(
                "--case", "llama-8b-draft-model", "--slo-tpot-p99-ms", "8", "--budget-gpu-min", "20", "--gpus", "0,0"
            ),
            "GPU groups must name distinct GPUs",
        ),
        (
            _advise(
                "--case",
                "pp-27462",
                "--model-shape",
                "llama-3.1-8b",
                "--slo-tpot-p99-ms",
                "8",
                "--budget-gpu-min",
                "20",
                "--gpus",
                "0",
            ),
            "needs 2 GPUs",
        ),
        (
            ["advise", "--case", "llama-8b-draft-model", "--slo-tpot-p99-ms", "8", "--ignore-recorded"],
            "--gpus and --ignore-recorded are for --mode live",
        ),
    ],
)
def test_bad_input_is_one_line_before_anything_starts(
    argv: list[str], message: str, data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert [p.name for p in data.iterdir()] == ["reference"]  # nothing written, nothing started


def test_without_vllm_or_a_gpu_the_live_search_says_so_before_any_work(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _advise("--case", "llama-8b-draft-model", "--slo-tpot-p99-ms", "8", "--budget-gpu-min", "20")
    started: list[object] = []
    monkeypatch.setattr(live, "advise_live", lambda *a, **k: started.append(a))
    monkeypatch.setattr(runner.importlib.util, "find_spec", lambda name: None)  # no vLLM here
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        "error: live mode needs vLLM in this Python environment (pip install -r "
        "requirements-gpu.txt); replay mode needs none"
    )
    monkeypatch.setattr(live, "require_vllm", lambda: None)
    monkeypatch.setattr(runner, "query_gpus", lambda: ("cpu", 0, "none", None))
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.strip().startswith("error: live mode needs an NVIDIA GPU")
    assert started == []


@pytest.fixture
def live_command(h200: None, monkeypatch: pytest.MonkeyPatch) -> Servers:
    """``vllm-playbooks advise --mode live`` as if vLLM and a GPU were here: the search runs against the stand-in
    server and bench, at the test prices; the servers it started are in the returned factory."""
    servers = Servers()
    real = live.advise_live
    monkeypatch.setattr(live, "require_vllm", lambda: None)
    monkeypatch.setattr(live, "require_gpu", lambda: None)
    monkeypatch.setattr(live, "live_prices", lambda plan, grid, data=None: _prices(grid))
    monkeypatch.setattr(
        live,
        "advise_live",
        lambda *a, **k: real(*a, **k, bench=LoadBench(servers), server_factory=servers, gpu_sampler=None),
    )
    return servers


def test_the_command_prints_the_advice_the_rows_added_and_the_trace(
    case_file: Path, data: Path, live_command: Servers, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(_advise("--case", str(case_file), "--slo-tpot-p99-ms", "6", "--budget-gpu-min", "15")) == 0
    out = capsys.readouterr().out
    trace = latest_trace("live-advice", data)
    assert trace is not None and out.rstrip().endswith(f"trace: {trace.path}")
    assert out.startswith(f"A live search of live-advice (tiny-llama, 64 in / 16 out, closed loop) on {H200}, started")
    assert "SLO TPOT p99 ≤ 6 ms, budget 15.0 GPU-minutes (each of the grid's 8 points once: 6.0)" in out
    assert f"it stopped: {stop_text(trace)}." in out
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("  paid ")] == [
        f"  paid {n}" for n in range(1, len(trace.payments) + 1)
    ]
    assert f"live: {len(trace.payments)} point(s) measured on NVIDIA H200 (1 GPU per server), vLLM 0.26.0" in out


def test_a_budget_short_of_the_baseline_first_plan_is_refused_before_a_server_starts(
    case_file: Path, data: Path, live_command: Servers, capsys: pytest.CaptureFixture[str]
) -> None:
    # the plan: speculation off's first point, then n-gram's, each with its start-up, times the margin: 4.5 GPU-min
    needed_min = PLAN_MARGIN * 2 * (RUN_GPU_S + STARTUP_GPU_S) / 60.0
    assert needed_min == 4.5
    assert cli.main(_advise("--case", str(case_file), "--slo-tpot-p99-ms", "6", "--budget-gpu-min", "4.4")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: --budget-gpu-min 4.4 is short of the 4.5 GPU-minutes with which the search measures "
        "speculation off first (its first point and then a speculative one, server start-ups included, at "
        "this grid's prices, times 1.5); on less it would start with a speculative config and could "
        "recommend one with no baseline measured beside it: give --budget-gpu-min 4.5 or more"
    ]
    assert live_command.started == [] and latest_trace("live-advice", data) is None  # no server, no trace
    # that budget is enough: the search starts with speculation off
    assert cli.main(_advise("--case", str(case_file), "--slo-tpot-p99-ms", "6", "--budget-gpu-min", "4.5")) == 0
    trace = latest_trace("live-advice", data)
    assert trace is not None and trace.payments[0]["point"].startswith("spec-off")
