"""The recorded grids: one is picked by its filters, its loads limited to a number of clients."""

from __future__ import annotations

import pytest

from vllm_playbooks.advisor.grids import one_grid
from vllm_playbooks.errors import ConfigError


@pytest.mark.recorded_data
def test_one_grid_is_picked_by_its_filters_and_loads_limited_to_the_clients() -> None:
    with pytest.raises(ConfigError, match="pick one of"):
        one_grid("deepseek-mtp", None, None, None, None, None, None)
    with pytest.raises(ConfigError, match="unknown case"):
        one_grid("nope", None, None, None, None, None, None)
    key, rows, ups = one_grid("llama-8b-draft-model", None, None, None, None, None, 4.0)
    assert (
        key["case"] == "llama-8b-draft-model"
        and (rows["concurrency"] <= 4).all()
        and set(ups) == set(rows["config_id"])
    )
