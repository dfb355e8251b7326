"""The live runner's orchestration against a real stand-in server process and a stand-in `bench serve`."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.conftest import ROOT, FakeBench, fake_server_argv
from vllm_playbooks.engine.server import VllmServer
from vllm_playbooks.errors import ConfigError, PlaybookError, SchemaError
from vllm_playbooks.results import raw
from vllm_playbooks.results.replay import replay_case, replay_rows, sync_rows
from vllm_playbooks.results.server_logs import SERVER_RECORD_KEYS, read_server_record
from vllm_playbooks.results.textfiles import read_text
from vllm_playbooks.run.case import run_case
from vllm_playbooks.run.plan import load_plan

CASE = "llama-8b-draft-model"


def factory(*extra: str):  # type: ignore[no-untyped-def]
    """A server factory that starts the stand-in server instead of vLLM."""

    def make(argv: list[str], log: Path, port: int, **kwargs: Any) -> VllmServer:
        return VllmServer(fake_server_argv(port, *extra), log, port, **kwargs)

    return make


def small_plan(**overrides: Any):  # type: ignore[no-untyped-def]
    """Speculation off and the default draft (unless ``engines`` says otherwise) at concurrency 1 and 4."""
    return load_plan(
        CASE,
        **{"concurrency": [1, 4], "min_duration_s": 0.001, "engines": ["spec-off", "draft-1b-k4-a0.8"], **overrides},
    )


def test_sweep_writes_every_point_and_replays(data: Path) -> None:
    bench = FakeBench()
    report = run_case(small_plan(), data=data, bench=bench, server_factory=factory(), progress=False)
    assert len(report.measured) == 4 and not report.failed
    rows = replay_rows(CASE, data)
    assert [r.point_id for r in rows] == report.measured
    spec = [r for r in rows if r.spec_method == "draft_model"]
    assert all(r.mean_acceptance_length == pytest.approx(1 + 236 / 100) for r in spec)
    # warm-up then measured run, one pair per point
    assert len(bench.calls) == 8
    point = json.loads((data / rows[0].raw_path / "point.json").read_text())
    assert point["bench_argv"][:3] == ["vllm", "bench", "serve"]
    assert point["server_argv"][0] == sys.executable  # the stand-in's argv, as the factory started it


def test_recorded_scrapes_and_logs_are_stored_compressed(data: Path) -> None:
    run_case(small_plan(engines=["spec-off"]), data=data, bench=FakeBench(), server_factory=factory(), progress=False)
    case_dir = data / "runs" / CASE
    point_dir = raw.finished_points(case_dir)[0]
    assert {p.name for p in point_dir.glob("*.prom*")} == {"metrics_before.prom.gz", "metrics_after.prom.gz"}
    logs = sorted(p.name for p in (case_dir / "logs").glob("*.log*"))
    assert len(logs) == 1 and logs[0].startswith("spec-off-") and logs[0].endswith(".log.gz"), logs
    assert "vllm:" in read_text(point_dir / raw.METRICS_AFTER)  # read by its plain name
    assert read_text(case_dir / "logs" / logs[0])  # the stand-in server's output, kept
    # beside the log, the hardware its server launched on: the hardware of the point it measured
    hardware = point_dir.relative_to(raw.raw_root(case_dir)).parts[0]
    assert read_server_record(case_dir / "logs" / logs[0])["hardware"] == hardware


def test_resume_skips_finished_points(data: Path) -> None:
    run_case(small_plan(engines=["spec-off"]), data=data, bench=FakeBench(), server_factory=factory(), progress=False)
    bench = FakeBench()
    report = run_case(small_plan(), data=data, bench=bench, server_factory=factory(), progress=False)
    assert len(report.skipped) == 2 and len(report.measured) == 2
    assert all("draft" in pid for pid in report.measured)
    assert len(bench.calls) == 4


def test_server_crash_mid_sweep_keeps_finished_points_and_names_the_failed_one(data: Path) -> None:
    # 2 scrapes per point: the server dies on the third scrape, i.e. during the second point
    report = run_case(
        small_plan(engines=["spec-off"]),
        data=data,
        bench=FakeBench(),
        server_factory=factory("--die-after-scrapes", "2"),
        progress=False,
    )
    assert len(report.measured) == 1 and len(report.failed) == 1
    (failed,) = report.failed
    assert "c4" in failed and "metrics" in report.failed[failed]
    assert raw.failure_file(data / "runs" / CASE, failed).exists()
    assert len(replay_rows(CASE, data)) == 1
    with pytest.raises(PlaybookError, match="1 point.s. failed; 1 measured and kept"):
        report.raise_for_failures()
    # the retry measures only what is missing and clears the failure record
    again = run_case(
        small_plan(engines=["spec-off"]), data=data, bench=FakeBench(), server_factory=factory(), progress=False
    )
    assert again.measured == [failed] and not raw.failure_file(data / "runs" / CASE, failed).exists()


def test_bench_failure_is_recorded_and_the_sweep_goes_on(data: Path) -> None:
    report = run_case(
        small_plan(engines=["spec-off"]),
        data=data,
        bench=FakeBench(fail_on_call=1),
        server_factory=factory(),
        progress=False,
    )
    assert len(report.failed) == 1 and len(report.measured) == 1


def test_a_run_with_failed_requests_is_a_failure_not_a_row(data: Path) -> None:
    """Call 2 is the first point's measured run (call 1 its calibration): three of its requests failed, so the point
    is kept as a failure file and the next run measures it again; the other point is recorded."""
    plan = small_plan(engines=["spec-off"])
    report = run_case(
        plan, data=data, bench=FakeBench(lose_requests_on_call=2), server_factory=factory(), progress=False
    )
    assert len(report.failed) == 1 and len(report.measured) == 1
    failed = next(iter(report.failed))
    assert "completed" in report.failed[failed] and "3 failed" in report.failed[failed]
    assert raw.failure_file(data / "runs" / CASE, failed).exists()
    assert [r.point_id for r in replay_rows(CASE, data)] == report.measured
    again = run_case(plan, data=data, bench=FakeBench(), server_factory=factory(), progress=False)
    assert again.measured == [failed] and not raw.failure_file(data / "runs" / CASE, failed).exists()


def test_server_that_never_starts_fails_its_points_only(data: Path) -> None:
    report = run_case(
        small_plan(), data=data, bench=FakeBench(), server_factory=factory("--exit-at-start", "1"), progress=False
    )
    assert len(report.failed) == 4 and "exited with code 1" in next(iter(report.failed.values()))
    assert replay_rows(CASE, data) == []
    # the one line each failure gets names the root cause the server logged
    with pytest.raises(PlaybookError, match=r"ServerError \(ValueError: No available memory for the cache blocks\)"):
        report.raise_for_failures()


def test_a_short_run_is_measured_again_with_a_longer_one(data: Path) -> None:
    bench = FakeBench()  # its result always lasts 33.4 s: longer than 30 s, so one attempt
    run_case(
        load_plan(CASE, concurrency=[1], engines=["spec-off"]),
        data=data,
        bench=bench,
        server_factory=factory(),
        progress=False,
    )
    assert len(bench.calls) == 2
    bench = FakeBench()
    run_case(
        load_plan(CASE, concurrency=[4], engines=["spec-off"], min_duration_s=60),
        data=data,
        bench=bench,
        server_factory=factory(),
        progress=False,
    )
    measured = [int(c[c.index("--num-prompts") + 1]) for c in bench.calls[1:]]
    assert len(measured) == 2 and measured[1] > measured[0]
    (row,) = [r for r in replay_rows(CASE, data) if r.concurrency == 4]
    assert json.loads((data / row.raw_path / "point.json").read_text())["measurement_attempts"] == 2


def test_replay_catches_a_table_that_drifted_from_its_raw_files(data: Path) -> None:
    run_case(small_plan(engines=["spec-off"]), data=data, bench=FakeBench(), server_factory=factory(), progress=False)
    table = data / "runs" / CASE / "runs.csv"
    rows = list(csv.DictReader(table.open()))
    rows[0]["output_tok_s"] = str(float(rows[0]["output_tok_s"]) * 2)
    with table.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(SchemaError, match=r"differs from its raw files in \['output_tok_s'\]"):
        replay_rows(CASE, data)


def test_a_crash_between_the_two_writes_is_healed(data: Path) -> None:
    run_case(small_plan(engines=["spec-off"]), data=data, bench=FakeBench(), server_factory=factory(), progress=False)
    table = data / "runs" / CASE / "runs.csv"
    lines = table.read_text().splitlines(keepends=True)
    table.write_text("".join(lines[:-1]))  # the last row never made it to the table
    with pytest.raises(SchemaError, match="raw points without rows"):
        replay_rows(CASE, data)
    assert len(sync_rows(CASE, data)) == 1
    assert len(replay_rows(CASE, data)) == 2


def test_a_raw_folder_is_never_overwritten(data: Path) -> None:
    report = run_case(
        small_plan(engines=["spec-off"]), data=data, bench=FakeBench(), server_factory=factory(), progress=False
    )
    with pytest.raises(SchemaError, match="never overwritten"):
        raw.write_point(data / "runs" / CASE, report.measured[0], dict.fromkeys(raw.REQUIRED_FILES, "x"))


SIGTERM_SCRIPT = """
import sys, time
sys.path.insert(0, {root!r})
from tests.conftest import FakeBench
from tests.unit.run.test_case import factory
from vllm_playbooks.run.plan import load_plan
from vllm_playbooks.run.case import run_case

