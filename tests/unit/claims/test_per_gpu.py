"""A claim judged per GPU: another GPU's rows never move the reference's verdict, and each GPU gets its own."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pandas as pd
import pytest

import vllm_playbooks.cases.discussion_13834  # noqa: F401 (registers the claim's check)
from vllm_playbooks import cases
from vllm_playbooks.book.ledger import ledger_markdown
from vllm_playbooks.claims import ledger, per_gpu
from vllm_playbooks.claims.claim import Evidence
from vllm_playbooks.claims.verdict import Verdict

CLAIM = "discussion-13834-slower"
OTHER = "NVIDIA A100-SXM4-80GB"


@pytest.fixture(scope="module")
def evidence(recorded_evidence: Evidence) -> Evidence:
    return recorded_evidence


@pytest.fixture(scope="module")
def with_a_faster_other_gpu(evidence: Evidence) -> Evidence:
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
def test_each_gpu_is_judged_on_its_own_rows(with_a_faster_other_gpu: Evidence, evidence: Evidence) -> None:
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
    # the same runs on both GPUs: the reference leads; the other, twice as fast, disagrees beyond the bands
    assert table["gpu"].tolist() == ["NVIDIA H200", OTHER] and table["rows"].min() >= 1
    assert table["headline"].tolist() == [True, False] and table["disagrees"].tolist() == [False, True]
    assert (table["runs_per_side"] == results[OTHER].fewest_runs).all()
    assert set(table["claim"]) == {CLAIM} and per_gpu.gpus_of({CLAIM: results}) == 2


@pytest.mark.recorded_data
def test_a_page_filter_narrows_what_the_verdict_rests_on(evidence: Evidence) -> None:
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


def test_an_unknown_claim_is_one_line(evidence: Evidence) -> None:
    from vllm_playbooks.errors import ConfigError

    with pytest.raises(ConfigError, match="no claim 'no-such-claim'"):
        per_gpu.results_by_gpu("no-such-claim", evidence.rows("discussion-13834"), evidence)


@pytest.mark.recorded_data
def test_a_page_takes_its_numbers_from_the_headline_gpu(with_a_faster_other_gpu: Evidence) -> None:
    rows = with_a_faster_other_gpu.rows("discussion-13834")
    assert per_gpu.gpus_in(rows) == [OTHER, "NVIDIA H200"] and per_gpu.gpus_in(rows.iloc[0:0]) == [""]
    assert per_gpu.page_gpu(rows, "replay") == "NVIDIA H200"
    assert per_gpu.page_gpu(rows, "live", here=OTHER) == OTHER


@pytest.mark.recorded_data
def test_the_ledger_judges_a_claim_on_each_gpu_the_reference_first(with_a_faster_other_gpu: Evidence) -> None:
    claim = ledger.claim_of(CLAIM, with_a_faster_other_gpu)
    assert with_a_faster_other_gpu.deciding_gpus(claim) == ["NVIDIA H200", OTHER]
    lines = ledger.build_ledger(with_a_faster_other_gpu, [claim])
    assert lines["claim"].tolist() == [CLAIM, CLAIM] and lines["hardware"].tolist() == ["NVIDIA H200", OTHER]
    by_gpu = per_gpu.results_by_gpu(CLAIM, with_a_faster_other_gpu.rows("discussion-13834"), with_a_faster_other_gpu)
    assert lines["verdict"].tolist() == [str(by_gpu["NVIDIA H200"].verdict), str(by_gpu[OTHER].verdict)]
    assert lines["verdict"].iloc[1] == "not reproduced" != lines["verdict"].iloc[0]
    assert ledger.headline_lines(lines)["hardware"].tolist() == ["NVIDIA H200"]
    assert lines["headline"].tolist() == [True, False]
    text = ledger_markdown(lines)
    assert f":::{{dropdown}} {CLAIM}: not reproduced ({OTHER}, " in text
    assert text.count(f"| **{CLAIM}**: ") == 1 and text.count(f"| ↳ {CLAIM} |") == 1  # the lead's line, then the other
    alone = ledger_markdown(ledger.headline_lines(lines))
    assert f"| ↳ {CLAIM} |" not in alone and f":::{{dropdown}} {CLAIM}: " in alone


def test_a_claim_judged_on_every_row_at_once_is_one_line(evidence: Evidence) -> None:
    claim = ledger.claim_of("rule-acceptance-bands", evidence)
    assert evidence.deciding_gpus(claim) == []
    assert [gpu for gpu, _ in ledger.judged_per_gpu(claim, evidence)] == [""]


@pytest.mark.recorded_data
def test_a_deciding_engine_that_did_not_start_on_a_gpu_is_named_in_that_gpus_result(
    with_a_faster_other_gpu: Evidence,
) -> None:
    from vllm_playbooks.results.failed_starts import FAILED_START_COLUMNS

    claim = ledger.claim_of(CLAIM, with_a_faster_other_gpu)
    speculative = sorted({label for label, _ in with_a_faster_other_gpu.deciding[CLAIM] if label != "spec-off"})
    rows = with_a_faster_other_gpu.rows("discussion-13834")
    other = (rows["gpu_name"] == OTHER) & rows["engine_label"].isin(speculative)
    rows = rows[~other].copy()  # on the other GPU the speculative servers did not start: no rows
    rows.loc[rows["gpu_name"] == OTHER, "hardware"] = "other-x1-vllm0.26.0"
    failed = pd.DataFrame(
        [
            {**dict.fromkeys(FAILED_START_COLUMNS), "hardware": hardware, "engine_label": label}
            for label in speculative
            for hardware in ("other-x1-vllm0.26.0", "nvidia-h200-x1-vllm0.26.0")
        ]
    )
    evidence = replace(
        with_a_faster_other_gpu,
        runs={**with_a_faster_other_gpu.runs, "discussion-13834": rows},
        failed_starts={"discussion-13834": failed},
    )
    assert evidence.not_started(claim, OTHER) == speculative
    assert evidence.not_started(claim, "NVIDIA H200") == []  # it failed there once too, and then measured its rows
    results = per_gpu.results_by_gpu(CLAIM, rows, evidence)
    assert results[OTHER].not_started == tuple(speculative)
    assert results["NVIDIA H200"].not_started == ()


def _rows(gpu: str, runs: int, change: float) -> list[dict[str, Any]]:
    """The claim's two deciding points (speculation off and the report's k = 5, α 0.72 at concurrency 32) measured
    ``runs`` times each on ``gpu``, speculation changing output throughput by ``change`` (a fraction), with a spread
    of 2 % over the runs of each side."""
    from vllm_playbooks.results.schema import RUN_COLUMNS

    rows = []
    for label, k, alpha, value in [("spec-off", 0, None, 400.0), ("draft3b-k5-a0.72", 5, 0.72, 400.0 * (1 + change))]:
        for run in range(runs):
            row = dict.fromkeys(RUN_COLUMNS)
            row.update(
                case="discussion-13834",
                engine_label=label,
                point_id=f"{gpu}/{label}-0/in1240-out128-c32-r{run}",
                model_shape="llama-3.3-70b-awq",
                load_format="dummy",
                spec_method="draft_model" if k else "none",
                num_speculative_tokens=k,
                imposed_alpha=alpha,
                input_len=1240,
                output_len=128,
                random_range_ratio=0.0,
                concurrency=32,
                tensor_parallel_size=1,
                pipeline_parallel_size=1,
                max_num_seqs=256,
                max_num_batched_tokens=8192,
                gpu_name=gpu,
                hardware=gpu,
                output_tok_s=value * (1 + 0.01 * (run % 3 - 1)),
            )
            rows.append(row)
    return rows


def _synthetic(published: pd.DataFrame, **by_gpu: tuple[str, int, float]) -> Evidence:
    """Evidence of the claim on the GPUs given (a name → (GPU, runs a side, change)), every other case empty."""
    from vllm_playbooks.run.deciding import deciding_points

    rows = [row for gpu, runs, change in by_gpu.values() for row in _rows(gpu, runs, change)]
    return Evidence(
        published=published,
        runs={"discussion-13834": pd.DataFrame(rows)},
        deciding={CLAIM: deciding_points("discussion-13834", CLAIM)},
        checks=cases.checks(),
    )


@pytest.fixture(scope="module")
def published(evidence: Evidence) -> pd.DataFrame:
    return evidence.published


def test_the_better_evidenced_gpu_leads_the_ledger_and_the_page(published: pd.DataFrame) -> None:
    """The reference GPU measured the claim's points once, another GPU three times a side: the other leads, with the
    same word; the reference's line stays, second."""
    evidence = _synthetic(published, reference=("NVIDIA H200", 1, -0.06), other=(OTHER, 3, -0.06))
    lines = ledger.build_ledger(evidence, [ledger.claim_of(CLAIM, evidence)])
    assert lines["hardware"].tolist() == [OTHER, "NVIDIA H200"] and lines["headline"].tolist() == [True, False]
    assert lines["min_clean_repeats"].tolist() == [3, 1] and set(lines["verdict"]) == {"direction only"}
    assert ledger.headline_lines(lines)["hardware"].tolist() == [OTHER]
    assert ledger.result_for(CLAIM, evidence).fewest_runs == 3
    export = ledger.ledger_export(lines)
    assert export["runs_per_side"].tolist() == [3, 1] and export["headline"].tolist() == [True, False]
    assert export["re_measured"].tolist() == [True, False] and set(export["verdict"]) == {"direction only"}
    results = per_gpu.results_by_gpu(CLAIM, evidence.rows("discussion-13834"), evidence)
    assert per_gpu.verdict_gpu(results, "replay") == OTHER and per_gpu.page_result(results, "replay").fewest_runs == 3
    assert per_gpu.verdict_gpu(results, "live", here="NVIDIA H200") == "NVIDIA H200"  # live: the GPU it just ran on
    table = per_gpu.verdict_table({CLAIM: results})
    assert table["gpu"].tolist() == [OTHER, "NVIDIA H200"] and table["runs_per_side"].tolist() == [3, 1]
    assert not table["disagrees"].any()  # the same word on both
    # three runs on both: the tie goes to the reference GPU
    even = _synthetic(published, reference=("NVIDIA H200", 3, -0.06), other=(OTHER, 3, -0.06))
    assert ledger.build_ledger(even, [ledger.claim_of(CLAIM, even)])["hardware"].tolist() == ["NVIDIA H200", OTHER]


