"""The claims ledger: every claim covered and sourced, checks that follow the data, refusals that say what is wrong."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.conftest import FROZEN, ROOT
from vllm_playbooks import cases
from vllm_playbooks.analysis import whatif
from vllm_playbooks.book.ledger import ledger_markdown, measured_words
from vllm_playbooks.cases import discussion_13834
from vllm_playbooks.claims import claim as claims_claim
from vllm_playbooks.claims import ledger as claims_ledger
from vllm_playbooks.claims import loading as claims_loading
from vllm_playbooks.claims import verdict as claims_verdict
from vllm_playbooks.config.case_file import calibration_cases
from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.errors import ConfigError, SchemaError
from vllm_playbooks.model import calibration
from vllm_playbooks.paths import data_dir
from vllm_playbooks.results.schema import RUN_COLUMNS
from vllm_playbooks.results.store import load_reference

CHECKS = cases.checks()  # every case's checks, as the ledger page has them

V = claims_verdict.Verdict


@pytest.fixture(scope="module")
def published() -> pd.DataFrame:
    return load_reference()


@pytest.fixture(scope="module")
def claims(published: pd.DataFrame) -> dict[str, claims_claim.Claim]:
    return {c.claim_id: c for c in claims_loading.load_claims(published=published)}


@pytest.fixture(scope="module")
def evidence(recorded_evidence: claims_claim.Evidence) -> claims_claim.Evidence:
    """What the ledger reads from the recorded data (the tests that take it are ``recorded_data``)."""
    return recorded_evidence


@pytest.fixture(scope="module")
def ledger(evidence: claims_claim.Evidence) -> pd.DataFrame:
    """The ledger on the recorded data, as the ledger page builds it."""
    return claims_ledger.build_ledger(evidence)


@pytest.fixture(scope="module")
def frozen_ledger(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    """The ledger built from the frozen copy of a few recorded runs (``tests.conftest.FROZEN``) beside the claims and
    published numbers: what those runs showed stays put as runs are added to ``data/``."""
    folder = tmp_path_factory.mktemp("frozen-ledger")
    shutil.copytree(FROZEN / "runs", folder / "runs")
    evidence = cases.load_evidence(folder)
    return claims_ledger.build_ledger(evidence)


def _row(case: str, label: str, concurrency: float | None, value: float, **changes: Any) -> dict[str, Any]:
    """One measured row: speculation off unless ``k`` is given; ``value`` is both output tok/s and 1000 / TPOT."""
    row: dict[str, Any] = dict.fromkeys(RUN_COLUMNS)
    k = changes.pop("k", 0)
    row.update(
        case=case,
        engine_label=label,
        model_shape="llama-3.1-8b",
        load_format="dummy",
        kv_cache_dtype="auto",
        spec_method=changes.pop("method", "draft_model") if k else "none",
        num_speculative_tokens=k,
        input_len=512,
        output_len=128,
        concurrency=concurrency,
        request_rate_qps=None,
        tensor_parallel_size=1,
        pipeline_parallel_size=1,
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        gpu_name="NVIDIA H200",
        output_tok_s=value,
        tpot_mean_ms=1000.0 / value,
    )
    row.update(changes)
    return row


def _evidence(published: pd.DataFrame, case: str, rows: list[dict[str, Any]], **kw: Any) -> claims_claim.Evidence:
    return claims_claim.Evidence(published=published, runs={case: pd.DataFrame(rows, columns=RUN_COLUMNS)}, **kw)


# --------------------------------------------------------------------------------------------------------------------
# The file, the registry, the refusals
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.recorded_data
def test_the_ledger_covers_every_claim_in_the_file(claims: dict[str, claims_claim.Claim], ledger: pd.DataFrame) -> None:
    assert ledger.claim.drop_duplicates().tolist() == list(claims)  # in the file's order, a claim's lines together
    assert claims_ledger.headline_lines(ledger).claim.tolist() == list(claims)
    assert set(ledger.verdict) <= {str(v) for v in V}
    assert set(ledger.model_verdict) <= {"", *(str(v) for v in claims_verdict.DATA_VERDICTS)}
    assert (ledger.published.str.len() > 0).all()


def test_every_source_exists_in_published(claims: dict[str, claims_claim.Claim], published: pd.DataFrame) -> None:
    ids = set(zip(published.case, published.claim_id, strict=True))
    for claim in claims.values():
        assert claim.sources
        for source in claim.sources:
            assert (claim.case, source) in ids, (claim.claim_id, source)


def test_every_case_and_the_rules_have_a_claim(claims: dict[str, claims_claim.Claim], published: pd.DataFrame) -> None:
    assert {c.case for c in claims.values()} == set(published.case)
    assert {c.check for c in claims.values()} == set(CHECKS)


@pytest.mark.recorded_data
def test_source_urls_and_kinds_come_from_published(ledger: pd.DataFrame) -> None:
    line = claims_ledger.headline_lines(ledger).set_index("claim")
    assert line.loc["discussion-13834-slower", "source_kind"] == "secondary only"
    assert line.loc["deepseek-v3-mtp-speedup", "source_kind"] == "primary"
    assert line.loc["rule-acceptance-bands", "source_kind"] == "primary and secondary"
    assert "digitalocean.com" in line.loc["rule-acceptance-bands", "source_urls"]
    assert line.loc["issue-27462-pp-starves", "source_urls"] == "https://github.com/vllm-project/vllm/issues/41682"


def _claims_file(tmp_path: Path, twice: bool = False, **changes: str) -> Path:
    """The #13834 case's claims file with its row changed (``twice``: the row listed twice), in a folder named as
    that case's."""
    source = ROOT / "vllm_playbooks" / "cases" / "discussion_13834" / "claims.csv"
    rows = list(csv.DictReader(source.open(encoding="utf-8")))
    rows[0].update(changes)
    rows = rows * 2 if twice else rows
    target = tmp_path / "discussion_13834" / "claims.csv"
    target.parent.mkdir(parents=True)
    with target.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=claims_loading.CLAIMS_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return target


def test_an_unknown_check_is_refused_with_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"row 1 .*unknown check 'spec_is_slow'; known checks: acceptance_bands"):
        claims_loading.load_claims(path=_claims_file(tmp_path, check="spec_is_slow"), checks=CHECKS)
    with pytest.raises(ConfigError, match="unknown check 'nope'; known checks: acceptance_bands"):
        cases.load_evidence(tmp_path).check("nope")
    with pytest.raises(ConfigError, match="unknown check 'acceptance_bands'; known checks: none"):
        claims_claim.Evidence(published=load_reference()).check("acceptance_bands")  # loaded without the checks


