"""The search: it finds the winner of a grid it may only see through the oracle, stops by its rule (the lead beyond
the noise band, two configs within noise, the budget, or no point meeting the SLO), and never pays for a config the
KV calculator says cannot fit."""

from __future__ import annotations

import math
from functools import partial

import pandas as pd
import pytest

from tests.unit.advisor.grids import engine_json, frame, row, startups
from vllm_playbooks.advisor.goodput import Slo, grid_best, point_table, slo_levels
from vllm_playbooks.advisor.grids import one_grid
from vllm_playbooks.advisor.loads import dominated, transients
from vllm_playbooks.advisor.oracle import RecordedOracle, point_key
from vllm_playbooks.advisor.outlook import outlook
from vllm_playbooks.advisor.predict import priced_catalog
from vllm_playbooks.advisor.search import (
    BASELINE_UNMEASURED,
    PLAN_MARGIN,
    PLAUSIBLE_CHANCE,
    STOP_REASONS,
    Knobs,
    _challengers,
    _expected_without,
    _Offer,
    advise,
    baseline_first_gpu_s,
    certainty,
    min_answer_gpu_s,
    point_summary,
)
from vllm_playbooks.cli.advise import advice_text
from vllm_playbooks.hardware import datasheet_gpu

GPU = datasheet_gpu("H200-SXM")
LOADS = (1, 4, 16, 64)


def _config(
    name: str, tpots: tuple[float, ...], rps: tuple[float, ...], repeats: int = 1, wobble: float = 0.0, **kwargs: object
) -> list[dict[str, object]]:
    """One config's rows at ``LOADS``; repeat r scales the throughput by 1 + r·wobble."""
    return [
        row(name, c, t, r * (1 + i * wobble), repeat=i, **kwargs)  # type: ignore[arg-type]
        for c, t, r in zip(LOADS, tpots, rps, strict=True)
        for i in range(repeats)
    ]


def _clear_winner() -> pd.DataFrame:
    return frame(
        _config("a", (5.0, 5.2, 6.6, 12.0), (1.5, 5.8, 18.0, 39.0))
        + _config("b", (5.0, 5.3, 9.0, 20.0), (1.2, 4.0, 10.0, 25.0))
    )


def test_it_finds_a_clear_winner_and_stops_on_its_lead() -> None:
    rows = _clear_winner()
    oracle = RecordedOracle(rows, startups(rows), budget_gpu_s=10_000.0)
    advice = advise(oracle, Slo(tpot_p99_ms=8.0), GPU)
    assert advice.chosen is not None and advice.chosen["point"] == "a @ c16"
    assert advice.chosen["goodput_rps"] == 18.0 and advice.chosen["max_num_seqs"] == 16
    # b's one paid point missed, and the model, refitted on a's loads, rules out every other point of b beating a:
    # no other config met the SLO, so there is no measured lead to call beyond noise
    assert advice.stop_reason == "nothing else can win"
    assert advice.runner_up is None and [s.measured_goodput_rps for s in advice.steps if s.point.startswith("b")] == [
        0.0
    ]
    assert len(oracle.payments) < len(rows)  # it did not buy the whole grid
    assert advice.spent_gpu_s == oracle.spent_gpu_s == sum(s.gpu_s for s in advice.steps)


def test_two_configs_within_noise_end_within_noise_once_the_repeats_are_spent() -> None:
    rows = frame(
        _config("a", (5.0, 5.2, 6.6, 12.0), (1.5, 5.8, 18.0, 39.0), repeats=3, wobble=0.1)
        + _config("b", (5.0, 5.2, 6.7, 12.5), (1.5, 5.8, 18.2, 39.0), repeats=3, wobble=0.1)
    )
    oracle = RecordedOracle(rows, startups(rows), budget_gpu_s=100_000.0)
    advice = advise(oracle, Slo(tpot_p99_ms=8.0), GPU)
    assert advice.stop_reason == "within noise"
    assert advice.chosen is not None and advice.runner_up is not None
    assert {advice.chosen["point"], advice.runner_up["point"]} == {"a @ c16", "b @ c16"}
    assert advice.chosen["runs"] == 3 and advice.runner_up["runs"] == 3  # repeats paid before calling it a tie
    assert any(s.why.startswith("repeat") for s in advice.steps)


