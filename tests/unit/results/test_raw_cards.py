"""The GPU cards a point ran on, from its point folder: what tells two machines of one GPU model apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_playbooks.paths import data_dir
from vllm_playbooks.results import raw
from vllm_playbooks.results.replay import with_gpu_cards
from vllm_playbooks.results.store import load_runs


def _point_with(folder: Path, sampling: dict[str, object] | None) -> Path:
    folder.mkdir(parents=True)
    record = {"case": "demo"} if sampling is None else {"case": "demo", "gpu_sampling": sampling}
    (folder / raw.POINT_FILE).write_text(json.dumps(record))
    return folder


def test_a_points_cards_are_the_uuids_its_gpu_sampling_saw_sorted(tmp_path: Path) -> None:
    two = {
        "status": "sampled",
        "devices": [
            {"gpu": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-bb"},
            {"gpu": 1, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-aa"},
        ],
    }
    assert raw.gpu_cards(_point_with(tmp_path / "pp2", two)) == "GPU-aa + GPU-bb"
    assert raw.gpu_cards(_point_with(tmp_path / "old", None)) == ""  # recorded before the sampler existed
    assert raw.gpu_cards(_point_with(tmp_path / "none", {"status": "unavailable", "devices": []})) == ""


@pytest.mark.recorded_data
def test_recorded_rows_get_the_cards_of_their_point_folders() -> None:
    rows = with_gpu_cards(load_runs("load-desync"))
    assert len(rows) == len(load_runs("load-desync")) and rows["gpu_cards"].str.startswith("GPU-").all()
    first = rows.iloc[0]
    folder = raw.raw_root(data_dir() / "runs" / "load-desync") / first["point_id"]
    sampled = json.loads((folder / raw.POINT_FILE).read_text())["gpu_sampling"]["devices"]
    assert first["gpu_cards"] == sampled[0]["uuid"]
    # the draft's H100 runs came from more than one machine: their cards say so where their CPU model cannot
    h100_draft = rows[(rows["gpu_name"] == "NVIDIA H100 80GB HBM3") & (rows["engine_label"] == "draft-1b-k4-a0.8")]
    assert h100_draft["host_cpu"].nunique() == 1 and h100_draft["gpu_cards"].nunique() >= 2


def test_cards_for_people_keep_eight_hex_digits_of_each_uuid() -> None:
    one = "GPU-5d0ff3f1-9f78-8e41-3cb6-51bcf8c333a6"
    assert raw.short_cards(one) == "GPU-5d0ff3f1"
    assert raw.short_cards(f"{one} + GPU-8c146483-6349-097f-d667-89e3b8f27d09") == "GPU-5d0ff3f1 + GPU-8c146483"
    assert raw.short_cards("") == ""
    assert raw.count_cards(["GPU-a + GPU-b", "GPU-a", ""]) == 2