def test_a_missing_source_a_duplicate_and_an_empty_cell_are_refused(tmp_path: Path, published: pd.DataFrame) -> None:
    with pytest.raises(SchemaError, match=r"no published row \['output-tok-s-spec-of'\]"):
        claims_loading.load_claims(published=published, path=_claims_file(tmp_path, sources="output-tok-s-spec-of"))
    with pytest.raises(SchemaError, match="appears twice"):
        claims_loading.load_claims(path=_claims_file(tmp_path / "twice", twice=True))
    with pytest.raises(SchemaError, match="every column needs a value"):
        claims_loading.load_claims(path=_claims_file(tmp_path / "empty", text=" "))


def test_a_check_may_read_only_its_claims_sources(
    claims: dict[str, claims_claim.Claim], published: pd.DataFrame
) -> None:
    ev = claims_claim.Evidence(published=published)
    with pytest.raises(SchemaError, match="does not list as a source"):
        ev.value(claims["deepseek-v3-mtp-speedup"], "pr12755-speedup-qps1")


def test_a_data_verdict_needs_rows_and_a_model_verdict_is_a_data_one() -> None:
    with pytest.raises(ValueError, match="data verdicts need rows"):
        claims_claim.CheckResult("p", "m", V.REPRODUCED, rows=0)
    with pytest.raises(ValueError, match="data verdicts need rows"):
        claims_claim.CheckResult("p", "m", V.NOT_MEASURED, rows=2)
    with pytest.raises(ValueError, match="a model verdict is one of"):
        claims_claim.CheckResult("p", "m", V.NOT_MEASURED, model_verdict=V.MODEL_ONLY)
    with pytest.raises(ValueError, match="needs the model's verdict"):
        claims_claim.CheckResult("p", "m", V.MODEL_ONLY)


def test_every_verdict_has_a_meaning_on_the_page() -> None:
    legend = claims_verdict.verdict_legend()
    for verdict in V:
        assert f"| {verdict} | {claims_verdict.VERDICT_MEANINGS[verdict]} |" in legend


# --------------------------------------------------------------------------------------------------------------------
# Effects and judging
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("speedup", "expected"), [(1.06, "gain"), (1.05, "within noise"), (0.96, "within noise"), (0.94, "loss")]
)
def test_effect_has_a_break_even_band(speedup: float, expected: str) -> None:
    assert claims_verdict.effect(speedup) == expected


@pytest.mark.parametrize(
    ("measured", "low", "high", "expected"),
    [
        (0.75, 0.7146, None, V.REPRODUCED),  # slower by about the claimed amount
        (0.50, 0.7146, None, V.DIRECTION_ONLY),  # slower, by much more
        (1.43, 0.7146, None, V.NOT_REPRODUCED),  # faster: the opposite
        (0.98, 0.7146, None, V.NOT_REPRODUCED),  # within the break-even band: no slowdown
        (1.15, 1.10, 1.21, V.REPRODUCED),
        (1.40, 1.10, 1.21, V.DIRECTION_ONLY),
    ],
)
def test_judge(measured: float, low: float, high: float | None, expected: claims_verdict.Verdict) -> None:
    assert claims_verdict.judge(measured, low, high) is expected


def test_combine_keeps_the_worst() -> None:
    assert claims_verdict.combine([V.REPRODUCED, V.DIRECTION_ONLY]) is V.DIRECTION_ONLY
    assert claims_verdict.combine([V.REPRODUCED, V.NOT_REPRODUCED, V.DIRECTION_ONLY]) is V.NOT_REPRODUCED
    assert claims_verdict.combine([]) is V.NOT_MEASURED


# --------------------------------------------------------------------------------------------------------------------
# Each check on hand-made rows
# --------------------------------------------------------------------------------------------------------------------

CASE_13834 = "discussion-13834"


def _pair_13834(concurrency: int, off: float, on: float, alpha: float = 0.72, k: int = 5) -> list[dict[str, Any]]:
    return [
        _row(CASE_13834, "off", concurrency, off),
        _row(CASE_13834, "spec", concurrency, on, k=k, imposed_alpha=alpha),
    ]


@pytest.mark.parametrize(
    ("on", "expected"), [(292.0, V.REPRODUCED), (200.0, V.DIRECTION_ONLY), (520.0, V.NOT_REPRODUCED)]
)
def test_13834_follows_the_rows_at_the_reported_load(
    claims, published, on: float, expected: claims_verdict.Verdict
) -> None:  # type: ignore[no-untyped-def]
    # the report implies ≈ 32 streams; 400 → 292 tok/s is −27 % (reported −28.5 %)
    result = CHECKS["spec_slower_at_reported_load"](
        claims["discussion-13834-slower"], _evidence(published, CASE_13834, _pair_13834(32, 400.0, on))
    )
    assert result.verdict is expected and result.rows == 1
    assert "concurrency 32" in result.measured


def test_13834_at_low_load_or_other_settings_is_not_measured_yet(  # type: ignore[no-untyped-def]
    claims, published
) -> None:
    check = CHECKS["spec_slower_at_reported_load"]
    low = check(claims["discussion-13834-slower"], _evidence(published, CASE_13834, _pair_13834(1, 40.0, 60.0)))
    assert low.verdict is V.NOT_MEASURED and "+50.0 % at concurrency 1" in low.measured
    other = check(
        claims["discussion-13834-slower"], _evidence(published, CASE_13834, _pair_13834(32, 400.0, 292.0, alpha=0.5))
    )
    assert other.verdict is V.NOT_MEASURED and other.model_verdict is None  # no fit given: no model line


def test_13834_prefers_the_load_nearest_the_report(claims, published) -> None:  # type: ignore[no-untyped-def]
    rows = _pair_13834(16, 300.0, 330.0) + _pair_13834(32, 400.0, 292.0)
    result = CHECKS["spec_slower_at_reported_load"](
        claims["discussion-13834-slower"], _evidence(published, CASE_13834, rows)
    )
    assert result.verdict is V.REPRODUCED and "concurrency 32" in result.measured


@pytest.mark.recorded_data
def test_13834_model_line_uses_the_fit(claims, published) -> None:  # type: ignore[no-untyped-def]

    fit = calibration.fit_efficiency(whatif.calibration_rows(), "H200-SXM")
    result = CHECKS["spec_slower_at_reported_load"](
        claims["discussion-13834-slower"], claims_claim.Evidence(published=published, fit=fit)
    )
    predicted = discussion_13834.predict_13834_a100(fit, concurrency=32)
    assert f"{predicted['output_tok_s_on']:.0f} output tok/s" in result.model_says
    assert result.model_verdict is claims_verdict.judge(
        predicted["output_tok_s_on"] / predicted["output_tok_s_off"], 68.19 / 95.43
    )