def test_it_stops_at_the_budget_and_never_spends_past_it() -> None:
    rows = _clear_winner()
    oracle = RecordedOracle(rows, startups(rows, 100.0), budget_gpu_s=150.0)  # one start-up and one point
    advice = advise(oracle, Slo(tpot_p99_ms=8.0), GPU)
    assert advice.stop_reason == "budget"
    assert len(oracle.payments) == 1 and advice.spent_gpu_s == 140.0 <= advice.budget_gpu_s


def test_an_slo_no_point_meets_ends_after_the_likeliest_point_misses() -> None:
    rows = _clear_winner()
    oracle = RecordedOracle(rows, startups(rows), budget_gpu_s=10_000.0)
    advice = advise(oracle, Slo(tpot_p99_ms=1.0), GPU)
    assert advice.stop_reason == "no point meets the SLO" and advice.chosen is None
    assert [s.point for s in advice.steps][-1].endswith("@ c1")  # the lowest load: the likeliest to meet it
    assert advice.stop_reason in STOP_REASONS


def test_a_config_the_calculator_says_cannot_fit_is_never_paid_for() -> None:
    big = engine_json("big", model="llama-3.3-70b")  # BF16 70B: its weights alone exceed one H200's share
    rows = frame(
        _clear_winner().to_dict("records")
        + _config("big", (3.0, 3.1, 3.2, 3.3), (100.0, 200.0, 300.0, 400.0), engine=big, model="llama-3.3-70b")
    )
    oracle = RecordedOracle(rows, startups(rows), budget_gpu_s=10_000.0)
    advice = advise(oracle, Slo(tpot_p99_ms=8.0), GPU)
    assert "big-id" in advice.pruned and "exceed" in advice.pruned["big-id"]
    assert all(p.key[0] != "big-id" for p in oracle.payments)
    assert advice.chosen is not None and advice.chosen["point"] == "a @ c16"


def test_points_dominated_by_a_paid_load_of_their_config_cannot_win() -> None:
    rows = _clear_winner()
    lines = {
        (r["config_id"], 512, 128, float(r["concurrency"]), -1.0): {**r, "load": r["concurrency"]}
        for r in rows.to_dict("records")
    }
    missed, met = ("a-id", 512, 128, 16.0, -1.0), ("b-id", 512, 128, 4.0, -1.0)
    out = dominated(lines, {missed: {"goodput_rps": 0.0}, met: {"goodput_rps": 4.0}})
    assert out == {("a-id", 512, 128, 64.0, -1.0), ("b-id", 512, 128, 1.0, -1.0)}


def _rates(offs: tuple[float, ...], off_rps_at_4: float) -> pd.DataFrame:
    """A request-rate grid (1, 2, 4, 8 req/s): speculation off with the TPOT p99s ``offs`` (its 4 req/s completing
    ``off_rps_at_4`` requests/s), and a 1B draft that meets a TPOT p99 of 8 ms up to 4 req/s and misses it at 8."""
    draft = engine_json("draft", draft="llama-3.2-1b", k=4, alpha=0.8)
    rps = {1: 0.98, 2: 1.96, 4: 3.92, 8: 7.8}
    return frame(
        [row("off", 0, t, off_rps_at_4 if r == 4 else rps[r], rate=r) for r, t in zip(rps, offs, strict=True)]
        + [row("draft", 0, t, rps[r], rate=r, engine=draft) for r, t in zip(rps, (5.0, 5.2, 5.5, 9.0), strict=True)]
    )


