"""The DeepSeek MTP case's fade rule: one rule for 'has MTP's gain faded by the PR's bound', used by the ledger's
check of vLLM PR #12755's claim and by the case page."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from vllm_playbooks import cases
from vllm_playbooks.cases import deepseek_mtp
from vllm_playbooks.claims import ledger
from vllm_playbooks.claims.claim import Evidence
from vllm_playbooks.claims.verdict import Verdict
from vllm_playbooks.results.schema import RUN_COLUMNS
from vllm_playbooks.results.store import load_reference

CLAIM = "pr12755-mtp-gain-by-qps"


def _row(label: str, alpha: float | None, qps: int, tpot_ms: float) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(RUN_COLUMNS)
    row.update(
        case="deepseek-mtp",
        engine_label=label,
        model_shape="deepseek-v3-reduced",
        load_format="dummy",
        kv_cache_dtype="auto",
        spec_method="none" if alpha is None else "mtp",
        num_speculative_tokens=0 if alpha is None else 1,
        imposed_alpha=alpha,
        input_len=230,
        output_len=203,
        concurrency=None,
        request_rate_qps=qps,
        tensor_parallel_size=1,
        pipeline_parallel_size=1,
        max_num_seqs=128,
        max_num_batched_tokens=8192,
        gpu_name="NVIDIA H200",
        tpot_mean_ms=tpot_ms,
        output_tok_s=1000 / tpot_ms,
        point_id=f"h200/{label}-0/in230-out203-qps{qps}-r0",
    )
    return row


def _rows() -> pd.DataFrame:
    """Spec off at 50 ms; the PR's acceptance (0.81) measured clean at 1 QPS only (1.63×, as the PR); at 8 QPS, 0.85
    halves TPOT (2×) and 0.95, outside the floor band of the PR's acceptance length, shows no gain."""
    return pd.DataFrame(
        [
            _row("spec-off", None, 1, 50.0),
            _row("spec-off", None, 8, 50.0),
            _row("mtp-k1-a0.81", 0.81, 1, 50 / 1.63),
            _row("mtp-k1-a0.85", 0.85, 8, 25.0),
            _row("mtp-k1-a0.95", 0.95, 8, 50.0),
        ],
        columns=RUN_COLUMNS,
    )


@pytest.fixture(scope="module")
def published() -> pd.DataFrame:
    return load_reference()


def test_fade_rests_on_the_nearest_acceptance_within_the_floor_band(published: pd.DataFrame) -> None:
    fade = deepseek_mtp.fade_by_bound(_rows(), published)
    assert fade.engine_label.tolist() == ["mtp-k1-a0.85"]  # 1.85 / 1.823 within 5 %; 1.95 / 1.823 is not
    assert fade.acceptance_gap.tolist() == pytest.approx([0.85 - 0.823])
    assert fade.speedup.tolist() == pytest.approx([2.0]) and fade.effect.tolist() == ["gain"]
    clean_at_pr = pd.concat([_rows(), pd.DataFrame([_row("mtp-k1-a0.81", 0.81, 8, 49.0)])], ignore_index=True)
    fade = deepseek_mtp.fade_by_bound(clean_at_pr, published)  # the PR's own acceptance, once clean, decides
    assert fade.engine_label.tolist() == ["mtp-k1-a0.81"] and fade.effect.tolist() == ["within noise"]
    assert deepseek_mtp.fade_by_bound(_rows()[lambda d: d.engine_label != "mtp-k1-a0.85"], published).empty


def test_the_ledger_judges_the_fade_on_that_rule(published: pd.DataFrame) -> None:
    # the deciding part names the PR's acceptance at 1 and 8 QPS; 8 QPS has no clean run of it (as recorded)
    deciding = {
        CLAIM: frozenset(
            {
                ("spec-off", "in230-out203-qps1"),
                ("mtp-k1-a0.81", "in230-out203-qps1"),
                ("spec-off", "in230-out203-qps8"),
                ("mtp-k1-a0.81", "in230-out203-qps8"),
            }
        )
    }
    evidence = Evidence(published=published, runs={"deepseek-mtp": _rows()}, deciding=deciding, checks=cases.checks())
    result = evidence.check("mtp_gain_falls_with_qps")(ledger.claim_of(CLAIM, evidence), evidence)
    assert result.rows == 2  # 1 QPS at the PR's acceptance, 8 QPS at the nearest one
    assert result.verdict is Verdict.NOT_REPRODUCED  # a 2× gain where the PR saw none (it was 'direction only')
    assert "2.00× at QPS 8 (mtp-k1-a0.85" in result.measured and "no clean run" not in result.measured
