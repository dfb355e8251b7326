"""Engine configs of one case spread over GPU groups: assignment, refusals, the workers' environment, the merge."""

from __future__ import annotations

import shutil
import stat
import sys
import time
from pathlib import Path

import pytest

from vllm_playbooks import cli
from vllm_playbooks.cli.run import INTERRUPTED
from vllm_playbooks.errors import ConfigError, PlaybookError
from vllm_playbooks.paths import data_dir
from vllm_playbooks.results import raw
from vllm_playbooks.results.replay import replay_rows
from vllm_playbooks.run import parallel
from vllm_playbooks.run.parallel import assign_engines, check_group_sizes, merge_into, run_on_gpus, worker_argv
from vllm_playbooks.run.plan import load_plan

ROOT = Path(__file__).resolve().parents[3]
CASE = "llama-8b-draft-model"
#: The recorded points the stand-in workers "measure" by copying them.
RECORDED = data_dir() / "runs" / CASE


@pytest.fixture(autouse=True)
def _a_machine_with_vllm_and_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line checks for vLLM and a GPU before any worker starts; the stand-in workers need neither."""
    monkeypatch.setattr(parallel, "require_vllm", lambda: None)
    monkeypatch.setattr(parallel, "require_gpu", lambda: None)


def test_the_command_line_refuses_a_machine_without_a_gpu_before_any_worker(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from vllm_playbooks.run import case

    monkeypatch.setattr(parallel, "require_gpu", case.require_gpu)
    monkeypatch.setattr(case, "query_gpus", lambda: ("cpu", 0, "none", None))
    monkeypatch.setattr(parallel, "run_on_gpus", lambda *a, **k: pytest.fail("a worker started"))
    assert cli.main(["run", "--case", "llama-8b-draft-model", "--gpus", "0", "--part", "quick"]) == 2
    assert _not_warnings(capsys.readouterr().err)[0].startswith(
        "error: live mode needs an NVIDIA GPU, and this machine shows none"
    )


def _not_warnings(err: str) -> list[str]:
    """The lines of standard error other than the config's one-line advisories (``warning: …``)."""
    return [line for line in err.strip().splitlines() if not line.startswith("warning: ")]


def _recorded_points(config_prefix: str) -> list[Path]:
    """The recorded point folders of the configs whose id starts with ``config_prefix``."""
    return sorted(p.parent for p in (RECORDED / "raw").glob(f"*/{config_prefix}*/*/point.json"))


def test_engines_are_dealt_round_robin() -> None:
    assert assign_engines(["a", "b", "c"], ["0", "1"]) == {"0": ["a", "c"], "1": ["b"]}
    assert assign_engines(["a"], ["0", "1"]) == {"0": ["a"]}  # an idle group is left out


def test_the_engines_named_run_in_that_order() -> None:
    # the case file lists spec-off first; naming it last puts it after a warm server on GPU 0
    plan = load_plan("deepseek-mtp", engines=["mtp-k1-a0.81", "mtp-k1-a0.90", "spec-off"])
    labels = [engine.label for engine in plan.engines]
    assert labels == ["mtp-k1-a0.81", "mtp-k1-a0.90", "spec-off"]
    assert assign_engines(labels, ["0", "1"]) == {"0": ["mtp-k1-a0.81", "spec-off"], "1": ["mtp-k1-a0.90"]}
    assert [p.engine.label for p in plan.points()][::8] == labels  # eight loads each, one server after another
    assert [e.label for e in load_plan("deepseek-mtp").engines][:2] == ["spec-off", "mtp-k1-a0.85"]  # file order


@pytest.mark.parametrize("groups", [[], ["0", "0"], ["0,1", "1"], ["0,"]])
def test_bad_gpu_groups_are_refused(groups: list[str]) -> None:
    with pytest.raises(ConfigError):
        assign_engines(["a"], groups)


def test_an_engine_needing_more_gpus_than_its_group_is_refused() -> None:
    plan = load_plan("pp-27462", engines=["8b-pp2-mns64"], concurrency=[8])
    with pytest.raises(ConfigError, match="needs 2 GPUs .* group '0' has 1"):
        check_group_sizes(plan.engines, {"0": ["8b-pp2-mns64"]})
    check_group_sizes(plan.engines, {"0,1": ["8b-pp2-mns64"]})