def test_a_miss_out_of_line_at_a_rate_the_server_kept_up_with_rules_out_no_load_above_it() -> None:
    # speculation off's p99 spikes at 4 req/s (three times its 2 req/s p99, the rate kept up with) and falls back at
    # 8, where it meets the SLO with twice the goodput of anything below: taking the miss at 4 to rule out 8, the
    # search answered the draft at 4 req/s (half the best); taken as a transient, 8 req/s is measured and wins
    rows = _rates((6.0, 6.2, 20.0, 7.5), off_rps_at_4=3.92)
    advice = advise(RecordedOracle(rows, startups(rows), budget_gpu_s=10_000.0), Slo(tpot_p99_ms=8.0), GPU)
    points = [s.point for s in advice.steps]
    assert points[0] == "off @ 4 req/s" and "off @ 8 req/s" in points  # the spike first, and the load above it
    assert advice.chosen is not None and advice.chosen["point"] == "off @ 8 req/s"
    best = grid_best(point_table(rows), Slo(tpot_p99_ms=8.0))
    assert (best["engine_label"], best["request_rate_qps"]) == ("off", 8.0)  # the grid's best


@pytest.mark.parametrize(
    ("offs", "off_rps_at_4"),
    [((6.0, 6.2, 20.0, 7.5), 3.0), ((6.0, 7.9, 8.5, 7.5), 3.92)],
    ids=["fell behind the rate", "in line with the load below"],
)
def test_a_miss_by_the_load_still_rules_out_the_loads_above_it(offs: tuple[float, ...], off_rps_at_4: float) -> None:
    # the same grid, but the miss at 4 req/s is its load's: the server fell behind the rate (a queue built up), or
    # its p99 rose from 2 req/s by no more than the model allows for a doubled load; 8 req/s is never paid for
    rows = _rates(offs, off_rps_at_4)
    advice = advise(RecordedOracle(rows, startups(rows), budget_gpu_s=10_000.0), Slo(tpot_p99_ms=8.0), GPU)
    assert "off @ 8 req/s" not in [s.point for s in advice.steps]
    assert advice.chosen is not None and advice.chosen["point"] != "off @ 8 req/s"


def test_only_a_rate_the_server_kept_up_with_makes_a_miss_transient_a_closed_loop_always_queues() -> None:
    slo = Slo(tpot_p99_ms=8.0)

    def transient_loads(rows: pd.DataFrame) -> set[float]:
        lines = {point_key(line): line for line in priced_catalog(rows, GPU).to_dict("records")}
        oracle = RecordedOracle(rows, startups(rows), budget_gpu_s=10_000.0)
        paid = {key: point_summary(lines[key], [oracle.pay(key)], slo) for key in lines if key[0] == "off-id"}
        expected = partial(_expected_without, lines=lines, paid=paid, gpu=GPU, slo=slo, knobs=Knobs())
        return {lines[key]["load"] for key in transients(paid, slo, expected)}

    rates = _rates((6.0, 6.2, 20.0, 7.5), off_rps_at_4=3.92)
    assert transient_loads(rates) == {4.0}
    closed = rates.assign(concurrency=rates["request_rate_qps"], request_rate_qps=float("nan"))
    assert transient_loads(closed) == set()  # the same p99s under a closed loop: the load's own misses


def test_the_live_path_measures_through_the_runner_and_takes_recorded_rows_for_free() -> None:
    from vllm_playbooks.advisor.oracle import LiveOracle

    truth = {(r["config_id"], r["concurrency"]): r for r in _clear_winner().to_dict("records")}
    measured: list[tuple[str, float]] = []

    def runner(line: dict[str, object]) -> dict[str, object]:  # a fake of the live runner: one bench row per call
        measured.append((str(line["config_id"]), float(line["concurrency"])))  # type: ignore[arg-type]
        return dict(truth[(line["config_id"], line["concurrency"])])

    rows = _clear_winner()
    recorded = rows[(rows["engine_label"] == "a") & (rows["concurrency"] == 16)]
    oracle = LiveOracle(
        rows,
        10_000.0,
        runner,
        run_estimate_gpu_s=lambda line: 40.0,
        startup_estimate_gpu_s=lambda config: 100.0,
        recorded=recorded,
        max_repeats=1,
    )
    advice = advise(oracle, Slo(tpot_p99_ms=8.0), GPU)
    assert advice.chosen is not None and advice.chosen["point"] == "a @ c16"
    assert ("a-id", 16.0) not in measured  # recorded on this hardware: revealed, not measured
    paid = [(p.key[0], p.key[3]) for p in oracle.payments]
    assert ("a-id", 16.0) in paid and len(measured) == len(paid) - 1
    assert (
        oracle.spent_gpu_s
        == sum(p.gpu_s for p in oracle.payments)
        == 40.0 * len(measured) + 100.0 * len({c for c, _ in measured})
    )