@pytest.mark.recorded_data
def test_the_ledgers_fit_is_the_case_pages_fit(evidence: claims_claim.Evidence) -> None:
    """The ledger fits on the same rows as the pages' model (``analysis.whatif.calibration_rows``): without the
    batch-size schedules and the runner-forcing controls, which its own reading of the data folder must leave out
    too."""
    from vllm_playbooks.results.replay import replay_rows

    rows = whatif.calibration_rows()
    assert evidence.fit == calibration.fit_efficiency(rows, "H200-SXM", draft_overhead=True)
    assert any(not whatif.calibrates(r) for case in calibration_cases() for r in replay_rows(case))


MTP = "deepseek-mtp"


@pytest.mark.parametrize(
    ("on", "rate", "expected"), [(5.6, 0.87, V.REPRODUCED), (11.0, 0.87, V.NOT_REPRODUCED), (5.6, 0.60, V.NOT_MEASURED)]
)
def test_mtp_speedup_at_the_reported_acceptance(  # type: ignore[no-untyped-def]
    claims, published, on: float, rate: float, expected
) -> None:
    rows = [
        _row(MTP, "off", 1, 100.0, tpot_mean_ms=10.0, model_shape="deepseek-v3-reduced"),
        _row(
            MTP,
            "mtp",
            1,
            150.0,
            k=1,
            method="mtp",
            tpot_mean_ms=on,
            imposed_alpha=rate,
            acceptance_rate=rate,
            model_shape="deepseek-v3-reduced",
        ),
    ]
    check = CHECKS["mtp_speedup_at_acceptance"]
    result = check(claims["deepseek-v3-mtp-speedup"], _evidence(published, MTP, rows))
    assert result.verdict is expected
    assert result.model_verdict is V.REPRODUCED  # 1 MTP layer of 61: 1.82-1.87x, within 10 % of 1.8x
    # another architecture's MTP (MiMo-7B) is not judged against DeepSeek's number
    mimo = [dict(row, model_shape="mimo-7b") for row in rows]
    assert check(claims["deepseek-v3-mtp-speedup"], _evidence(published, MTP, mimo)).verdict is V.NOT_MEASURED
    # nor is DeepSeek-V3's layout at another scale (V2-Lite's 27 layers, hidden 2048)
    small = [dict(row, model_shape="deepseek-v3-v2lite-scale") for row in rows]
    assert check(claims["deepseek-v3-mtp-speedup"], _evidence(published, MTP, small)).verdict is V.NOT_MEASURED


def _qps_rows(speedups: dict[float, float], shape: str = "deepseek-v3-reduced") -> list[dict[str, Any]]:
    rows = []
    for qps, speedup in speedups.items():
        rows.append(_row(MTP, "off", None, 100.0, request_rate_qps=qps, tpot_mean_ms=50.0, model_shape=shape))
        rows.append(
            _row(
                MTP,
                "mtp",
                None,
                100.0,
                k=1,
                method="mtp",
                request_rate_qps=qps,
                tpot_mean_ms=50.0 / speedup,
                model_shape=shape,
                imposed_alpha=0.81,
            )
        )  # the PR's acceptance
    return rows


@pytest.mark.parametrize(
    ("speedups", "expected"),
    [
        ({1.0: 1.6, 2.0: 1.2, 8.0: 1.01, 16.0: 0.9}, V.REPRODUCED),
        ({1.0: 2.5, 2.0: 1.2}, V.DIRECTION_ONLY),
        ({1.0: 1.6, 8.0: 1.3}, V.NOT_REPRODUCED),  # still a gain at QPS 8
        ({16.0: 1.3}, V.NOT_REPRODUCED),  # a gain above the bound
        ({3.0: 1.3}, V.NOT_MEASURED),  # a rate the PR did not publish, below the bound
    ],
)
def test_mtp_gain_by_qps(  # type: ignore[no-untyped-def]
    claims, published, speedups: dict[float, float], expected
) -> None:
    check = CHECKS["mtp_gain_falls_with_qps"]
    result = check(claims["pr12755-mtp-gain-by-qps"], _evidence(published, MTP, _qps_rows(speedups)))
    assert result.verdict is expected
    assert "implies c=0.11" in result.model_says and result.model_verdict is None
    if expected is not V.NOT_MEASURED:
        assert f"{speedups[min(speedups)]:.2f}× at QPS {min(speedups):g} (mtp)" in result.measured
    # MiMo-7B's rows (another architecture) beside them change nothing
    both = _qps_rows(speedups) + _qps_rows({8.0: 1.6}, shape="mimo-7b")
    assert check(claims["pr12755-mtp-gain-by-qps"], _evidence(published, MTP, both)).verdict is expected
    # nor do those of DeepSeek-V3's layout at V2-Lite scale
    small = _qps_rows(speedups) + _qps_rows({8.0: 1.6}, shape="deepseek-v3-v2lite-scale")
    assert check(claims["pr12755-mtp-gain-by-qps"], _evidence(published, MTP, small)).verdict is expected


EAGLE = "gpt-oss-eagle3"


def _eagle_rows(changes: dict[int, float], k: int = 3, label: str = "eagle3-k3") -> list[dict[str, Any]]:
    rows = []
    for concurrency, speedup in changes.items():
        rows.append(_row(EAGLE, "off", concurrency, 1000.0, model_shape="gpt-oss-120b"))
        rows.append(_row(EAGLE, label, concurrency, 1000.0 * speedup, k=k, method="eagle3", model_shape="gpt-oss-120b"))
    return rows


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({1: 1.15, 64: 1.12, 200: 1.11}, V.REPRODUCED),
        ({1: 1.15, 128: 0.9, 200: 1.11}, V.NOT_REPRODUCED),
        ({1: 1.15, 32: 1.12}, V.NOT_MEASURED),  # nothing near 200 yet
    ],
)
def test_eagle3_gain_up_to_200(  # type: ignore[no-untyped-def]
    claims, published, changes: dict[int, float], expected
) -> None:
    result = CHECKS["gain_up_to_concurrency"](
        claims["gpt-oss-eagle3-200-concurrent"], _evidence(published, EAGLE, _eagle_rows(changes))
    )
    assert result.verdict is expected
    assert "dense decoders only" in result.model_says


def test_eagle3_the_best_config_stands(claims, published) -> None:  # type: ignore[no-untyped-def]
    rows = _eagle_rows({1: 1.15, 200: 1.11}) + _eagle_rows({1: 1.15, 200: 0.8}, k=4, label="eagle3-k4")
    result = CHECKS["gain_up_to_concurrency"](
        claims["gpt-oss-eagle3-200-concurrent"], _evidence(published, EAGLE, rows)
    )
    assert result.verdict is V.REPRODUCED


