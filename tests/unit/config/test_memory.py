"""The CUDA-graph part of the memory model: the graphs vLLM 0.26 profiles, and the rule its estimate follows."""

from __future__ import annotations

import re
import warnings

import pytest

from vllm_playbooks.config.capacity import max_capture_size_of, resolve_batching
from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.config.memory import (
    FALLBACK_FAMILY,
    GIB,
    MIN_GRAPH_BYTES,
    FamilyCalibration,
    GraphProfile,
    MemoryCalibration,
    cudagraph_descs,
    graph_profile,
    respecialized_modes,
    specialization,
    uses_v1_runner,
)
from vllm_playbooks.config.speculative import build_speculative_config
from vllm_playbooks.paths import data_dir
from vllm_playbooks.results.server_logs import read_startup, server_logs
from vllm_playbooks.results.textfiles import read_text
from vllm_playbooks.run.budget import engine_for_log


def _gpt_oss_eagle3(k: int) -> EngineConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = build_speculative_config(
            {"method": "eagle3", "model": "gpt-oss-120b-eagle3-131k", "num_speculative_tokens": k}
        )
    return EngineConfig(
        label=f"k{k}",
        model="gpt-oss-120b",
        max_model_len=16384,
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        speculative=spec,
    )


def _descs(engine: EngineConfig) -> dict[str, list[int]]:
    return cudagraph_descs(engine, 256, 8192, max_capture_size_of(engine.model))


@pytest.mark.recorded_data
def test_the_graphs_listed_are_those_every_recorded_v1_start_up_profiled() -> None:
    """Each mode's count and largest size, as vLLM's 'Profiling CUDA graph memory' line names them."""
    compared = 0
    for case in sorted(p for p in (data_dir() / "runs").iterdir() if p.is_dir()):
        for log in server_logs(case):
            found = re.search(r"Profiling CUDA graph memory: (.*)", read_text(log))
            if not found:
                continue
            engine = engine_for_log(log, data_dir())
            total = read_startup(log).total_memory_gib
            batched, seqs = resolve_batching(
                engine.max_model_len,
                total,
                max_num_seqs=engine.max_num_seqs,
                max_num_batched_tokens=engine.max_num_batched_tokens,
            )
            descs = cudagraph_descs(engine, seqs, batched, max_capture_size_of(engine.model))
            named = ", ".join(f"{mode}={len(sizes)} (largest={sizes[0]})" for mode, sizes in descs.items())
            assert uses_v1_runner(engine) and named == found.group(1).strip(), log.name
            compared += 1
    if not compared:
        pytest.skip("no recorded start-up profiled CUDA graphs")


def test_gpt_oss_eagle3_graphs_of_issue_43() -> None:
    """k=2: 1008 then 993 tokens (PIECEWISE), 768 then 753 (FULL); k=3: 1024 then 1008; k=4: 1010 then 995;
    k=5: 1008 then 996 (vLLM 0.26 fixes gpt-oss's largest at 1024 and rounds up to multiples of 1 + k)."""
    heads = {k: {mode: sizes[:2] for mode, sizes in _descs(_gpt_oss_eagle3(k)).items()} for k in (2, 3, 4, 5)}
    assert heads[2] == {"PIECEWISE": [1008, 993], "FULL": [768, 753]}
    assert heads[3] == {"PIECEWISE": [1024, 1008], "FULL": [1024, 1008]}
    assert heads[4] == {"PIECEWISE": [1010, 995], "FULL": [1010, 995]}
    assert heads[5] == {"PIECEWISE": [1008, 996], "FULL": [1008, 996]}


