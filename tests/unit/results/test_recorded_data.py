"""The recorded runs in data/: every row rebuilt from its committed raw files, with provenance, and consistent.

Every test here holds for any correctly recorded data (``recorded_data``), read from ``paths.data_dir()``: more runs
or a new case leave them passing (``tests/unit/test_recorded_data_grows.py``).
"""

from __future__ import annotations

import json

import pytest

from vllm_playbooks.paths import data_dir
from vllm_playbooks.results.replay import replay_rows
from vllm_playbooks.results.store import runs_file
from vllm_playbooks.results.textfiles import COMPRESSED_KINDS

pytestmark = pytest.mark.recorded_data

DATA = data_dir()
CASES = sorted(p.name for p in (DATA / "runs").iterdir() if p.is_dir())


def test_there_are_recorded_runs() -> None:
    assert CASES and all(runs_file(case, DATA).is_file() for case in CASES)


@pytest.mark.parametrize("case", CASES)
def test_rows_replay_from_raw_files(case: str) -> None:
    rows = replay_rows(case, DATA)
    assert rows, f"{case} has no rows"
    for row in rows:
        assert (DATA / row.raw_path / "bench.json").exists()
        assert row.gpu_count >= 1 and row.gpu_name.startswith("NVIDIA")
        assert row.failed == 0 and row.completed == row.num_prompts


@pytest.mark.parametrize("case", CASES)
def test_scrapes_and_logs_are_stored_compressed(case: str) -> None:
    """The recorded tree travels with the checkout to every GPU machine, so it stays compressed: a plain scrape or log
    left by a run (a worker stopped mid-run) is compressed with ``vllm-playbooks compress data/runs/<case>``."""
    folder = DATA / "runs" / case
    plain = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.suffix in COMPRESSED_KINDS]
    assert not plain, f"compress these: {plain[:5]}"


@pytest.mark.parametrize("case", CASES)
def test_our_acceptance_equals_bench_serves_own(case: str) -> None:
    for row in replay_rows(case, DATA):
        bench = json.loads((DATA / row.raw_path / "bench.json").read_text())
        if row.num_drafts is None:
            assert "spec_decode_num_drafts" not in bench
            continue
        assert row.num_drafts == bench["spec_decode_num_drafts"]
        assert row.num_accepted_tokens == bench["spec_decode_accepted_tokens"]


@pytest.mark.parametrize("case", CASES)
def test_imposed_acceptance_is_what_the_server_measured(case: str) -> None:
    for row in replay_rows(case, DATA):
        if row.imposed_acceptance_rates is None or not row.num_drafts:
            continue
        # P(A >= i) = p_i for the accepted count A of one draft, so E[A] = sum p_i and E[A^2] = sum (2i - 1) p_i.
        rates = json.loads(row.imposed_acceptance_rates)
        expected = 1 + sum(rates)
        variance = sum((2 * i - 1) * p for i, p in enumerate(rates, start=1)) - (expected - 1) ** 2
        # 5 %: the measured value reads a little low where drafts are cut short near max_tokens; 4 standard errors:
        # a point with few drafts (a schedule that switched speculation off above a batch size) is noisier
        tolerance = max(0.05 * expected, 4 * (variance / row.num_drafts) ** 0.5)
        assert row.mean_acceptance_length == pytest.approx(expected, abs=tolerance), row.point_id


def test_discussion_13834_speculation_off_ran_model_runner_v2_and_every_draft_model_server_v1() -> None:
    """What the page's 'Scale and setting' box says about the two sides' model runners, read from the server logs: of
    every server whose config forces no runner, those with speculation off ran Model Runner V2, those with a draft
    model V1."""
    from vllm_playbooks.analysis.compare import forced_model_runner
    from vllm_playbooks.results.server_logs import server_modes

    configs = {row.config_id: row for row in replay_rows("discussion-13834", DATA)}
    modes = server_modes("discussion-13834", DATA)
    unforced = {c for c, row in configs.items() if forced_model_runner(row.engine_config_json) is None}
    modes = modes[modes["config_id"].isin(unforced)]
    method = modes["config_id"].map(lambda c: configs[c].spec_method)
    assert (method == "none").any() and (modes.loc[method == "none", "model_runner"] == "V2").all()
    assert (method == "draft_model").any() and (modes.loc[method == "draft_model", "model_runner"] == "V1").all()


@pytest.mark.parametrize("case", CASES)
def test_a_server_whose_config_forces_a_runner_or_a_graph_mode_ran_so(case: str) -> None:
    """The spec-off controls of #13834 set VLLM_USE_V2_MODEL_RUNNER=0 (and one of them a PIECEWISE cudagraph_mode):
    each recorded server's log must say vLLM honoured what its config forced."""
    from vllm_playbooks.analysis.compare import forced_cudagraph_mode, forced_model_runner
    from vllm_playbooks.results.server_logs import server_modes

    configs = {row.config_id: row.engine_config_json for row in replay_rows(case, DATA)}
    modes = server_modes(case, DATA)
    modes = modes[modes["config_id"].isin(configs)]
    runner = modes.assign(forced=modes["config_id"].map(lambda c: forced_model_runner(configs[c]))).dropna(
        subset="forced"
    )
    graphs = modes.assign(forced=modes["config_id"].map(lambda c: forced_cudagraph_mode(configs[c]))).dropna(
        subset="forced"
    )
    if case == "discussion-13834":
        assert "spec-off-v1-runner" in set(runner["engine_label"])
    assert (runner["model_runner"] == runner["forced"]).all(), runner[["log", "model_runner", "forced"]]
    assert (graphs["cudagraph_mode"] == graphs["forced"]).all(), graphs[["log", "cudagraph_mode", "forced"]]