def test_a_verdict_rests_on_its_deciding_points_only(claims, published) -> None:  # type: ignore[no-untyped-def]
    rows = _eagle_rows({128: 0.9, 200: 1.11})
    for row in rows:
        row["point_id"] = f"gpu/{row['engine_label']}/c{int(row['concurrency'])}-r0"
    claim, check = claims["gpt-oss-eagle3-200-concurrent"], CHECKS["gain_up_to_concurrency"]
    assert check(claim, _evidence(published, EAGLE, rows)).verdict is V.NOT_REPRODUCED  # every load: 128's loss counts
    deciding = {claim.claim_id: frozenset({("off", "c200"), ("eagle3-k3", "c200")})}
    result = check(claim, _evidence(published, EAGLE, rows, deciding=deciding))
    assert result.verdict is V.REPRODUCED and result.measured == "eagle3-k3: +11.0 % at 200" and result.rows == 1


@pytest.mark.recorded_data
def test_the_recorded_evidence_names_the_deciding_points_of_the_claims_a_part_decides(
    evidence: claims_claim.Evidence,
) -> None:
    from vllm_playbooks.run.deciding import deciding_points

    assert set(evidence.deciding) >= {"discussion-13834-slower", "gpt-oss-eagle3-200-concurrent"}
    assert evidence.deciding["gpt-oss-eagle3-200-concurrent"] == deciding_points(EAGLE, "gpt-oss-eagle3-200-concurrent")
    claim = claims_ledger.claim_of("gpt-oss-eagle3-200-concurrent", evidence)
    decided = evidence.deciding_rows(claim)
    assert set(decided["concurrency"]) == {200} and set(decided["engine_label"]) == {"spec-off", "eagle3-k3-a0.71"}
    assert len(decided) < len(evidence.rows(EAGLE))