def test_gpus_that_disagree_beyond_their_bands_are_both_kept_and_marked(published: pd.DataFrame) -> None:
    """One run on the reference reproduces the reported -28.5 %; three runs on another GPU show -6 %, a direction
    only: the three runs lead, and the reference's verdict, beyond both bands, is marked as disagreeing."""
    evidence = _synthetic(published, reference=("NVIDIA H200", 1, -0.28), other=(OTHER, 3, -0.06))
    results = per_gpu.results_by_gpu(CLAIM, evidence.rows("discussion-13834"), evidence)
    assert results["NVIDIA H200"].verdict is Verdict.REPRODUCED and results[OTHER].verdict is Verdict.DIRECTION_ONLY
    table = per_gpu.verdict_table({CLAIM: results}).set_index("gpu")
    assert table.loc[OTHER, "headline"] and not table.loc[OTHER, "disagrees"]
    assert table.loc["NVIDIA H200", "disagrees"] and table.loc["NVIDIA H200", "verdict"] == "reproduced"
    assert table.loc["NVIDIA H200", "band_pct"] >= 5.0
    # -23 % against -20 %: either side of the size tolerance's edge, within the bands of each other
    near = _synthetic(published, reference=("NVIDIA H200", 1, -0.23), other=(OTHER, 3, -0.20))
    by_gpu = per_gpu.results_by_gpu(CLAIM, near.rows("discussion-13834"), near)
    assert {str(result.verdict) for result in by_gpu.values()} == {"reproduced", "direction only"}
    assert not per_gpu.verdict_table({CLAIM: by_gpu})["disagrees"].any()
