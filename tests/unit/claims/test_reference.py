"""The published numbers: every row sourced, the secondary-only flag honest, the cases' key numbers present."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pandas as pd
import pytest

from vllm_playbooks.cases import deepseek_mtp, gpt_oss_eagle3
from vllm_playbooks.claims import reference
from vllm_playbooks.errors import SchemaError
from vllm_playbooks.results.schema import PUBLISHED_COLUMNS
from vllm_playbooks.results.store import load_reference

BLOG = "juhoplayground.github.io"


@pytest.fixture(scope="module")
def published():  # type: ignore[no-untyped-def]
    return load_reference()


def test_every_case_has_published_numbers(published) -> None:  # type: ignore[no-untyped-def]
    assert set(published.case) == {"discussion-13834", "deepseek-mtp", "gpt-oss-eagle3", "pp-27462", "rules-of-thumb"}


def test_the_collecting_blog_is_never_marked_primary(published) -> None:  # type: ignore[no-untyped-def]
    from_blog = published[published.source_url.str.contains(BLOG)]
    assert len(from_blog) > 0
    assert from_blog.secondary_only.all()


@pytest.mark.parametrize(
    ("case", "claim_id", "value"),
    [
        ("discussion-13834", "output-tok-s-spec-off", 95.43),
        ("discussion-13834", "output-tok-s-spec-on", 68.19),
        ("discussion-13834", "itl-ms-spec-on", 2298.34),
    ],
)
def test_key_numbers_are_as_published(  # type: ignore[no-untyped-def]
    published, case: str, claim_id: str, value: float
) -> None:
    row = published[(published.case == case) & (published.claim_id == claim_id)]
    assert row.value.tolist() == [value]


def test_pr_12755_qps1_speedup_matches_its_tpots(published) -> None:  # type: ignore[no-untyped-def]
    mtp = published[(published.case == "deepseek-mtp") & published.source_url.str.contains("pull/12755")]
    tpots = mtp[mtp.quantity == "tpot_ms"].value.tolist()
    assert 55.47 in tpots and 33.99 in tpots
    assert round(55.47 / 33.99, 2) == 1.63


def _copy_with(tmp_path: Path, **changes: str) -> Path:
    """The #13834 case's published numbers with the first row changed, in a folder named as that case's."""
    source = Path(__file__).resolve().parents[3] / "vllm_playbooks" / "cases" / "discussion_13834" / "published.csv"
    rows = list(csv.DictReader(source.open()))
    rows[0].update(changes)
    target = tmp_path / "discussion_13834" / "published.csv"
    target.parent.mkdir(parents=True)
    with target.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=PUBLISHED_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return target


def test_row_without_url_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="row 1.*source_url"):
        load_reference(path=_copy_with(tmp_path, source_url="see the blog"))


def test_secondary_flag_must_be_a_boolean(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="secondary_only"):
        load_reference(path=_copy_with(tmp_path, secondary_only="maybe"))


def test_duplicate_claim_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="appears twice"):
        load_reference(path=_copy_with(tmp_path, claim_id="output-tok-s-spec-on"))


def test_load_profiles_and_imposed_acceptance_follow_from_their_sources(  # type: ignore[no-untyped-def]
    published,
) -> None:

    assert gpt_oss_eagle3.chat_profile(published) == (230, 203)  # 229711 / 1000 and 203068 / 1000 tokens
    assert gpt_oss_eagle3.long_profile(published) == (13000, 203)
    assert gpt_oss_eagle3.eagle3_rates(published) == [0.7165, 0.512, 0.3337]
    assert gpt_oss_eagle3.eagle3_alpha(published) == 0.71
    assert deepseek_mtp.mtp_later_conditional(published) == pytest.approx(0.6286, abs=1e-4)


def test_published_mtp_speedups_imply_small_draft_costs(published) -> None:  # type: ignore[no-untyped-def]

    implied = deepseek_mtp.implied_mtp(published)
    assert len(implied) == 4
    report = implied[implied.source.str.startswith("DeepSeek")].implied_c
    pr = implied[implied.source.str.contains("12755")].implied_c
    assert report.min() == pytest.approx(0.0278, abs=1e-4) and report.max() == pytest.approx(0.0556, abs=1e-4)
    assert 0.11 < pr.min() < pr.max() < 0.12


