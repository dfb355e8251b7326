"""The what-if curve refuses what it cannot honestly predict: configs that cannot load, drafts without alpha."""

from __future__ import annotations

import pytest

from vllm_playbooks.errors import CapacityError, ConfigError
from vllm_playbooks.model.calibration import EfficiencyFit
from vllm_playbooks.model.prediction import check_loadable, whatif_curve

FIT = EfficiencyFit(
    gpu="H200-SXM",
    bandwidth_efficiency=0.8,
    quantized_bandwidth_efficiency=0.4,
    compute_efficiency=0.8,
    overhead_s=1e-3,
    rows_used=3,
    rms_relative_error=0.05,
)


def test_bf16_70b_on_one_80_gb_gpu_is_refused_before_predicting() -> None:
    with pytest.raises(CapacityError, match=r"weights \(131.4 GiB\)"):
        whatif_curve(FIT, "A100-80GB", "llama-3.3-70b", [1, 8], 1024, 128)
    check_loadable("H200-SXM", "llama-3.3-70b-awq", 1152)  # the AWQ shape fits one GPU


def test_a_draft_without_alpha_is_a_clear_error_not_a_type_error() -> None:
    with pytest.raises(ConfigError, match="needs its acceptance alpha"):
        whatif_curve(FIT, "H200-SXM", "llama-3.1-8b", [1], 1024, 128, draft_model="llama-3.2-1b", k=4, alpha=None)


def test_a_loadable_config_gets_both_curves() -> None:
    curve = whatif_curve(
        FIT, "A100-80GB", "llama-3.1-8b", [1, 8], 1024, 128, draft_model="llama-3.2-1b", k=4, alpha=0.7
    )
    assert set(curve["engine_label"]) == {"spec off", "draft k=4 α=0.7"} and (curve["tpot_mean_ms"] > 0).all()


def test_an_interval_brackets_the_curve() -> None:
    curve = whatif_curve(FIT, "H200-SXM", "llama-3.1-8b", [1, 8], 1024, 128, interval_log=0.2)
    assert (curve.tpot_ms_low < curve.tpot_mean_ms).all() and (curve.tpot_mean_ms < curve.tpot_ms_high).all()
    assert (curve.output_tok_s_low < curve.output_tok_s).all() and (curve.output_tok_s < curve.output_tok_s_high).all()
