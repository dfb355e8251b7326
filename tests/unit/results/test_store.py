"""The schema check, the provenance rule, and append-only atomic writes."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from vllm_playbooks.errors import SchemaError
from vllm_playbooks.results import store
from vllm_playbooks.results.schema import PROVENANCE_COLUMNS, RUN_COLUMNS, RunRow


def make_row(**changes: object) -> RunRow:
    """A valid row (values are test values, not measurements)."""
    base: dict[str, object] = dict(
        case="unit",
        hardware="nvidia-h200-x1-vllm0.26.0",
        point_id="nvidia-h200-x1-vllm0.26.0/cfg-1/in8-out8-c1-r0",
        config_id="cfg-1",
        engine_label="cfg",
        model_shape="tiny-llama",
        load_format="dummy",
        dtype="auto",
        kv_cache_dtype="auto",
        spec_method="none",
        num_speculative_tokens=0,
        max_model_len=64,
        tensor_parallel_size=1,
        pipeline_parallel_size=1,
        gpu_memory_utilization=0.9,
        engine_config_json="{}",
        concurrency=1,
        burstiness=1.0,
        input_len=8,
        output_len=8,
        num_prompts=10,
        num_warmup_prompts=8,
        duration_s=1.5,
        completed=10,
        failed=0,
        request_throughput_rps=6.6,
        output_tok_s=53.0,
        total_tok_s=106.0,
        gpu_name="NVIDIA H200",
        gpu_count=1,
        driver_version="580.0",
        vllm_version="0.26.0",
        torch_version="2.11.0",
        measured_at="2026-11-30T10:00:00+00:00",
        git_sha="abc",
        raw_path="runs/unit/raw/x",
        **{f"{m}_{s}_ms": 1.0 for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "p50", "p90", "p99")},
    )
    base.update(changes)
    return RunRow(**base)


def test_append_then_load_round_trips(data: Path) -> None:
    row = make_row()
    store.append_run_row(row, data)
    store.append_run_row(make_row(point_id="cfg-1/in8-out8-c4-r0", concurrency=4), data)
    loaded = store.load_run_rows("unit", data)
    assert loaded[0] == row
    assert [r.concurrency for r in loaded] == [1, 4]
    assert list(store.load_runs("unit", data).columns) == RUN_COLUMNS


def test_absent_table_is_empty(data: Path) -> None:
    assert store.load_run_rows("nothing-yet", data) == []
    assert store.load_runs("nothing-yet", data).empty


def _write_table(path: Path, rows: list[dict[str, str]], header: list[str] = RUN_COLUMNS) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)


def _record(**changes: str) -> dict[str, str]:
    record = {k: "" if v is None else str(v) for k, v in make_row().model_dump().items()}
    record.update(changes)
    return record


@pytest.mark.parametrize("column", PROVENANCE_COLUMNS)
def test_row_without_provenance_is_refused_with_file_and_row(data: Path, column: str) -> None:
    path = store.runs_file("unit", data)
    _write_table(path, [_record(), _record(point_id="p2", **{column: ""})])
    with pytest.raises(SchemaError) as error:
        store.load_run_rows("unit", data)
    message = str(error.value)
    assert str(path) in message and "row 2 (line 3)" in message and column in message


def test_bad_value_is_refused_with_field_name(data: Path) -> None:
    _write_table(store.runs_file("unit", data), [_record(output_tok_s="fast")])
    with pytest.raises(SchemaError, match=r"row 1 \(line 2\): output_tok_s"):
        store.load_run_rows("unit", data)


def test_negative_throughput_is_refused(data: Path) -> None:
    _write_table(store.runs_file("unit", data), [_record(output_tok_s="-3")])
    with pytest.raises(SchemaError, match="output_tok_s"):
        store.load_run_rows("unit", data)


def test_spec_columns_must_agree() -> None:
    with pytest.raises(ValueError, match="num_speculative_tokens 0"):
        make_row(num_speculative_tokens=4)
    with pytest.raises(ValueError, match=">= 1"):
        make_row(spec_method="eagle3")


def test_header_drift_is_refused(data: Path) -> None:
    header = [*RUN_COLUMNS, "surprise"]
    _write_table(store.runs_file("unit", data), [{**_record(), "surprise": "1"}], header)
    with pytest.raises(SchemaError, match="surprise"):
        store.load_run_rows("unit", data)


def test_recorded_row_is_never_rewritten(data: Path) -> None:
    store.append_run_row(make_row(), data)
    before = store.runs_file("unit", data).read_bytes()
    with pytest.raises(SchemaError, match="already recorded"):
        store.append_run_row(make_row(output_tok_s=999.0), data)
    assert store.runs_file("unit", data).read_bytes() == before


def test_crash_during_append_leaves_the_old_file(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store.append_run_row(make_row(), data)
    path = store.runs_file("unit", data)
    before = path.read_bytes()

    def crash(*_: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        store.append_run_row(make_row(point_id="p2"), data)
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir() if p.name != ".runs.csv.lock"] == [
        "runs.csv"
    ]  # no temporary file left


def test_recorded_cases_are_the_case_folders_under_runs_sorted(tmp_path: Path) -> None:
    assert store.recorded_cases(tmp_path) == []  # no runs/ folder yet
    for name in ("pp-27462", "deepseek-mtp"):
        (tmp_path / "runs" / name).mkdir(parents=True)
    (tmp_path / "runs" / "README.md").write_text("not a case", encoding="utf-8")
    assert store.recorded_cases(tmp_path) == ["deepseek-mtp", "pp-27462"]
    assert store.case_dir("pp-27462", tmp_path) == store.runs_root(tmp_path) / "pp-27462"


def test_the_cases_with_runs_are_those_whose_folder_holds_a_table(tmp_path: Path) -> None:
    assert store.cases_with_runs(tmp_path) == []
    for name in ("pp-27462", "deepseek-mtp"):
        (tmp_path / "runs" / name).mkdir(parents=True)
    store.runs_file("pp-27462", tmp_path).write_text("case\n", encoding="utf-8")
    assert store.recorded_cases(tmp_path) == ["deepseek-mtp", "pp-27462"]
    assert store.cases_with_runs(tmp_path) == ["pp-27462"]  # deepseek-mtp has a folder, no table yet