def test_claims_table_leaves_out_the_sources_of_settings(published) -> None:  # type: ignore[no-untyped-def]

    eagle = published[published.case == "gpt-oss-eagle3"]
    table = reference.claims_table(eagle, ("sharegpt-", "swebench-", "vllm-test-", "pr42764-"))
    assert "max-concurrency-with-gain" in set(table.claim_id) and not table.claim_id.str.startswith("sharegpt").any()
    assert list(table.columns) == ["claim_id", "setting", "value", "unit", "secondary_only", "source_url"]


def test_published_row_in_words(published) -> None:  # type: ignore[no-untyped-def]
    from vllm_playbooks.errors import SchemaError

    text = reference.published_row(published, "nebius-original-mtp-acceptance-length-t0")
    assert text.startswith("nebius-original-mtp-acceptance-length-t0: 3.2 tokens (DeepSeek-V3-0324")
    assert text.endswith("https://huggingface.co/nebius/MTP-DeepSeek-V3-0324)")
    with pytest.raises(SchemaError):
        reference.published_row(published, "nope")


def test_pr12755_table_beside_ours_at_the_same_rates() -> None:
    published = load_reference("deepseek-mtp")
    base = {"model_shape": "deepseek-v3-reduced", "concurrency": None}
    rows = pd.DataFrame(
        [
            {
                **base,
                "engine_label": "spec-off",
                "spec_method": "none",
                "request_rate_qps": 1.0,
                "tpot_mean_ms": 30.0,
                "acceptance_rate": None,
            },
            {
                **base,
                "engine_label": "mtp-k1-a0.85",
                "spec_method": "mtp",
                "request_rate_qps": 1.0,
                "tpot_mean_ms": 15.0,
                "acceptance_rate": 0.85,
            },
            {
                **base,
                "engine_label": "mtp-k1-a0.85",
                "spec_method": "mtp",
                "request_rate_qps": 8.0,
                "tpot_mean_ms": 25.0,
                "acceptance_rate": 0.86,
            },  # its baseline is missing (say, it stalled): no speed-up at 8 QPS
            {
                **base,
                "engine_label": "spec-off",
                "spec_method": "none",
                "request_rate_qps": None,
                "tpot_mean_ms": 9.0,
                "acceptance_rate": None,
                "concurrency": 4,
            },  # closed loop: not a Poisson row
        ]
    )
    table = deepseek_mtp.mtp_beside_pr(published, rows).set_index("request_rate_qps")
    assert list(table.index) == [1.0, 2.0, 4.0, 6.0, 8.0]  # every rate the PR published
    assert table.loc[1.0, ["pr_tpot_off_ms", "pr_tpot_mtp_ms", "pr_speedup"]].tolist() == [55.47, 33.99, 1.63]
    assert table.loc[1.0, ["ours_tpot_off_ms", "ours_tpot_mtp_ms", "ours_speedup"]].tolist() == [30.0, 15.0, 2.0]
    assert table.loc[1.0, "ours_acceptance_pct"] == pytest.approx(85.0)
    assert math.isnan(table.loc[8.0, "ours_speedup"]) and table.loc[8.0, "ours_tpot_mtp_ms"] == 25.0
    assert table.loc[[2.0, 4.0, 6.0], "ours_tpot_off_ms"].isna().all()


def test_source_link_names_each_source_once_in_order() -> None:
    frame = pd.DataFrame(
        {
            "claim_id": ["a-1", "a-2", "b-1"],
            "source_url": [
                "https://github.com/x/y/pull/1",
                "https://github.com/x/y/pull/1",
                "https://arxiv.org/abs/2/",
            ],
        }
    )
    assert reference.source_link(frame) == (
        "[github.com/x/y/pull/1](https://github.com/x/y/pull/1), [arxiv.org/abs/2](https://arxiv.org/abs/2/)"
    )
    assert reference.source_link(frame, ("b-",)) == "[arxiv.org/abs/2](https://arxiv.org/abs/2/)"
    with pytest.raises(SchemaError):
        reference.source_link(frame, ("c-",))
