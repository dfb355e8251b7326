"""Speculative-decoding formulas, the batch roofline, the hardware table and the calibrated model's error bound."""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd
import pytest

from vllm_playbooks.analysis import kbest, whatif
from vllm_playbooks.analysis.compare import is_control
from vllm_playbooks.cases import discussion_13834, gpt_oss_eagle3
from vllm_playbooks.config.case_file import calibration_cases
from vllm_playbooks.config.sizes import weight_bytes
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.hardware import (
    REFERENCE_DATASHEET,
    REFERENCE_GPU,
    datasheet_gpu,
    get_gpu,
    list_gpus,
    load_gpus,
    measured_on,
)
from vllm_playbooks.model import calibration as fits
from vllm_playbooks.model import prediction, roofline, speculative
from vllm_playbooks.results.replay import replay_rows
from vllm_playbooks.shapes import get_shape


@pytest.mark.parametrize("k", [1, 4, 7])
def test_tau_limits(k: int) -> None:
    assert speculative.expected_tokens_per_step(0.0, k) == 1.0
    assert speculative.expected_tokens_per_step(1e-12, k) == pytest.approx(1.0)
    assert speculative.expected_tokens_per_step(1.0 - 1e-9, k) == pytest.approx(k + 1, rel=1e-6)
    assert speculative.expected_tokens_per_step(1.0, k) == k + 1


def test_tau_k0_is_one() -> None:
    assert speculative.expected_tokens_per_step(0.7, 0) == pytest.approx(1.0)


def test_speedup_hand_values() -> None:
    assert speculative.speedup(0.8, 4, 0.0) == pytest.approx(speculative.expected_tokens_per_step(0.8, 4))
    # τ(0.8, 4) = (1 − 0.8^5)/0.2 = 3.3616; / (4·0.1 + 1) = 2.4011...
    assert speculative.speedup(0.8, 4, 0.1) == pytest.approx(3.3616 / 1.4)
    # k = 1: S = (1 + α)/(1 + c)
    assert speculative.speedup(0.6, 1, 0.25) == pytest.approx(1.6 / 1.25)


@pytest.mark.parametrize("c", [0.05, 0.3, 0.7])
def test_break_even_k1_is_c(c: float) -> None:
    assert speculative.break_even_alpha(1, c) == pytest.approx(c, abs=1e-9)


def test_break_even_none_when_draft_too_slow() -> None:
    # k = 4, c = 1.5: S(1) = 5 / 7 < 1 for every α.
    assert speculative.break_even_alpha(4, 1.5) is None
    assert speculative.break_even_alpha(4, 0.0) == 0.0


def test_break_even_a1_example() -> None:
    # anchors D1: α = 0.72, k = 5 gives τ ≈ 3.07, so S ≥ 1 needs c ≤ (τ − 1)/5 ≈ 0.41.
    c = (speculative.expected_tokens_per_step(0.72, 5) - 1) / 5
    assert c == pytest.approx(0.41, abs=0.01)
    assert speculative.break_even_alpha(5, c) == pytest.approx(0.72, abs=1e-6)


@pytest.mark.parametrize(("alpha", "k"), [(0.1, 1), (0.5, 3), (0.72, 5), (0.95, 8)])
def test_alpha_from_acceptance_length_inverts_tau(alpha: float, k: int) -> None:
    assert speculative.alpha_from_acceptance_length(speculative.expected_tokens_per_step(alpha, k), k) == pytest.approx(
        alpha, abs=1e-9
    )


def test_alpha_from_acceptance_length_bounds() -> None:
    assert speculative.alpha_from_acceptance_length(1.0, 4) == pytest.approx(0.0, abs=1e-9)
    assert speculative.alpha_from_acceptance_length(5.0, 4) == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError):
        speculative.alpha_from_acceptance_length(5.5, 4)


def test_roofline_switches_at_ridge() -> None:
    bw, peak = 2e12, 400e12  # ridge = 200 FLOP/B
    bytes_moved = 1e9
    below = roofline.step_time_s(bytes_moved, 199 * bytes_moved, bw, peak)
    above = roofline.step_time_s(bytes_moved, 201 * bytes_moved, bw, peak)
    assert below == pytest.approx(bytes_moved / bw)  # memory-bound
    assert above == pytest.approx(201 * bytes_moved / peak)  # compute-bound
    assert roofline.step_time_s(bytes_moved, 200 * bytes_moved, bw, peak, 1e-3) == pytest.approx(0.5e-3 + 1e-3)


def test_decode_bytes_8b_batch1() -> None:
    shape = get_shape("llama-3.1-8b")
    # 32 layers × 2 × 8 KV heads × 128 × 2 B = 128 KiB per token
    assert roofline.decode_step_bytes(shape, 1, 1000) == weight_bytes(shape) + 1000 * 128 * 1024
    assert roofline.decode_step_bytes(shape, 4, 1000, "fp8") == weight_bytes(shape) + 4 * 1000 * 64 * 1024