class SlowBench(FakeBench):
    def __call__(self, argv, timeout_s=None):
        time.sleep(60)

run_case(load_plan("llama-8b-draft-model", concurrency=[1], engines=["spec-off"]), bench=SlowBench(),
         server_factory=factory("--child-pid-file", {pid_file!r}), progress=False)
"""


def test_sigterm_to_the_runner_stops_the_server_group(data: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    script = SIGTERM_SCRIPT.format(root=str(ROOT), pid_file=str(pid_file))
    runner = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 30
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.5)  # let the runner reach the bench call
    child = int(pid_file.read_text())
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=30) != 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stat = Path(f"/proc/{child}/stat")
        if not stat.exists() or stat.read_text().split()[2] == "Z":
            break
        time.sleep(0.2)
    else:
        pytest.fail("the server's child process outlived the runner")


def test_the_engine_env_reaches_the_server_factory(data: Path) -> None:
    import yaml

    from vllm_playbooks.run.grid import plan_file
    from vllm_playbooks.run.plan import plan_from_dict

    spec = yaml.safe_load(plan_file(CASE).read_text())
    spec["engine_defaults"]["env"] = {"PLAYBOOK_MARK": "1"}
    plan = plan_from_dict(spec, concurrency=[1], engines=["spec-off"], min_duration_s=0.001)
    seen: list[Any] = []

    def make(argv: list[str], log: Path, port: int, **kwargs: Any) -> VllmServer:
        seen.append(kwargs.get("env"))
        return VllmServer(fake_server_argv(port), log, port, **kwargs)

    run_case(plan, data=data, bench=FakeBench(), server_factory=make, progress=False).raise_for_failures()
    assert seen == [{"PLAYBOOK_MARK": "1"}]


def test_a_stalled_run_is_measured_again(data: Path) -> None:
    # scrapes 1 and 2 bracket the first measured run; the stand-in reports 10 gaps of 2.5-5 s at scrape 2
    bench = FakeBench()
    run_case(
        load_plan(CASE, concurrency=[1], engines=["spec-off"]),
        data=data,
        bench=bench,
        server_factory=factory("--stall-at-scrapes", "2"),
        progress=False,
    )
    assert len(bench.calls) == 3  # warm-up, the stalled run, the run kept
    (row,) = replay_rows(CASE, data)
    point = json.loads((data / row.raw_path / "point.json").read_text())
    assert point["measurement_attempts"] == 2
    (reason,) = point["remeasured_because"]
    assert reason.startswith("stalled: 10 output-token gaps over 2.5 s, at least ")
    # a stall in the second run too is kept as measured (two attempts at most): the pages flag it
    bench = FakeBench()
    run_case(
        load_plan(CASE, concurrency=[4], engines=["spec-off"]),
        data=data,
        bench=bench,
        server_factory=factory("--stall-at-scrapes", "2", "4"),
        progress=False,
    )
    assert len(bench.calls) == 3
    from vllm_playbooks.results.stalls import stall_table

    table = stall_table(replay_case(CASE, data), data).set_index("concurrency")
    assert table.loc[1, "stalled_gaps"] == 0 and table.loc[4, "stalled_gaps"] == 10
    assert table.loc[4, "longest_gap_at_most_s"] == 5.0


def test_a_recorded_stalled_point_is_measured_again_as_the_next_repeat(data: Path) -> None:
    # both attempts of the c4 point stall (scrapes 2 and 4): it is recorded as r0, stalled
    run_case(
        load_plan(CASE, concurrency=[4], engines=["spec-off"]),
        data=data,
        bench=FakeBench(),
        server_factory=factory("--stall-at-scrapes", "2", "4"),
        progress=False,
    )
    # the next call measures it again as r1 (a server that does not stall), keeps r0, and measures c1 as planned
    report = run_case(
        load_plan(CASE, concurrency=[1, 4], engines=["spec-off"]),
        data=data,
        bench=FakeBench(),
        server_factory=factory(),
        progress=False,
    )

    def load_and_repeat(pid: str) -> str:  # ".../in512-out128-c4-r1" -> "c4-r1"
        return "-".join(pid.rsplit("-", 2)[-2:])

    assert sorted(map(load_and_repeat, report.measured)) == ["c1-r0", "c4-r1"]
    assert list(map(load_and_repeat, report.skipped)) == ["c4-r0"]  # recorded, kept, not run again
    ids = sorted(load_and_repeat(row.point_id) for row in replay_rows(CASE, data))
    assert ids == ["c1-r0", "c4-r0", "c4-r1"]
    # a third call has nothing left to do: r1 did not stall
    again = run_case(
        load_plan(CASE, concurrency=[1, 4], engines=["spec-off"]),
        data=data,
        bench=FakeBench(),
        server_factory=factory(),
        progress=False,
    )
    assert again.measured == [] and len(again.skipped) == 2
    # and without remeasure_stalled a stalled record counts as measured
    from vllm_playbooks.run.case import points_to_measure

    plan = load_plan(CASE, concurrency=[4], engines=["spec-off"])
    (planned,) = plan.points()
    assert points_to_measure(plan, {planned.point_id}, set()) == []
    (extra,) = points_to_measure(plan, {planned.point_id}, {planned.point_id})
    assert (extra.repeat, extra.load) == (1, planned.load)


def test_a_live_run_takes_the_gpu_memory_from_the_gpu_at_hand() -> None:
    from tests.fakes.fake_nvml import FakeNvml, two_h200
    from vllm_playbooks.run.case import live_overrides

    assert live_overrides({"concurrency": [1]}, two_h200()) == {"concurrency": [1], "gpu_memory_gib": 140.4}
    assert live_overrides({"gpu_memory_gib": 80.0}, two_h200()) == {"gpu_memory_gib": 80.0}  # given: kept
    assert live_overrides(None, FakeNvml([], fail_init=True)) == {}  # no NVML: the case file's figure


def test_rows_of_another_hardware_are_neither_skipped_nor_mixed(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Points recorded on an H200 are there; a run on this machine measures its own, beside them; a second run here
    skips exactly its own."""
    from vllm_playbooks.run import case as runner

    here = runner.collect_provenance
    monkeypatch.setattr(
        runner,
        "collect_provenance",
        lambda repo=None: here(repo).model_copy(
            update={"gpu_name": "NVIDIA H200", "gpu_count": 1, "vllm_version": "0.26.0"}
        ),
    )
    plan = small_plan(engines=["spec-off"])
    h200 = run_case(plan, data=data, bench=FakeBench(), server_factory=factory(), progress=False)
    assert len(h200.measured) == len(plan.points()) and all(
        p.startswith("nvidia-h200-x1-vllm0.26.0/") for p in h200.measured
    )
    monkeypatch.setattr(runner, "collect_provenance", here)
    mine = run_case(plan, data=data, bench=FakeBench(), server_factory=factory(), progress=False)
    assert not mine.skipped and len(mine.measured) == len(plan.points())
    assert not set(mine.measured) & set(h200.measured)
    rows = replay_rows(CASE, data)
    by_hardware = {hw: sorted(r.point_id for r in rows if r.hardware == hw) for hw in {r.hardware for r in rows}}
    assert by_hardware == {
        "nvidia-h200-x1-vllm0.26.0": sorted(h200.measured),
        mine.measured[0].split("/")[0]: sorted(mine.measured),
    }
    again = run_case(plan, data=data, bench=FakeBench(), server_factory=factory(), progress=False)
    assert again.measured == [] and sorted(again.skipped) == sorted(mine.measured)


