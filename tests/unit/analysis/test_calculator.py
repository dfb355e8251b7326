"""The calibrated memory model against every recorded vLLM start-up: the check file, its coverage, its errors."""

from __future__ import annotations

import warnings

import pandas as pd
import pytest

from vllm_playbooks.analysis.calculator import (
    KV_CHECK_NAME,
    calibrate,
    calibration_table,
    held_out_calibrations,
    kv_check,
    recorded_startups,
    respecialized_graph_gib,
)
from vllm_playbooks.config.capacity import kv_budget
from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.config.memory import (
    CALIBRATION_NAME,
    FALLBACK_FAMILY,
    GIB,
    MIN_GRAPH_BYTES,
    GraphProfile,
    load_calibration,
    memory_family,
)
from vllm_playbooks.config.speculative import build_speculative_config
from vllm_playbooks.paths import data_dir

pytestmark = pytest.mark.recorded_data


@pytest.fixture(scope="module")
def startups():  # type: ignore[no-untyped-def]
    return recorded_startups(data_dir())


@pytest.fixture(scope="module")
def stored() -> pd.DataFrame:
    return pd.read_csv(data_dir() / "checks" / KV_CHECK_NAME)


def _same_logs(startups, stored: pd.DataFrame) -> None:  # type: ignore[no-untyped-def]
    """Skip, as the notebooks' check outputs do, where server logs were recorded after the check file was written."""
    if {(s.case, s.start.log) for s in startups} != set(zip(stored["case"], stored["log"], strict=True)):
        pytest.skip("server logs recorded since data/checks was written: run `vllm-playbooks kv-check`")


def test_every_log_the_check_file_names_is_a_recorded_server_log(stored: pd.DataFrame) -> None:
    """Each row points at its raw record: the server log under its case's logs/ (a renamed log fails here, where
    the comparisons above would only skip)."""
    logs = data_dir() / "runs"
    missing = [
        f"{r.case}/{r.log}"
        for r in stored.itertuples()
        if not any((logs / r.case / "logs" / f"{r.log}{gz}").exists() for gz in ("", ".gz"))
    ]
    assert not missing, missing


def test_the_check_file_covers_every_recorded_server_config(  # type: ignore[no-untyped-def]
    startups, stored: pd.DataFrame
) -> None:
    _same_logs(startups, stored)
    assert {s.engine.config_id() for s in startups} == set(stored["config"])
    assert len(stored) == len(startups)


def test_the_stored_calibration_and_check_are_what_the_logs_give_now(  # type: ignore[no-untyped-def]
    startups, stored: pd.DataFrame
) -> None:
    _same_logs(startups, stored)
    calibration = calibrate(startups)
    recorded = pd.read_csv(data_dir() / "checks" / CALIBRATION_NAME)
    pd.testing.assert_frame_equal(calibration_table(calibration), recorded, check_dtype=False, rtol=1e-9)
    pd.testing.assert_frame_equal(kv_check(startups, calibration), stored, check_dtype=False)


def _on_h200(startups, stored: pd.DataFrame) -> pd.Series:  # type: ignore[no-untyped-def]
    """Which start-ups of ``stored`` ran on an H200 (139.8 GiB of device memory in their log)."""
    memory = {(s.case, s.start.log): s.start.total_memory_gib for s in startups}
    return pd.Series([memory.get((r.case, r.log), 0.0) > 100 for r in stored.itertuples()], stored.index)


def test_dense_configs_are_within_2_percent_on_the_h200(  # type: ignore[no-untyped-def]
    startups, stored
) -> None:
    """On the H200's pools (139.8 GiB); a smaller GPU's pool makes the same GiB a larger share (the next test)."""
    dense = stored[stored["family"].str.startswith(("LlamaForCausalLM", "MiMoForCausalLM"))]
    dense = dense[_on_h200(startups, dense)]
    assert len(dense) and dense["error_pct"].abs().max() <= 2.0