def _copy_points(source_case_dir: Path, data: Path, config_prefix: str) -> list[str]:
    """Put the recorded raw points of one config (and its logs) into a worker-like data folder; return their ids."""
    target = data / "runs" / CASE
    ids = []
    for point in raw.finished_points(source_case_dir):
        pid = point.relative_to(raw.raw_root(source_case_dir)).as_posix()
        if pid.split("/")[1].startswith(config_prefix):
            shutil.copytree(point, raw.raw_root(target) / pid)
            ids.append(pid)
    (target / "logs").mkdir(parents=True, exist_ok=True)
    for log in (source_case_dir / "logs").glob(f"{config_prefix}*"):
        shutil.copy2(log, target / "logs" / log.name)
    return ids


@pytest.mark.recorded_data
def test_merge_copies_points_and_logs_and_rebuilds_rows(tmp_path: Path) -> None:
    worker, data = tmp_path / "worker", tmp_path / "data"
    ids = _copy_points(RECORDED, worker, "spec-off")
    assert ids and len(ids) == len(_recorded_points("spec-off"))
    assert sorted(merge_into(CASE, worker, data)) == sorted(ids)
    assert sorted(r.point_id for r in replay_rows(CASE, data)) == sorted(ids)
    assert any((data / "runs" / CASE / "logs").iterdir())
    assert merge_into(CASE, worker, data) == []  # nothing twice, nothing overwritten


@pytest.mark.recorded_data
def test_merge_keeps_the_failures_of_points_not_measured_and_drops_those_measured_since(tmp_path: Path) -> None:
    worker, data = tmp_path / "worker", tmp_path / "data"
    measured = _copy_points(RECORDED, worker, "spec-off")[0]
    config = measured.rsplit("/", 1)[0]
    failed = f"{config}/in1-out1-c1-r0"  # a point whose server did not start
    for pid in (failed, measured):  # the second: a failure kept before the point was measured on another worker
        raw.record_failure(tmp_path / "elsewhere" / CASE, pid, "ServerError: exited", {"server_log": "/tmp/x.log"})
    shutil.copytree(
        raw.raw_root(tmp_path / "elsewhere" / CASE), raw.raw_root(worker / "runs" / CASE), dirs_exist_ok=True
    )
    merge_into(CASE, worker, data)
    kept = raw.failure_records(data / "runs" / CASE)
    assert [record["point_id"] for record in kept] == [failed]
    assert kept[0]["server_log"] == "/tmp/x.log"
    # the failed point, measured later by another worker: its failure goes once its folder is merged
    recorded = raw.raw_root(RECORDED) / measured
    shutil.copytree(recorded, raw.raw_root(tmp_path / "later" / "runs" / CASE) / failed)
    merge_into(CASE, tmp_path / "later", data)
    assert raw.failure_records(data / "runs" / CASE) == []


@pytest.mark.recorded_data
def test_workers_get_their_gpus_and_own_folders_and_their_points_are_merged(tmp_path: Path) -> None:
    # A stand-in for the worker: records which GPUs and data folder it got, and "measures" by copying recorded points.
    stub = tmp_path / "worker.py"
    stub.write_text(
        "import os, shutil, sys\n"
        "from pathlib import Path\n"
        f"recorded = Path({str(RECORDED)!r})\n"
        "data = Path(os.environ['VLLM_PLAYBOOKS_DATA_DIR'])\n"
        "gpus = os.environ['CUDA_VISIBLE_DEVICES']\n"
        "(data.parent / f'seen-{gpus}').write_text(str(data) + ' ' + ' '.join(sys.argv[1:]))\n"
        "config = 'spec-off' if gpus == '0' else 'draft-1b'\n"
        "for point in sorted(p.parent for p in (recorded / 'raw').glob('*/' + config + '*/*/point.json')):\n"
        "    target = data / 'runs' / '" + CASE + "' / 'raw' / point.relative_to(recorded / 'raw')\n"
        "    if not target.exists():\n"
        "        shutil.copytree(point, target)\n"
    )
    launcher = tmp_path / "python"
    launcher.write_text(f'#!/bin/sh\nexec {sys.executable} {stub} "$@"\n')
    launcher.chmod(launcher.stat().st_mode | stat.S_IEXEC)
    data = tmp_path / "data"
    report = run_on_gpus(
        CASE,
        ["0", "1"],
        data=data,
        python=str(launcher),
        workdir=tmp_path,
        concurrency=[1, 4],
        engines=["spec-off", "draft-1b-k4-a0.8"],
    )
    assert report.assignment == {"0": ["spec-off"], "1": ["draft-1b-k4-a0.8"]}
    assert report.returncodes == {"0": 0, "1": 0}
    seen = {p.name: p.read_text() for p in tmp_path.glob("*/seen-*")}
    assert set(seen) == {"seen-0", "seen-1"}
    assert seen["seen-0"].split()[0] != seen["seen-1"].split()[0]  # each worker its own data folder
    assert "--engines spec-off --overrides" in seen["seen-0"] and '"concurrency": [1, 4]' in seen["seen-0"]
    copied = len(_recorded_points("spec-off")) + len(_recorded_points("draft-1b"))
    assert len(report.added) == copied and len(replay_rows(CASE, data)) == copied
    report.raise_for_failures()


