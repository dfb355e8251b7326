"""The GPU sampler against a fake NVML: device mapping, readings, missing NVML, the raw file and its summary."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.conftest import FakeBench
from tests.fakes.fake_nvml import FakeGpu, FakeNvml, two_h200
from tests.unit.run.test_case import factory
from vllm_playbooks.engine.gpu_sampler import (
    NVML_MODULES,
    SAMPLE_COLUMNS,
    GpuSampler,
    GpuSamplerUnavailable,
    resolve_devices,
)
from vllm_playbooks.results import raw
from vllm_playbooks.results.gpu_samples import gpu_summary, load_gpu_samples, sampling_status, summarize_samples
from vllm_playbooks.results.replay import replay_case, replay_rows
from vllm_playbooks.run.case import run_case
from vllm_playbooks.run.plan import load_plan

CASE = "llama-8b-draft-model"


def four_gpus() -> FakeNvml:
    return FakeNvml([FakeGpu(f"GPU-{i}{i}{i}{i}-uuid") for i in range(4)])


@pytest.mark.parametrize(
    ("visible", "count", "expected"),
    [
        (None, 2, [0, 1]),  # unset: the first devices
        ("2,3", 2, [2, 3]),
        ("3,1", 1, [3]),  # the engine's first GPU is the first visible one
        ("GPU-2222,GPU-0000-uuid", 2, [2, 0]),  # UUIDs and unique UUID prefixes
        ("1,7,2", 1, [1]),  # CUDA stops at the first entry that names no device
    ],
)
def test_cuda_visible_devices_map_to_nvml_indices(visible: str | None, count: int, expected: list[int]) -> None:
    devices = resolve_devices(four_gpus(), count, visible)
    assert [d.nvml_index for d in devices] == expected
    assert [d.gpu for d in devices] == list(range(count))
    assert devices[0].uuid == f"GPU-{expected[0]}{expected[0]}{expected[0]}{expected[0]}-uuid"  # bytes decoded


@pytest.mark.parametrize(
    ("visible", "count", "message"),
    [
        ("1,7,2", 2, r"uses 2 GPU\(s\) but only 1 are visible \(4 in NVML, CUDA_VISIBLE_DEVICES '1,7,2'\)"),
        ("", 1, "only 0 are visible"),
        ("-1", 1, "only 0 are visible"),
        (None, 5, r"only 4 are visible \(4 in NVML, CUDA_VISIBLE_DEVICES unset\)"),
        ("GPU-", 1, "matches 4 GPUs"),
    ],
)
def test_too_few_visible_devices_is_unavailable(visible: str | None, count: int, message: str) -> None:
    with pytest.raises(GpuSamplerUnavailable, match=message):
        resolve_devices(four_gpus(), count, visible)


def test_sampler_reads_every_engine_gpu_until_stopped() -> None:
    nvml = two_h200(util0=[100, 90], util1=[0, 10])
    sampler = GpuSampler(2, {"CUDA_VISIBLE_DEVICES": "1,0"}, interval_s=0.01, nvml=nvml)
    with sampler:
        time.sleep(0.15)
    taken = len(sampler.samples)
    time.sleep(0.05)
    assert len(sampler.samples) == taken  # stopped means stopped
    assert sampler.status == "sampled" and nvml.initialised == 0  # NVML shut down again
    frame = pd.DataFrame(sampler.samples, columns=list(SAMPLE_COLUMNS))
    assert set(frame.gpu) == {0, 1} and taken >= 8
    # engine GPU 0 is NVML device 1 (CUDA_VISIBLE_DEVICES=1,0): its readings are device 1's
    first = frame[frame.gpu == 0]
    assert set(first.nvml_index) == {1} and set(first.util_pct) <= {0, 10}
    assert set(frame[frame.gpu == 1].util_pct) <= {100, 90}
    assert (
        first.mem_used_mib.iloc[0] == 71000.0 and first.power_w.iloc[0] == 649.0 and first.sm_clock_mhz.iloc[0] == 1980
    )
    assert frame.t_s.is_monotonic_increasing
    record = sampler.record()
    assert record["status"] == "sampled" and record["reason"] is None
    assert [d["nvml_index"] for d in record["devices"]] == [1, 0] and record["samples"] == taken // 2


def test_an_unsupported_reading_is_an_empty_cell(tmp_path: Path) -> None:
    nvml = FakeNvml([FakeGpu("GPU-a", util=[40], power_supported=False)])
    with GpuSampler(1, {}, interval_s=0.01, nvml=nvml) as sampler:
        time.sleep(0.05)
    text = sampler.csv_text()
    assert text.splitlines()[0] == ",".join(SAMPLE_COLUMNS)
    assert text.splitlines()[1].endswith(",1980,")  # power: empty
    (tmp_path / raw.GPU_SAMPLES_FILE).write_text(text)
    frame = load_gpu_samples(tmp_path)
    assert frame.power_w.isna().all() and (frame.util_pct == 40).all()


def without_nvml_bindings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in NVML_MODULES:
        monkeypatch.setitem(sys.modules, name, None)  # importing it raises ImportError


def test_without_nvml_bindings_the_sampler_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    without_nvml_bindings(monkeypatch)
    sampler = GpuSampler(2, {})
    sampler.start()
    sampler.stop()
    assert sampler.status == "unavailable" and (sampler.reason or "").startswith("no NVML bindings (pip install")
    assert all(name in (sampler.reason or "") for name in NVML_MODULES)
    assert sampler.samples == [] and sampler.record()["samples"] == 0


def test_without_nvidia_ml_py_the_sampler_uses_the_bindings_vllm_vendors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setitem(sys.modules, "vllm.third_party.pynvml", two_h200())
    sampler = GpuSampler(2, {"CUDA_VISIBLE_DEVICES": "1,0"}, interval_s=0.01)
    sampler.start()
    time.sleep(0.05)
    sampler.stop()
    assert sampler.status == "sampled" and [device.nvml_index for device in sampler.devices] == [1, 0]


def test_without_a_driver_the_sampler_says_why() -> None:
    sampler = GpuSampler(1, {}, nvml=two_h200(fail_init=True))
    sampler.start()
    sampler.stop()
    assert sampler.status == "unavailable"
    assert sampler.reason == "NVML could not start: NVMLError_DriverNotLoaded: Driver Not Loaded"


def test_an_error_mid_run_keeps_the_samples_taken() -> None:
    nvml = two_h200(fail_after=6)
    with GpuSampler(2, {}, interval_s=0.01, nvml=nvml) as sampler:
        time.sleep(0.15)
    assert sampler.status == "failed" and "RuntimeError" in (sampler.reason or "")
    assert len(sampler.samples) == 6  # three full samples of two GPUs


def test_summary_of_a_known_sequence() -> None:
    rows = [
        (0.1 * i, 0, 0, u, 10, 100.0, 1980, 300.0) for i, u in enumerate([0, 20, 40, 60, 80, 100, 100, 100, 100, 100])
    ]
    rows += [(0.1 * i, 1, 1, 100, 50, 200.0, 1900, None) for i in range(10)]
    summary = summarize_samples(pd.DataFrame(rows, columns=list(SAMPLE_COLUMNS)), threshold_pct=50)
    first, second = summary.iloc[0], summary.iloc[1]
    assert first.util_mean_pct == 70.0 and first.util_p50_pct == 90.0
    assert first.util_p10_pct == pytest.approx(18.0)  # numpy's linear interpolation between 0 and 20
    assert first.below_threshold_frac == 0.3  # 0, 20, 40
    assert first.sampled_s == pytest.approx(0.9) and first.samples == 10
    assert second.below_threshold_frac == 0.0 and second.mem_used_max_mib == 200.0
    assert pd.isna(second.power_mean_w)  # never read: NaN, not 0


def _sampler_factory(nvml: FakeNvml) -> Any:
    def make(count: int, env: dict[str, str]) -> GpuSampler:
        return GpuSampler(count, env, interval_s=0.01, nvml=nvml)

    return make


def test_the_runner_writes_samples_with_the_point_and_rows_replay(data: Path) -> None:
    nvml = two_h200(util0=[100], util1=[30])
    plan = load_plan(CASE, engines=["spec-off"], concurrency=[1], min_duration_s=0.001)
    run_case(
        plan, data=data, bench=FakeBench(), server_factory=factory(), progress=False, gpu_sampler=_sampler_factory(nvml)
    )
    (row,) = replay_rows(CASE, data)
    point_dir = data / row.raw_path
    status = sampling_status(point_dir)
    assert status["status"] == "sampled" and [d["nvml_index"] for d in status["devices"]] == [0]  # TP=PP=1: one GPU
    samples = load_gpu_samples(point_dir)
    assert len(samples) >= 1 and set(samples.gpu) == {0} and (samples.util_pct == 100).all()
    summary = gpu_summary(replay_case(CASE, data), data)
    assert summary.sampling_status.tolist() == ["sampled"] and summary.util_mean_pct.tolist() == [100.0]
    assert summary.engine_label.tolist() == ["spec-off"]


def test_the_runner_goes_on_without_nvml_and_says_so(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    without_nvml_bindings(monkeypatch)
    plan = load_plan(CASE, engines=["spec-off"], concurrency=[1], min_duration_s=0.001)
    report = run_case(plan, data=data, bench=FakeBench(), server_factory=factory(), progress=False)  # default sampler
    assert len(report.measured) == 1 and not report.failed
    (row,) = replay_rows(CASE, data)
    point = json.loads((data / row.raw_path / raw.POINT_FILE).read_text())
    assert point["gpu_sampling"]["status"] == "unavailable"
    assert point["gpu_sampling"]["reason"].startswith("no NVML bindings")
    assert not (data / row.raw_path / raw.GPU_SAMPLES_FILE).exists()
    summary = gpu_summary(replay_case(CASE, data), data)
    assert summary.sampling_status.tolist() == ["unavailable"] and summary.util_mean_pct.isna().all()


@pytest.mark.recorded_data
def test_points_recorded_before_the_sampler_say_so() -> None:
    """The case's first points predate the sampler (their point.json has no ``gpu_sampling``): one line each, 'not
    recorded', no statistics."""
    from vllm_playbooks.paths import data_dir

    data = data_dir()
    runs = replay_case(CASE, data)
    before = {
        row.point_id
        for row in runs.itertuples()
        if "gpu_sampling" not in json.loads((data / row.raw_path / "point.json").read_text())
    }
    summary = gpu_summary(runs, data)
    old = summary[summary.point_id.isin(before)]
    assert before and len(old) == len(before) and set(old.sampling_status) == {"not recorded"}
    assert old.util_mean_pct.isna().all()
    assert "not recorded" not in set(summary[~summary.point_id.isin(before)].sampling_status)


def test_the_gpu_at_hand_is_the_first_visible_one_with_its_memory() -> None:
    from vllm_playbooks.engine.gpu_sampler import gpu_at_hand

    nvml = FakeNvml([FakeGpu("GPU-aaaa1111-0000", name="NVIDIA A100-SXM4-80GB"), FakeGpu("GPU-bbbb2222-0000")])
    gpu = gpu_at_hand(None, nvml)
    assert gpu is not None and gpu.name == "NVIDIA A100-SXM4-80GB"
    assert gpu.memory_gib == pytest.approx(143771 / 1024)  # the fake's total, in GiB
    assert gpu_at_hand("1", nvml).name == "NVIDIA H200"  # type: ignore[union-attr]
    assert nvml.initialised == 0  # released every time
    assert gpu_at_hand(None, FakeNvml([], fail_init=True)) is None  # no driver
    assert gpu_at_hand("5", nvml) is None  # nothing visible
