"""One card at a time: comparisons that never leave one machine, and how far the machine moved them."""

from __future__ import annotations

import pandas as pd
import pytest

from vllm_playbooks.analysis import cards, compare


def _rows(runs: list[tuple[str, str, int, str, float]]) -> pd.DataFrame:
    """Rows of one shape from (GPU, engine label, concurrency, card, output tok/s) per run; '' is a run without card."""
    records = []
    for gpu, label, concurrency, card, value in runs:
        off = label == "spec-off"
        records.append(
            dict(
                engine_label=label,
                spec_method="none" if off else "draft_model",
                num_speculative_tokens=0 if off else 4,
                imposed_alpha=None if off else 0.8,
                concurrency=concurrency,
                request_rate_qps=None,
                output_tok_s=value,
                model_shape="s",
                load_format="dummy",
                input_len=512,
                output_len=128,
                tensor_parallel_size=1,
                pipeline_parallel_size=1,
                max_num_seqs=None,
                max_num_batched_tokens=None,
                gpu_name=gpu,
                gpu_cards=card,
            )
        )
    return pd.DataFrame(records)


A, B, C = "GPU-aaaaaaaa-1111", "GPU-bbbbbbbb-2222", "GPU-cccccccc-3333"
RUNS = [
    # H200, concurrency 16: speculation off is steady on both cards; the draft loses on card a and gains on card b
    *[("H200", "spec-off", 16, A, v) for v in (2300.0, 2310.0, 2320.0)],
    *[("H200", "draft", 16, A, v) for v in (1650.0, 1660.0, 1670.0)],
    *[("H200", "spec-off", 16, B, v) for v in (2290.0, 2300.0, 2310.0)],
    *[("H200", "draft", 16, B, v) for v in (2750.0, 2760.0, 2770.0)],
    ("H200", "draft", 16, "", 2000.0),  # recorded without its card
    # H200, concurrency 1: only card a ran both sides, card b only the draft
    ("H200", "spec-off", 1, A, 200.0),
    ("H200", "draft", 1, A, 180.0),
    ("H200", "draft", 1, B, 210.0),
    # H100, concurrency 16: two cards that agree
    *[("H100", "spec-off", 16, C, v) for v in (1800.0, 1810.0, 1820.0)],
    *[("H100", "draft", 16, C, v) for v in (1600.0, 1610.0, 1620.0)],
    *[("H100", "spec-off", 16, A, v) for v in (1790.0, 1800.0, 1810.0)],
    *[("H100", "draft", 16, A, v) for v in (1580.0, 1590.0, 1600.0)],
]


def test_each_card_is_judged_on_its_own_runs() -> None:
    by_card = cards.versus_baseline_by_card(_rows(RUNS)).set_index(["gpu_name", "concurrency", "card"])
    assert by_card.loc[("H200", 16, "GPU-aaaaaaaa"), "change_pct"] == pytest.approx(100 * (1660 / 2310 - 1))
    assert by_card.loc[("H200", 16, "GPU-aaaaaaaa"), "effect"] == "loss"
    assert by_card.loc[("H200", 16, "GPU-bbbbbbbb"), "change_pct"] == pytest.approx(100 * (2760 / 2300 - 1))
    assert by_card.loc[("H200", 16, "GPU-bbbbbbbb"), "effect"] == "gain"
    # the run without its card is in no card's line: card a's draft rests on its own three runs
    assert by_card.loc[("H200", 16, "GPU-aaaaaaaa"), "speculative_runs"] == 3
    # a card where only one side ran gives no line
    assert ("H200", 1, "GPU-bbbbbbbb") not in by_card.index
    assert by_card.loc[("H200", 1, "GPU-aaaaaaaa"), ["baseline_runs", "speculative_runs"]].tolist() == [1, 1]


def test_pooled_over_machines_the_same_runs_cancel_out() -> None:
    rows = _rows(RUNS)
    pooled = compare.versus_baseline(rows[rows["gpu_name"] == "H200"]).set_index("concurrency")
    assert pooled.loc[16, "effect"] == "within noise"


def test_the_swing_is_per_gpu_model_and_load_widest_first() -> None:
    swings = cards.card_swings(cards.versus_baseline_by_card(_rows(RUNS)))
    # H200 at 1 ran both sides on one card only: no swing there
    assert swings[["gpu_name", "concurrency"]].values.tolist() == [["H200", 16], ["H100", 16]]
    widest = swings.iloc[0]
    assert (widest["lowest_card"], widest["lowest_effect"]) == ("GPU-aaaaaaaa", "loss")
    assert (widest["highest_card"], widest["highest_effect"]) == ("GPU-bbbbbbbb", "gain")
    assert widest["swing_pts"] == pytest.approx(100 * (2760 / 2300 - 1660 / 2310))
    assert swings.iloc[1]["swing_pts"] < 2  # the H100's two cards agree
    assert swings["cards"].tolist() == [2, 2]


def test_runs_without_cards_give_no_lines() -> None:
    rows = _rows(RUNS).assign(gpu_cards="")
    assert cards.versus_baseline_by_card(rows).empty
    assert cards.card_swings(cards.versus_baseline_by_card(rows)).empty
