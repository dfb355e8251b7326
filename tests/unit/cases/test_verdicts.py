"""The MTP and EAGLE-3 verdicts: each status reachable from made-up rows, 'not measured' without them."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from vllm_playbooks.analysis import kbest, profiles, versus_model
from vllm_playbooks.cases import deepseek_mtp, gpt_oss_eagle3
from vllm_playbooks.cases.deepseek_mtp import draft_tokens
from vllm_playbooks.cases.gpt_oss_eagle3 import step_costs
from vllm_playbooks.results.store import load_reference

PROFILES = {"chat": (230, 203), "swe": (13000, 203)}


def _row(label: str, k: int, **load: Any) -> dict[str, Any]:
    return dict(
        engine_label=label,
        spec_method="none" if k == 0 else "mtp",
        num_speculative_tokens=k,
        imposed_alpha=None if k == 0 else 0.85,
        imposed_acceptance_rates=None,
        model_shape="deepseek-v3-reduced",
        load_format="dummy",
        input_len=load.pop("input_len", 230),
        output_len=203,
        tensor_parallel_size=1,
        pipeline_parallel_size=1,
        max_num_seqs=128,
        max_num_batched_tokens=8192,
        gpu_name="NVIDIA H200",
        concurrency=load.pop("concurrency", None),
        request_rate_qps=load.pop("request_rate_qps", None),
        **load,
    )


def _mtp(off: list[float], on: list[float], rates: tuple[int, ...] = (1, 2, 4, 8)) -> pd.DataFrame:
    rows = [_row("spec-off", 0, request_rate_qps=r, tpot_mean_ms=t) for r, t in zip(rates, off, strict=True)]
    rows += [_row("mtp-k1-a0.85", 1, request_rate_qps=r, tpot_mean_ms=t) for r, t in zip(rates, on, strict=True)]
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def published():  # type: ignore[no-untyped-def]
    return load_reference()


def test_mtp_not_measured_without_the_pair(published) -> None:  # type: ignore[no-untyped-def]
    empty = pd.DataFrame(columns=list(_row("x", 0)) + ["tpot_mean_ms"])
    verdict = deepseek_mtp.mtp_verdict(empty, published)
    assert verdict.status == "not measured" and "Not measured yet" in verdict.sentence
    only_off = _mtp([50, 50, 50, 50], [40, 40, 40, 40])[lambda d: d.engine_label == "spec-off"]
    assert deepseek_mtp.mtp_verdict(only_off, published).status == "not measured"


@pytest.mark.parametrize(
    ("on", "status"),
    [
        ([30, 35, 42, 50], "gain that shrinks with load"),  # 1.67× → 1.00×, as PR #12755
        ([30, 30, 30, 30], "gain that holds with load"),
        ([50, 45, 40, 35], "no gain at low load"),
    ],
)
def test_mtp_statuses(published, on: list[float], status: str) -> None:  # type: ignore[no-untyped-def]
    verdict = deepseek_mtp.mtp_verdict(_mtp([50, 50, 50, 50], on), published)
    assert verdict.status == status
    assert "PR #12755 reported 1.63× at 1 QPS and 1.00× at 8 QPS" in verdict.sentence
    assert list(verdict.table.request_rate_qps) == [1, 2, 4, 8]


def test_mtp_incomplete_when_a_rate_is_missing(published) -> None:  # type: ignore[no-untyped-def]
    verdict = deepseek_mtp.mtp_verdict(_mtp([50, 50], [30, 40], rates=(1, 2)), published)
    assert verdict.status == "incomplete" and "Not yet measured at 4, 8 QPS" in verdict.sentence
    assert verdict.table.speedup.tolist() == pytest.approx([50 / 30, 50 / 40])


def test_mtp_leaves_stalled_rates_out_and_says_so(published) -> None:  # type: ignore[no-untyped-def]
    rows = _mtp([50, 50, 50, 50], [30, 35, 80, 90]).assign(stalled=False)
    rows.loc[rows.request_rate_qps >= 4, "stalled"] = True  # the two high rates lost seconds to stalls
    verdict = deepseek_mtp.mtp_verdict(rows, published)
    assert verdict.status == "incomplete" and list(verdict.table.request_rate_qps) == [1, 2]
    assert "Not yet measured" not in verdict.sentence
    assert "Measured at 4, 8 QPS too, but runs there stalled" in verdict.sentence
    rows.loc[rows.request_rate_qps == 4, "stalled"] = False  # 4 QPS clean: 8 stalled, nothing unmeasured
    judged = deepseek_mtp.mtp_verdict(rows, published)
    assert "Measured at 8 QPS too" in judged.sentence and "the trend is judged without them" in judged.sentence
    assert judged.status == "gain that shrinks with load"  # 1.67× at 1 QPS → 0.63× at 4 QPS, 8 QPS left out
    assert list(judged.table.request_rate_qps) == [1, 2, 4]


def test_mtp_holds_to_the_last_clean_rate(published) -> None:  # type: ignore[no-untyped-def]
    rows = _mtp([50, 50, 50, 50], [30, 30, 29, 90]).assign(stalled=[False, False, False, True] * 2)
    verdict = deepseek_mtp.mtp_verdict(rows, published)
    assert verdict.status == "gain that holds with load" and "up to 4 QPS" in verdict.sentence


def _k_rows() -> pd.DataFrame:
    rows = [_row("spec-off", 0, concurrency=c, tpot_mean_ms=30.0) for c in (1, 64)]
    for label, k, rates, tpots in (
        ("mtp-k1-a0.85", 1, "[0.85]", (20.0, 25.0)),
        ("mtp-k1-a0.9", 1, "[0.9]", (10.0, 10.0)),  # another acceptance: not compared
        ("mtp-k2-p0.85", 2, "[0.85, 0.5]", (15.0, 24.0)),
        ("mtp-k3-p0.85", 3, "[0.85, 0.5, 0.3]", (12.0, 26.0)),
    ):
        for c, tpot in zip((1, 64), tpots, strict=True):
            rows.append(_row(label, k, concurrency=c, tpot_mean_ms=tpot) | {"imposed_acceptance_rates": rates})
    return pd.DataFrame(rows)


def test_best_k_by_load_compares_at_one_first_position_acceptance() -> None:
    best = draft_tokens.best_k_by_load(draft_tokens.k_sweep(_k_rows(), "deepseek-v3-reduced"))
    assert best.load.tolist() == ["concurrency 1", "concurrency 64"]
    assert best.best_k.tolist() == [3, 2]
    assert best.speedup.tolist() == pytest.approx([30 / 12, 30 / 24])
    assert best.k1_speedup.tolist() == pytest.approx([30 / 20, 30 / 25])
    none = draft_tokens.best_k_by_load(draft_tokens.k_sweep(_k_rows(), "mimo-7b"))  # no row of that shape chosen
    assert none.empty and list(none.columns) == list(best.columns)


def _eagle(
    gains: dict[int, float], label: str = "eagle3-k3-a0.71", k: int = 3, alpha: float = 0.71, input_len: int = 230
) -> list[dict[str, Any]]:
    rows = []
    for c, gain in gains.items():
        rows.append(_row("spec-off", 0, concurrency=c, input_len=input_len, output_tok_s=1000.0))
        spec = _row(label, k, concurrency=c, input_len=input_len, output_tok_s=1000.0 * (1 + gain / 100))
        rows.append({**spec, "spec_method": "eagle3", "imposed_alpha": alpha, "model_shape": "deepseek-v3-reduced"})
    return rows


def test_eagle3_statuses(published) -> None:  # type: ignore[no-untyped-def]
    holds = pd.DataFrame(_eagle({1: 30.0, 64: 20.0, 200: 10.0}))
    verdict = gpt_oss_eagle3.eagle3_verdict(holds, PROFILES, published)
    assert verdict.status == "gain holds to 200"
    # the range over the loads, the gain at the top, and the published range
    for numbers in ("+10.0 % to +30.0 %", "1-200", "200 concurrent requests (+10.0 %)", "+10 to +21 %"):
        assert numbers in verdict.sentence
    fades = pd.DataFrame(_eagle({1: 30.0, 64: 5.0, 200: -4.0}))
    assert gpt_oss_eagle3.eagle3_verdict(fades, PROFILES, published).status == "gain fades before the top"
    assert gpt_oss_eagle3.eagle3_verdict(pd.DataFrame(_eagle({1: 1.0, 64: -5.0})), PROFILES).status == "no gain"
    assert gpt_oss_eagle3.eagle3_verdict(pd.DataFrame(_eagle({1: 20.0})), PROFILES).status == "incomplete"
    swe_only = pd.DataFrame(_eagle({1: 20.0}, input_len=13000))
    assert gpt_oss_eagle3.eagle3_verdict(swe_only, PROFILES).status == "not measured"


def test_eagle3_names_a_loss_below_a_top_it_holds_at(published) -> None:  # type: ignore[no-untyped-def]
    dip = pd.DataFrame(_eagle({1: 36.0, 16: -7.8, 64: 21.4}, input_len=13000))
    verdict = gpt_oss_eagle3.eagle3_verdict(dip, PROFILES, published, profile="swe", top=64, cite_report=False)
    assert verdict.status == "gain holds to 64"
    assert verdict.sentence.endswith("It did not hold at every load below that: -7.8 % at 16.")
    steady = pd.DataFrame(_eagle({1: 36.0, 16: 1.0, 64: 21.4}, input_len=13000))  # within the tolerance: no dip named
    assert (
        "did not hold" not in gpt_oss_eagle3.eagle3_verdict(steady, PROFILES, published, profile="swe", top=64).sentence
    )


def test_eagle3_leaves_a_stalled_concurrency_out(published) -> None:  # type: ignore[no-untyped-def]
    rows = pd.DataFrame(_eagle({1: 30.0, 128: 60.0, 200: 10.0})).assign(stalled=False)
    rows.loc[(rows.concurrency == 128) & (rows.engine_label == "spec-off"), "stalled"] = True
    verdict = gpt_oss_eagle3.eagle3_verdict(rows, PROFILES, published)
    assert verdict.status == "gain holds to 200" and list(verdict.table.concurrency) == [1, 200]
    assert "Measured at concurrency 128 too, but runs there stalled" in verdict.sentence
    rows.loc[rows.concurrency == 200, "stalled"] = True
    verdict = gpt_oss_eagle3.eagle3_verdict(rows, PROFILES, published)
    assert verdict.status == "incomplete" and "Not yet measured at 200" not in verdict.sentence
    assert "concurrency 128, 200 too" in verdict.sentence
    long = gpt_oss_eagle3.eagle3_verdict(rows, PROFILES, published, profile="swe", top=64)
    assert long.status == "not measured" and "stalled" not in long.sentence  # the chat profile's stalls are not its own


def test_second_profile_note_says_where_k3_paid_and_lost(published) -> None:  # type: ignore[no-untyped-def]
    long = gpt_oss_eagle3.eagle3_verdict(
        pd.DataFrame(_eagle({1: 36.0, 4: 2.0, 16: -7.8}, input_len=13000)), PROFILES, published, profile="swe", top=64
    )
    assert long.status == "incomplete" and "-7.8 % to +36.0 % at 1-16" in long.sentence
    assert long.sentence.count("-7.8 %") == 2 and "-7.8 % at 16" in long.sentence  # the loss named with its load
    assert "+10 to +21 %" in long.sentence
    uncited = gpt_oss_eagle3.eagle3_verdict(
        pd.DataFrame(_eagle({1: 36.0}, input_len=13000)), PROFILES, published, profile="swe", top=64, cite_report=False
    )
    assert "Red Hat" not in uncited.sentence


def test_best_k_by_band() -> None:
    rows = _eagle({1: 10.0, 8: 12.0, 64: 5.0}, "eagle3-k2-a0.71", 2) + _eagle({1: 20.0, 8: 18.0, 64: 2.0, 128: 9.0})
    rows = [r for i, r in enumerate(rows) if not (r["engine_label"] == "spec-off" and 6 <= i < 12)]  # one per level
    gains = profiles.gain_table(pd.DataFrame(rows), PROFILES)
    best = kbest.best_k_by_band(gains, 0.71).set_index("band")
    assert best.loc["1-8", "best_k"] == 3 and best.loc["16-64", "best_k"] == 2
    assert pd.isna(best.loc["128-200", "best_k"]) and best.loc["128-200", "ks"] == "3"  # one k: no best
    assert best.loc["1-8", "ks"] == "2, 3"
    assert best.loc["1-8", "runner_up_k"] == 2 and best.loc["1-8", "lead_pts"] == pytest.approx(8.0)  # 19 vs 11
    assert best.loc["16-64", "lead_pts"] == pytest.approx(3.0)  # k = 2 +5.0 % against k = 3 +2.0 %
    assert best.loc["16-64", "tied_ks"] == "3" and best.loc["1-8", "tied_ks"] == ""  # 1.05 / 1.02 within the band
    no_high_band = kbest.best_k_by_band(gains[gains.concurrency <= 64], 0.71)
    assert no_high_band.band.tolist() == ["1-8", "16-64"]  # a band without points gets no row


def _stepped(steps: dict[int, tuple[float, float, float, float]]) -> pd.DataFrame:
    """Spec-off and k=3 rows per concurrency: (steps per 1k tokens off, on; ms per step off, on)."""
    rows = _eagle({c: 0.0 for c in steps})
    for i, (c, (n_off, n_on, t_off, t_on)) in enumerate(steps.items()):
        for row, n, ms in ((rows[2 * i], n_off, t_off), (rows[2 * i + 1], n_on, t_on)):
            row.update(steps_per_1k_tokens=n, ms_per_step=ms, output_tok_s=1e6 / (n * ms))
    return pd.DataFrame(rows)


def test_step_factors_split_the_gain_into_saved_steps_and_step_cost() -> None:
    rows = _stepped({16: (60.0, 30.0, 40.0, 84.0), 64: (24.0, 9.0, 90.0, 198.0)})
    factors = step_costs.step_factors(rows, PROFILES, "eagle3-k3-a0.71").set_index("concurrency")
    assert factors.fewer_steps_x.tolist() == pytest.approx([2.0, 24 / 9])
    assert factors.step_cost_x.tolist() == pytest.approx([2.1, 2.2])
    assert factors.gain_pct.tolist() == pytest.approx([100 * (2.0 / 2.1 - 1), 100 * (24 / 9 / 2.2 - 1)])
    assert step_costs.step_factors(rows, PROFILES, "eagle3-k2-a0.71").empty  # another engine: nothing to split


def test_latency_gains_count_lower_as_better() -> None:
    rows = _eagle({4: 0.0})
    rows[0]["e2el_mean_ms"], rows[1]["e2el_mean_ms"] = 1000.0, 850.0
    gains = profiles.gain_table(pd.DataFrame(rows), PROFILES, "e2el_mean_ms")
    assert gains.gain_pct.tolist() == pytest.approx([15.0])


def _k_sweep(gains_by_k: dict[int, dict[int, float]], input_len: int = 230) -> pd.DataFrame:
    """A gain table of k = 3 and the other ks given ({k: {concurrency: gain %}}) at α 0.71, one spec-off per load."""
    rows = [r for k, gains in gains_by_k.items() for r in _eagle(gains, f"eagle3-k{k}-a0.71", k, input_len=input_len)]
    seen: set[float] = set()
    unique = []
    for r in rows:  # one spec-off row per concurrency: the gain table pairs each k with it
        if r["engine_label"] == "spec-off":
            if r["concurrency"] in seen:
                continue
            seen.add(r["concurrency"])
        unique.append(r)
    return profiles.gain_table(pd.DataFrame(unique), PROFILES)


def test_claimed_ks_by_band_sets_the_best_inside_the_range_against_the_best_outside() -> None:
    gains = _k_sweep(
        {2: {1: 30.0, 16: 20.0, 128: 40.0}, 3: {1: 31.0, 16: 25.0, 128: 35.0}, 4: {1: 29.0, 16: 40.0, 128: 20.0}}
    )
    long = _k_sweep({2: {1: 30.0}, 3: {1: 20.0}}, input_len=13000)
    claimed = kbest.claimed_ks_by_band(pd.concat([gains, long]), 0.71, 2, 3).set_index(["profile", "band"])
    assert claimed["outcome"].to_dict() == {
        ("chat", "1-8"): "too close",
        ("chat", "16-64"): "not held",
        ("chat", "128-200"): "held",
        ("swe", "1-8"): "not tested",
    }
    assert claimed.loc[("chat", "1-8"), ["inside_k", "outside_k"]].tolist() == [3, 4]  # 31 vs 29: within 5 points
    assert claimed.loc[("chat", "128-200"), ["inside_gain_pct", "outside_gain_pct"]].tolist() == pytest.approx(
        [40.0, 20.0]
    )
    assert pd.isna(claimed.loc[("swe", "1-8"), "outside_k"])  # k = 2 and 3 alone cannot show 2-3 is best
    assert (
        kbest.claimed_ks_by_band(gains, 0.71, 2, 3, tolerance=0.01).set_index("band").loc["1-8", "outcome"] == "held"
    )  # 2 points ahead counts with a 1-point tolerance


def test_alpha_band_sets_each_alpha_beside_the_central_one(published) -> None:  # type: ignore[no-untyped-def]
    rows = (
        _eagle({1: 30.0, 64: 20.0, 200: 10.0})
        + _eagle({1: 12.0, 64: 2.0}, "eagle3-k3-a0.61", alpha=0.61)
        + _eagle({1: 40.0, 8: 35.0}, "eagle3-k3-a0.81", alpha=0.81)
        + _eagle({1: 50.0}, "eagle3-k2-a0.81", 2, 0.81)
    )  # another k: not in k = 3's band
    gains = profiles.gain_table(pd.DataFrame(rows), PROFILES)
    band = profiles.alpha_band(gains, 0.71)
    assert band[["imposed_alpha", "concurrency"]].values.tolist() == [[0.61, 1], [0.61, 64], [0.81, 1], [0.81, 8]]
    assert band.difference_pts.iloc[:3].tolist() == pytest.approx([-18.0, -18.0, 10.0])
    assert pd.isna(band.central_gain_pct.iloc[3]) and (band.central_alpha == 0.71).all()
    nothing_else = profiles.alpha_band(profiles.select_gains(gains, alpha=0.71), 0.71)
    assert nothing_else.empty


def test_select_gains() -> None:
    rows = _eagle({1: 10.0}, "eagle3-k2-a0.71", 2) + _eagle({1: 20.0}, "eagle3-k3-a0.61", 3, 0.61)
    gains = profiles.gain_table(pd.DataFrame(rows), PROFILES)
    assert profiles.select_gains(gains, alpha=0.71).engine_label.tolist() == ["eagle3-k2-a0.71"]
    assert profiles.select_gains(gains, k=3, profile="chat").engine_label.tolist() == ["eagle3-k3-a0.61"]
    assert profiles.select_gains(gains, profile="swe").empty and profiles.select_gains(gains.iloc[:0], alpha=0.7).empty


def test_measurements_beside_the_model() -> None:
    rows = _eagle({1: 30.0, 64: 20.0})
    gains = profiles.gain_table(pd.DataFrame(rows), PROFILES)
    # as cases.gpt_oss_eagle3.eagle3_predictions gives it: both a batch and a concurrency column
    model = pd.DataFrame({"concurrency": [1, 64, 200], "batch": [1, 64, 200], "gain_pct": [-10.0, 25.0, 40.0]})
    table = versus_model.beside_model(gains, model, "gain_pct", "eagle3-k3-a0.71")
    assert table.concurrency.tolist() == [1.0, 64.0] and table.predicted.tolist() == [-10.0, 25.0]
    assert table.measured_minus_predicted.tolist() == pytest.approx([40.0, -5.0])
    speedups = deepseek_mtp.tpot_speedups(
        _mtp([50, 50], [25, 40], rates=(1, 2)).assign(concurrency=[1, 4, 1, 4], request_rate_qps=None)
    )
    batch_model = pd.DataFrame({"batch": [1, 4], "speedup": [1.5, 1.5]})
    table = versus_model.beside_model(speedups, batch_model, "speedup", "mtp-k1-a0.85")
    assert table.measured.tolist() == pytest.approx([2.0, 1.25]) and table.predicted.tolist() == [1.5, 1.5]


def test_measurements_beside_the_model_for_each_configuration() -> None:
    rows = _mtp([50, 50], [25, 40], rates=(1, 2)).assign(concurrency=[1, 4, 1, 4], request_rate_qps=None)
    k2 = rows[rows.engine_label == "mtp-k1-a0.85"].assign(
        engine_label="mtp-k2-p0.85", num_speculative_tokens=2, tpot_mean_ms=[20.0, 50.0]
    )
    speedups = deepseek_mtp.tpot_speedups(pd.concat([rows, k2], ignore_index=True))
    predicted = pd.DataFrame(
        {
            "config": ["mtp-k2-p0.85", "mtp-k2-p0.85", "mtp-k1-a0.85", "mtp-k1-a0.85", "not-measured", "not-measured"],
            "batch": [1, 4] * 3,
            "speedup": [2.6, 1.0, 1.9, 1.3, 1.5, 1.5],
        }
    )
    table = versus_model.beside_model_by_config(speedups, predicted, "speedup")
    # in the model's order; a configuration without measurements has no rows
    assert table.engine_label.tolist() == ["mtp-k2-p0.85"] * 2 + ["mtp-k1-a0.85"] * 2
    assert table.measured.tolist() == pytest.approx([2.5, 1.0, 2.0, 1.25])


def _band_rows() -> pd.DataFrame:
    """Spec off at 20 ms; k = 1 at α 0.81 and 0.90 (acceptance lengths 1.81 and 1.90) at 1 QPS and concurrency 1,
    0.81 alone at concurrency 64."""
    rows = [
        _row("spec-off", 0, tpot_mean_ms=20.0, **load)
        for load in ({"request_rate_qps": 1}, {"concurrency": 1}, {"concurrency": 64})
    ]
    for label, alpha, length, tpots in (
        ("mtp-k1-a0.81", 0.81, 1.81, {1: 12.0, "c1": 15.0, "c64": 18.0}),
        ("mtp-k1-a0.90", 0.90, 1.90, {1: 12.0 * 1.81 / 1.90, "c1": 15.0}),
    ):
        for key, tpot in tpots.items():
            load = {"request_rate_qps": key} if key == 1 else {"concurrency": int(key[1:])}
            rows.append(
                _row(label, 1, tpot_mean_ms=tpot, mean_acceptance_length=length, **load) | {"imposed_alpha": alpha}
            )
    return pd.DataFrame(rows)


def test_acceptance_band_compares_the_ends_at_each_load() -> None:
    band = draft_tokens.acceptance_band(draft_tokens.k_sweep(_band_rows(), "deepseek-v3-reduced"))
    assert band.load.tolist() == ["1 QPS", "1 QPS", "concurrency 1", "concurrency 1", "concurrency 64"]
    assert band.imposed_alpha.tolist() == [0.81, 0.9, 0.81, 0.9, 0.81]
    assert band.mean_acceptance_length.tolist() == [1.81, 1.9, 1.81, 1.9, 1.81]


def _draft_cost_case() -> tuple[pd.DataFrame, pd.DataFrame]:
    rows = [_row("spec-off", 0, concurrency=c, tpot_mean_ms=5.0) for c in (1, 16)]
    rows += [
        _row("mtp-k1-a0.85", 1, concurrency=1, tpot_mean_ms=3.0, mean_acceptance_length=1.85),
        _row("mtp-k1-a0.85", 1, concurrency=16, tpot_mean_ms=4.0, mean_acceptance_length=1.85),
        _row("mtp-k3-p0.85", 3, concurrency=1, tpot_mean_ms=2.5, mean_acceptance_length=2.7),
        _row("mtp-k1-a0.85", 1, request_rate_qps=1, tpot_mean_ms=3.0, mean_acceptance_length=1.85),
    ]
    predicted = pd.DataFrame(
        {
            "config": ["mtp-k1-a0.85", "mtp-k1-a0.85", "mtp-k3-p0.85"],
            "batch": [1, 16, 1],
            "c": [0.4, 0.38, 0.4],
            "draft_ms": [2.0, 2.1, 2.0],
            "draft_fixed_cost_ms": 1.7,
        }
    )
    return draft_tokens.k_sweep(pd.DataFrame(rows), "deepseek-v3-reduced"), predicted


def test_the_draft_cost_a_measured_pair_implies() -> None:
    sweep, predicted = _draft_cost_case()
    table = draft_tokens.draft_cost_beside_model(sweep, predicted)
    # closed loop only: the 1-QPS row has no batch to compare with
    assert table.engine_label.tolist() == ["mtp-k1-a0.85", "mtp-k1-a0.85", "mtp-k3-p0.85"]
    c = [3.0 * 1.85 / 5 - 1, 4.0 * 1.85 / 5 - 1, (2.5 * 2.7 / 5 - 1) / 3]
    assert table.c_measured.tolist() == pytest.approx(c)
    assert table.draft_ms_measured.tolist() == pytest.approx([5 * x for x in c])
    # beyond the model's reads: measured draft time less (model draft time - the fixed cost it charged)
    assert table.beyond_reads_ms.tolist() == pytest.approx([5 * c[0] - 0.3, 5 * c[1] - 0.4, 5 * c[2] - 0.3])
    assert draft_tokens.draft_fixed_cost_ms(table) == pytest.approx((5 * c[0] - 0.3 + 5 * c[2] - 0.3) / 2)
    assert draft_tokens.draft_fixed_cost_ms(table.iloc[0:0]) != draft_tokens.draft_fixed_cost_ms(table.iloc[0:0])  # NaN


def test_predictions_with_another_draft_fixed_cost_side_by_side() -> None:
    before = pd.DataFrame(
        {
            "config": ["a", "a", "b"],
            "batch": [1, 8, 1],
            "draft_fixed_cost_ms": 1.7,
            "c": [0.6, 0.3, 0.4],
            "speedup": [1.0, 1.2, 1.3],
        }
    )
    after = before.assign(draft_fixed_cost_ms=0.2, c=[0.1, 0.05, 0.1], speedup=[1.4, 1.5, 1.6])
    change = draft_tokens.fixed_cost_change(before, after)
    assert change.columns.tolist() == [
        "config",
        "batch",
        "draft_fixed_cost_ms_before",
        "c_before",
        "speedup_before",
        "draft_fixed_cost_ms_after",
        "c_after",
        "speedup_after",
    ]


def _scale_case() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    small, rate = {"model_shape": "small"}, {"imposed_acceptance_rates": "[0.85]"}
    rows = [_row("spec-off", 0, concurrency=c, tpot_mean_ms=t) for c, t in ((1, 10.0), (16, 20.0))]
    rows += [
        _row("big-k1", 1, concurrency=1, tpot_mean_ms=6.0, mean_acceptance_length=2.0) | rate,
        _row("big-k1", 1, concurrency=16, tpot_mean_ms=12.5, mean_acceptance_length=2.0) | rate,
        _row("big-k1", 1, request_rate_qps=1, tpot_mean_ms=6.0, mean_acceptance_length=2.0) | rate,
        _row("big-k1-a0.9", 1, concurrency=1, tpot_mean_ms=5.0, mean_acceptance_length=2.0)
        | {"imposed_acceptance_rates": "[0.9]"},
        _row("small-off", 0, concurrency=1, tpot_mean_ms=3.0) | small,
        _row("small-k1", 1, concurrency=1, tpot_mean_ms=2.25, mean_acceptance_length=2.0) | small | rate,
    ]
    model = {"config": ["big-k1", "big-k1", "small-k1"], "batch": [1, 16, 1], "tau": 2.0}
    before = pd.DataFrame(
        model
        | {"tpot_off_ms": [10.0, 20.0, 3.0], "tpot_on_ms": [6.5, 12.0, 2.5], "speedup": [10 / 6.5, 20 / 12.0, 3 / 2.5]}
    )
    after = before.assign(tpot_on_ms=[5.5, 11.0, 1.75], speedup=[10 / 5.5, 20 / 11.0, 3 / 1.75])
    return deepseek_mtp.tpot_speedups(pd.DataFrame(rows)), before, after


def test_added_step_time_is_tpot_times_acceptance_length_less_the_spec_off_step() -> None:
    speedups, before, after = _scale_case()
    table = draft_tokens.added_step_time(speedups, before, after)
    # without model tables every closed-loop pair is kept, model columns NaN
    every = draft_tokens.added_step_time(speedups)
    assert sorted(every.engine_label) == ["big-k1", "big-k1", "big-k1-a0.9", "small-k1"]
    assert every.added_ms_before.isna().all() and every.speedup_after.isna().all()
    assert sorted(every.position_1_rate) == [0.85, 0.85, 0.85, 0.9]
    # with them, their configs only; closed loop only, by concurrency, the longer step first
    assert list(zip(table.engine_label, table.concurrency, strict=True)) == [
        ("big-k1", 1),
        ("small-k1", 1),
        ("big-k1", 16),
    ]
    assert table.step_on_ms.tolist() == pytest.approx([12.0, 4.5, 25.0])
    assert table.added_ms.tolist() == pytest.approx([2.0, 1.5, 5.0])
    assert table.added_share.tolist() == pytest.approx([0.2, 0.5, 0.25])
    # S = tau / (1 + share) when the acceptance length is the measured one
    assert table.speedup.tolist() == pytest.approx([2.0 / 1.2, 2.0 / 1.5, 2.0 / 1.25])
    assert table.added_ms_before.tolist() == pytest.approx([3.0, 2.0, 4.0])
    assert table.added_ms_after.tolist() == pytest.approx([1.0, 0.5, 2.0])


def _k3_steps(ms: dict[tuple[float, int], float]) -> pd.DataFrame:
    """EAGLE-3 k = 3 rows with a step time per (imposed α, concurrency), and one k = 2 row that must be ignored."""
    rows = [
        {
            **_row(f"eagle3-k3-a{a}", 3, concurrency=c, ms_per_step=t, point_id=f"k3-a{a}/c{c}"),
            "spec_method": "eagle3",
            "imposed_alpha": a,
        }
        for (a, c), t in ms.items()
    ]
    rows.append(
        {
            **_row("eagle3-k2-a0.71", 2, concurrency=1, ms_per_step=99.0, point_id="k2/c1"),
            "spec_method": "eagle3",
            "imposed_alpha": 0.71,
        }
    )
    return pd.DataFrame(rows)


def test_step_cost_by_alpha_spreads_the_alpha_runs_of_one_k() -> None:
    rows = _k3_steps(
        {
            (0.61, 1): 11.0,
            (0.71, 1): 11.22,
            (0.81, 1): 11.11,
            (0.61, 64): 38.0,
            (0.71, 64): 42.75,
            (0.81, 64): 41.8,
            (0.61, 200): 80.0,
        }
    )
    table = step_costs.step_cost_by_alpha(rows, PROFILES, overlapped=["k3-a0.71/c64"]).set_index("concurrency")
    assert table.index.tolist() == [1, 64]  # 200 has one α only; the k = 2 row is not k = 3
    assert table.spread_pct.tolist() == pytest.approx([2.0, 12.5])
    assert table.loc[64, ["alpha_fast", "alpha_slow"]].tolist() == [0.61, 0.71]
    assert table.shared_host.tolist() == [False, True]
    assert table.loc[1, "alphas"] == (0.61, 0.71, 0.81)