def test_replay_shows_only_the_loads_and_engines_asked_for(frozen_data: Path) -> None:
    from vllm_playbooks.run.case import case_rows

    every = case_rows("deepseek-mtp", "replay")[0]
    assert set(every["request_rate_qps"].dropna()) == {1.0, 4.0, 8.0} and 64 in set(every["concurrency"])
    rates = case_rows("deepseek-mtp", "replay", {"request_rate_qps": "[1, 8]", "concurrency": None})[0]
    assert set(rates["request_rate_qps"]) == {1.0, 8.0} and len(rates) == (every["request_rate_qps"].isin([1, 8])).sum()
    off = case_rows("deepseek-mtp", "replay", {"engines": ["spec-off"]})[0]
    assert set(off["engine_label"]) == {"spec-off"} and len(off) == (every["engine_label"] == "spec-off").sum()
    # the quick part runs the 16-expert shape, of which no row is recorded: replay says so rather than show other rows
    with pytest.raises(ConfigError, match=r"no recorded row at engine \['fit80-spec-off', 'fit80-mtp-k1-a0.85'\]"):
        case_rows("deepseek-mtp", "replay", part="quick")


def test_replay_of_a_part_leaves_out_its_configs_not_measured_yet(data: Path) -> None:
    """The Llama quick part names speculation off and both drafts; with the first two recorded, replay shows them."""
    from vllm_playbooks.run.case import case_rows

    run_case(small_plan(concurrency=[1, 16]), data=data, bench=FakeBench(), server_factory=factory(), progress=False)
    quick = case_rows(CASE, "replay", part="quick")[0]
    assert set(quick["engine_label"]) == {"spec-off", "draft-1b-k4-a0.8"} and set(quick["concurrency"]) == {1, 16}
    with pytest.raises(ConfigError, match=r"no recorded row at engine \['draft-1b-k4-a0.8-async'\]"):
        case_rows(CASE, "replay", {"engines": ["draft-1b-k4-a0.8-async"]})


