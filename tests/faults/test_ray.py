"""``vllm-playbooks run --ray`` on a local Ray cluster of two nodes (``ray.cluster_utils.Cluster``: a head and one
more node, one stand-in GPU each), the stand-in server as the engine: the whole grid measured on both nodes equals a
local run's rows; a node killed mid-grid, the driver interrupted, a second driver on the same case.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.conftest import CASE_FILE, PARALLEL, PLANNED, Runner, row_ids, wait_until
from vllm_playbooks.results import raw
from vllm_playbooks.results.store import load_run_rows

pytestmark = [pytest.mark.faults, pytest.mark.full_tier]

#: The object store of each node: the smallest Ray takes, the machine is shared.
STORE_BYTES = 100 * 2**20


@pytest.fixture
def cluster(runner: Runner, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[float], tuple[Any, Any]]]:
    """Starts the two-node cluster, its bench calls taking the given seconds, every process of it tagged as the
    runner's (so its servers are found); returns (cluster, the node that is not the head). Shut down at the end."""
    cluster_utils = pytest.importorskip("ray.cluster_utils")
    made: list[Any] = []

    def start(bench_s: float) -> tuple[Any, Any]:
        # the nodes' processes, and the tasks they run, inherit this environment
        monkeypatch.setenv("FAULT_TAG", runner.tag)
        monkeypatch.setenv("FAULT_BENCH_S", str(bench_s))
        head = {"num_cpus": 1, "num_gpus": 1, "object_store_memory": STORE_BYTES, "include_dashboard": False}
        made.append(cluster_utils.Cluster(initialize_head=True, connect=False, head_node_args=head))
        other = made[0].add_node(num_cpus=1, num_gpus=1, object_store_memory=STORE_BYTES)
        made[0].wait_for_nodes()
        return made[0], other

    yield start
    for each in made:
        each.shutdown()


def ray_run(address: str) -> list[str]:
    """The command line of a grid on the cluster at ``address``."""
    return ["run", "--case", str(CASE_FILE), "--ray", address]


def servers(runner: Runner) -> list[str]:
    """The stand-in servers (and their guards) of this test still alive, on any node."""
    return [cmd for cmd in runner.ours().values() if "fake_vllm_server" in cmd]


def nodes_of(runner: Runner) -> dict[str, str]:
    """The node (``provenance.json``) each recorded point was measured on, by point id."""
    root = raw.raw_root(runner.case_dir)
    return {
        point.relative_to(root).as_posix(): json.loads((point / raw.PROVENANCE_FILE).read_text())["node"]
        for point in raw.finished_points(runner.case_dir)
    }


def node_ids(cluster: Any) -> set[str]:
    """The Ray node ids of the cluster's nodes."""
    return {node.node_id for node in cluster.list_all_nodes()}


def test_a_grid_over_two_nodes_measures_every_point_once_as_a_local_run_does(
    runner: Runner, cluster: Callable[[float], tuple[Any, Any]], tmp_path: Path
) -> None:
    made, _ = cluster(0.1)
    code, err = runner.run(ray_run(made.address), timeout_s=180)
    assert code == 0, err
    runner.assert_complete()
    on = nodes_of(runner)
    assert {node.rsplit("ray:", 1)[1] for node in on.values()} == node_ids(made)  # points on both nodes
    for config in {pid.split("/")[1] for pid in on}:  # one task per config: its points on one node
        assert len({node for pid, node in on.items() if pid.split("/")[1] == config}) == 1
    local = Runner(tmp_path / "local", tag=runner.tag)  # the same tag: the runner fixture stops what it leaves
    local.tmp.mkdir()
    code, err = local.run(PARALLEL, FAULT_BENCH_S="0.02")
    assert code == 0, err
    assert Counter(row_ids(local.case_dir / "runs.csv")) == Counter(row_ids(runner.case_dir / "runs.csv"))
    columns = ("config_id", "engine_label", "repeat", "concurrency", "input_len", "output_len", "failed", "gpu_count")
    ray_rows = {row.point_id: row for row in load_run_rows("faults", runner.data)}
    for row in load_run_rows("faults", local.data):
        assert [getattr(row, c) for c in columns] == [getattr(ray_rows[row.point_id], c) for c in columns]
        assert ray_rows[row.point_id].completed == ray_rows[row.point_id].num_prompts
    assert servers(runner) == []