def _draft_overrated() -> pd.DataFrame:
    """A 1B draft the prior ranks above speculation off, measured slower than it everywhere (as on the H200 grids)."""
    draft = engine_json("draft", draft="llama-3.2-1b", k=4, alpha=0.8)
    return frame(
        _config("off", (4.9, 5.2, 6.6, 12.2), (1.55, 5.8, 18.1, 39.0))
        + _config("draft", (7.7, 7.4, 12.3, 16.7), (1.45, 5.6, 16.5, 35.3), engine=draft)
    )


def test_the_baseline_is_settled_first_so_a_draft_the_prior_overrates_cannot_hide_it() -> None:
    rows = _draft_overrated()
    oracle = RecordedOracle(rows, startups(rows), budget_gpu_s=10_000.0)
    advice = advise(oracle, Slo(tpot_p99_ms=6.0), GPU)
    # without the rule the draft goes first, and a budget spent on its misses may never reach speculation off
    assert advice.steps[0].point.startswith("off") and advice.steps[0].why.startswith("the baseline first")
    assert advice.chosen is not None and advice.chosen["point"] == "off @ c4"
    assert advice.stop_reason == "nothing else can win"  # the draft met the SLO nowhere: no measured runner-up


def test_the_knobs_move_the_search_an_infinite_plan_margin_drops_the_baseline_first_rule() -> None:
    rows = _draft_overrated()
    as_set = advise(RecordedOracle(rows, startups(rows), budget_gpu_s=10_000.0), Slo(tpot_p99_ms=6.0), GPU)
    dropped = advise(
        RecordedOracle(rows, startups(rows), budget_gpu_s=10_000.0),
        Slo(tpot_p99_ms=6.0),
        GPU,
        knobs=Knobs(plan_margin=math.inf),
    )
    assert as_set.steps[0].why.startswith("the baseline first")
    assert dropped.steps[0].why.startswith("the budget is short of the baseline-first plan")
    assert dropped.steps[0].point.startswith("draft")  # the prior overrates the draft


def test_a_budget_short_of_the_baseline_warns_that_its_choice_has_no_measured_baseline_beside_it() -> None:
    rows = _draft_overrated()
    key = {
        "case": "synthetic",
        "hardware": "nvidia-h200-x1-vllm0.26.0",
        "model_shape": "llama-3.1-8b",
        "input_len": 512,
        "output_len": 128,
        "load_kind": "concurrency",
        "acceptance": "none imposed",
    }
    short = advise(RecordedOracle(rows, startups(rows), budget_gpu_s=300.0), Slo(tpot_p99_ms=8.0), GPU)
    assert short.steps[0].why.startswith("the budget is short of the baseline-first plan")
    assert short.chosen is not None and short.chosen["point"].startswith("draft") and short.baseline_unmeasured
    assert f"warning: {BASELINE_UNMEASURED}" in advice_text(short, key, 1000.0)
    # a little more budget: the draft's measured overheads do not rule out speculation off, which is then measured
    more = advise(RecordedOracle(rows, startups(rows), budget_gpu_s=400.0), Slo(tpot_p99_ms=8.0), GPU)
    assert more.steps[0].point.startswith("draft") and more.steps[-1].point.startswith("off")
    assert more.chosen is not None and more.chosen["point"] == "off @ c4" and not more.baseline_unmeasured
    assert "warning" not in advice_text(more, key, 1000.0)