def test_decode_flops_scale_with_batch_and_q() -> None:
    shape = get_shape("llama-3.1-8b")
    one = roofline.decode_step_flops(shape, 1, 1)
    assert one == pytest.approx(2 * 8.03e9, rel=0.01)
    assert roofline.decode_step_flops(shape, 8, 5) == pytest.approx(40 * one)


def test_speculative_tpot() -> None:
    tau = speculative.expected_tokens_per_step(0.8, 4)
    assert speculative.speculative_tpot_s(0.010, 0.002, 0.8, 4) == pytest.approx(0.018 / tau)


def test_hardware_table_rows_have_https_sources() -> None:
    gpus = load_gpus()
    assert set(gpus) == {"A100-80GB", "H100-SXM", "H200-SXM", "B200", "MI300X", "L40S"}
    for gpu in gpus.values():
        assert gpu.source_url.startswith("https://")
        assert gpu.hbm_bandwidth_tb_s > 0 and gpu.bf16_dense_tflops > 0
    assert get_gpu("A100-80GB").fp8_dense_tflops is None  # Ampere: no FP8 tensor cores
    assert get_gpu("H200-SXM").ridge_point_bf16 == pytest.approx(989.4 / 4.8)


@pytest.mark.parametrize(
    ("name", "row"),
    [
        ("nvidia-h200-x1-vllm0.26.0", "H200-SXM"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H200", "H200-SXM"),
        ("H100-SXM", "H100-SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("AMD Instinct MI300X", "MI300X"),
    ],
)
def test_a_recorded_gpu_name_or_hardware_key_reads_as_its_datasheet_row(name: str, row: str) -> None:
    assert datasheet_gpu(name).name == row


def test_rows_are_measured_on_their_own_gpu_only() -> None:
    assert measured_on("NVIDIA H200", "H200-SXM") and measured_on("NVIDIA H100 80GB HBM3", get_gpu("H100-SXM"))
    assert not measured_on("NVIDIA H100 80GB HBM3", "H200-SXM") and not measured_on("NVIDIA H200", "H100-SXM")
    assert not measured_on("cpu", "H200-SXM") and not measured_on("Tesla V100-SXM2-32GB", "H200-SXM")
    assert not measured_on("NVIDIA A100-SXM4-40GB", "A100-80GB")  # its name gives another memory size


def test_the_reference_gpus_rows_are_of_its_datasheet_row_and_no_other() -> None:
    assert datasheet_gpu(REFERENCE_GPU).name == REFERENCE_DATASHEET
    assert [row for row in list_gpus() if measured_on(REFERENCE_GPU, row)] == [REFERENCE_DATASHEET]


def test_unknown_gpu_refused() -> None:
    with pytest.raises(ConfigError, match="A100-80GB"):
        get_gpu("V100")
    assert "H200-SXM" in list_gpus()


@pytest.fixture(scope="module")
def calibration() -> tuple[list, fits.EfficiencyFit]:
    rows = whatif.calibration_rows()
    return rows, fits.fit_efficiency(rows, "H200-SXM")


@pytest.mark.recorded_data
def test_calibration_error_bound(calibration: tuple[list, fits.EfficiencyFit]) -> None:
    rows, fit = calibration
    recorded = [r for case in calibration_cases() for r in replay_rows(case)]
    scheduled = [
        r
        for r in recorded
        if '"num_speculative_tokens_per_batch_size": null' not in r.engine_config_json and r.spec_method != "none"
    ]
    assert scheduled  # batch-size schedules: fixed k and full graphs, as the model takes them, do not hold
    controls = [r for r in recorded if is_control(r.engine_config_json)]
    assert controls  # spec-off forced onto the V1 runner (or a graph mode): the model is of vLLM's choices
    assert not set(map(id, rows)) & set(map(id, scheduled + controls))
    assert all(r.tensor_parallel_size == 1 and r.pipeline_parallel_size == 1 for r in rows)
    assert {r.spec_method for r in rows} <= set(whatif.MODELLED_SPEC_METHODS)
    # fitted on the speculation-off points (repeats as medians) only
    assert fit.rows_used == len([p for p in fits.median_points(rows) if not p["num_speculative_tokens"]])
    off = [p for p in fits.median_points(rows) if not p["num_speculative_tokens"]]
    table = prediction.prediction_table(off, fit)
    assert table["tpot_rel_error"].abs().median() <= 0.15  # in-sample, on the points it was fitted on
    for name, (low, high) in fits.EFFICIENCY_BOUNDS.items():
        assert low <= getattr(fit, name) <= high <= 0.9
    assert 0 < fit.quantized_bandwidth_efficiency < fit.bandwidth_efficiency


@pytest.mark.recorded_data
def test_a100_prediction_spec_is_slower(calibration: tuple[list, fits.EfficiencyFit]) -> None:
    _, fit = calibration
    result = discussion_13834.predict_13834_a100(fit)
    assert result["reported_output_tok_s_off"] == 95.43
    assert result["reported_output_tok_s_on"] == 68.19
    assert result["output_tok_s_on"] < result["output_tok_s_off"]
    assert math.isfinite(result["tpot_ms_on"])
    table = discussion_13834.a100_table(result, result).set_index("A100, Discussion #13834's setup")
    assert table.loc["reported", "output tok/s, speculation on"] == 68.19
    assert table.loc["reported", "change (%)"] == pytest.approx(100 * (68.19 / 95.43 - 1))
    assert pd.isna(table.loc["reported", "TPOT on (ms)"])  # the report gives no TPOT: blank, not invented
    assert table.iloc[0]["HBM bandwidth efficiency"] == result["bandwidth_efficiency"]


@pytest.mark.recorded_data
def test_whatif_curve_on_the_h200_reproduces_the_fit_and_overlays_measured_rows() -> None:

    fit = fits.fit_efficiency(whatif.calibration_rows(), "H200-SXM")
    curve = prediction.whatif_curve(fit, "H200-SXM", "llama-3.1-8b", [1, 64], 512, 128, "auto", "llama-3.2-1b", 4, 0.8)
    assert list(curve.engine_label.unique()) == ["spec off", "draft k=4 α=0.8"]
    off_c1 = curve[(curve.engine_label == "spec off") & (curve.concurrency == 1)].tpot_mean_ms.item()
    measured = whatif.measured_overlay("H200-SXM", "llama-3.1-8b", "llama-3.2-1b", 4)
    assert len(measured) == _recorded_row_count(_overlaid)
    row = measured[(measured.spec_method == "none") & (measured.concurrency == 1)].iloc[0]
    assert off_c1 == pytest.approx(row.tpot_mean_ms, rel=0.15)
    assert (curve.output_tok_s == curve.concurrency * 1000 / curve.tpot_mean_ms).all()
    assert whatif.measured_overlay("A100-80GB", "llama-3.1-8b").empty
    h100 = whatif.measured_overlay("H100-SXM", "llama-3.1-8b", "llama-3.2-1b", 4)
    assert len(h100) == _recorded_row_count(lambda row: _overlaid(row, "H100")) > 0
    assert set(h100.gpu_name) == {"NVIDIA H100 80GB HBM3"}


@pytest.mark.parametrize(("alpha", "k"), [(0.8, 4), (0.72, 5), (0.5, 1)])
def test_acceptance_rate_is_the_mean_of_the_position_rates(alpha: float, k: int) -> None:
    assert speculative.acceptance_rate_of_alpha(alpha, k) == pytest.approx(sum(alpha**i for i in range(1, k + 1)) / k)
    assert speculative.acceptance_rate_of_alpha(alpha, 1) == pytest.approx(alpha)
    with pytest.raises(ValueError):
        speculative.acceptance_rate_of_alpha(alpha, 0)


def test_draft_cost_inverts_the_speculative_tpot() -> None:
    # off: 10 ms per token; on: verify 10 ms + 4 drafts of 1.5 ms, τ(0.8, 4) = 3.3616 tokens per step → c = 0.15
    tau = speculative.expected_tokens_per_step(0.8, 4)
    on = speculative.speculative_tpot_s(0.010, 0.0015, 0.8, 4)
    assert speculative.draft_cost_from_tpot(on, 0.010, tau, 4) == pytest.approx(0.15)
    # the break-even acceptance rate equals c
    c = 0.3
    assert speculative.acceptance_rate_of_alpha(speculative.break_even_alpha(4, c), 4) == pytest.approx(c, abs=1e-9)
    with pytest.raises(ValueError):
        speculative.draft_cost_from_tpot(on, 0.0, tau, 4)


def test_compute_bound_batch_without_context_is_the_ridge() -> None:
    shape, gpu = get_shape("llama-3.1-8b"), get_gpu("H200-SXM")
    # BF16 weights, no KV: intensity = 2·P·B / (2·P + norms…) ≈ B, so the step turns at the ridge (≈ 206 FLOP/B)
    batch = roofline.compute_bound_batch(shape, gpu, 0)
    assert batch == math.ceil(gpu.ridge_point_bf16 * weight_bytes(shape) / roofline.decode_step_flops(shape, 1))
    assert 200 <= batch <= 215
    assert roofline.decode_step_flops(shape, batch, 1) >= gpu.ridge_point_bf16 * roofline.decode_step_bytes(
        shape, batch, 0
    )
    assert roofline.decode_step_flops(shape, batch - 1, 1) < gpu.ridge_point_bf16 * roofline.decode_step_bytes(
        shape, batch - 1, 0
    )
    # verifying k = 4 drafts puts 5 query tokens per sequence: about a fifth of the batch
    assert roofline.compute_bound_batch(shape, gpu, 0, q=5) == pytest.approx(batch / 5, abs=1)


def test_compute_bound_batch_kv_and_4bit() -> None:
    awq, bf16 = get_shape("llama-3.3-70b-awq"), get_shape("llama-3.1-8b")
    # 4-bit weights turn compute-bound several times earlier than BF16 weights
    assert (
        roofline.compute_bound_batch(awq, "H200-SXM", 0, "fp8") < roofline.compute_bound_batch(bf16, "H200-SXM", 0) / 3
    )
    # KV reads grow with the batch: a long enough context keeps a BF16 step memory-bound at any batch
    assert roofline.compute_bound_batch(bf16, "H200-SXM", 2048) is None
    assert roofline.compute_bound_batch(bf16, "H200-SXM", 576) > roofline.compute_bound_batch(bf16, "H200-SXM", 0)


def test_iid_alpha_fit_recovers_a_geometric_chain_and_the_published_eagle3_head() -> None:
    assert speculative.fit_iid_alpha([0.8, 0.64, 0.512]) == pytest.approx(0.8, abs=1e-5)
    # RedHatAI/gpt-oss-20b-speculator.eagle3 in vLLM's acceptance-length test: 0.7165, 0.5120, 0.3337 at k = 3
    assert speculative.fit_iid_alpha([0.7165, 0.5120, 0.3337]) == pytest.approx(0.7065, abs=5e-4)
    with pytest.raises(ValueError):
        speculative.fit_iid_alpha([1.2])


def test_later_conditional_rate_reproduces_a_published_acceptance_length() -> None:
    later = speculative.fit_later_conditional(0.85, 7, 3.20)
    rates = speculative.rates_first_then_constant(0.85, later, 7)
    assert speculative.tokens_per_step_from_rates(rates) == pytest.approx(3.20, abs=1e-9)
    assert later == pytest.approx(0.6286, abs=1e-4)
    assert rates[1] / rates[0] == pytest.approx(later) and rates[2] / rates[1] == pytest.approx(later)
    assert later < 0.85  # an i.i.d. 0.85 would give τ = 4.85 at k = 7: reusing the layer costs acceptance
    with pytest.raises(ValueError, match="out of reach"):
        speculative.fit_later_conditional(0.85, 1, 2.5)


def test_implied_cost_ratio_inverts_leviathan() -> None:
    c = speculative.implied_draft_cost_ratio(1.815, 1, 1.63)
    assert speculative.speedup(0.815, 1, c) == pytest.approx(1.63)
    assert speculative.implied_draft_cost_ratio(1.85, 1, 1.8) == pytest.approx(0.0278, abs=1e-4)


@pytest.mark.parametrize(("experts", "k", "tokens", "expected"), [(32, 8, 1, 8), (32, 8, 0, 0), (256, 8, 8, 57.42)])
def test_expected_distinct_experts(experts: int, k: int, tokens: int, expected: float) -> None:
    assert roofline.expected_distinct_experts(experts, k, tokens) == pytest.approx(expected, abs=0.01)
    assert roofline.expected_distinct_experts(experts, k, 10_000) == pytest.approx(experts)


def test_fewer_experts_make_verification_cheaper_than_at_full_scale() -> None:
    """At batch 8 the reduced shape touches nearly all 32 experts already, so verifying 2 tokens per sequence reads
    little more; the 256-expert model touches many more experts when the tokens double."""
    full = roofline.forward_cost("deepseek-v3", 8, 2, 300).bytes / roofline.forward_cost("deepseek-v3", 8, 1, 300).bytes
    reduced = (
        roofline.forward_cost("deepseek-v3-reduced", 8, 2, 300).bytes
        / roofline.forward_cost("deepseek-v3-reduced", 8, 1, 300).bytes
    )
    assert full > 1.3 > reduced > 1.0
    # at batch 1 both read the same active experts: the reduced shape is the full model in cost
    one = (
        roofline.forward_cost("deepseek-v3", 1, 1, 300).bytes
        / roofline.forward_cost("deepseek-v3-reduced", 1, 1, 300).bytes
    )
    assert one == pytest.approx(1.0, abs=0.02)


def test_mtp_and_head_forwards_are_small_against_their_targets() -> None:
    assert (
        roofline.forward_cost("deepseek-v3-reduced", 1, 1, 300, role="mtp").bytes
        < 0.1 * roofline.forward_cost("deepseek-v3-reduced", 1, 1, 300).bytes
    )
    assert roofline.forward_cost("gpt-oss-120b-eagle3", 1, 1, 300, role="draft").bytes < 1e9
    with pytest.raises(ValueError, match="no MTP module"):
        roofline.forward_cost("gpt-oss-120b", 1, 1, 300, role="mtp")


@pytest.mark.recorded_data
def test_scale_decides_the_mtp_payoff_at_batch_one(calibration: tuple[list, fits.EfficiencyFit]) -> None:
    """The per-forward overhead is a large share of a V2-Lite-scale step, a small one of a full-width step."""
    _, fit = calibration
    small = prediction.speculation_prediction("deepseek-v3-v2lite-scale", [0.85], 1, 300, fit, "H200-SXM")
    wide = prediction.speculation_prediction("deepseek-v3-reduced", [0.85], 1, 300, fit, "H200-SXM")
    assert small["c"] > 2 * wide["c"]  # the fixed costs are a larger share of the short step
    assert small["speedup"] < wide["speedup"] and wide["speedup"] > 1.1
    assert wide["tau"] == pytest.approx(1.85)
    assert wide["tpot_on_ms"] == pytest.approx(wide["tpot_off_ms"] / wide["speedup"])
    frame = prediction.prediction_frame(
        {"r": {"target": "deepseek-v3-reduced", "rates": [0.85], "context_len": 300}}, [1, 8], fit
    )
    assert list(frame.batch) == [1, 8] and frame.speedup.iloc[1] > frame.speedup.iloc[0]
    # the V2-Lite-scale 'no gain' rests on charging the draft forward a whole step's fixed cost
    cheap = prediction.speculation_prediction(
        "deepseek-v3-v2lite-scale", [0.85], 1, 300, fit, "H200-SXM", draft_fixed_cost_s=0.0002
    )
    assert cheap["speedup"] > 1.3 and cheap["c"] < 0.2


@pytest.mark.recorded_data
def test_a_draft_forward_can_carry_its_own_fixed_cost(calibration: tuple[list, fits.EfficiencyFit]) -> None:
    _, fit = calibration
    charged = prediction.speculation_prediction("mimo-7b", [0.85, 0.5], 4, 300, fit, "H200-SXM")
    assert charged["draft_fixed_cost_ms"] == pytest.approx(1000 * fit.overhead_s)
    free = prediction.speculation_prediction("mimo-7b", [0.85, 0.5], 4, 300, fit, "H200-SXM", draft_fixed_cost_s=0.0)
    assert free["draft_ms"] == pytest.approx(charged["draft_ms"] - 1000 * fit.overhead_s)
    assert free["verify_ms"] == charged["verify_ms"] and free["decode_ms"] == charged["decode_ms"]
    # the step is verify + k drafts: two drafts' fixed costs fewer
    assert free["tpot_on_ms"] * free["tau"] == pytest.approx(
        charged["tpot_on_ms"] * charged["tau"] - 2000 * fit.overhead_s
    )
    frame = prediction.prediction_frame(
        {
            "a": {"target": "mimo-7b", "rates": [0.85], "context_len": 300},
            "b": {"target": "mimo-7b", "rates": [0.85], "context_len": 300, "draft_fixed_cost_s": 0.001},
        },
        [1],
        fit,
        draft_fixed_cost_s=0.0,
    )
    assert frame.draft_fixed_cost_ms.tolist() == pytest.approx([0.0, 1.0])  # a config's own value wins
    with pytest.raises(ValueError, match="draft_fixed_cost_s must be >= 0"):
        prediction.speculation_prediction("mimo-7b", [0.85], 1, 300, fit, "H200-SXM", draft_fixed_cost_s=-0.001)


def test_fixed_routing_reads_only_the_chosen_experts() -> None:
    uniform = roofline.forward_cost("gpt-oss-120b", 16, 1, 300).bytes
    fixed = roofline.forward_cost("gpt-oss-120b", 16, 1, 300, routing="fixed").bytes
    assert fixed < uniform / 5
    assert roofline.forward_cost("gpt-oss-120b", 1, 1, 300, routing="fixed").bytes == pytest.approx(
        roofline.forward_cost("gpt-oss-120b", 1, 1, 300).bytes
    )  # one token: the same four experts either way
    with pytest.raises(ValueError, match="routing must be"):
        roofline.forward_cost("gpt-oss-120b", 1, 1, 300, routing="zipf")


@pytest.mark.recorded_data
def test_routing_signature_tells_the_two_routings_apart(calibration: tuple[list, fits.EfficiencyFit]) -> None:
    _, fit = calibration
    base = dict(model_shape="gpt-oss-120b", spec_method="none", request_rate_qps=None, input_len=230, output_len=203)
    measured = pd.DataFrame(
        [{**base, "concurrency": 1, "tpot_mean_ms": 5.0}, {**base, "concurrency": 16, "tpot_mean_ms": 5.5}]
    )
    table = gpt_oss_eagle3.routing_signature(measured, "gpt-oss-120b", fit)
    row = table.iloc[0]
    assert row.measured_growth == pytest.approx(1.1)
    assert row.predicted_uniform > 2.0 > row.predicted_fixed >= 1.0
    assert gpt_oss_eagle3.routing_signature(measured.iloc[:1], "gpt-oss-120b", fit).empty


@pytest.mark.recorded_data
def test_eagle3_predictions_come_in_the_measured_tables_columns(calibration: tuple[list, fits.EfficiencyFit]) -> None:

    _, fit = calibration
    frame = gpt_oss_eagle3.eagle3_predictions(
        "gpt-oss-120b", "gpt-oss-120b-eagle3-131k", [0.71], [2, 3], [1, 64], {"chat": (230, 203)}, fit
    )
    assert len(frame) == 4 and set(frame.profile) == {"chat"}
    assert frame.gain_pct.tolist() == pytest.approx([100 * (s - 1) for s in frame.speedup])
    one = frame[frame.concurrency == 1]
    assert (one.verify_over_decode > 1.1).all() and one.sort_values("k").verify_over_decode.is_monotonic_increasing
    # k + 1 tokens touch more of the 128 experts than one does (the fixed time per MoE layer dilutes the ratio)
    assert kbest.best_k_by_band(frame, 0.71).band.tolist() == ["1-8", "16-64"]  # no point in 128-200


def test_sliding_window_layers_read_at_most_their_window() -> None:
    shape = get_shape("gpt-oss-120b")  # 18 sliding layers (window 128) and 18 full ones, 2 × 8 × 64 bf16 per layer
    per_layer = 2 * 8 * 64 * 2
    assert roofline.kv_read_bytes(shape, 2, 1000) == 2 * per_layer * (18 * 128 + 18 * 1000)
    assert roofline.kv_read_bytes(shape, 1, 100) == per_layer * 36 * 100  # inside the window every layer reads it all
    llama = get_shape("llama-3.1-8b")
    assert roofline.kv_read_bytes(llama, 1, 1000) == 1000 * 128 * 1024  # no sliding layers: the whole context


@pytest.mark.recorded_data
def test_eagle3_predictions_take_levels_per_profile(calibration: tuple[list, fits.EfficiencyFit]) -> None:
    _, fit = calibration
    frame = gpt_oss_eagle3.eagle3_predictions(
        "gpt-oss-120b",
        "gpt-oss-120b-eagle3-131k",
        [0.71],
        [3],
        {"a": [1, 2], "b": [4]},
        {"a": (230, 203), "b": (13000, 203)},
        fit,
    )
    assert frame.groupby("profile").concurrency.apply(list).to_dict() == {"a": [1, 2], "b": [4]}


# --------------------------------------------------------------------------------------------------------------------
# Issue #8: the per-draft-forward overhead t_d (and a per-step t_v) in the speculative TPOT
# --------------------------------------------------------------------------------------------------------------------

_SYNTHETIC_FIT = fits.EfficiencyFit("H200-SXM", 0.9, 0.4, 0.8, 1.5e-3, 0, 0.0)


def _synthetic_rows(draft_s: float, verify_s: float = 0.0) -> list[dict]:
    """Rows whose measured TPOT is the model's own prediction with t_d = ``draft_s`` and t_v = ``verify_s``."""
    model = _SYNTHETIC_FIT.with_draft_overhead(fits.DraftOverheadFit(draft_s, verify_s))
    rows = []
    for case, target, draft, kv, in_len, ks in (
        ("syn-8b", "llama-3.1-8b", "llama-3.2-1b", "auto", 512, (2, 4)),
        ("syn-70b", "llama-3.3-70b-awq", "llama-3.2-3b-awq", "fp8", 1240, (3, 5)),
    ):
        for k in (0, *ks):
            for concurrency in (1, 8, 32):
                row = {
                    "case": case,
                    "model_shape": target,
                    "kv_cache_dtype": kv,
                    "input_len": in_len,
                    "output_len": 128,
                    "concurrency": concurrency,
                    "num_speculative_tokens": k,
                }
                if k:
                    row.update(draft_model=draft, imposed_alpha=0.7)
                rows.append({**row, "tpot_mean_ms": prediction.predict_tpot_ms(row, model)})
    return rows


def test_speculative_tpot_with_overheads_hand_values() -> None:
    # τ(0.8, 4) = 3.3616; step = 10 ms verify + 4 × (2 ms draft + 1 ms overhead) + 0.5 ms per step = 22.5 ms
    assert speculative.speculative_tpot_s(0.010, 0.002, 0.8, 4, 0.001, 0.0005) == pytest.approx(0.0225 / 3.3616)
    assert speculative.speculative_tpot_s(0.010, 0.002, 0.8, 4, 0.0, 0.0) == speculative.speculative_tpot_s(
        0.010, 0.002, 0.8, 4
    )
    with pytest.raises(ValueError):
        speculative.speculative_tpot_s(0.010, 0.002, 0.8, 4, -0.001)
    # in the calibrated model the terms add (k·t_d + t_v) / τ to a speculative row and nothing to a spec-off row
    row = {
        "model_shape": "llama-3.1-8b",
        "input_len": 512,
        "output_len": 128,
        "concurrency": 4,
        "num_speculative_tokens": 4,
        "draft_model": "llama-3.2-1b",
        "imposed_alpha": 0.8,
    }
    with_terms = _SYNTHETIC_FIT.with_draft_overhead(fits.DraftOverheadFit(1.5e-3, 0.4e-3))
    added = prediction.predict_tpot_ms(row, with_terms) - prediction.predict_tpot_ms(row, _SYNTHETIC_FIT)
    assert added == pytest.approx((4 * 1.5 + 0.4) / 3.3616)  # ms
    off = {**row, "num_speculative_tokens": 0}
    assert prediction.predict_tpot_ms(off, with_terms) == prediction.predict_tpot_ms(off, _SYNTHETIC_FIT)
    assert (with_terms.draft_overhead_s, with_terms.verify_overhead_s) == (1.5e-3, 0.4e-3)
    assert (_SYNTHETIC_FIT.draft_overhead_s, _SYNTHETIC_FIT.verify_overhead_s) == (0.0, 0.0)


def test_fit_recovers_a_known_draft_overhead_from_synthetic_rows() -> None:
    rows = _synthetic_rows(2.0e-3)
    fitted = fits.fit_draft_overhead(rows, _SYNTHETIC_FIT)
    assert fitted.draft_overhead_s == pytest.approx(2.0e-3, rel=1e-9)
    assert fitted.verify_overhead_s == 0.0
    assert fitted.rows_used == sum(r["num_speculative_tokens"] > 0 for r in rows) == 12  # spec-off rows skipped
    assert fitted.groups == ("syn-70b", "syn-8b")
    assert fitted.rms_relative_error == pytest.approx(0.0, abs=1e-9)
    # with k varying (2, 3, 4, 5) a per-step term is identifiable too
    both = fits.fit_draft_overhead(_synthetic_rows(1.2e-3, 0.7e-3), _SYNTHETIC_FIT, verify_term=True)
    assert (both.draft_overhead_s, both.verify_overhead_s) == pytest.approx((1.2e-3, 0.7e-3), rel=1e-6)
    # a per-step term the data make negative is held at 0 unless asked otherwise
    negative = _synthetic_rows(1.2e-3, -0.5e-3)
    assert fits.fit_draft_overhead(negative, _SYNTHETIC_FIT, verify_term=True).verify_overhead_s == 0.0
    free = fits.fit_draft_overhead(negative, _SYNTHETIC_FIT, verify_term=True, nonnegative=False)
    assert free.verify_overhead_s == pytest.approx(-0.5e-3, rel=1e-6)
    # fit_efficiency's option: the spec-off parameters come out as without it, the term on top
    plain = fits.fit_efficiency(rows, "H200-SXM")
    combined = fits.fit_efficiency(rows, "H200-SXM", draft_overhead=True)
    assert combined.with_draft_overhead(None) == plain and plain.speculation is None
    assert combined.speculation == fits.fit_draft_overhead(rows, plain)
    with pytest.raises(ValueError, match="rows with speculation"):
        fits.fit_draft_overhead([r for r in rows if not r["num_speculative_tokens"]], _SYNTHETIC_FIT)


@pytest.mark.recorded_data
def test_zero_draft_overhead_reproduces_the_old_predictions(calibration: tuple[list, fits.EfficiencyFit]) -> None:
    rows, fit = calibration
    zero = fit.with_draft_overhead(fits.DraftOverheadFit(0.0))
    old = prediction.prediction_table(rows, fit)
    assert prediction.prediction_table(rows, zero).equals(old)
    # the old formula, written out: (T_target(B, k+1) + k·T_draft(B, 1)) / τ with the fitted roofline
    device = get_gpu("H200-SXM")
    for row, predicted in zip(rows, old.tpot_ms_predicted, strict=True):
        target, draft, k, tau = fits._row_terms(row)
        step = fits.forward_pass_s(target, device, *fits.fit_parameters(fit)) + (
            k * fits.forward_pass_s(draft, device, *fits.fit_parameters(fit)) if k else 0.0
        )
        assert predicted == pytest.approx(1000 * step / tau, rel=1e-12)
    assert discussion_13834.predict_13834_a100(zero) == discussion_13834.predict_13834_a100(fit)
    args = ["H200-SXM", "llama-3.1-8b", [1, 16], 512, 128, "auto", "llama-3.2-1b", 4, 0.8]
    assert prediction.whatif_curve(zero, *args).equals(prediction.whatif_curve(fit, *args))
    # a positive term slows exactly the speculative rows and curves
    with_term = fits.fit_efficiency(rows, "H200-SXM", draft_overhead=True)
    new = prediction.prediction_table(rows, with_term)
    spec = new.k > 0
    assert (new.tpot_ms_predicted[~spec] == old.tpot_ms_predicted[~spec]).all()
    assert (new.tpot_ms_predicted[spec] > old.tpot_ms_predicted[spec]).all()
    curve, before = prediction.whatif_curve(with_term, *args), prediction.whatif_curve(fit, *args)
    on = curve.engine_label != "spec off"
    assert (curve.tpot_mean_ms[on] > before.tpot_mean_ms[on]).all() and curve[~on].equals(before[~on])
    assert (
        discussion_13834.predict_13834_a100(with_term)["output_tok_s_on"]
        < discussion_13834.predict_13834_a100(fit)["output_tok_s_on"]
    )


def _overlaid(row: dict[str, str], gpu: str = "H200") -> bool:
    """A runs.csv row of the 8B shape on the GPU whose name holds ``gpu``, speculation off or with the 1B draft at
    k = 4."""
    drafted = row["draft_model"] == "llama-3.2-1b" and row["num_speculative_tokens"] == "4"
    on_gpu = gpu in row["gpu_name"] and row["model_shape"] == "llama-3.1-8b"
    return on_gpu and (row["spec_method"] == "none" or drafted)


def _recorded_row_count(keep: Callable[[dict[str, str]], bool] = lambda row: True) -> int:
    """Rows in the calibration cases' runs.csv files that ``keep`` takes, read directly (not through the replay the
    model uses), but those the calibration leaves out: configs with a batch-size schedule, controls that force a model
    runner, open-loop loads, more than one GPU, speculative methods the model does not cover."""
    import csv

    from vllm_playbooks.results.store import runs_file

    total = 0
    for case in calibration_cases():
        with runs_file(case).open(newline="") as handle:
            total += sum(
                1
                for row in csv.DictReader(handle)
                if (
                    'num_speculative_tokens_per_batch_size": null' in row["engine_config_json"]
                    or row["spec_method"] == "none"
                )
                and row["spec_method"] in whatif.MODELLED_SPEC_METHODS
                and row["concurrency"]
                and row["tensor_parallel_size"] == row["pipeline_parallel_size"] == "1"
                and "VLLM_USE_V2_MODEL_RUNNER" not in row["engine_config_json"]
                and keep(row)
            )
    return total


@pytest.mark.recorded_data
def test_draft_overhead_improves_the_speculative_rows_and_is_physical(
    calibration: tuple[list, fits.EfficiencyFit],
) -> None:
    rows, fit = calibration
    from vllm_playbooks.results.replay import replay_case
    from vllm_playbooks.results.stalls import mark_stalled

    def on_h200(row: dict[str, str]) -> bool:
        return "H200" in row["gpu_name"]

    stalled = sum(
        int(mark_stalled(replay_case(case)).query("gpu_name == 'NVIDIA H200'").stalled.sum())
        for case in calibration_cases()
    )
    assert _recorded_row_count(on_h200) - stalled <= len(rows) <= _recorded_row_count(on_h200)
    points = fits.median_points(rows)
    with_term = fits.fit_efficiency(rows, "H200-SXM", draft_overhead=True)
    assert with_term.speculation.rows_used == sum(bool(p["num_speculative_tokens"]) for p in points) > 0
    spec = [p for p in points if p["num_speculative_tokens"]]
    after = prediction.prediction_table(spec, with_term).tpot_rel_error.abs().median()
    assert after < prediction.prediction_table(spec, fit).tpot_rel_error.abs().median()
    # a physical draft overhead: positive, below a whole 1B forward on its own; the fit's standard error is finite
    assert 0.0 < with_term.draft_overhead_s < 5e-3 and math.isfinite(with_term.speculation.draft_overhead_se_s)


@pytest.mark.recorded_data
def test_prediction_configs_come_from_the_plans_speculative_engines() -> None:
    from vllm_playbooks.run.plan import quiet_plan

    mtp, _ = quiet_plan("deepseek-mtp")
    at_085 = prediction.engine_prediction_configs(mtp.engines, 400, rates=[0.85])
    assert sorted(at_085) == ["fit80-mtp-k1-a0.85", "mimo-mtp-k1-a0.85", "mtp-k1-a0.85", "v2lite-mtp-k1-a0.85"]
    mimo = prediction.engine_prediction_configs(mtp.engines, 400, model="mimo-7b")
    assert mimo["mimo-mtp-k3-p0.85"]["rates"][0] == 0.85 and len(mimo["mimo-mtp-k3-p0.85"]["rates"]) == 3
    assert {config["draft"] for config in mimo.values()} == {None}  # MTP drafts with the target's own modules
    reduced = prediction.engine_prediction_configs(mtp.engines, 400, model="deepseek-v3-reduced", first_rate=0.85)
    assert sorted(reduced) == ["mtp-k1-a0.85", "mtp-k2-p0.85", "mtp-k3-p0.85"]
    eagle, _ = quiet_plan("gpt-oss-eagle3")
    heads = prediction.engine_prediction_configs(eagle.engines, 433)
    assert "spec-off" not in heads and heads["eagle3-k3-a0.71"]["draft"] == "gpt-oss-120b-eagle3-131k"
    frame = prediction.prediction_frame(reduced, [1, 8], fits.fit_efficiency(whatif.calibration_rows(), "H200-SXM"))
    assert len(frame) == 6 and (frame["speedup"] > 0).all()
