"""Which GPUs a run's provenance names: those the process sees, not every GPU on the host."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.fake_nvml import FakeGpu, FakeNvml
from vllm_playbooks.results.provenance import query_gpus

TWO_H200 = [FakeGpu("GPU-aaaa-1111"), FakeGpu("GPU-bbbb-2222")]


@pytest.mark.parametrize(
    ("visible", "count"),
    [(None, 2), ("0", 1), ("1", 1), ("1,0", 2), ("GPU-bbbb", 1), ("0,7,1", 1)],
)
def test_query_gpus_counts_only_the_gpus_cuda_shows(
    visible: str | None, count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert query_gpus(FakeNvml(TWO_H200)) == ("NVIDIA H200", count, "580.159.04", 143771)


@pytest.mark.parametrize("visible", ["", "7", "GPU-"])  # nothing visible, no such GPU, an ambiguous UUID prefix
def test_query_gpus_says_cpu_where_cuda_shows_no_gpu(visible: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert query_gpus(FakeNvml(TWO_H200)) == ("cpu", 0, "none", None)


def test_query_gpus_says_cpu_without_a_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert query_gpus(FakeNvml(TWO_H200, fail_init=True)) == ("cpu", 0, "none", None)


def test_mixed_gpus_are_named_together(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    mixed = FakeNvml([FakeGpu("GPU-a", name="NVIDIA H200"), FakeGpu("GPU-b", name="NVIDIA A100-SXM4-80GB")])
    assert query_gpus(mixed)[:2] == ("NVIDIA A100-SXM4-80GB + NVIDIA H200", 2)


def test_the_host_cpu_is_the_first_model_name_of_cpuinfo(tmp_path: Path) -> None:
    from vllm_playbooks.results.provenance import host_cpu

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C\n"
        "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C\n"
    )
    assert host_cpu(cpuinfo) == "Intel(R) Xeon(R) Platinum 8480C"


def test_the_node_is_recorded_only_where_a_ray_task_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_playbooks.results.provenance import NODE_ENV, collect_provenance

    monkeypatch.delenv(NODE_ENV, raising=False)
    assert collect_provenance().node is None
    monkeypatch.setenv(NODE_ENV, "gpu-box-2 ray:abc123")
    assert collect_provenance().node == "gpu-box-2 ray:abc123"