def test_replay_refuses_what_no_recorded_row_holds(frozen_data: Path) -> None:
    from vllm_playbooks.run.case import case_rows

    with pytest.raises(ConfigError, match=r"no recorded row at concurrency \[2\]; recorded: \[64\]"):
        case_rows("deepseek-mtp", "replay", {"concurrency": [2]})
    with pytest.raises(ConfigError, match=r"no recorded row at engine \['mtp-k1-a0.81'\]; recorded: \['mtp-k1"):
        case_rows("deepseek-mtp", "replay", {"engines": ["mtp-k1-a0.81"]})
    with pytest.raises(ConfigError, match=r"no recorded row at request rate \[1\]; recorded: \[4\]"):
        case_rows("deepseek-mtp", "replay", {"engines": ["mtp-k1-a0.85"], "request_rate_qps": [1]})
    with pytest.raises(ConfigError, match="no recorded row of the chosen engines at the chosen loads"):
        case_rows("gpt-oss-eagle3", "replay", {"profiles": ["swe"]})  # the frozen copy holds chat rows only
    with pytest.raises(ConfigError, match="Unknown case 'nope'"):
        case_rows("nope", "replay")
    with pytest.raises(ConfigError, match="no part 'x'"):
        case_rows("deepseek-mtp", "replay", part="x")


