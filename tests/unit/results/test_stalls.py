"""Output-token gaps of seconds in recorded points, read from vLLM's inter-token latency histogram."""

from __future__ import annotations

import pytest

from tests.conftest import FROZEN
from vllm_playbooks.book.page_notes import stall_note
from vllm_playbooks.engine.metrics import Histogram
from vllm_playbooks.results.replay import replay_case
from vllm_playbooks.results.stalls import STALL_S, STALL_SHARE, stall_table, unstalled


def test_gaps_above_a_bound_are_counted_from_the_cumulative_buckets() -> None:
    h = Histogram(bounds=(0.05, 2.5, 5.0, float("inf")), cumulative=(90.0, 97.0, 99.0, 100.0), count=100.0, total=0.0)
    assert h.count_above(2.5) == 3 and h.count_above(5.0) == 1
    with pytest.raises(ValueError, match="not a bucket bound"):
        h.count_above(3.0)


def test_the_recorded_moe_runs_that_stalled_are_found_and_the_dense_ones_did_not() -> None:
    """The frozen copy of DeepSeek's first two sessions (tests/fixtures/recorded): both servers stalled at 4 and
    8 QPS (their runs overlapped in time), MTP also at concurrency 64; measured again (repeat 1) in the next session,
    only spec-off at 8 QPS stalled again, and its third run (repeat 2, on a fresh machine) ran clean."""
    table = stall_table(replay_case("deepseek-mtp", FROZEN), FROZEN)
    stalled = table[table.stalled_gaps > 0]
    repeats = [int(pid.rsplit("-r", 1)[1]) for pid in stalled.point_id]
    assert sorted(
        zip(stalled.engine_label, stalled.request_rate_qps.fillna(0), stalled.concurrency.fillna(0), repeats)
    ) == [
        ("mtp-k1-a0.85", 0.0, 64.0, 0),
        ("mtp-k1-a0.85", 4.0, 0.0, 0),
        ("spec-off", 4.0, 0.0, 0),
        ("spec-off", 8.0, 0.0, 0),
        ("spec-off", 8.0, 0.0, 1),
    ]
    assert stalled.longest_gap_at_most_s.max() == 10.0 and (table.token_gaps > 0).all()
    assert (stalled.stall_share >= STALL_SHARE).all()
    assert (table[table.stalled_gaps == 0].stall_share == 0).all()  # the runs at 1 QPS and the repeats that ran clean
    # spec-off at 4 QPS: 173 gaps of 2.5-5 s and 73 of 5-7.5 s over 120 requests of 22.41 s mean E2E latency
    share = stalled.set_index("point_id").stall_share
    assert share["nvidia-h200-x1-vllm0.26.0/spec-off-094a81a93f/in230-out203-qps4-r0"] == pytest.approx(
        (173 * 2.5 + 73 * 5.0) / (120 * 22.412), rel=1e-3
    )
    # dense: the frozen #27462 runs (Llama-3.1-8B on one and two GPUs) had no gap of seconds
    assert (stall_table(replay_case("pp-27462", FROZEN), FROZEN).stalled_gaps == 0).all()


def test_a_lone_long_gap_is_not_a_stall_of_the_run() -> None:
    # gpt-oss spec-off at concurrency 16 had one gap of 2.5-5 s among 32,320: under 1 % of its requests' time; at 128
    # the first run had 137 such gaps (a stall) and the run measured again had none (frozen)
    share = stall_table(replay_case("gpt-oss-eagle3", FROZEN), FROZEN).set_index("point_id").stall_share
    first, again = (f"nvidia-h200-x1-vllm0.26.0/spec-off-1b958792f5/in230-out203-c128-r{repeat}" for repeat in (0, 1))
    assert 0 < share["nvidia-h200-x1-vllm0.26.0/spec-off-1b958792f5/in230-out203-c16-r0"] < STALL_SHARE <= share[first]
    assert share[again] == 0


def test_stalled_points_are_named_and_left_out() -> None:
    runs = replay_case("deepseek-mtp", FROZEN)
    kept = unstalled(runs, FROZEN)
    assert len(runs) - len(kept) == 5
    note = stall_note(stall_table(runs, FROZEN))
    assert note.startswith("**Stalls.** In 5 of 8 measured runs the engine emitted nothing for seconds")
    assert f"longer than {STALL_S:g} s" in note
    again = ", measured again without a stall)"
    assert f"spec-off at 4 QPS (246 gaps, the longest ≤ 7.5 s; ≥ 29.7% of the requests' time{again}" in note
    # spec-off at 8 QPS stalled in its first two runs; the third (repeat 2) ran clean and counts for both
    assert f"spec-off at 8 QPS (89 gaps, the longest ≤ 5 s; ≥ 5.5% of the requests' time{again};" in note
    assert f"spec-off at 8 QPS, repeat 1 (73 gaps, the longest ≤ 5 s; ≥ 5.2% of the requests' time{again}." in note
    # MTP at concurrency 64 and at 4 QPS have no clean run in the copy
    assert "mtp-k1-a0.85 at concurrency 64 (44 gaps, the longest ≤ 7.5 s; ≥ 5.0% of the requests' time);" in note
    assert note.endswith(
        "2 of their 4 points were measured again without a stall and count through that run, 2 wait for one."
    )
    assert stall_note(stall_table(replay_case("pp-27462", FROZEN), FROZEN)) == ""
    # gpt-oss-eagle3's one stalled run (spec off at concurrency 128) was measured again without a stall
    assert stall_note(stall_table(replay_case("gpt-oss-eagle3", FROZEN), FROZEN)).endswith(
        "left out of the verdict; the point was measured again without a stall and counts through that run."
    )