def test_a_dense_configs_error_is_the_same_gib_on_every_gpu(  # type: ignore[no-untyped-def]
    startups, stored
) -> None:
    """The 70B-AWQ servers logged the same overheads on an H100 as on an H200, and our estimate misses their KV cache
    by the same number of tokens on both (what our weights miss, ``tests.unit.config.test_capacity``): an offset of
    the model, not of the GPU, which the H100's smaller pool turns into a larger share."""
    memory = {(s.case, s.start.log): s.start.total_memory_gib for s in startups}
    spec_off = stored[stored["config"].str.startswith("spec-off-f13eb06360")]
    gpus = spec_off.assign(memory=[memory[(r.case, r.log)] for r in spec_off.itertuples()])
    missed = (gpus["predicted_kv_tokens"] - gpus["logged_kv_tokens"]).groupby(gpus["memory"] > 100).agg(["min", "max"])
    assert set(missed.index) == {True, False}  # both GPUs' start-ups are recorded
    assert missed.values.max() - missed.values.min() <= 32  # two 16-token blocks of rounding
    shares = gpus.groupby(gpus["memory"] > 100)["error_pct"].max()
    assert shares[False] > 2 * shares[True]


def test_the_moe_starts_of_issue_43_are_no_longer_overstated_by_10_to_51_percent(  # type: ignore[no-untyped-def]
    startups, stored
) -> None:
    # gpt-oss-120b spec-off was +10.8 %, the reduced DeepSeek-V3 with MTP k=1 +51 %, before the calibration (H200).
    on_h200 = stored[_on_h200(startups, stored)]
    off = on_h200[on_h200["family"] == "GptOssForCausalLM/gpt-oss-120b"]
    mtp_k1 = on_h200[on_h200["config"].str.startswith("mtp-k1-")]
    assert len(off) and off["error_pct"].abs().max() <= 5.0
    assert len(mtp_k1) and mtp_k1["error_pct"].abs().max() <= 5.0


def test_every_start_up_on_the_h200_is_within_5_percent(  # type: ignore[no-untyped-def]
    startups, stored
) -> None:
    """Issue #43's done-when, on the GPU it was set on: every recorded config's KV tokens within 5 % of what vLLM 0.26
    logged. A GPU whose KV pool is a few GiB beside the weights turns the same GiB into a larger share (next test)."""
    assert stored.loc[_on_h200(startups, stored), "error_pct"].abs().max() <= 5.0


def test_gpt_oss_misses_about_the_same_kv_tokens_on_the_h100_as_on_the_h200(  # type: ignore[no-untyped-def]
    startups, stored
) -> None:
    """gpt-oss-120b leaves the H100 a KV pool of a few GiB beside its 61 GiB of weights. Our weights count misses
    vLLM's by under 1 GiB (fewer without a drafter, more with EAGLE-3), an offset of the model that the H200's pool
    hides and the H100's shows: the missed tokens agree within 5 % on the two GPUs, the share is far larger."""
    on_h200 = _on_h200(startups, stored)
    for config in ("spec-off-1b958792f5", "eagle3-k3-a0.71-aa841995e0"):
        rows = stored["config"] == config
        missed = (stored["predicted_kv_tokens"] - stored["logged_kv_tokens"])[rows].groupby(on_h200[rows])
        assert set(missed.groups) == {True, False}, config  # both GPUs' start-ups are recorded
        low, high = missed.min().min(), missed.max().max()
        assert low * high > 0 and high - low <= 0.05 * min(abs(low), abs(high)), config
        shares = stored.loc[rows, "error_pct"].abs().groupby(on_h200[rows]).max()
        assert shares[False] > 5 * shares[True], config


def test_gpt_oss_eagle3_k2_and_k5_lose_the_kv_tokens_k3_and_k4_keep(  # type: ignore[no-untyped-def]
    startups, stored
) -> None:
    """Issue #43's hardest case: vLLM logged ~11 % fewer KV tokens for EAGLE3 k=2 and k=5 than for k=3 and k=4 (a
    7.9-9.5 GiB CUDA-graph estimate against 1.2) on the H200; the budget predicts that gap, and each within 5 %."""
    eagle3 = stored[stored["family"].str.startswith("GptOssForCausalLM/gpt-oss-120b+eagle3")]
    eagle3 = eagle3[_on_h200(startups, eagle3)]
    k = eagle3["config"].str.extract(r"eagle3-k(\d)-")[0].astype(int)
    predicted = eagle3.groupby(k)["predicted_kv_tokens"].max()
    assert {2, 3, 4, 5} <= set(predicted.index)
    assert max(predicted[2], predicted[5]) < 0.95 * min(predicted[3], predicted[4])
    assert eagle3["error_pct"].abs().max() <= 5.0