def test_k2_and_k5_respecialize_where_k3_and_k4_do_not() -> None:
    """The rule that sets the 7.9-9.5 GiB estimates of k=2 and k=5 apart from k=3 and k=4's 1.2 GiB: a mode whose
    second graph changes integer class (a multiple of 16 or not) is extrapolated from a costly second capture."""
    profiles = {k: graph_profile(_descs(_gpt_oss_eagle3(k))) for k in (2, 3, 4, 5)}
    assert profiles[3] == GraphProfile(largest=1024, plain_graphs=160, respecialized_graphs=0)
    assert profiles[4] == GraphProfile(largest=1010, plain_graphs=158, respecialized_graphs=0)
    assert profiles[2] == GraphProfile(largest=1008, plain_graphs=0, respecialized_graphs=80 + 65)
    assert profiles[5] == GraphProfile(largest=1008, plain_graphs=0, respecialized_graphs=79 + 79)
    off = EngineConfig(label="off", model="gpt-oss-120b", max_model_len=16384, max_num_seqs=256)
    assert graph_profile(_descs(off)) == GraphProfile(largest=1024, plain_graphs=82, respecialized_graphs=34)


def test_specialization() -> None:
    assert [specialization(n) for n in (1, 2, 16, 248, 256, 993, 1008)] == [1, 0, 16, 0, 16, 0, 16]


def test_the_estimate_is_the_first_capture_plus_each_graph_extrapolated() -> None:
    row = FamilyCalibration(
        family="f",
        logs=1,
        activation_factor=0.0,
        cudagraph_first_gib_per_token=0.001,
        cudagraph_respecialized_gib_per_graph=0.05,
        non_torch_gib=0.0,
        fallback_error_pct=0.0,
    )
    profile = GraphProfile(largest=1000, plain_graphs=10, respecialized_graphs=20)
    assert row.cudagraph_bytes(profile) == round(1.0 * GIB + 20 * 0.05 * GIB) + 10 * MIN_GRAPH_BYTES
    # a respecialized graph never counts under vLLM's 1 MiB floor
    cheap = FamilyCalibration(**{**row.__dict__, "cudagraph_respecialized_gib_per_graph": 0.0})
    assert cheap.cudagraph_bytes(profile) == round(1.0 * GIB) + 30 * MIN_GRAPH_BYTES
    assert row.cudagraph_bytes(GraphProfile(0, 0, 0)) == 0


def test_respecialized_modes_name_the_sizes_that_change_class() -> None:
    assert respecialized_modes(_descs(_gpt_oss_eagle3(2))) == [("PIECEWISE", 1008, 993, 80), ("FULL", 768, 753, 65)]
    assert respecialized_modes(_descs(_gpt_oss_eagle3(3))) == []


def _row(family: str, logs: int, factor: float) -> FamilyCalibration:
    return FamilyCalibration(
        family=family,
        logs=logs,
        activation_factor=factor,
        cudagraph_first_gib_per_token=0.0,
        cudagraph_respecialized_gib_per_graph=0.0,
        non_torch_gib=0.0,
        fallback_error_pct=0.0,
    )


def test_a_new_shape_with_a_drafter_takes_another_shapes_row_with_that_drafter() -> None:
    """A DeepSeek-V3 shape no start-up calibrates: with MTP, the MTP row of the architecture fitted on the most logs;
    without, a row without drafter."""
    rows = [
        _row("DeepseekV3ForCausalLM/deepseek-v3-reduced+mtp", 8, 5.8),
        _row("DeepseekV3ForCausalLM/deepseek-v3-v2lite-scale+mtp", 1, 3.0),
        _row("DeepseekV3ForCausalLM/deepseek-v3-reduced", 3, 5.2),
        _row(FALLBACK_FAMILY, 18, 2.2),
    ]
    calibration = MemoryCalibration({r.family: r for r in rows})
    mtp = build_speculative_config({"method": "mtp", "num_speculative_tokens": 1})
    with_mtp = EngineConfig(label="m", model="deepseek-v3-fit80", max_model_len=2048, speculative=mtp)
    assert calibration.for_engine(with_mtp) == (rows[0], False)
    without = EngineConfig(label="o", model="deepseek-v3-fit80", max_model_len=2048)
    assert calibration.for_engine(without) == (rows[2], False)
    assert calibration.warning(with_mtp) is not None
