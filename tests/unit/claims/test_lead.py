"""The GPU a claim leads with is the best-evidenced one, and two GPUs disagree only beyond their bands."""

from __future__ import annotations

import pandas as pd
import pytest

from vllm_playbooks.claims import lead
from vllm_playbooks.hardware import REFERENCE_GPU

OTHER = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    ("runs", "leads"),
    [
        ({REFERENCE_GPU: 1, OTHER: 3}, OTHER),  # three runs a side beat one
        ({REFERENCE_GPU: 3, OTHER: 3}, REFERENCE_GPU),  # a tie goes to the reference GPU
        ({OTHER: 3, REFERENCE_GPU: 3}, REFERENCE_GPU),  # whatever the order the GPUs come in
        ({REFERENCE_GPU: 4, OTHER: 3}, REFERENCE_GPU),
        ({REFERENCE_GPU: None, OTHER: 1}, OTHER),  # a verdict that compares no points ranks below one run
        ({"NVIDIA B200": 2, "NVIDIA A100-SXM4-80GB": 2}, "NVIDIA A100-SXM4-80GB"),  # no reference: the first name
        ({REFERENCE_GPU: None}, REFERENCE_GPU),
    ],
)
def test_the_gpu_with_the_most_runs_a_side_leads(runs: dict[str, int | None], leads: str) -> None:
    assert lead.lead_gpu(runs) == leads


def test_no_gpu_has_no_lead() -> None:
    with pytest.raises(ValueError, match="no GPU"):
        lead.lead_gpu({})


def _pairs(change_pct: float, band_pct: float = 5.0, concurrency: int = 200, label: str = "spec") -> pd.DataFrame:
    """One compared point as ``versus_baseline`` gives it: its change and its band."""
    return pd.DataFrame(
        [
            {
                "engine_label": label,
                "input_len": 1024,
                "output_len": 128,
                "random_range_ratio": 0.0,
                "concurrency": concurrency,
                "request_rate_qps": None,
                "change_pct": change_pct,
                "band_pct": band_pct,
            }
        ]
    )


def test_changes_further_apart_than_the_wider_band_are_beyond_the_bands() -> None:
    assert lead.beyond_bands(_pairs(19.8), _pairs(55.4, band_pct=8.6)) is True
    assert lead.beyond_bands(_pairs(10.0), _pairs(14.0)) is False  # 4 points apart, inside 5 %
    assert lead.beyond_bands(_pairs(10.0), _pairs(17.0, band_pct=8.0)) is False  # the wider band counts
    assert lead.beyond_bands(_pairs(10.0), _pairs(17.0)) is True
    # only a point both compare counts: another load, or another config, tells nothing
    assert lead.beyond_bands(_pairs(10.0), _pairs(50.0, concurrency=32)) is None
    assert lead.beyond_bands(_pairs(10.0), _pairs(50.0, label="other")) is None
    assert (
        lead.beyond_bands(None, _pairs(1.0)) is None and lead.beyond_bands(_pairs(1.0), _pairs(1.0).iloc[0:0]) is None
    )


def test_two_gpus_disagree_only_where_their_words_differ_beyond_the_bands() -> None:
    assert lead.disagree("direction only", _pairs(55.4, 8.6), "reproduced", _pairs(19.8))
    assert not lead.disagree("direction only", _pairs(55.4), "direction only", _pairs(19.8))  # the same word
    # each near the edge of the size tolerance: different words, within noise of each other
    assert not lead.disagree("direction only", _pairs(-20.0), "reproduced", _pairs(-23.0))
    # no common point: nothing shows the difference to be noise, so it is said
    assert lead.disagree("reproduced", _pairs(10.0), "not reproduced", _pairs(-10.0, concurrency=32))
    # a verdict on no rows disagrees with nothing
    assert not lead.disagree("reproduced", _pairs(10.0), "not measured yet", None)
    assert not lead.disagree("model only", None, "reproduced", _pairs(10.0))