def test_a_baseline_point_measured_once_the_budget_is_short_of_the_plan_is_not_said_to_be_for_the_shortage() -> None:
    rows = _draft_overrated()
    slo = Slo(tpot_p99_ms=6.0)
    needed = baseline_first_gpu_s(RecordedOracle(rows, startups(rows), budget_gpu_s=1.0), slo, GPU)
    assert needed is not None
    steps = advise(RecordedOracle(rows, startups(rows), budget_gpu_s=needed), slo, GPU).steps
    # two baseline runs leave less than the plan; the third is speculation off again, chosen as the started config
    assert [s.point for s in steps[:3]] == ["off @ c16", "off @ c1", "off @ c4"]
    assert steps[2].why.startswith("a started config") and steps[3].point.startswith("draft")
    assert not any(s.why.startswith("the budget is short") for s in steps if s.point.startswith("off"))


def test_the_least_budget_for_the_baseline_first_is_where_the_search_starts_with_speculation_off() -> None:
    rows = _draft_overrated()
    slo = Slo(tpot_p99_ms=8.0)
    needed = baseline_first_gpu_s(RecordedOracle(rows, startups(rows), budget_gpu_s=1.0), slo, GPU)
    assert needed is not None and 300.0 < needed < 10_000.0  # the 300 GPU-s above are short of it

    def first_step(budget_gpu_s: float) -> str:
        return advise(RecordedOracle(rows, startups(rows), budget_gpu_s=budget_gpu_s), slo, GPU).steps[0].why

    assert first_step(needed).startswith("the baseline first")
    assert first_step(needed - 1.0).startswith("the budget is short of the baseline-first plan")
    # the plan's margin scales it; a grid without speculation off (or without speculation) has no such plan
    assert baseline_first_gpu_s(
        RecordedOracle(rows, startups(rows), 1.0), slo, GPU, Knobs(plan_margin=2 * PLAN_MARGIN)
    ) == pytest.approx(2 * needed)
    drafts = rows[rows["engine_label"] == "draft"]
    offs = rows[rows["engine_label"] == "off"]
    assert baseline_first_gpu_s(RecordedOracle(drafts, startups(drafts), 1.0), slo, GPU) is None
    assert baseline_first_gpu_s(RecordedOracle(offs, startups(offs), 1.0), slo, GPU) is None


def test_below_its_misses_a_config_is_walked_down_by_measurement_not_ruled_out_by_the_model() -> None:
    # the recorded #13834 grid at acceptance 0.72, tight SLO: the 2-token draft misses at 16 clients by 2x, and that
    # miss, carried down by the prior's shape over load, would rule out the whole draft family at 8 clients; walked
    # down, its 8 clients miss by 3 %, which places the 3-token draft's 8 clients (the grid best, 3 % inside the
    # bound); without the walk the search settled on speculation off at 4 clients (half the goodput)
    key, rows, ups = one_grid("discussion-13834", None, None, None, None, "concurrency", None, acceptance="0.72")
    slo = dict(slo_levels(point_table(rows)))["tight"]
    advice = advise(RecordedOracle(rows, ups, budget_gpu_s=10_000.0), slo, datasheet_gpu(key["hardware"]))
    points = [s.point for s in advice.steps]
    first_miss = points.index("draft3b-k2-a0.72 @ c16")
    assert advice.steps[first_miss].measured_goodput_rps == 0 and points[first_miss + 1] == "draft3b-k2-a0.72 @ c8"
    best = grid_best(point_table(rows), slo)
    assert best is not None and (best["engine_label"], best["concurrency"]) == ("draft3b-k3-a0.72", 8)
    assert advice.chosen is not None and advice.chosen["point"] == "draft3b-k3-a0.72 @ c8"


def test_a_new_config_that_only_the_prior_places_starts_at_its_middle_load() -> None:
    # the prior puts 64 clients nearest a 30 ms bound (its TPOT p99 rises 1.5x over the loads, the 70B AWQ's 6x):
    # under its factor-2.5 uncertainty that edge is a guess, and the middle load halves the bracket in one run
    rows = frame(_config("off", (22.0, 26.3, 48.4, 138.6), (0.33, 1.08, 2.48, 3.55), model="llama-3.3-70b-awq"))
    advice = advise(RecordedOracle(rows, startups(rows), budget_gpu_s=10_000.0), Slo(tpot_p99_ms=30.0), GPU)
    assert advice.steps[0].point == "off @ c16" and "middle load" in advice.steps[0].why
    assert advice.chosen is not None and advice.chosen["point"] == "off @ c4" and len(advice.steps) == 3