def test_a_failed_worker_is_reported_after_its_points_are_merged(tmp_path: Path) -> None:
    launcher = tmp_path / "python"
    launcher.write_text("#!/bin/sh\nexit 3\n")
    launcher.chmod(launcher.stat().st_mode | stat.S_IEXEC)
    report = run_on_gpus(
        CASE,
        ["0"],
        data=tmp_path / "data",
        python=str(launcher),
        workdir=tmp_path,
        engines=["spec-off"],
        concurrency=[1],
    )
    assert report.returncodes == {"0": 3} and report.added == []
    with pytest.raises(PlaybookError, match="GPUs 0: exit 3"):
        report.raise_for_failures()


def test_bad_input_is_refused_before_any_worker(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "--case", CASE, "--gpus", "0", "--engines", "no-such-engine"]) == 2
    assert "error:" in capsys.readouterr().err


def test_worker_argv_carries_labels_and_overrides() -> None:
    argv = worker_argv("c", ["a", "b"], {"concurrency": [8]}, python="py")
    assert argv == [
        "py",
        "-m",
        "vllm_playbooks",
        "worker",
        "--case",
        "c",
        "--engines",
        "a",
        "b",
        "--overrides",
        '{"concurrency": [8]}',
    ]


def test_a_case_file_of_ones_own_loads_by_path(tmp_path: Path) -> None:
    import yaml

    own = tmp_path / "mine.yaml"
    own.write_text(
        yaml.safe_dump(
            {
                "case": "mine",
                "engine_defaults": {"model": "llama-3.1-8b", "max_model_len": 2048},
                "engines": [{"label": "off"}],
                "loads": {"input_len": 8, "output_len": 8, "concurrency": [1]},
            }
        )
    )
    plan = load_plan(str(own))
    assert plan.case == "mine" and [e.label for e in plan.engines] == ["off"]
    with pytest.raises(ConfigError, match="no case file"):
        load_plan(str(tmp_path / "missing.yaml"))
    (tmp_path / "nameless.yaml").write_text("engines: []\n")
    with pytest.raises(ConfigError, match="a mapping with a 'case' name"):
        load_plan(str(tmp_path / "nameless.yaml"))


def _interrupted(*args: object, **kwargs: object) -> None:
    raise KeyboardInterrupt


def test_an_interrupt_ends_with_one_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:

    monkeypatch.setattr(parallel, "run_on_gpus", _interrupted)
    assert cli.main(["run", "--case", CASE, "--gpus", "0", "1"]) == 130
    assert _not_warnings(capsys.readouterr().err) == [f"{INTERRUPTED}; the points every worker finished were merged"]
    monkeypatch.setattr(parallel, "run_case", _interrupted)
    assert cli.main(["worker", "--case", CASE, "--engines", "spec-off"]) == 130
    assert capsys.readouterr().err.strip() == INTERRUPTED


@pytest.mark.recorded_data
def test_the_time_limit_interrupts_the_workers_and_keeps_what_they_finished(tmp_path: Path) -> None:
    # A stand-in worker: "measures" one point, then runs long; on the interrupt it stops as the real one does.
    stub = tmp_path / "worker.py"
    stub.write_text(
        "import os, shutil, signal, sys, time\n"
        "from pathlib import Path\n"
        "signal.signal(signal.SIGINT, lambda *_: sys.exit(130))\n"
        f"recorded = Path({str(RECORDED)!r})\n"
        "data = Path(os.environ['VLLM_PLAYBOOKS_DATA_DIR'])\n"
        "point = sorted(p.parent for p in (recorded / 'raw').glob('*/spec-off*/*/point.json'))[0]\n"
        "shutil.copytree(point, data / 'runs' / '" + CASE + "' / 'raw' / point.relative_to(recorded / 'raw'))\n"
        "time.sleep(60)\n"
    )
    launcher = tmp_path / "python"
    launcher.write_text(f'#!/bin/sh\nexec {sys.executable} {stub} "$@"\n')
    launcher.chmod(launcher.stat().st_mode | stat.S_IEXEC)
    data = tmp_path / "data"
    began = time.monotonic()
    report = run_on_gpus(
        CASE,
        ["0"],
        data=data,
        python=str(launcher),
        workdir=tmp_path,
        time_limit_s=3,
        engines=["spec-off"],
        concurrency=[1],
    )
    assert time.monotonic() - began < 30
    assert report.timed_out and report.returncodes == {"0": 130}
    assert len(report.added) == 1 and len(replay_rows(CASE, data)) == 1
    with pytest.raises(PlaybookError, match="the time limit stopped the workers of GPUs 0"):
        report.raise_for_failures()