def test_the_held_out_column_refits_without_the_family(  # type: ignore[no-untyped-def]
    startups,
) -> None:
    """A family held out is fitted on no log of its own: its row is gone, or (a target without drafter) stands on
    its drafter families' logs alone; the dense fallback keeps its own logs."""
    held_out = held_out_calibrations(startups)
    assert set(held_out) == {memory_family(s.engine) for s in startups}
    for family, calibration in held_out.items():
        if family == FALLBACK_FAMILY:
            assert family in calibration.rows
            continue
        drafting = [s for s in startups if memory_family(s.engine).startswith(family + "+")]
        if "+" in family or not drafting:
            assert family not in calibration.rows, family
        else:
            assert calibration.rows[family].logs == len(drafting), family


def _graph_log(family: str, largest: int, respecialized: int, estimate: float) -> tuple[str, GraphProfile, float]:
    return family, GraphProfile(largest, 0, respecialized), estimate


def test_the_respecialized_cost_is_fitted_where_the_logs_separate_it() -> None:
    """0.001 GiB per token of the largest graph (family a), 0.002 (family b) and 0.05 GiB per respecialized graph."""
    logs = [
        _graph_log("A/a", 1024, 0, 1.024),
        _graph_log("A/a", 1008, 145, 1.008 + 7.25),
        _graph_log("A/b", 1024, 34, 2.048 + 1.7),
    ]
    assert respecialized_graph_gib(logs) == pytest.approx(0.05)
    # every log of each family alike: the two terms cannot be told apart, so vLLM's floor of 1 MiB
    assert respecialized_graph_gib([logs[2]]) == MIN_GRAPH_BYTES / GIB
    assert respecialized_graph_gib([_graph_log("A/a", 512, 0, 1.0), _graph_log("A/a", 512, 40, 0.5)]) == (
        MIN_GRAPH_BYTES / GIB
    )  # a fit below the floor


def test_an_uncalibrated_architecture_warns_with_the_error_to_expect() -> None:
    calibration = load_calibration()
    assert calibration is not None
    engine = EngineConfig(label="g", model="gpt-oss-20b", max_model_len=4096)
    assert memory_family(engine) not in calibration.rows
    budget = kv_budget(engine, 79.2)
    gap = budget.calibration_warning
    assert gap is not None and gap.family == memory_family(engine) and gap.borrowed in calibration.rows
    assert gap.moe and gap.worst_error_pct > 0
    recorded = EngineConfig(label="l", model="llama-3.1-8b", max_model_len=2048)
    assert kv_budget(recorded, 139.8).calibration_warning is None


def test_the_cuda_graph_reserve_grows_with_k_and_drops_without_full_graphs() -> None:
    def spec(k: int, **more: object) -> EngineConfig:
        return EngineConfig(
            label="d",
            model="llama-3.1-8b",
            max_model_len=2048,
            max_num_seqs=64,
            speculative=build_speculative_config(
                {"method": "draft_model", "model": "llama-3.2-1b", "num_speculative_tokens": k, **more}
            ),
        )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k1, k4 = kv_budget(spec(1), 139.8), kv_budget(spec(4), 139.8)
        scheduled = kv_budget(spec(4, num_speculative_tokens_per_batch_size=[[1, 16, 4], [17, 64, 0]]), 139.8)
    assert k4.cudagraph_bytes > k1.cudagraph_bytes > 0
    assert 0 < scheduled.cudagraph_bytes < k4.cudagraph_bytes
    off = EngineConfig(label="o", model="llama-3.1-8b", max_model_len=2048)
    assert kv_budget(off, 139.8).cudagraph_bytes == 0  # Model Runner V2: vLLM reserves none from the KV budget
