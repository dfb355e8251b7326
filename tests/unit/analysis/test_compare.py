"""Comparisons, verdict sentences and the Leviathan relations the pages use."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from vllm_playbooks.analysis import compare, repeats
from vllm_playbooks.book import change_text, page_notes
from vllm_playbooks.cases import load_words
from vllm_playbooks.model.speculative import expected_tokens_per_step, tokens_per_step_from_rates


def _frame() -> pd.DataFrame:
    rows = []
    for label, method, values in (("off", "none", [100, 400, 900]), ("spec", "draft_model", [150, 432, 800])):
        for c, v in zip([1, 4, 16], values, strict=True):
            rows.append(
                dict(
                    engine_label=label,
                    spec_method=method,
                    num_speculative_tokens=0 if method == "none" else 4,
                    imposed_alpha=None,
                    concurrency=c,
                    request_rate_qps=None,
                    output_tok_s=float(v),
                    model_shape="s",
                    load_format="dummy",
                    input_len=8,
                    output_len=8,
                    tensor_parallel_size=1,
                    pipeline_parallel_size=1,
                    max_num_seqs=None,
                    max_num_batched_tokens=None,
                    gpu_name="g",
                )
            )
    return pd.DataFrame(rows)


def test_versus_baseline_pairs_the_same_load() -> None:
    out = compare.versus_baseline(_frame())
    assert out.concurrency.tolist() == [1, 4, 16]
    assert out.change_pct.tolist() == pytest.approx([50.0, 8.0, -100 / 9])


@pytest.mark.parametrize(
    ("env", "runner"),
    [({}, None), ({"VLLM_USE_V2_MODEL_RUNNER": "0"}, "V1"), ({"VLLM_USE_V2_MODEL_RUNNER": "1"}, "V2")],
)
def test_forced_model_runner_reads_the_engine_env(env: dict[str, str], runner: str | None) -> None:
    assert compare.forced_model_runner(json.dumps({"label": "x", "env": env})) == runner
    assert compare.forced_model_runner(None) is None


@pytest.mark.parametrize(
    ("config", "mode", "control"),
    [
        ({"env": {}, "extra_args": []}, None, False),
        ({"env": {}, "extra_args": ["--async-scheduling"]}, None, False),  # forces neither runner nor graph mode
        ({"env": {}, "extra_args": ["--compilation-config", '{"cudagraph_mode": "PIECEWISE"}']}, "PIECEWISE", True),
        ({"env": {"VLLM_USE_V2_MODEL_RUNNER": "0"}, "extra_args": []}, None, True),
    ],
)
def test_a_control_forces_the_runner_or_the_cudagraph_mode(config: dict, mode: str | None, control: bool) -> None:
    assert compare.forced_cudagraph_mode(json.dumps(config)) == mode
    assert compare.is_control(json.dumps(config)) is control
    assert compare.forced_cudagraph_mode(None) is None and compare.is_control(None) is False


@pytest.mark.parametrize(
    "forced",
    [
        {"env": {"VLLM_USE_V2_MODEL_RUNNER": "0"}},
        {"env": {}, "extra_args": ["--compilation-config", '{"cudagraph_mode": "PIECEWISE"}']},
    ],
)
def test_a_spec_off_control_is_not_pooled_into_the_baseline(forced: dict) -> None:
    frame = _frame().assign(engine_config_json=json.dumps({"env": {}}))
    control = frame[frame.engine_label == "off"].assign(
        engine_label="off-forced", output_tok_s=50.0, engine_config_json=json.dumps(forced)
    )
    both = pd.concat([frame, control], ignore_index=True)
    assert compare.is_baseline(both).tolist() == [True] * 3 + [False] * 6
    out = compare.versus_baseline(both)
    assert out.engine_label.tolist() == ["spec"] * 3  # the control is not compared as if it were speculative either
    assert out.change_pct.tolist() == pytest.approx([50.0, 8.0, -100 / 9])  # against 'off' alone, not a median with 50


def test_winning_levels_and_sentence() -> None:
    out = compare.versus_baseline(_frame())
    assert compare.winning_levels(out) == [1, 4]
    sentence = change_text.describe_change(out)
    assert "+50.0 % at concurrency 1" in sentence and "beat the baseline only at concurrency 1, 4" in sentence


def test_nothing_to_compare_is_said_plainly() -> None:
    only_baseline = _frame()[lambda d: d.spec_method == "none"]
    assert "nothing to compare" in change_text.describe_change(compare.versus_baseline(only_baseline))


@pytest.mark.parametrize(
    ("alpha", "k", "tau"),
    [(0.0, 4, 1.0), (1.0, 4, 5.0), (0.5, 1, 1.5), (0.8, 4, 3.3616), (0.72, 5, 3.0739), (0.9, 0, 1.0)],
)
def test_expected_tokens_per_step(alpha: float, k: int, tau: float) -> None:
    assert expected_tokens_per_step(alpha, k) == pytest.approx(tau, abs=1e-4)


def test_iid_rates_give_the_same_tau() -> None:
    rates = [0.8**i for i in range(1, 5)]
    assert tokens_per_step_from_rates(rates) == pytest.approx(expected_tokens_per_step(0.8, 4))
    with pytest.raises(ValueError):
        expected_tokens_per_step(1.2, 3)


def test_for_latencies_lower_is_better() -> None:
    frame = _frame().rename(columns={"output_tok_s": "tpot_p50_ms"})
    out = compare.versus_baseline(frame, "tpot_p50_ms")
    # speculation: 150 vs 100 ms at c1 (worse), 432 vs 400 (worse), 800 vs 900 (better) → it last beat it at 16
    assert compare.winning_levels(out) == [16]
    assert "beat the baseline only at concurrency 16" in change_text.describe_change(out)


def test_versus_baseline_carries_extra_columns_of_the_speculative_rows() -> None:
    frame = _frame().assign(acceptance_rate=lambda d: [None if m == "none" else 0.6 for m in d.spec_method])
    out = compare.versus_baseline(frame, extra=["acceptance_rate"])
    assert out.acceptance_rate.tolist() == [0.6, 0.6, 0.6]
    assert "acceptance_rate" not in compare.versus_baseline(frame).columns


def test_request_rate_loads_are_named_in_the_sentences() -> None:
    frame = _frame().assign(request_rate_qps=lambda d: d.concurrency.astype(float), concurrency=None)
    out = compare.versus_baseline(frame)
    assert "load" not in out.columns  # the label is the pages' (cases.load_words)
    assert load_words.with_load_labels(out).load.tolist() == ["1 QPS", "4 QPS", "16 QPS"]
    assert "+50.0 % at 1 QPS" in change_text.describe_change(out)
    assert "beat the baseline only at 1 QPS, 4 QPS" in change_text.describe_change(out)


def test_a_load_run_twice_reports_its_spread_and_one_run_reports_none() -> None:
    frame = _frame()
    again = frame[(frame.engine_label == "off") & (frame.concurrency == 16)].assign(output_tok_s=945.0)
    both = pd.concat([frame, again], ignore_index=True).assign(measured_at=[f"2026-12-0{i % 9 + 1}" for i in range(7)])
    spread = repeats.repeat_spread(both)
    assert spread[["engine_label", "concurrency", "runs", "lowest", "highest"]].values.tolist() == [
        ["off", 16, 2, 900.0, 945.0]
    ]
    assert spread["spread_pct"].iloc[0] == pytest.approx(100 * 45 / 922.5)  # highest - lowest over the median
    assert spread["values"].iloc[0] == [900.0, 945.0]  # in the order measured
    text = page_notes.describe_repeat_spread(spread)
    assert (
        "off at concurrency 16 (8 in / 8 out) ran 2 times without a stall: 900.0 and 945.0 output tok/s, 4.9 % apart"
    ) in text
    assert repeats.repeat_spread(frame).empty and page_notes.describe_repeat_spread(repeats.repeat_spread(frame)) == ""
    # the comparison takes the median of the two baselines: 800 against 922.5
    paired = compare.versus_baseline(both).set_index("concurrency")
    assert paired.loc[16, "baseline"] == pytest.approx(922.5)
    assert (paired.loc[16, "baseline_runs"], paired.loc[16, "speculative_runs"]) == (2, 1)
    # the band is the larger spread of the two sides, never below the floor
    assert paired.loc[16, "band_pct"] == pytest.approx(5.0) and paired.loc[16, "baseline_spread_pct"] < 5.0


def test_the_verdict_is_computed_for_each_hardware_apart() -> None:
    from vllm_playbooks.book.change_text import describe_change, describe_change_by_hardware

    def comparison(gpu: str, change: float) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "engine_label": ["spec"],
                "concurrency": [1.0],
                "request_rate_qps": [None],
                "change_pct": [change],
                "metric": ["output_tok_s"],
                "gpu_name": [gpu],
                "effect": ["gain" if change > 0 else "loss"],
            }
        )

    both = pd.concat([comparison("NVIDIA H200", 40.0), comparison("NVIDIA L40S", -10.0)], ignore_index=True)
    text = describe_change_by_hardware(both)
    h200, l40s = text.split("\n\n")
    assert h200 == f"**On NVIDIA H200.** {describe_change(both.iloc[:1])}" and "+40.0 %" in h200
    assert l40s.startswith("**On NVIDIA L40S.**") and "-10.0 %" in l40s and "+40.0" not in l40s
    assert describe_change_by_hardware(both.iloc[:1]) == describe_change(both.iloc[:1])  # one GPU: no heading