def test_the_rows_name_their_hardware() -> None:
    from vllm_playbooks.run.case import hardware_in_words

    rows = pd.DataFrame(
        {
            "point_id": ["a/c1-r0", "b/c1-r0", "b/c4-r0"],
            "gpu_name": ["NVIDIA H200", "NVIDIA A100", "NVIDIA A100"],
            "gpu_count": [1, 2, 2],
            "vllm_version": ["0.26.0"] * 3,
        }
    )
    assert hardware_in_words(rows) == (
        "NVIDIA A100 (2 GPUs per server), vLLM 0.26.0; NVIDIA H200 (1 GPU per server), vLLM 0.26.0"
    )
    assert hardware_in_words(rows.iloc[:0]) == "no rows"


def test_live_mode_needs_a_gpu_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_playbooks.run import case

    monkeypatch.setattr(case, "query_gpus", lambda: ("cpu", 0, "none", None))
    with pytest.raises(ConfigError, match="live mode needs an NVIDIA GPU, and this machine shows none"):
        case.require_gpu()

    monkeypatch.setattr(case, "query_gpus", lambda: ("NVIDIA H200", 1, "570", 143771))
    case.require_gpu()


def test_one_engine_servers_lifetime_is_started_listed_stopped_and_its_log_kept(data: Path) -> None:
    from vllm_playbooks.engine.leftovers import SERVERS_FILE, read_record
    from vllm_playbooks.errors import ServerError
    from vllm_playbooks.run.engine_server import EngineServer

    case_dir = data / "runs" / CASE
    engine, other = small_plan().engines
    lifetime = EngineServer(engine, case_dir, FakeBench(), factory())
    with lifetime as server:
        assert server.healthy() and len(read_record(case_dir / SERVERS_FILE)) == 1
        assert lifetime.log_path.name.startswith(f"{engine.config_id()}-")
    assert not server.alive() and read_record(case_dir / SERVERS_FILE) == []
    assert not lifetime.log_path.exists() and lifetime.log_path.with_name(lifetime.log_path.name + ".gz").exists()
    lifetime.stop()  # a second stop does nothing

    on = ("nvidia-h100-80gb-hbm3-x1-vllm0.26.0", "NVIDIA H100 80GB HBM3", "0.26.0")
    broken = EngineServer(other, case_dir, FakeBench(), factory("--exit-at-start", "1"), hardware=on)
    with pytest.raises(ServerError, match="exited with code 1"):
        broken.start()
    assert broken.log_path.with_name(broken.log_path.name + ".gz").exists()  # its log is kept, compressed
    # and, written before the server started, the hardware it failed on
    assert read_server_record(broken.log_path) == dict(zip(SERVER_RECORD_KEYS, on, strict=True))
    assert read_record(case_dir / SERVERS_FILE) == []
