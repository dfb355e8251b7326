"""The Ray executor's parts that need no cluster: refusals before anything starts, what a task starts from, the
mailbox, and the merge of what tasks send. A real cluster runs in tests/faults/test_ray.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from vllm_playbooks import cli
from vllm_playbooks.paths import data_dir
from vllm_playbooks.results import raw
from vllm_playbooks.results.replay import replay_rows
from vllm_playbooks.run import ray_grid
from vllm_playbooks.run.plan import load_plan
from vllm_playbooks.run.ray_grid import Mailbox, RayReport, check_fits, config_seed, pack, unpack

CASE = "llama-8b-draft-model"
CASE_FILE = Path(__file__).resolve().parents[2] / "faults" / "faults.yaml"


def _errors(err: str) -> list[str]:
    """Standard error without the config's one-line advisories (``warning: …``)."""
    return [line for line in err.strip().splitlines() if not line.startswith("warning: ")]


def test_without_ray_the_option_is_refused_in_one_line_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError, as where it is not installed
    monkeypatch.setattr(ray_grid, "case_runner_lock", lambda folder: pytest.fail("the case was locked"))
    assert cli.main(["run", "--case", str(CASE_FILE), "--ray", "auto"]) == 2
    assert _errors(capsys.readouterr().err) == [f"error: {ray_grid.RAY_MISSING}"]


@pytest.mark.parametrize("where", [[], ["--gpus", "0", "--ray", "auto"]])
def test_gpus_or_ray_one_of_them(where: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        cli.main(["run", "--case", str(CASE_FILE), *where])
    assert stop.value.code == 2
    assert len(_errors(capsys.readouterr().err)) == 1


def test_a_paired_plan_is_refused_before_connecting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    monkeypatch.setattr(ray_grid, "_connect", lambda ray, address: pytest.fail("connected"))
    with pytest.raises(ray_grid.ConfigError, match="paired"):
        ray_grid.run_on_ray(str(CASE_FILE), "auto", data=tmp_path, paired=True)
    assert not (tmp_path / "runs").exists()


@pytest.mark.recorded_data
def test_a_config_seed_holds_its_recorded_points_only_and_merges_once(tmp_path: Path) -> None:
    case_dir = data_dir() / "runs" / CASE
    points = raw.finished_points(case_dir)
    config_id = points[0].parent.name
    mine = [p.relative_to(raw.raw_root(case_dir)).as_posix() for p in points if p.parent.name == config_id]
    assert 0 < len(mine) < len(points)
    seed = config_seed(CASE, config_id, data_dir())
    unpack(seed, tmp_path / "task")
    got = raw.finished_points(tmp_path / "task" / "runs" / CASE)
    assert sorted(p.relative_to(raw.raw_root(tmp_path / "task" / "runs" / CASE)).as_posix() for p in got) == mine
    # what a task sent, arriving twice (a retried task sends its points again): recorded once
    target = tmp_path / "data"
    assert sorted(ray_grid._merge([seed, seed], CASE, target)) == sorted(mine)
    assert ray_grid._merge([seed], CASE, target) == []
    assert sorted(r.point_id for r in replay_rows(CASE, target)) == sorted(mine)


def test_pack_names_members_relative_to_its_root(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f.txt").write_text("x")
    unpack(pack(tmp_path, [tmp_path / "a"]), tmp_path / "out")
    assert (tmp_path / "out" / "a" / "b" / "f.txt").read_text() == "x"


def test_the_mailbox_hands_each_blob_over_once_and_keeps_each_configs_for_a_retry() -> None:
    box = Mailbox()
    box.put("a", b"1")
    box.put("b", b"2")
    assert box.take() == [b"1", b"2"]
    box.put("a", b"3")
    assert box.take() == [b"3"]
    assert box.take() == []
    assert box.sent("a") == [b"1", b"3"]
    assert box.sent("c") == []


def test_the_report_fails_on_a_task_error_a_failed_point_or_the_time_limit() -> None:
    done = RayReport(nodes={"a": "n1"}, measured={"a": ["p1", "p2"]}, added=["p1", "p2"])
    done.raise_for_failures()
    assert done.lines() == ["a: 2 point(s) measured on n1", "rows added: 2"]
    for report in (
        RayReport(errors={"a": "NodeDiedError: gone"}),
        RayReport(failed={"hw/c/p-r0": "ServerError: exited"}),
        RayReport(timed_out=True),
    ):
        with pytest.raises(ray_grid.PlaybookError):
            report.raise_for_failures()


def test_an_engine_wider_than_every_node_is_refused_before_its_task(tmp_path: Path) -> None:
    case_file = tmp_path / "tp2.yaml"
    case_file.write_text(
        CASE_FILE.read_text().replace("  - label: spec-off\n", "  - label: spec-off\n    tensor_parallel_size: 2\n")
    )
    engines = load_plan(str(case_file)).engines
    assert [e.tensor_parallel_size for e in engines] == [2, 1]
    check_fits(engines, [1.0, 2.0])
    with pytest.raises(ray_grid.ConfigError, match="spec-off needs 2 GPUs"):
        check_fits(engines, [1.0, 1.0])
    with pytest.raises(ray_grid.ConfigError):
        check_fits(engines, [])
