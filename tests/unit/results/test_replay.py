"""A case's rows with the runs other cases recorded of the same points (``replay_case_with_same_points``)."""

from __future__ import annotations

import pytest

from vllm_playbooks.results import raw
from vllm_playbooks.results.replay import (
    BORROWED_REPEAT_OFFSET,
    RECORDED_FOR,
    point_folders,
    replay_case,
    replay_case_with_same_points,
    replay_rows,
)
from vllm_playbooks.results.store import cases_with_runs


@pytest.mark.recorded_data
@pytest.mark.parametrize("case", cases_with_runs())
def test_a_case_gains_exactly_the_other_cases_runs_of_its_own_points(case: str) -> None:
    own = replay_case(case)
    pooled = replay_case_with_same_points(case)
    points = {raw.split_point_id(pid)[0] for pid in own["point_id"]}
    expected = {
        (other, row.point_id)
        for other in cases_with_runs()
        if other != case
        for row in replay_rows(other)
        if raw.split_point_id(row.point_id)[0] in points
    }
    borrowed = pooled[pooled[RECORDED_FOR] != case]
    assert len(pooled) == len(own) + len(expected)
    assert set(pooled["case"]) <= {case}  # compared as the case's own runs
    assert pooled["point_id"].is_unique  # renumbered repeats: no collision with the case's own ids
    assert {raw.split_point_id(pid)[0] for pid in borrowed["point_id"]} <= points
    assert all(raw.split_point_id(pid)[1] >= BORROWED_REPEAT_OFFSET for pid in borrowed["point_id"])
    # each borrowed row still reads its own folder, in the case that recorded it
    recorded = {
        (other, path.rsplit("/raw/", 1)[1]) for other, path in zip(borrowed[RECORDED_FOR], borrowed["raw_path"])
    }
    assert recorded == expected
    assert all(folder.is_dir() for folder in point_folders(pooled))


@pytest.mark.recorded_data
def test_the_llama_and_load_shape_cases_share_their_fixed_length_points() -> None:
    """The two cases ran the same servers at the same fixed-length loads on the same GPUs: each sees the other's
    runs."""
    llama = replay_case_with_same_points("llama-8b-draft-model")
    shape = replay_case_with_same_points("load-desync")
    assert (llama[RECORDED_FOR] == "load-desync").any() and (shape[RECORDED_FOR] == "llama-8b-draft-model").any()
    assert (shape.loc[shape[RECORDED_FOR] != "load-desync", "random_range_ratio"] == 0).all()
