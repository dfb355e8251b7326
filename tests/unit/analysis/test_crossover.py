"""Where speculation stops paying, the ITL chunking artifact, the schedule rule and the grid still to measure."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from vllm_playbooks.analysis import compare, crossover, schedule
from vllm_playbooks.cases import discussion_13834
from vllm_playbooks.claims import ledger as claims_ledger
from vllm_playbooks.claims.claim import Evidence
from vllm_playbooks.run.grid import unmeasured
from vllm_playbooks.run.plan import plan_from_dict


def _rows(off: list[float], on: list[float], levels: list[int], metric: str = "output_tok_s") -> pd.DataFrame:
    base = {
        "case": "c",
        "model_shape": "m",
        "load_format": "dummy",
        "gpu_name": "G",
        "input_len": 100,
        "output_len": 10,
        "random_range_ratio": 0.0,
        "request_rate_qps": None,
        "dtype": "bfloat16",
        "kv_cache_dtype": "auto",
        "quantization": None,
        "max_num_seqs": 256,
        "max_num_batched_tokens": 8192,
        "max_model_len": 4096,
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "temperature": 0.0,
        "imposed_acceptance_rates": None,
    }
    records = []
    for c, a, b in zip(levels, off, on, strict=True):
        records.append(
            {
                **base,
                "engine_label": "off",
                "spec_method": "none",
                "num_speculative_tokens": 0,
                "imposed_alpha": None,
                "concurrency": c,
                metric: a,
            }
        )
        records.append(
            {
                **base,
                "engine_label": "on",
                "spec_method": "draft_model",
                "num_speculative_tokens": 4,
                "imposed_alpha": 0.7,
                "concurrency": c,
                metric: b,
            }
        )
    frame = pd.DataFrame(records)
    missing = [c for c in compare.MATCH_COLUMNS if c not in frame]
    assert not missing, missing
    return frame


def test_crossover_finds_the_last_gain_and_the_first_loss() -> None:
    comparison = compare.versus_baseline(_rows([100, 100, 100, 100], [150, 110, 102, 80], [1, 4, 16, 64]))
    row = crossover.crossover(comparison).iloc[0]
    assert (row["gains_up_to"], row["loses_from"]) == (4, 64)
    assert row["text"] == "on: gains up to 4 streams; within noise (±5 %) at 16; loses from 64 streams."


def test_crossover_refuses_a_latency() -> None:
    comparison = compare.versus_baseline(_rows([1.0], [2.0], [1], "tpot_p50_ms"), "tpot_p50_ms")
    with pytest.raises(ValueError, match="throughput"):
        crossover.crossover(comparison)


def test_itl_artifact_recovers_tokens_per_chunk() -> None:
    # off: ITL = TPOT = 20 ms. on: TPOT 30 ms (slower), 3 tokens per chunk → ITL 90 ms.
    itl = _rows([20.0], [90.0], [32], "itl_mean_ms")
    frame = itl.assign(tpot_mean_ms=[20.0, 30.0], mean_acceptance_length=[None, 3.0])
    row = crossover.itl_artifact(frame).iloc[0]
    assert row["itl_ratio"] == pytest.approx(4.5) and row["tpot_ratio"] == pytest.approx(1.5)
    assert row["chunking"] == pytest.approx(3.0)
    assert row["artifact_share"] == pytest.approx(math.log(3.0) / math.log(4.5))
    faster = itl.assign(itl_mean_ms=[20.0, 30.0], tpot_mean_ms=[20.0, 10.0], mean_acceptance_length=[None, 3.0])
    assert crossover.itl_artifact(faster).iloc[0]["artifact_share"] == 1.0  # TPOT fell: all of the rise is chunking


def _schedule_k(engine_config_json: str, concurrency: float) -> int | None:
    """k at ``concurrency`` under a recorded config's batch-size schedule, read from the JSON (None: no schedule)."""
    import json

    spec = json.loads(engine_config_json).get("speculative") or {}
    schedule = spec.get("num_speculative_tokens_per_batch_size")
    if not schedule or math.isnan(concurrency):
        return None
    return next(k for low, high, k in schedule if low <= concurrency <= high)


@pytest.mark.recorded_data
def test_recorded_chunking_equals_acceptance_length() -> None:
    """On every recorded 70B pair, tokens per chunk (ITL ratio / TPOT ratio) is the measured acceptance length; the
    rows a batch-size schedule switched speculation off at (k = 0 at their concurrency) are not drafting pairs."""
    from vllm_playbooks.paths import data_dir
    from vllm_playbooks.results.replay import replay_case
    from vllm_playbooks.results.store import runs_file

    rows = replay_case("discussion-13834")
    table = pd.read_csv(runs_file("discussion-13834", data_dir()))
    off = {
        pid
        for pid, config, c in zip(table.point_id, table.engine_config_json, table.concurrency, strict=True)
        if _schedule_k(config, c) == 0
    }
    assert set(rows.loc[schedule.scheduled_off(rows), "point_id"]) == off
    table = crossover.itl_artifact(rows[~rows["point_id"].isin(off)])
    assert not table.empty
    assert ((table["chunking"] / table["mean_acceptance_length"] - 1).abs() < 0.05).all()