def test_the_walk_down_stops_where_no_lower_load_could_beat_the_best_throughput() -> None:
    awq = "llama-3.3-70b-awq"
    rows = frame(
        _config("off", (22.0, 26.3, 48.4, 138.6), (0.33, 1.08, 2.48, 3.55), model=awq)
        + _config("slow", (60.0, 70.0, 90.0, 150.0), (0.05, 0.1, 0.2, 0.3), model=awq)
    )
    advice = advise(RecordedOracle(rows, startups(rows), budget_gpu_s=10_000.0), Slo(tpot_p99_ms=30.0), GPU)
    slow = [s.point for s in advice.steps if s.point.startswith("slow")]
    assert advice.chosen is not None and advice.chosen["point"] == "off @ c4"
    assert len(slow) <= 1  # one miss, and nothing below it could carry more than 1.08 req/s


def test_a_started_config_is_settled_before_a_new_one_and_a_new_one_starts_at_the_best_load() -> None:
    rows = _clear_winner()
    lines = {
        (r["config_id"], 512, 128, float(r["concurrency"]), -1.0): {**r, "family": "none"}
        for r in rows.to_dict("records")
    }
    a4, a16 = (("a-id", 512, 128, c, -1.0) for c in (4.0, 16.0))
    b4, b64 = (("b-id", 512, 128, c, -1.0) for c in (4.0, 64.0))
    offers = {"a-id": [_Offer(a16, gain=1.0, edge=0.1)], "b-id": [_Offer(b4, 9.0, 0.5), _Offer(b64, 50.0, 0.05)]}
    price = {a16: 40.0, b4: 140.0, b64: 140.0}.__getitem__
    assert _challengers(offers, lines, {a4}, a4, price, 10_000.0) == [
        (a16, "a started config: its point nearest the SLO's edge")
    ]
    ((point, why),) = _challengers({"b-id": offers["b-id"]}, lines, {a4}, a4, price, 10_000.0)
    assert point == b4 and why == "a new config, at the best point's load"


def test_a_budget_short_of_the_baseline_plan_goes_to_the_speculative_offer_of_most_gain_per_gpu_second() -> None:
    off, spec = ("off-id", 512, 128, 4.0, -1.0), ("spec-id", 512, 128, 4.0, -1.0)
    lines = {off: {"family": "none"}, spec: {"family": "mtp"}}
    offers = {"off-id": [_Offer(off, gain=1.0, edge=0.1)], "spec-id": [_Offer(spec, gain=10.0, edge=0.1)]}
    price = {off: 140.0, spec: 140.0}.__getitem__
    plan = 140.0 + 140.0
    roomy = _challengers(offers, lines, set(), None, price, PLAN_MARGIN * plan)
    assert [k for k, _ in roomy] == [off] and roomy[0][1].startswith("the baseline first")
    short = _challengers(offers, lines, set(), None, price, PLAN_MARGIN * plan - 1.0)
    assert [k for k, _ in short] == [spec, off] and short[0][1].startswith("the budget is short")
    # a baseline the budget cannot afford no longer ends the search with nothing paid for
    dear = {off: 500.0, spec: 140.0}.__getitem__
    assert [k for k, _ in _challengers(offers, lines, set(), None, dear, 300.0)] == [spec]


def test_the_best_is_repeated_to_confirm_it_only_while_its_p99_is_within_noise_of_the_bound() -> None:
    rows = frame(
        _config("a", (5.0, 5.2, 6.6, 12.0), (1.5, 5.8, 18.0, 39.0), repeats=3)
        + _config("b", (5.0, 5.3, 9.0, 20.0), (1.2, 4.0, 10.0, 25.0), repeats=3)
    )
    far = advise(RecordedOracle(rows, startups(rows), budget_gpu_s=10_000.0), Slo(tpot_p99_ms=8.0), GPU)
    assert far.chosen is not None and far.chosen["point"] == "a @ c16" and far.chosen["runs"] == 1  # 6.6 ms of 8
    assert not any(s.why.startswith("repeat") for s in far.steps)
    near = advise(RecordedOracle(rows, startups(rows), budget_gpu_s=10_000.0), Slo(tpot_p99_ms=6.8), GPU)
    assert near.chosen is not None and near.chosen["point"] == "a @ c16" and near.chosen["runs"] == 3  # 6.6 of 6.8
    assert near.stop_reason == "nothing else can win"  # b's paid point missed: the model rules out the rest of b


