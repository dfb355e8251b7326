"""A claim judged per GPU: another GPU's rows never move the reference's verdict, and each GPU gets its own."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

import vllm_playbooks.cases.discussion_13834  # noqa: F401 (registers the claim's check)
from vllm_playbooks.cases import register_checks
from vllm_playbooks.claims import ledger, per_gpu
from vllm_playbooks.claims.verdict import Verdict

CLAIM = "discussion-13834-slower"
OTHER = "NVIDIA A100-SXM4-80GB"


@pytest.fixture(scope="module")
def evidence() -> ledger.Evidence:
    return ledger.load_evidence()


@pytest.fixture(scope="module")
def with_a_faster_other_gpu(evidence: ledger.Evidence) -> ledger.Evidence:
    """The reference GPU's recorded 13834 rows, and the same rows once more as another GPU's, where every speculative
    point ran twice as fast: on that GPU speculation gains, so its verdict must differ from the reference's. Rows of
    any other recorded GPU are left out (every case's), so the test holds as GPUs are added."""
    reference = evidence.on_gpu("NVIDIA H200")
    own = reference.rows("discussion-13834")
    other = own.assign(gpu_name=OTHER, point_id="other/" + own["point_id"].astype(str))
    speculative = other["num_speculative_tokens"].astype(float) > 0
    other.loc[speculative, "output_tok_s"] = other.loc[speculative, "output_tok_s"] * 2
    return replace(reference, runs={**reference.runs, "discussion-13834": pd.concat([own, other], ignore_index=True)})


@pytest.mark.recorded_data
def test_each_gpu_is_judged_on_its_own_rows(with_a_faster_other_gpu: ledger.Evidence,
                                            evidence: ledger.Evidence) -> None:  # fmt: skip
    rows = with_a_faster_other_gpu.rows("discussion-13834")
    results = per_gpu.results_by_gpu(CLAIM, rows, with_a_faster_other_gpu)
    assert set(results) == {"NVIDIA H200", OTHER}
    reference = ledger.result_for(CLAIM, evidence.on_gpu("NVIDIA H200"))
    assert results["NVIDIA H200"].measured == reference.measured
    assert results["NVIDIA H200"].verdict is reference.verdict
    # the ledger's verdict on both GPUs' rows is the reference's, though the other GPU's name sorts first
    assert ledger.result_for(CLAIM, with_a_faster_other_gpu).measured == reference.measured
    assert results[OTHER].verdict is Verdict.NOT_REPRODUCED  # twice as fast with speculation: not slower
    table = per_gpu.verdict_table({CLAIM: results})
    assert table["gpu"].tolist() == [OTHER, "NVIDIA H200"] and table["rows"].min() >= 1  # in name order
    assert set(table["claim"]) == {CLAIM} and per_gpu.gpus_of({CLAIM: results}) == 2


@pytest.mark.recorded_data
def test_a_page_filter_narrows_what_the_verdict_rests_on(evidence: ledger.Evidence) -> None:
    rows = evidence.rows("discussion-13834")
    lone = per_gpu.results_by_gpu(CLAIM, rows[rows["concurrency"] == 1], evidence)
    assert lone["NVIDIA H200"].verdict is Verdict.NOT_MEASURED  # the claim's load (≈32 streams) was filtered out
    nothing = per_gpu.results_by_gpu(CLAIM, rows.iloc[0:0], evidence)
    assert list(nothing) == [""] and nothing[""].verdict is Verdict.NOT_MEASURED
    assert per_gpu.gpus_of({CLAIM: nothing}) == 0


@pytest.mark.parametrize(
    ("gpus", "mode", "here", "headline"),
    [
        (["NVIDIA H200", OTHER], "live", OTHER, OTHER),  # a live run heads with the GPU it ran on
        (["NVIDIA H200", OTHER], "replay", OTHER, "NVIDIA H200"),  # replay heads with the reference
        (["NVIDIA H200", OTHER], "live", "NVIDIA L40S", "NVIDIA H200"),  # the GPU here measured nothing shown
        ([OTHER], "replay", None, OTHER),
    ],
)
def test_the_headline_gpu(gpus: list[str], mode: str, here: str | None, headline: str) -> None:
    assert per_gpu.headline_gpu(gpus, mode, here) == headline


def test_an_unknown_claim_is_one_line(evidence: ledger.Evidence) -> None:
    from vllm_playbooks.errors import ConfigError

    with pytest.raises(ConfigError, match="no claim 'no-such-claim'"):
        per_gpu.results_by_gpu("no-such-claim", evidence.rows("discussion-13834"), evidence)


@pytest.mark.recorded_data
def test_a_page_takes_its_numbers_from_the_headline_gpu(with_a_faster_other_gpu: ledger.Evidence) -> None:
    rows = with_a_faster_other_gpu.rows("discussion-13834")
    assert per_gpu.gpus_in(rows) == [OTHER, "NVIDIA H200"] and per_gpu.gpus_in(rows.iloc[0:0]) == [""]
    assert per_gpu.page_gpu(rows, "replay") == "NVIDIA H200"
    assert per_gpu.page_gpu(rows, "live", here=OTHER) == OTHER


@pytest.mark.recorded_data
def test_the_ledger_judges_a_claim_on_each_gpu_the_reference_first(with_a_faster_other_gpu: ledger.Evidence) -> None:
    claim = ledger.claim_of(CLAIM, with_a_faster_other_gpu)
    assert with_a_faster_other_gpu.deciding_gpus(claim) == ["NVIDIA H200", OTHER]
    lines = ledger.build_ledger(with_a_faster_other_gpu, [claim])
    assert lines["claim"].tolist() == [CLAIM, CLAIM] and lines["hardware"].tolist() == ["NVIDIA H200", OTHER]
    by_gpu = per_gpu.results_by_gpu(CLAIM, with_a_faster_other_gpu.rows("discussion-13834"), with_a_faster_other_gpu)
    assert lines["verdict"].tolist() == [str(by_gpu["NVIDIA H200"].verdict), str(by_gpu[OTHER].verdict)]
    assert lines["verdict"].iloc[1] == "not reproduced" != lines["verdict"].iloc[0]
    assert ledger.headline_lines(lines)["hardware"].tolist() == ["NVIDIA H200"]
    text = ledger.ledger_markdown(lines)
    assert f":::{{dropdown}} {CLAIM} on {OTHER}: not reproduced" in text
    assert text.count("** on NVIDIA H200 |") == 1 and text.count(f"** on {OTHER} |") == 1
    alone = ledger.ledger_markdown(ledger.headline_lines(lines))  # a claim on one GPU names none
    assert "** on NVIDIA H200 |" not in alone and f":::{{dropdown}} {CLAIM}: " in alone


def test_a_claim_judged_on_every_row_at_once_is_one_line(evidence: ledger.Evidence) -> None:
    register_checks()
    claim = ledger.claim_of("rule-acceptance-bands", evidence)
    assert evidence.deciding_gpus(claim) == []
    assert [gpu for gpu, _ in ledger.judged_per_gpu(claim, evidence)] == [""]


@pytest.mark.recorded_data
def test_a_deciding_engine_that_did_not_start_on_a_gpu_is_named_in_that_gpus_result(
    with_a_faster_other_gpu: ledger.Evidence,
) -> None:
    from vllm_playbooks.results.failed_starts import FAILED_START_COLUMNS

    claim = ledger.claim_of(CLAIM, with_a_faster_other_gpu)
    speculative = sorted({label for label, _ in with_a_faster_other_gpu.deciding[CLAIM] if label != "spec-off"})
    rows = with_a_faster_other_gpu.rows("discussion-13834")
    other = (rows["gpu_name"] == OTHER) & rows["engine_label"].isin(speculative)
    rows = rows[~other].copy()  # on the other GPU the speculative servers did not start: no rows
    rows.loc[rows["gpu_name"] == OTHER, "hardware"] = "other-x1-vllm0.26.0"
    failed = pd.DataFrame([{**dict.fromkeys(FAILED_START_COLUMNS), "hardware": hardware, "engine_label": label}
                           for label in speculative
                           for hardware in ("other-x1-vllm0.26.0", "nvidia-h200-x1-vllm0.26.0")])  # fmt: skip
    evidence = replace(with_a_faster_other_gpu, runs={**with_a_faster_other_gpu.runs, "discussion-13834": rows},
                       failed_starts={"discussion-13834": failed})  # fmt: skip
    assert evidence.not_started(claim, OTHER) == speculative
    assert evidence.not_started(claim, "NVIDIA H200") == []  # it failed there once too, and then measured its rows
    results = per_gpu.results_by_gpu(CLAIM, rows, evidence)
    assert results[OTHER].measured.endswith(f"did not start on this GPU: {', '.join(speculative)}")
    assert "did not start" not in results["NVIDIA H200"].measured


def _result(runs: int | None) -> ledger.CheckResult:
    """A 'direction only' result resting on ``runs`` runs of each side of one point; no compared point for None."""
    if runs is None:
        return ledger.CheckResult("", "", Verdict.MODEL_ONLY, model_verdict=Verdict.REPRODUCED)
    pairs = pd.DataFrame([{"baseline_runs": runs, "speculative_runs": runs, "baseline_spread_pct": 1.0,
                           "speculative_spread_pct": 2.0, "band_pct": 5.0}])  # fmt: skip
    return ledger.CheckResult("", "", Verdict.DIRECTION_ONLY, rows=2 * runs, pairs=pairs)


def test_a_single_run_verdict_names_the_gpus_that_re_measured_it() -> None:
    results = {"NVIDIA H200": _result(1), OTHER: _result(3), "NVIDIA L40S": _result(2), "NVIDIA B200": _result(4)}
    assert [results[g].re_measured for g in ("NVIDIA H200", OTHER)] == [False, True]
    assert list(per_gpu.re_measured_elsewhere(results, "NVIDIA H200")) == [OTHER, "NVIDIA B200"]
    # a re-measured verdict needs no other GPU's beside it, whatever they rest on
    assert per_gpu.re_measured_elsewhere(results, OTHER) == {}
    # nor does a verdict that compares no recorded points
    assert per_gpu.re_measured_elsewhere({**results, "NVIDIA H200": _result(None)}, "NVIDIA H200") == {}
    assert results[OTHER].fewest_runs == 3 and _result(None).fewest_runs is None
    assert results[OTHER].noise["spread_pct"] == 2.0 and results[OTHER].noise["band_pct"] == 5.0
