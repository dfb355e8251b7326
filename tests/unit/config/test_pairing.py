"""How a paired plan runs its configs: together at a share of the memory where they fit, else by restart; in turns."""

from __future__ import annotations

import pytest

from vllm_playbooks.config.pairing import BY_RESTART, CO_RESIDENT, paired_order, restart_starts
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.run.plan import load_plan

CASE = "llama-8b-draft-model"
TWO = ["spec-off", "draft-1b-k4-a0.8"]


def test_two_configs_that_fit_together_share_the_memory() -> None:
    plan = load_plan(CASE, paired=True, gpu_memory_gib=79.2, engines=TWO)
    assert plan.pairing == CO_RESIDENT
    assert [e.gpu_memory_utilization for e in plan.engines] == [0.45, 0.45]
    three = load_plan(CASE, paired=True, gpu_memory_gib=79.2)
    assert [e.gpu_memory_utilization for e in three.engines] == [0.3, 0.3, 0.3]


def test_configs_that_do_not_fit_together_keep_their_memory_and_alternate_by_restart() -> None:
    # the 8B target and its 1B draft need about 19 GiB before any KV cache: two of them do not fit 0.45 x 30 GiB
    plan = load_plan(CASE, paired=True, gpu_memory_gib=30, engines=TWO)
    assert plan.pairing == BY_RESTART
    assert [e.gpu_memory_utilization for e in plan.engines] == [0.9, 0.9]


def test_an_unpaired_plan_is_as_before() -> None:
    plan = load_plan(CASE, gpu_memory_gib=79.2, engines=TWO)
    assert plan.pairing is None and [e.gpu_memory_utilization for e in plan.engines] == [0.9, 0.9]


@pytest.mark.parametrize("bad", ["yes", 1, [True]])
def test_paired_is_true_or_false(bad: object) -> None:
    with pytest.raises(ConfigError, match="paired must be true or false"):
        load_plan(CASE, paired=bad)


def test_one_config_cannot_be_paired() -> None:
    with pytest.raises(ConfigError, match="two or more engine configs"):
        load_plan(CASE, paired=True, engines=["spec-off"])


def _order(mode: str) -> list[tuple[str, str, int]]:
    plan = load_plan(CASE, paired=True, gpu_memory_gib=79.2, concurrency=[1, 16], repeats=2, engines=TWO)
    return [(p.engine.label[:4], p.load.slug().split("-")[-1], p.repeat) for p in paired_order(plan.points(), mode)]


def test_co_resident_runs_alternate_the_configs_at_every_load() -> None:
    assert _order(CO_RESIDENT) == [
        ("spec", "c1", 0),
        ("draf", "c1", 0),
        ("spec", "c16", 0),
        ("draf", "c16", 0),
        ("spec", "c1", 1),
        ("draf", "c1", 1),
        ("spec", "c16", 1),
        ("draf", "c16", 1),
    ]


def test_runs_by_restart_keep_one_config_for_all_loads_of_a_repeat_and_turn_order_each_repeat() -> None:
    assert _order(BY_RESTART) == [
        ("spec", "c1", 0),
        ("spec", "c16", 0),
        ("draf", "c1", 0),
        ("draf", "c16", 0),
        ("draf", "c1", 1),
        ("draf", "c16", 1),
        ("spec", "c1", 1),
        ("spec", "c16", 1),
    ]


@pytest.mark.parametrize(
    ("left", "starts"),
    [
        ({"a": 3, "b": 3}, {"a": 2, "b": 2}),  # a | b b | a a | b
        ({"a": 1, "b": 1}, {"a": 1, "b": 1}),
        ({"a": 3, "b": 1}, {"a": 2, "b": 1}),  # a | b | a a
        ({"a": 3, "b": 3, "c": 3}, {"a": 2, "b": 3, "c": 2}),  # a b c c b a a b c
        ({"a": 0, "b": 2}, {"a": 0, "b": 1}),
    ],
)
def test_by_restart_a_server_starts_once_per_lifetime_of_the_paired_order(
    left: dict[str, int], starts: dict[str, int]
) -> None:
    assert restart_starts(left) == starts