def test_a_node_killed_mid_grid_its_task_runs_again_elsewhere_and_no_row_is_lost_or_doubled(
    runner: Runner, cluster: Callable[[float], tuple[Any, Any]]
) -> None:
    made, other = cluster(1.0)
    runner.start(ray_run(made.address))
    wait_until(lambda: other.node_id in " ".join(nodes_of(runner).values()), 90, "a point measured on the other node")
    killed_config = next(pid.split("/")[1] for pid, node in nodes_of(runner).items() if other.node_id in node)
    made.remove_node(other, allow_graceful=False)
    assert runner.process.wait(timeout=180) == 0, runner.stderr()  # type: ignore[union-attr]
    runner.assert_complete()  # every planned point exactly once
    on = nodes_of(runner)
    config_nodes = Counter(node.rsplit("ray:", 1)[1] for pid, node in on.items() if pid.split("/")[1] == killed_config)
    assert 1 <= config_nodes[other.node_id] < 3  # finished before the node died, and kept
    assert sum(config_nodes.values()) == 3  # the rest measured by the retry on the head
    wait_until(lambda: not servers(runner), 30, "no stand-in server left")


def test_ctrl_c_on_the_driver_stops_every_remote_server_and_the_rerun_measures_the_rest(
    runner: Runner, cluster: Callable[[float], tuple[Any, Any]]
) -> None:
    made, _ = cluster(1.0)
    runner.start(ray_run(made.address))
    wait_until(lambda: len(row_ids(runner.case_dir / "runs.csv")) >= 1, 90, "a first point recorded")
    runner.signal(signal.SIGINT)
    assert runner.process.wait(timeout=60) == 130  # type: ignore[union-attr]
    assert [line.split(":")[0] for line in runner.error_lines()] == ["interrupted"]
    wait_until(lambda: not servers(runner), 30, "no stand-in server left on any node")
    before = row_ids(runner.case_dir / "runs.csv")
    assert 1 <= len(before) < len(PLANNED) and len(set(before)) == len(before)
    code, err = runner.run(ray_run(made.address), timeout_s=180)
    assert code == 0, err
    runner.assert_complete()
    assert row_ids(runner.case_dir / "runs.csv")[: len(before)] == before  # appended, never rewritten
    assert servers(runner) == []


def test_a_second_driver_on_the_same_case_is_refused_naming_the_first(
    runner: Runner, cluster: Callable[[float], tuple[Any, Any]]
) -> None:
    made, _ = cluster(0.5)
    first = runner.start(ray_run(made.address))
    wait_until(lambda: len(row_ids(runner.case_dir / "runs.csv")) >= 1, 90, "a first point recorded")
    second = Runner(runner.tmp, tag=runner.tag, runs=10)
    code, _ = second.run(ray_run(made.address), timeout_s=60)
    assert code == 2
    assert len(second.error_lines()) == 1 and f"pid {first.pid} " in second.error_lines()[0]
    assert first.wait(timeout=180) == 0, runner.stderr()
    runner.assert_complete()


def test_the_time_limit_cancels_the_tasks_keeps_their_points_and_exits_124(
    runner: Runner, cluster: Callable[[float], tuple[Any, Any]]
) -> None:
    # a config's three points take six bench calls, 12 s, beside its start-up: no config is done in 12 s (how many
    # points are, if any, depends on how fast this machine starts workers and servers)
    made, _ = cluster(2.0)
    code, err = runner.run([*ray_run(made.address), "--time-limit-s", "12"], timeout_s=120)
    assert code == 124, err
    assert [line.split(":")[0] for line in runner.error_lines()] == ["error"]
    ids = row_ids(runner.case_dir / "runs.csv")
    assert len(ids) < len(PLANNED) and len(set(ids)) == len(ids) and set(ids) <= set(PLANNED)
    wait_until(lambda: not servers(runner), 30, "no stand-in server left on any node")