def test_unmeasured_matches_by_label_and_load() -> None:
    plan = plan_from_dict(
        {
            "case": "t",
            "engine_defaults": {"model": "llama-3.1-8b", "max_model_len": 2048},
            "engines": [{"label": "a"}, {"label": "b"}],
            "loads": {"input_len": 8, "output_len": 8, "concurrency": [1, 4], "random_range_ratio": 0.0},
        }
    )
    rows = pd.DataFrame(
        {
            "engine_label": ["a", "a", "b"],
            "input_len": [8, 8, 8],
            "output_len": [8, 8, 8],
            "concurrency": [1.0, 4.0, 4.0],
            "request_rate_qps": [None, None, None],
        }
    )
    table = unmeasured(plan, rows).set_index("engine_label")
    assert table.loc["a", "missing"] == "—" and table.loc["b", "missing"] == "c1"
    assert table["measured"].tolist() == [2, 1]


@pytest.mark.recorded_data
def test_the_case_page_verdict_is_the_ledgers_and_reads_its_point(recorded_evidence: Evidence) -> None:
    """The page's verdict is the ledger's, on the recorded pair with the report's k and acceptance nearest the load
    the report implies (the recorded concurrencies of that config, read from the table)."""
    from vllm_playbooks.errors import ConfigError
    from vllm_playbooks.paths import data_dir
    from vllm_playbooks.results.store import load_reference, runs_file

    evidence = recorded_evidence  # cases.load_evidence(): what the page and the ledger page each read
    result = claims_ledger.result_for("discussion-13834-slower", evidence)
    table = claims_ledger.headline_lines(claims_ledger.build_ledger(evidence)).set_index("claim")
    assert str(result.verdict) == table.loc["discussion-13834-slower", "verdict"]
    published = load_reference("discussion-13834")
    implied = discussion_13834.implied_13834(published)
    k = int(published.loc[published.claim_id == "num-speculative-tokens", "value"].item())
    alpha = published.loc[published.claim_id == "acceptance-rate-author-quoted", "value"].item()
    runs = pd.read_csv(runs_file("discussion-13834", data_dir()))
    paired = runs[
        (runs.num_speculative_tokens == k)
        & ((runs.imposed_alpha - alpha).abs() < 1e-9)
        & runs.concurrency.isin(runs.loc[runs.spec_method == "none", "concurrency"])
    ]
    streams = implied["streams_in_flight_spec_off"]
    nearest = min(set(paired.concurrency), key=lambda c: abs(math.log(c / streams)))
    assert (result.point["concurrency"], result.point["k"]) == (nearest, k)
    assert implied["itl_chunking_implied"] == pytest.approx(
        implied["itl_ratio_on_over_off"] / implied["tpot_ratio_if_closed_loop"]
    )
    with pytest.raises(ConfigError, match="no claim 'nope'"):
        claims_ledger.result_for("nope", evidence)


def _schedule_rows() -> pd.DataFrame:
    """Speculation off, fixed k = 4 and the same config switched off above 8 requests, at 1, 8 and 32 streams."""
    import json

    from vllm_playbooks.config.speculative import build_speculative_config

    frame = _rows([100, 100, 100], [150, 120, 80], [1, 8, 32])
    spec = build_speculative_config(
        {
            "method": "draft_model",
            "model": "llama-3.2-1b",
            "num_speculative_tokens": 4,
            "num_speculative_tokens_per_batch_size": [[1, 8, 4], [9, 256, 0]],
        }
    )
    assert spec is not None
    config = json.dumps({"speculative": spec.model_dump(mode="json")})
    scheduled = frame[frame["engine_label"] == "on"].assign(
        engine_label="sched", output_tok_s=[148.0, 100.0, 90.0], num_drafts=[500, 900, 12], engine_config_json=config
    )
    return pd.concat([frame, scheduled], ignore_index=True)


def test_schedule_outcome_compares_with_fixed_k_where_it_drafts_and_with_off_where_it_does_not() -> None:
    outcome = schedule.schedule_outcome(_schedule_rows(), "sched", "on").set_index("concurrency")
    assert outcome["scheduled_k"].tolist() == [4, 4, 0]
    assert outcome["reference_label"].tolist() == ["on", "on", "off"]
    assert outcome.loc[1, "change_pct"] == pytest.approx(-100 * 2 / 150)
    assert outcome.loc[8, "change_pct"] == pytest.approx(-100 * 20 / 120)
    assert outcome.loc[32, "change_pct"] == pytest.approx(-10.0)
    assert outcome.loc[32, "num_drafts"] == 12
    assert schedule.schedule_outcome(_schedule_rows(), "not-measured", "on").empty
    rows = _schedule_rows()
    off = rows[schedule.scheduled_off(rows)]
    assert off[["engine_label", "concurrency"]].values.tolist() == [["sched", 32]]