def _on_long_profile(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` moved to the case's long profile (``swe`` in gpt-oss-eagle3.yaml: 13,000 tokens in, 203 out)."""
    return [{**row, "input_len": 13000, "output_len": 203} for row in rows]


def test_eagle3_judges_each_length_profile_apart(claims, published) -> None:  # type: ignore[no-untyped-def]
    chat = _eagle_rows({1: 1.15, 200: 1.11})
    long = _on_long_profile(_eagle_rows({1: 1.15, 16: 0.95}))  # a loss, but far below 200 concurrent requests
    result = CHECKS["gain_up_to_concurrency"](
        claims["gpt-oss-eagle3-200-concurrent"], _evidence(published, EAGLE, chat + long)
    )
    assert result.verdict is V.REPRODUCED and result.rows == 2
    assert (
        result.measured
        == "eagle3-k3 (512 in / 128 out): +15.0 % at 1, +11.0 % at 200; eagle3-k3 (swe): +15.0 % at 1, -5.0 % at 16"
    )
    # a profile that stops short of 200 is no evidence that the gain held there
    short_wins = _on_long_profile(_eagle_rows({1: 1.15, 16: 1.12}, k=4, label="eagle3-k4"))
    losing = _eagle_rows({1: 1.15, 200: 0.8})
    result = CHECKS["gain_up_to_concurrency"](
        claims["gpt-oss-eagle3-200-concurrent"], _evidence(published, EAGLE, losing + short_wins)
    )
    assert result.verdict is V.NOT_REPRODUCED


def test_eagle3_best_draft_tokens_per_length_profile(claims, published) -> None:  # type: ignore[no-untyped-def]
    chat = [
        _row(EAGLE, f"k{k}", 16, v, k=k, method="eagle3", imposed_alpha=0.7)
        for k, v in {2: 1100.0, 3: 1150.0, 4: 1058.0}.items()
    ]
    # k=3 alone on the long profile, far slower: pooled with the chat rows it would make k=4 the best at 16
    long = _on_long_profile([_row(EAGLE, "k3", 16, 300.0, k=3, method="eagle3", imposed_alpha=0.7)])
    result = CHECKS["best_draft_tokens"](
        claims["gpt-oss-eagle3-draft-tokens"], _evidence(published, EAGLE, chat + long)
    )
    assert result.verdict is V.REPRODUCED
    assert (
        result.measured == "512 in / 128 out, concurrency 16, α 0.7: best k=3 (tied within noise with k=2), k=4 -8.0 %"
    )


@pytest.mark.parametrize(
    ("by_k", "expected"),
    [
        ({2: 1100.0, 3: 1150.0, 4: 1058.0}, V.REPRODUCED),
        ({2: 1100.0, 3: 1150.0, 4: 1200.0}, V.NOT_REPRODUCED),
        ({2: 1100.0, 3: 1150.0}, V.NOT_MEASURED),
    ],
)
def test_eagle3_best_draft_tokens(  # type: ignore[no-untyped-def]
    claims, published, by_k: dict[int, float], expected
) -> None:
    rows = [_row(EAGLE, f"k{k}", 16, v, k=k, method="eagle3", imposed_alpha=0.7) for k, v in by_k.items()]
    result = CHECKS["best_draft_tokens"](claims["gpt-oss-eagle3-draft-tokens"], _evidence(published, EAGLE, rows))
    assert result.verdict is expected
    # k = 4 is named against the best k unless it is the best (no "k=4 +0.0 %")
    assert (", k=4 " in result.measured) is (expected is V.REPRODUCED)
    # at batch 1 with a one-layer head (c = 1/36) the Leviathan optimum lies above 3
    assert result.model_verdict is V.NOT_REPRODUCED and "best k 5 at α 0.6" in result.model_says


PP = "pp-27462"


def _pp_rows(pp1: float, pp2: float, pp2_at_2n: float) -> list[dict[str, Any]]:
    """PP=1 and PP=2 at cap 64 and PP=2 at 128, each at concurrency twice its cap (the #27462 page's grid)."""
    return [
        _row(PP, "pp1-64", 128, pp1, max_num_seqs=64, point_id="a"),
        _row(PP, "pp2-64", 128, pp2, pipeline_parallel_size=2, max_num_seqs=64, point_id="b"),
        _row(PP, "pp2-128", 256, pp2_at_2n, pipeline_parallel_size=2, max_num_seqs=128, point_id="c"),
    ]


@pytest.mark.parametrize(
    ("pp2", "pp2_at_2n", "expected"),
    [
        (1000.0, 1500.0, V.REPRODUCED),  # two stages at N give one GPU's throughput; at 2N they gain
        (1500.0, 1800.0, V.NOT_REPRODUCED),  # two stages at N already gain 50 %: no starvation
        (1000.0, 1100.0, V.NOT_REPRODUCED),
    ],  # the fix does not pay
)
def test_pp_cap_is_the_pages_comparison(  # type: ignore[no-untyped-def]
    claims, published, pp2: float, pp2_at_2n: float, expected
) -> None:
    result = CHECKS["pp_cap_starves_stages"](
        claims["issue-27462-pp-starves"], _evidence(published, PP, _pp_rows(1000.0, pp2, pp2_at_2n))
    )
    assert result.verdict is expected and result.rows == 1
    assert "N=64: PP=2 at N" in result.measured


def test_pp_cap_leaves_out_a_point_whose_cap_was_not_filled(claims, published) -> None:  # type: ignore[no-untyped-def]
    steps = pd.DataFrame({"point_id": ["a", "b", "c"], "fill": [0.99, 0.99, 0.6]})  # PP=2 at 128 ran 77 of 128
    result = CHECKS["pp_cap_starves_stages"](
        claims["issue-27462-pp-starves"],
        _evidence(published, PP, _pp_rows(1000.0, 1000.0, 1500.0), engine_steps={PP: steps}),
    )
    assert result.verdict is V.NOT_MEASURED and result.rows == 0


@pytest.mark.recorded_data
def test_pp_cap_on_the_recorded_runs(ledger: pd.DataFrame) -> None:
    """The ledger's verdict on #27462 is the case page's own, from the same rows and the same fill rule."""
    from vllm_playbooks.cases import pp_27462
    from vllm_playbooks.results.engine_steps import step_summary
    from vllm_playbooks.results.replay import replay_case

    rows = replay_case(pp_27462.CASE)
    comparison = pp_27462.pp_comparison(rows, steps=step_summary(rows))
    page = {"Reproduced": V.REPRODUCED, "Direction only": V.DIRECTION_ONLY, "Not reproduced": V.NOT_REPRODUCED}
    line = ledger.set_index("claim").loc["issue-27462-pp-starves"]
    assert line.verdict == str(page[pp_27462.verdict_label(comparison)])
    for n in comparison.dropna(subset=["pp2_at_2n_tok_s"])["max_num_seqs"]:
        assert f"N={int(n)}: PP=2 at N " in line.measured
    assert line.model_verdict in {str(v) for v in page.values()} and "N=32: PP=2 at N " in line.model_says


@pytest.mark.parametrize(
    ("rate", "speedup", "expected"),
    [
        (0.4, 0.8, V.REPRODUCED),
        (0.4, 1.4, V.NOT_REPRODUCED),
        (0.6, 1.02, V.REPRODUCED),
        (0.6, 0.8, V.NOT_REPRODUCED),
        (0.7, 1.3, V.REPRODUCED),
        (0.7, 0.9, V.NOT_REPRODUCED),
    ],
)
def test_acceptance_bands(  # type: ignore[no-untyped-def]
    claims, published, rate: float, speedup: float, expected
) -> None:
    rows = [
        _row("any", "off", 1, 100.0),
        _row(
            "any",
            "spec",
            1,
            100.0 * speedup,
            k=4,
            acceptance_rate=rate,
            mean_acceptance_length=1 + 4 * rate,
            draft_model="llama-3.2-1b",
        ),
    ]
    result = CHECKS["acceptance_bands"](claims["rule-acceptance-bands"], _evidence(published, "any", rows))
    assert result.verdict is expected and result.rows == 1


def test_acceptance_bands_are_judged_on_the_re_measured_points_once_there_are_any(  # type: ignore[no-untyped-def]
    claims, published
) -> None:
    """A point run three times a side is judged; a single-run point beside it is an anecdote, set aside and counted.
    Alone, the single run at 0.4 (a 40 % gain where the band expects a loss) would make the rule not reproduced."""
    spec = dict(k=4, acceptance_rate=0.7, mean_acceptance_length=3.8, draft_model="llama-3.2-1b")
    repeated = [_row("any", "off", 16, v) for v in (100.0, 101.0, 102.0)]
    repeated += [_row("any", "spec", 16, v, **spec) for v in (130.0, 131.0, 132.0)]
    single = [_row("any", "off", 1, 100.0), _row("any", "spec", 1, 140.0, **{**spec, "acceptance_rate": 0.4})]
    check = CHECKS["acceptance_bands"]
    result = check(claims["rule-acceptance-bands"], _evidence(published, "any", repeated + single))
    assert result.verdict is V.REPRODUCED and result.rows == 1
    assert "1 of 1 re-measured points" in result.measured and "acceptance 0.70–0.70" in result.measured
    assert "(by the effect their band expects: gain 1 of 1)" in result.measured  # the single run's band is not counted
    assert result.measured.endswith("set aside: 1 points with fewer clean runs, 0 of which behave as their band says")
    assert claims_claim.noise_of(result.pairs)["min_clean_repeats"] == 3
    alone = check(claims["rule-acceptance-bands"], _evidence(published, "any", single))  # no repeats: every point
    assert alone.verdict is V.NOT_REPRODUCED and alone.rows == 1 and "set aside" not in alone.measured
    assert "any on NVIDIA H200 at concurrency 1: acceptance 0.40 (expects loss) gave +40.0 %" in alone.measured
    assert "(by the effect their band expects: loss 0 of 1)" in alone.measured


def test_acceptance_bands_model_is_the_draft_cost(claims, published) -> None:  # type: ignore[no-untyped-def]
    # TPOT off 10 ms, on 10·(1 + 4·0.6)/τ ms with τ = 3: c = 0.6, so the break-even rate is 0.6 (inside 0.5-0.65)
    rows = [
        _row("any", "off", 1, 100.0),
        _row(
            "any",
            "spec",
            1,
            88.0,
            k=4,
            acceptance_rate=0.5,
            mean_acceptance_length=3.0,
            tpot_mean_ms=10.0 * 3.4 / 3.0,
            draft_model="llama-3.2-1b",
        ),
    ]
    result = CHECKS["acceptance_bands"](claims["rule-acceptance-bands"], _evidence(published, "any", rows))
    assert "break-even acceptance rate 0.60" in result.model_says and result.model_verdict is V.REPRODUCED
    cheap = [rows[0], {**rows[1], "tpot_mean_ms": 10.0 * 1.8 / 3.0}]  # c = 0.2: break-even at 0.2, outside the band
    result = CHECKS["acceptance_bands"](claims["rule-acceptance-bands"], _evidence(published, "any", cheap))
    assert "break-even acceptance rate 0.20" in result.model_says and result.model_verdict is V.NOT_REPRODUCED


def test_acceptance_bands_model_names_a_config_without_draft_model_by_its_method(  # type: ignore[no-untyped-def]
    claims, published
) -> None:
    rows = [
        _row("any", "off", 1, 100.0, model_shape="mimo-7b"),
        _row(
            "any",
            "mtp",
            1,
            88.0,
            k=1,
            method="mtp",
            acceptance_rate=0.8,
            mean_acceptance_length=1.8,
            model_shape="mimo-7b",
            draft_model=None,
        ),
    ]
    result = CHECKS["acceptance_bands"](claims["rule-acceptance-bands"], _evidence(published, "any", rows))
    assert result.model_says.startswith("mimo-7b + mtp, k=1: c=") and "nan" not in result.model_says


@pytest.mark.parametrize(
    ("shape", "kv", "expected"),
    [("llama-3.3-70b-awq", "fp8", V.REPRODUCED), ("llama-3.1-8b", "auto", V.NOT_REPRODUCED)],
)
def test_compute_bound_batch_is_model_only(  # type: ignore[no-untyped-def]
    claims, published, shape: str, kv: str, expected
) -> None:
    rows = [_row("any", "off", 1, 100.0, model_shape=shape, kv_cache_dtype=kv, input_len=1240, output_len=128)]
    result = CHECKS["compute_bound_batch"](claims["rule-batch-64-compute-bound"], _evidence(published, "any", rows))
    assert result.verdict is V.MODEL_ONLY and result.model_verdict is expected


def test_compute_bound_batch_without_rows_says_so(claims, published) -> None:  # type: ignore[no-untyped-def]
    result = CHECKS["compute_bound_batch"](
        claims["rule-batch-64-compute-bound"], claims_claim.Evidence(published=published)
    )
    assert result.verdict is V.NOT_MEASURED and result.model_verdict is None


def test_temperature_cannot_be_measured_with_imposed_acceptance(  # type: ignore[no-untyped-def]
    claims, published
) -> None:
    rows = [_row("any", "off", 1, 100.0), _row("any", "spec", 1, 120.0, k=4, imposed_acceptance_rates="[0.8]")]
    result = CHECKS["temperature_rule"](claims["rule-temperature"], _evidence(published, "any", rows))
    assert result.verdict is V.NOT_MEASURED and result.measured.startswith("0 recorded speculative row(s) with earned")


def _startups(kv_tokens: int, preemptions: int, rows: int = 3, gpu: str = "NVIDIA H200") -> pd.DataFrame:
    engine = EngineConfig(label="e", model="llama-3.1-8b", max_model_len=2048, max_num_seqs=256)
    return pd.DataFrame(
        [
            {
                "case": "any",
                "engine_label": "e",
                "engine": engine,
                "total_memory_gib": 139.8,
                "max_num_seqs": 256,
                "max_model_len": 2048,
                "kv_cache_tokens": kv_tokens,
                "measured_rows": rows,
                "preemptions": preemptions,
                "gpu_name": gpu,
            }
        ]
    )


@pytest.mark.parametrize(
    ("kv_tokens", "preemptions", "rows", "expected"),
    [
        (200_000, 0, 3, V.NOT_REPRODUCED),
        (200_000, 7, 3, V.REPRODUCED),
        (600_000, 0, 3, V.NOT_MEASURED),
        (200_000, 0, 0, V.NOT_MEASURED),
    ],
)
def test_kv_fit(  # type: ignore[no-untyped-def]
    claims, published, kv_tokens: int, preemptions: int, rows: int, expected
) -> None:
    ev = claims_claim.Evidence(published=published, startups=_startups(kv_tokens, preemptions, rows))
    result = CHECKS["kv_product_fits"](claims["rule-kv-fit"], ev)
    assert result.verdict is expected


def test_kv_fit_tells_one_line_per_config_and_gpu_with_every_start_up_judged(  # type: ignore[no-untyped-def]
    claims, published
) -> None:
    """Two start-ups of one config on one GPU make one line (the span of their caches, their rows summed); a third
    on another GPU makes its own; each start-up is still one judged point, and one with preemptions agrees."""
    starts = pd.concat([_startups(200_000, 0), _startups(210_000, 0, rows=2), _startups(100_000, 4, gpu="NVIDIA H100")])
    result = CHECKS["kv_product_fits"](
        claims["rule-kv-fit"], claims_claim.Evidence(published=published, startups=starts)
    )
    assert result.rows == 3 and result.verdict is V.NOT_REPRODUCED
    assert result.measured == (
        "any e on NVIDIA H100: 100,000 KV tokens for 256 × 2048 = 524,288 (0.19×); 1 start-up(s), "
        "3 measured row(s), 4 preemptions; any e on NVIDIA H200: 200,000–210,000 KV tokens for "
        "256 × 2048 = 524,288 (0.38–0.40×); 2 start-up(s), 5 measured row(s), 0 preemptions"
    )
    assert result.model_says.count("any e on NVIDIA H200: holds") == 1


def test_batching_defaults_follow_the_table(claims, published) -> None:  # type: ignore[no-untyped-def]
    check, claim = CHECKS["batching_defaults_table"], claims["rule-batching-defaults"]
    assert check(claim, claims_claim.Evidence(published=published)).model_verdict is V.REPRODUCED
    wrong = published.copy()
    wrong.loc[wrong.claim_id == "defaults-max-num-seqs-small-server", "value"] = 512.0
    result = check(claim, claims_claim.Evidence(published=wrong))
    assert result.verdict is V.MODEL_ONLY and result.model_verdict is V.NOT_REPRODUCED
    assert "defaults-max-num-seqs-small-server on A100-80GB: table 512, vLLM 0.26 256" in result.model_says


# --------------------------------------------------------------------------------------------------------------------
# The ledger on the recorded data, and on none
# --------------------------------------------------------------------------------------------------------------------


def test_recorded_rows_already_go_against_the_acceptance_bands(frozen_ledger: pd.DataFrame) -> None:
    # a counter-example: the recorded 70B-AWQ + 3B pair (frozen) gained at an acceptance rate of 0.40
    line = frozen_ledger.set_index("claim").loc["rule-acceptance-bands"]
    assert (line.verdict, line.rows) == ("not reproduced", 1)
    assert line.measured == (
        "0 of 1 paired rows behave as their band says (by the effect their band expects: loss 0 "
        "of 1); against it: discussion-13834 on "
        "NVIDIA H200 at concurrency 1: acceptance 0.40 (expects loss) gave +43.4 %"
    )


@pytest.mark.recorded_data
def test_data_verdicts_rest_on_rows(ledger: pd.DataFrame) -> None:
    data = ledger[ledger.verdict.isin([str(v) for v in claims_verdict.DATA_VERDICTS])]
    assert not data.empty and (data.rows > 0).all()
    assert (ledger[~ledger.index.isin(data.index)].rows == 0).all()


def test_with_nothing_recorded_no_claim_gets_a_data_verdict(data: Path) -> None:
    ev = cases.load_evidence(data)
    assert ev.runs == {} and ev.fit is None and ev.startups.empty
    ledger = claims_ledger.build_ledger(ev)
    assert set(ledger.verdict) <= {"not measured yet", "model only"}
    assert (ledger.rows == 0).all()


@pytest.mark.recorded_data
def test_the_page_renders_every_claim(ledger: pd.DataFrame) -> None:
    text = ledger_markdown(ledger)
    for claim in ledger.claim:
        assert f"**{claim}**" in text
    assert "[juhoplayground.github.io](https://juhoplayground.github.io/" in text and "**[secondary]**" in text
    assert "[vllm-project/vllm#41682](https://github.com/vllm-project/vllm/issues/41682)" in text
    assert claims_verdict.verdict_counts(ledger).startswith("reproduced: ")


def test_a_server_that_did_not_start_is_left_out_of_the_startups(data: Path) -> None:
    logs = data / "runs" / "any" / "logs"
    logs.mkdir(parents=True)
    (logs / "spec-off-0123456789-2026-11-30T000000+0000.log").write_text("ValueError: no KV cache\n")
    assert claims_loading.recorded_startups(data).empty


@pytest.mark.recorded_data
def test_each_startup_counts_only_the_rows_measured_while_it_was_up(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()  # a data folder with this one case: its logs are read, not every case's
    (tmp_path / "runs" / "discussion-13834").symlink_to(data_dir() / "runs" / "discussion-13834")
    case = claims_loading.recorded_startups(tmp_path)
    rows = pd.read_csv(data_dir() / "runs" / "discussion-13834" / "runs.csv")
    # every server of this case started and logged its KV cache, so each row belongs to exactly one start-up
    assert (
        case.groupby("engine_label")["measured_rows"].sum().to_dict() == rows["engine_label"].value_counts().to_dict()
    )
    # a config started more than once: no one start-up holds the rows measured while another was up
    again = case[case.groupby("engine_label")["measured_rows"].transform(lambda n: (n > 0).sum() > 1)]
    assert not again.empty
    for label, group in again.groupby("engine_label"):
        assert group["measured_rows"].max() < (rows["engine_label"] == label).sum(), label


def test_a_shape_the_roofline_does_not_model_is_named_not_fatal(  # type: ignore[no-untyped-def]
    claims, published
) -> None:
    rows = [
        _row("any", "off", 1, 100.0, model_shape="gpt-oss-120b"),
        _row("any", "off", 1, 100.0, model_shape="llama-3.3-70b-awq", kv_cache_dtype="fp8", input_len=1240),
    ]
    result = CHECKS["compute_bound_batch"](claims["rule-batch-64-compute-bound"], _evidence(published, "any", rows))
    assert "gpt-oss-120b: not modelled" in result.model_says and result.model_verdict is V.REPRODUCED


@pytest.mark.recorded_data
def test_the_export_states_the_noise_each_verdict_rests_on(ledger: pd.DataFrame) -> None:
    export = claims_ledger.ledger_export(ledger)
    assert list(export.columns) == claims_ledger.EXPORT_COLUMNS and len(export) == len(ledger)
    judged = export[export["runs_per_side"].notna()]
    assert not judged.empty
    assert (judged["band_pct"] >= judged["spread_pct"]).all() and (judged["band_pct"] >= 5.0).all()
    for row in judged.itertuples():  # the runs a verdict rests on, stated beside its word
        assert row.re_measured == (row.runs_per_side >= 3), row
    assert export["re_measured"].isna().sum() == len(export) - len(judged)
    assert set(export["verdict"]) <= {str(v) for v in V}  # a word alone: the runs have their own column
    parts = export.drop_duplicates("claim_id").set_index("claim_id")["deciding_part"]  # the same on each GPU's line
    assert (
        parts["gpt-oss-eagle3-200-concurrent"] == "quick"
        and parts["gpt-oss-eagle3-draft-tokens"] == "decide-draft-tokens"
    )
    assert parts["rule-acceptance-bands"] == ""  # no part decides it: it rests on every recorded row
    hand_made = claims_ledger.build_ledger(claims_claim.Evidence(published=load_reference(), checks=CHECKS))
    assert (hand_made["deciding_part"] == "").all()  # evidence that names no deciding points names no part either


@pytest.mark.recorded_data
@pytest.mark.recorded_data
def test_a_quick_check_on_another_gpu_is_a_line_of_its_own(ledger: pd.DataFrame) -> None:
    """The discussion-13834 quick check ran three times per point on an H100: its line says so, beside the H200's."""
    export = claims_ledger.ledger_export(ledger)
    lines = export[export["claim_id"] == "discussion-13834-slower"]
    assert {"NVIDIA H200", "NVIDIA H100 80GB HBM3"} <= set(lines["hardware"])
    h100 = lines.set_index("hardware").loc["NVIDIA H100 80GB HBM3"]
    assert h100["re_measured"] and h100["runs_per_side"] >= 3 and h100["band_pct"] >= h100["spread_pct"]
    assert export.groupby("claim_id")["hardware"].nunique().max() == lines["hardware"].nunique()  # no GPU twice


@pytest.mark.recorded_data
def test_no_verdict_leads_on_fewer_runs_than_another_gpu_has(ledger: pd.DataFrame) -> None:
    """Each claim's first line is its headline, on the GPU with the most clean runs a side (a tie: the reference)."""
    export = claims_ledger.ledger_export(ledger)
    assert export.groupby("claim_id", sort=False)["headline"].sum().eq(1).all()
    assert export.drop_duplicates("claim_id")["headline"].all()  # the headline line comes first
    runs = export["runs_per_side"].astype("float").fillna(-1)
    for _, lines in export.assign(runs=runs).groupby("claim_id"):
        lead = lines[lines["headline"]].iloc[0]
        assert lead["runs"] == lines["runs"].max(), lines
        tied = lines[lines["runs"] == lead["runs"]]["hardware"]
        assert len(tied) == 1 or lead["hardware"] == "NVIDIA H200" or "NVIDIA H200" not in set(tied), lines
    lead = claims_ledger.headline_lines(ledger)
    assert lead["claim"].is_unique and len(lead) == ledger["claim"].nunique()


def test_the_ledger_and_its_export_speak_the_one_verdict_vocabulary(ledger: pd.DataFrame) -> None:
    words = {str(v) for v in claims_verdict.Verdict}
    exported = claims_ledger.ledger_export(ledger)["verdict"]
    assert set(ledger["verdict"]) <= words and set(exported) <= words
    assert set(ledger["model_verdict"]) - {""} <= words


def test_the_export_states_the_runs_a_side_beside_the_verdict() -> None:
    ledger = pd.DataFrame(
        {
            "claim": ["a", "a", "c", "d"],
            "min_clean_repeats": [3, 1, None, None],
            "verdict": ["reproduced", "reproduced", "model only", "direction only"],
            "points": [2, 1, 0, 0],
            "hardware": ["G", "H", "", ""],
            "spread_pct": [2.0, 0.0, None, None],
            "band_pct": [5.0, 5.0, None, None],
            "deciding_part": ["quick", "quick", "", ""],
            "headline": [True, False, True, True],
        }
    )
    export = claims_ledger.ledger_export(ledger)
    assert list(export.columns) == claims_ledger.EXPORT_COLUMNS
    assert export["deciding_part"].tolist() == ["quick", "quick", "", ""]
    assert export["verdict"].tolist() == ["reproduced", "reproduced", "model only", "direction only"]
    assert export["runs_per_side"].tolist()[:2] == [3, 1] and export["runs_per_side"].iloc[2:].isna().all()
    assert export["headline"].tolist() == [True, False, True, True]
    assert export["re_measured"].tolist()[:2] == [True, False] and export["re_measured"].iloc[2:].isna().all()
    text = export.to_csv(index=False)
    assert "not re-measured" not in text and "not counted" not in text


def test_a_result_counts_the_fewest_runs_of_a_side() -> None:
    def pairs(runs: int) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "gpu_name": ["G"],
                "baseline_runs": [3],
                "speculative_runs": [runs],
                "baseline_spread_pct": [1.0],
                "speculative_spread_pct": [2.0],
                "band_pct": [5.0],
            }
        )

    once = claims_claim.CheckResult("p", "m", V.REPRODUCED, rows=1, pairs=pairs(1))
    thrice = claims_claim.CheckResult("p", "m", V.REPRODUCED, rows=1, pairs=pairs(3))
    uncounted = claims_claim.CheckResult("p", "m", V.DIRECTION_ONLY, rows=1)
    assert (once.fewest_runs, once.re_measured) == (1, False) and (thrice.fewest_runs, thrice.re_measured) == (3, True)
    assert uncounted.fewest_runs is None and uncounted.re_measured is None


def test_the_ledger_page_marks_single_runs_and_states_their_noise() -> None:
    base = {
        "case": "c",
        "text": "t",
        "sources": "s",
        "source_urls": "https://example.org/x",
        "source_kind": "primary",
        "published": "p",
        "measured": "m",
        "not_started": [],
        "rows": 2,
        "model_says": "",
        "model_verdict": "",
    }
    ledger = pd.DataFrame(
        [
            {
                **base,
                "claim": "once",
                "verdict": "reproduced",
                "points": 2,
                "hardware": "G",
                "min_clean_repeats": 1,
                "spread_pct": 0.0,
                "band_pct": 5.0,
                "deciding_part": "quick",
                "headline": True,
            },
            {
                **base,
                "claim": "thrice",
                "verdict": "reproduced",
                "points": 1,
                "hardware": "G",
                "min_clean_repeats": 3,
                "spread_pct": 7.5,
                "band_pct": 7.5,
                "deciding_part": "",
                "headline": True,
            },
            {
                **base,
                "claim": "uncounted",
                "verdict": "direction only",
                "points": 0,
                "hardware": "",
                "min_clean_repeats": None,
                "spread_pct": None,
                "band_pct": None,
                "deciding_part": "",
                "headline": True,
            },
        ]
    )
    text = ledger_markdown(ledger)
    assert (
        text.count("*Re-measure:*") == 1
        and "`vllm-playbooks run --case c --gpus 0 --part quick` measures again the points" in text
    )
    assert "| **reproduced** | G, 1 run a side |" in text and "| **reproduced** | G, 3 runs a side |" in text
    assert ":::{dropdown} once: reproduced (G, 1 run a side)" in text and "not re-measured" not in text
    assert "| **direction only** | runs not counted |" in text
    assert (
        "2 compared points on G; the fewest clean runs of a point: 1; no spread yet (single runs); band 5.0 %" in text
    )
    assert "1 compared point on G; the fewest clean runs of a point: 3; widest spread 7.5 %; band 7.5 %" in text


def test_noise_of_takes_the_fewest_runs_and_the_widest_spread() -> None:
    pairs = pd.DataFrame(
        {
            "gpu_name": ["G", "G"],
            "baseline_runs": [3, 2],
            "speculative_runs": [4, 3],
            "baseline_spread_pct": [1.0, 8.0],
            "speculative_spread_pct": [2.0, 3.0],
            "band_pct": [5.0, 8.0],
        }
    )
    assert claims_claim.noise_of(pairs) == {
        "hardware": "G",
        "points": 2,
        "min_clean_repeats": 2,
        "spread_pct": 8.0,
        "band_pct": 8.0,
    }
    assert claims_claim.noise_of(None)["points"] == 0


def test_acceptance_bands_judge_an_open_loop_by_its_tpot(claims, published) -> None:  # type: ignore[no-untyped-def]
    """At a request rate the offered load sets the throughput: the speed-up is the TPOT's (here 1.5× faster at an
    acceptance of 0.8, a gain as the band expects), even though output throughput did not move."""
    off = _row("any", "off", None, 100.0, request_rate_qps=2.0, tpot_mean_ms=15.0)
    spec = _row(
        "any",
        "spec",
        None,
        100.0,
        request_rate_qps=2.0,
        tpot_mean_ms=10.0,
        k=4,
        acceptance_rate=0.8,
        mean_acceptance_length=4.2,
        draft_model="llama-3.2-1b",
    )
    result = CHECKS["acceptance_bands"](claims["rule-acceptance-bands"], _evidence(published, "any", [off, spec]))
    assert result.verdict is V.REPRODUCED and result.rows == 1
    slower = {**spec, "tpot_mean_ms": 16.5}  # a loss at 0.8: against the band
    result = CHECKS["acceptance_bands"](claims["rule-acceptance-bands"], _evidence(published, "any", [off, slower]))
    assert result.verdict is V.NOT_REPRODUCED and "2 QPS" in result.measured


def test_the_pages_name_the_engines_that_did_not_start_after_what_was_measured() -> None:
    assert measured_words("m", []) == "m"
    assert measured_words("m", ["a", "b"]) == "m; did not start on this GPU: a, b"
    assert measured_words("", ["a"]) == "did not start on this GPU: a"
