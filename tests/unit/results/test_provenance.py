"""Which GPUs a run's provenance names: those the process sees, not every GPU on the host."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from vllm_playbooks.results.provenance import query_gpus, visible_gpu_rows

ROWS = [
    ["0", "GPU-aaaa-1111", "NVIDIA H200", "580.159.04", "143771"],
    ["1", "GPU-bbbb-2222", "NVIDIA H200", "580.159.04", "143771"],
]


@pytest.mark.parametrize(
    ("visible", "indices"),
    [(None, ["0", "1"]), ("0", ["0"]), ("1", ["1"]), ("1,0", ["1", "0"]), ("GPU-bbbb", ["1"]), ("", []),
     ("0,7,1", ["0"])],  # fmt: skip
)
def test_visible_rows_follow_cuda_visible_devices(visible: str | None, indices: list[str]) -> None:
    assert [r[0] for r in visible_gpu_rows(ROWS, visible)] == indices


def test_ambiguous_uuid_prefix_selects_nothing() -> None:
    assert visible_gpu_rows(ROWS, "GPU-") == []


@pytest.fixture
def fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "nvidia-smi"
    lines = "\\n".join(", ".join(r) for r in ROWS)
    script.write_text(f'#!/bin/sh\nprintf "{lines}\\n"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}")


def test_query_gpus_counts_only_visible_gpus(fake_nvidia_smi: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert query_gpus() == ("NVIDIA H200", 2, "580.159.04", 143771)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert query_gpus() == ("NVIDIA H200", 1, "580.159.04", 143771)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert query_gpus() == ("cpu", 0, "none", None)


def test_the_host_cpu_is_the_first_model_name_of_cpuinfo(tmp_path: Path) -> None:
    from vllm_playbooks.results.provenance import host_cpu

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C\n"
                       "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C\n")  # fmt: skip
    assert host_cpu(cpuinfo) == "Intel(R) Xeon(R) Platinum 8480C"
