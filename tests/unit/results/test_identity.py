"""A point's identity: its hardware key, a config id that hashes only what the server sees, and a folder that agrees
with its files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from vllm_playbooks.config.engine import PACKAGED_TOKENIZER, EngineConfig
from vllm_playbooks.errors import SchemaError
from vllm_playbooks.paths import data_dir
from vllm_playbooks.results import raw
from vllm_playbooks.results.identity import engine_of, hardware_key, point_hardware
from vllm_playbooks.run.plan import quiet_plan

PREMIGRATION = FIXTURES / "premigration" / "runs" / "llama-8b-draft-model" / "raw"


def test_the_hardware_key_names_gpu_model_count_and_vllm_version() -> None:
    assert hardware_key("NVIDIA H200", 1, "0.26.0") == "nvidia-h200-x1-vllm0.26.0"
    assert hardware_key("NVIDIA A100-SXM4-80GB", 2, "0.26.0") == "nvidia-a100-sxm4-80gb-x2-vllm0.26.0"
    assert hardware_key("cpu", 0, "0.26.0+cpu") == "cpu-vllm0.26.0-cpu"
    keys = {hardware_key(g, n, v) for g in ("NVIDIA H200", "NVIDIA L40S") for n in (1, 2) for v in ("0.26.0", "0.27.0")}
    assert len(keys) == 8  # any difference in what a result depends on gives another key


def test_the_driver_and_torch_versions_do_not_separate_points() -> None:
    record = json.loads(next(PREMIGRATION.glob("*/*/point.json")).read_text(encoding="utf-8"))
    base = {"gpu_name": "NVIDIA H200", "vllm_version": "0.26.0"}
    assert point_hardware(record, {**base, "driver_version": "580", "torch_version": "2.11.0"}) == point_hardware(
        record, {**base, "driver_version": "590", "torch_version": "2.12.0"}
    )


def test_two_ids_the_old_code_gave_one_config_are_one_id_now() -> None:
    """The draft config recorded on 2026-11-30 (…-b1d514d62b) and on 2026-12-04 (…-dcc4dba872, after new defaulted
    fields entered the stored speculative config): the same server flags, so the same id, today's runner's."""
    ids = {
        engine_of(json.loads(p.read_text(encoding="utf-8"))).config_id() for p in PREMIGRATION.glob("*/*/point.json")
    }
    engine = next(e for e in quiet_plan("llama-8b-draft-model")[0].engines if e.label == "draft-1b-k4-a0.8")
    assert ids == {engine.config_id()}


def test_the_config_id_changes_with_the_servers_flags_and_environment_only() -> None:
    engine = next(e for e in quiet_plan("llama-8b-draft-model")[0].engines if e.label == "spec-off")
    same = {"label": engine.label, "model": engine.model, "max_model_len": engine.max_model_len}
    base = EngineConfig(**same, max_num_seqs=256)
    assert EngineConfig(**same, max_num_seqs=128).config_id() != base.config_id()
    assert EngineConfig(**same, max_num_seqs=256, env={"X": "1"}).config_id() != base.config_id()
    assert (
        EngineConfig(**{**same, "label": "other"}, max_num_seqs=256).config_id().split("-")[-1]
        == (base.config_id().split("-")[-1])
    )  # the label names it; the hash is the server's
    flags = base.identity()["argv"]
    assert PACKAGED_TOKENIZER in flags and not any(arg.startswith("/") for arg in flags)  # no checkout's path
    assert "--port" not in flags and "--host" not in flags


def test_a_point_in_a_folder_its_files_do_not_name_is_refused(tmp_path: Path) -> None:
    source = next(PREMIGRATION.glob("*/*/point.json")).parent
    folder = tmp_path / "runs" / "c" / "raw" / "nvidia-h200-x1-vllm0.26.0" / source.parent.name / source.name
    shutil.copytree(source, folder)
    with pytest.raises(SchemaError, match="vllm-playbooks migrate"):
        raw.row_from_point(folder, tmp_path)


@pytest.mark.recorded_data
def test_every_recorded_points_config_id_rebuilds_from_its_point_json_unchanged() -> None:
    for case_dir in sorted(p for p in (data_dir() / "runs").iterdir() if p.is_dir()):
        for folder in raw.finished_points(case_dir):
            hardware, config_id = raw.point_identity(folder)
            assert (hardware, config_id) == (folder.parent.parent.name, folder.parent.name), folder