@pytest.mark.parametrize("limit", ["0", "-5", "nan", "inf", "soon"])
def test_a_time_limit_must_be_a_positive_number(limit: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(["run", "--case", CASE, "--gpus", "0", "--time-limit-s", limit])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.startswith("error: argument --time-limit-s: ") and err.count("\n") == 1


def test_a_part_of_the_grid_is_chosen_by_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:

    seen: dict[str, object] = {}

    def record(case: str, groups: list[str], **kwargs: object) -> parallel.ParallelReport:
        seen.update(case=case, groups=groups, **kwargs)
        return parallel.ParallelReport(assignment={})

    monkeypatch.setattr(parallel, "run_on_gpus", record)
    assert cli.main(["run", "--case", "gpt-oss-eagle3", "--gpus", "0", "1", "--part", "1-verdict"]) == 0
    assert seen["engines"] == ["spec-off", "eagle3-k3-a0.71"] and seen["profiles"] == ["chat"]
    assert (
        cli.main(["run", "--case", "gpt-oss-eagle3", "--gpus", "0", "--part", "1-verdict", "--engines", "spec-off"])
        == 0
    )
    assert seen["engines"] == ["spec-off"] and seen["profiles"] == ["chat"]
    assert cli.main(["run", "--case", "gpt-oss-eagle3", "--gpus", "0", "--part", "9-nothing"]) == 2
    assert "no part '9-nothing'" in capsys.readouterr().err


def test_repeats_ask_for_a_second_run_of_the_chosen_points(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_playbooks.run.plan import load_plan

    calls: list[dict[str, object]] = []

    def record(
        case: str, groups: list[str], *, time_limit_s: float | None, **overrides: object
    ) -> parallel.ParallelReport:
        calls.append(overrides)
        return parallel.ParallelReport(assignment={})

    monkeypatch.setattr(parallel, "run_on_gpus", record)
    chosen = [
        "--case",
        "gpt-oss-eagle3",
        "--gpus",
        "0",
        "--part",
        "4-long-verdict",
        "--engines",
        "spec-off",
        "--concurrency",
        "64",
    ]
    assert cli.main(["run", *chosen, "--repeats", "2"]) == 0 and cli.main(["run", *chosen]) == 0
    tails = [[p.point_id.rsplit("/", 1)[1] for p in load_plan("gpt-oss-eagle3", **o).points()] for o in calls]
    assert tails == [["in13000-out203-c64-r0", "in13000-out203-c64-r1"], ["in13000-out203-c64-r0"]]


def test_repeats_below_one_are_refused_before_any_gpu_time(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(["run", "--case", "gpt-oss-eagle3", "--gpus", "0", "--repeats", "0"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.startswith("error: argument --repeats: must be a number above 0, got '0'")


def test_a_worker_started_with_sigint_ignored_still_stops_on_the_interrupt(tmp_path: Path) -> None:
    # `nohup cmd &` in a script starts cmd with SIGINT ignored; the time limit's interrupt must still reach the runner.
    import signal
    import subprocess

    stub = tmp_path / "slow_runner.py"
    stub.write_text(
        "import sys, time\n"
        "import vllm_playbooks.run.parallel as parallel\n"
        "parallel.load_plan = lambda *a, **k: None\n"
        "def run_case(*a, **k):\n"
        "    print('measuring', flush=True)\n"
        "    time.sleep(60)\n"
        "parallel.run_case = run_case\n"
        "from vllm_playbooks import cli\n"
        "sys.exit(cli.main(['worker', '--case', 'c', '--engines', 'e']))\n"
    )
    worker = subprocess.Popen(
        [sys.executable, str(stub)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # noqa: PLW1509
    )
    assert worker.stdout is not None and worker.stdout.readline().strip() == b"measuring"
    worker.send_signal(signal.SIGINT)
    assert worker.wait(timeout=20) == 130
