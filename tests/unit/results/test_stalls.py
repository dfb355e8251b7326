"""Output-token gaps of seconds in recorded points, read from vLLM's inter-token latency histogram."""

from __future__ import annotations

import pytest

from vllm_playbooks.engine.metrics import Histogram
from vllm_playbooks.results.replay import replay_case
from vllm_playbooks.results.stalls import STALL_S, STALL_SHARE, stall_note, stall_table, unstalled


def test_gaps_above_a_bound_are_counted_from_the_cumulative_buckets() -> None:
    h = Histogram(bounds=(0.05, 2.5, 5.0, float("inf")), cumulative=(90.0, 97.0, 99.0, 100.0), count=100.0, total=0.0)
    assert h.count_above(2.5) == 3 and h.count_above(5.0) == 1
    with pytest.raises(ValueError, match="not a bucket bound"):
        h.count_above(3.0)


def test_the_recorded_moe_runs_that_stalled_are_found_and_the_dense_ones_did_not() -> None:
    table = stall_table(replay_case("deepseek-mtp"))
    stalled = table[table.stalled_gaps > 0]
    # first session: both servers stalled at 4 and 8 QPS (their runs overlapped in time), MTP also at concurrency 64;
    # measured again (repeat 1) in the next session, only spec-off at 8 QPS stalled again; in the sixth, k = 1 at
    # α 0.81 stalled at 8 QPS, the first server of a fresh machine as before; in the twenty-sixth, k = 1 at α 0.90
    # stalled at concurrency 64 in both its attempts (the second server of that machine)
    repeats = [int(pid.rsplit("-r", 1)[1]) for pid in stalled.point_id]
    assert sorted(zip(stalled.engine_label, stalled.request_rate_qps.fillna(0), stalled.concurrency.fillna(0),
                      repeats)) == [
        ("mtp-k1-a0.81", 8.0, 0.0, 0),
        ("mtp-k1-a0.85", 0.0, 64.0, 0), ("mtp-k1-a0.85", 4.0, 0.0, 0), ("mtp-k1-a0.85", 8.0, 0.0, 0),
        ("mtp-k1-a0.90", 0.0, 64.0, 0),
        ("spec-off", 4.0, 0.0, 0), ("spec-off", 8.0, 0.0, 0), ("spec-off", 8.0, 0.0, 1),
    ]  # fmt: skip
    # the k = 2 and k = 3 servers started after those two, on the same machine, and none of their 16 runs stalled;
    # nor did any of MiMo-7B's (dense) 24
    quiet = ["mtp-k2-p0.85", "mtp-k3-p0.85", "mimo-spec-off", "mimo-mtp-k1-a0.85", "mimo-mtp-k3-p0.85"]
    assert not stalled.engine_label.isin(quiet).any() and table.engine_label.isin(quiet).sum() == 40
    assert stalled.longest_gap_at_most_s.max() == 10.0 and (table.token_gaps > 0).all()
    assert (stalled.stall_share >= STALL_SHARE).all()
    # spec-off at 4 QPS: 173 gaps of 2.5-5 s and 73 of 5-7.5 s over 120 requests of 22.41 s mean E2E latency
    share = stalled.set_index("point_id").stall_share
    assert share["spec-off-97b70737ac/in230-out203-qps4-r0"] == pytest.approx((173 * 2.5 + 73 * 5.0) / (120 * 22.412),
                                                                             rel=1e-3)  # fmt: skip
    for case in ("llama-8b-draft-model", "discussion-13834", "pp-27462"):
        assert (stall_table(replay_case(case)).stalled_gaps == 0).all(), case


def test_a_lone_long_gap_is_not_a_stall_of_the_run() -> None:
    # gpt-oss spec-off at concurrency 16 had one gap of 2.5-5 s among 32,320: under 1 % of its requests' time; at 128
    # the first run had 137 such gaps (a stall) and the run measured again had none
    share = stall_table(replay_case("gpt-oss-eagle3")).set_index("point_id").stall_share
    first, again = (f"spec-off-032949c299/in230-out203-c128-r{repeat}" for repeat in (0, 1))
    assert 0 < share["spec-off-032949c299/in230-out203-c16-r0"] < STALL_SHARE <= share[first]
    assert share[again] == 0


def test_stalled_points_are_named_and_left_out() -> None:
    runs = replay_case("deepseek-mtp")
    kept = unstalled(runs)
    assert len(runs) - len(kept) == 8
    note = stall_note(stall_table(runs))
    assert note.startswith("**Stalls.** In 8 of 94 measured runs the engine emitted nothing for seconds")
    assert f"longer than {STALL_S:g} s" in note
    again = ", measured again without a stall)"
    assert f"spec-off at 4 QPS (246 gaps, the longest ≤ 7.5 s; ≥ 29.7% of the requests' time{again}" in note
    assert f"mtp-k1-a0.85 at concurrency 64 (44 gaps, the longest ≤ 7.5 s; ≥ 5.0% of the requests' time{again}" \
        in note
    # spec-off at 8 QPS stalled in its first two runs; the third (repeat 2) ran clean and counts for both
    assert f"spec-off at 8 QPS (89 gaps, the longest ≤ 5 s; ≥ 5.5% of the requests' time{again};" in note
    assert f"spec-off at 8 QPS, repeat 1 (73 gaps, the longest ≤ 5 s; ≥ 5.2% of the requests' time{again};" in note
    assert "mtp-k1-a0.90 at concurrency 64 (35 gaps, the longest ≤ 5 s; ≥ 2.1% of the requests' time)." in note
    assert note.endswith("5 of their 7 points were measured again without a stall and count through that run, 2 "
                         "wait for one.")  # fmt: skip
    assert stall_note(stall_table(replay_case("llama-8b-draft-model"))) == ""
    # gpt-oss-eagle3's one stalled run (spec off at concurrency 128) was measured again without a stall
    assert stall_note(stall_table(replay_case("gpt-oss-eagle3"))).endswith(
        "left out of the verdict; the point was measured again without a stall and counts through that run.")  # fmt: skip
