"""The report's acceptance in both vocabularies: V0's per-position rate (α for an i.i.d. chain) and V1's accepted /
drafted."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from vllm_playbooks.cases.discussion_13834 import report_acceptance
from vllm_playbooks.results.store import load_reference


def _row(label: str, k: int, alpha: float | None, rate: float | None, **more: Any) -> dict[str, Any]:
    return dict(
        engine_label=label,
        spec_method="none" if k == 0 else "draft_model",
        num_speculative_tokens=k,
        imposed_alpha=alpha,
        acceptance_rate=rate,
        concurrency=32,
        engine_config_json=None,
        **more,
    )


@pytest.fixture(scope="module")
def published() -> pd.DataFrame:
    return load_reference("discussion-13834")


def test_the_reported_alpha_is_a_lower_v1_rate_for_k_5(published: pd.DataFrame) -> None:
    result = report_acceptance(pd.DataFrame([_row("spec-off", 0, None, None)]), published)
    assert (result["alpha"], result["k"]) == (0.72, 5)
    # (0.72 + 0.72² + … + 0.72⁵) / 5: below 0.5, the rule of thumb's net-loss band
    assert result["rate_expected"] == pytest.approx(sum(0.72**i for i in range(1, 6)) / 5)
    assert result["rate_expected"] < 0.5 < result["alpha"]
    assert result["rate_measured"] is None and result["rows"] == 0


def test_the_measured_rate_is_the_median_of_the_reports_k_and_alpha_only(published: pd.DataFrame) -> None:
    rows = pd.DataFrame(
        [
            _row("draft3b-k5-a0.72", 5, 0.72, 0.40),
            _row("draft3b-k5-a0.72", 5, 0.72, 0.42),
            _row("draft3b-k5-a0.72", 5, 0.72, 0.43),
            _row("draft3b-k5-a0.9", 5, 0.9, 0.70),  # another α
            _row("draft3b-k3-a0.72", 3, 0.72, 0.50),  # another k
            _row("draft3b-k5-a0.72", 5, 0.72, None),  # no counters
        ]
    )
    result = report_acceptance(rows, published)
    assert result["rate_measured"] == pytest.approx(0.42)
    assert result["rows"] == 3