def test_schedule_table_puts_two_schedules_beside_one_reference() -> None:
    rows = _schedule_rows()
    second = (
        rows[rows["engine_label"] == "sched"]
        .iloc[[0, 2]]
        .assign(engine_label="sched-async", output_tok_s=[140.0, 95.0])
    )
    rows = pd.concat([rows, second], ignore_index=True)
    outcomes = pd.concat([schedule.schedule_outcome(rows, label, "on") for label in ("sched", "sched-async")])
    table = schedule.schedule_table(outcomes)
    assert table.index.tolist() == [(1, 4), (8, 4), (32, 0)]
    assert table[("reference", "engine_label")].tolist() == ["on", "on", "off"]
    assert table[("reference", "output_tok_s")].tolist() == [150.0, 120.0, 100.0]
    assert table[("sched", "output_tok_s")].tolist() == [148.0, 100.0, 90.0]
    assert table.loc[(32, 0), ("sched-async", "change_pct")] == pytest.approx(-5.0)
    assert pd.isna(table.loc[(8, 4), ("sched-async", "output_tok_s")])
    assert list(dict.fromkeys(group for group, _ in table.columns)) == ["reference", "sched", "sched-async"]


def test_change_chain_takes_a_gap_apart_one_logged_difference_at_a_time() -> None:
    measured = {
        "off": {8: 200.0, 32: 400.0, 64: 500.0},
        "off-v1": {32: 404.0, 64: 505.0},
        "off-v1-piecewise": {32: 392.0, 64: 495.0},
        "sched": {8: 190.0, 32: 356.0, 64: 450.0},
    }
    rows = pd.DataFrame(
        [
            {
                "engine_label": label,
                "spec_method": "draft_model" if label == "sched" else "none",
                "concurrency": c,
                "output_tok_s": v,
            }
            for label, values in measured.items()
            for c, v in values.items()
        ]
    )
    modes = pd.DataFrame(
        {
            "engine_label": ["off", "off-v1", "off-v1-piecewise", "sched"],
            "model_runner": ["V2", "V1", "V1", "V1"],
            "cudagraph_mode": ["FULL_AND_PIECEWISE", "FULL_AND_PIECEWISE", "PIECEWISE", "PIECEWISE"],
            "async_scheduling": [True, True, True, None],
        }
    )
    chain = schedule.change_chain(rows, list(measured), modes)
    assert chain.index.tolist() == ["1", "2", "3", "total"]
    assert [c for c in chain.columns if isinstance(c, int)] == [32, 64]  # 8 lacks two of the servers
    assert chain["differs"].tolist() == [
        "model runner V2 → V1",
        "CUDA graphs FULL_AND_PIECEWISE → PIECEWISE",
        "speculation none → draft_model; async scheduling on → not logged",
        "speculation none → draft_model; model runner V2 → V1; CUDA graphs FULL_AND_PIECEWISE → PIECEWISE; "
        "async scheduling on → not logged",
    ]
    assert chain.loc["1", 32] == pytest.approx(1.0) and chain.loc["3", 64] == pytest.approx(100 * (450 / 495 - 1))
    steps = chain.drop(index="total")
    for level in (32, 64):  # the steps compound to the total
        assert (1 + steps[level] / 100).prod() == pytest.approx(1 + chain.loc["total", level] / 100)
    assert chain.loc["total", 32] == pytest.approx(-11.0)
    with pytest.raises(ValueError, match="at least two labels"):
        schedule.change_chain(rows, ["off"], modes)


def test_a_schedule_counts_repeats_once_and_compares_each_gpu_with_its_own_references() -> None:
    rows = _schedule_rows().assign(gpu_name="NVIDIA H200")
    repeat = rows[rows["engine_label"] == "sched"].assign(output_tok_s=[152.0, 110.0, 94.0], num_drafts=[520, 940, 14])
    other = rows.assign(gpu_name="NVIDIA A100-SXM4-80GB", output_tok_s=rows["output_tok_s"] / 2)
    outcome = schedule.schedule_outcome(pd.concat([rows, repeat, other], ignore_index=True), "sched", "on")
    h200 = outcome[outcome["gpu_name"] == "NVIDIA H200"].set_index("concurrency")
    a100 = outcome[outcome["gpu_name"] != "NVIDIA H200"].set_index("concurrency")
    assert len(h200) == len(a100) == 3  # one row per point, not per run
    assert h200.loc[32, "output_tok_s"] == pytest.approx(92.0) and h200.loc[32, "num_drafts"] == 13  # medians
    assert a100.loc[32, "reference"] == pytest.approx(50.0) and a100.loc[32, "change_pct"] == pytest.approx(-10.0)
    table = schedule.schedule_table(outcome)
    assert table.index.names == ["gpu_name", "concurrency", "scheduled_k"] and len(table) == 6