def test_a_point_can_win_only_with_a_plausible_chance_of_beating_the_bar() -> None:
    slo = Slo(tpot_p99_ms=10.0)
    at_bound = {"tpot_p99_ms": 10.0, "ttft_p99_ms": 50.0, "request_throughput_rps": 20.0}
    chance, gain = outlook(at_bound, 0.5, slo, bar=0.0)
    assert chance == pytest.approx(0.5) and gain > 0.5 * 20.0  # half a chance to meet it, any goodput beats none
    far_over = {**at_bound, "tpot_p99_ms": 20.0}  # twice the bound, known within a factor 1.5: a long shot
    assert outlook(far_over, 0.5, slo, bar=0.0)[0] < PLAUSIBLE_CHANCE
    assert outlook(far_over, 3.0, slo, bar=0.0)[0] > PLAUSIBLE_CHANCE  # unless it is hardly known
    low_rps = outlook(at_bound, 0.5, slo, bar=40.0)  # meets it at half the best's goodput
    assert low_rps[0] < PLAUSIBLE_CHANCE and low_rps[1] < 0.01


def _dear_high_loads() -> pd.DataFrame:
    """``_clear_winner``'s numbers, a run at 16 or 64 clients costing 300 or 400 GPU-s, at 1 or 4 clients 40 or 60."""
    prices = dict(zip(LOADS, (40.0, 60.0, 300.0, 400.0), strict=True))
    clear = _clear_winner()
    return clear.assign(gpu_s=clear["concurrency"].map(lambda c: prices[int(c)]))


def test_a_budget_that_pays_for_one_point_always_gets_an_answer_from_what_it_measured() -> None:
    rows = _dear_high_loads()
    least = min_answer_gpu_s(RecordedOracle(rows, startups(rows), budget_gpu_s=1.0), GPU)
    assert least == 100.0 + 40.0  # a start-up and the cheapest run
    short = advise(RecordedOracle(rows, startups(rows), budget_gpu_s=least - 1.0), Slo(tpot_p99_ms=8.0), GPU)
    assert short.steps == [] and short.chosen is None and short.sure == "nothing measured meets the SLO"
    for budget in (least, 200.0, 300.0):  # the points that can win (16 clients: 400 GPU-s) are out of reach
        advice = advise(RecordedOracle(rows, startups(rows), budget_gpu_s=budget), Slo(tpot_p99_ms=8.0), GPU)
        assert advice.steps[0].point == "a @ c1" and advice.steps[0].why.endswith("that the budget affords")
        assert advice.chosen is not None and advice.chosen["point"] == "a @ c1" and advice.stop_reason == "budget"
        assert advice.spent_gpu_s <= budget


def test_certainty_weighs_the_measured_lead_against_the_noise_band() -> None:
    def point(goodput: float, spread: float) -> dict[str, float]:
        return {"goodput_rps": goodput, "spread_pct": spread}

    sure, lead, band = certainty(point(11.0, 2.0), point(10.0, 0.0))  # 10 % ahead, the band's 5 % floor
    assert sure == "lead beyond noise" and abs(lead - 10.0) < 1e-9 and band == 5.0
    sure, lead, band = certainty(point(11.0, 12.0), point(10.0, 0.0))
    assert sure == "within noise" and abs(lead - 10.0) < 1e-9 and band == 12.0
    assert certainty(point(11.0, 0.0), None)[0] == "not compared"
    assert certainty(point(11.0, 0.0), point(0.0, 0.0))[0] == "not compared"
    sure, lead, band = certainty(None, None)
    assert sure == "nothing measured meets the SLO" and math.isnan(lead) and math.isnan(band)
