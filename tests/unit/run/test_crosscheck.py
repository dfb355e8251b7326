"""The cross-check table: our verdicts, the argv vLLM gets, the comparison rows, and the recorded run against
vLLM 0.26 with the explanation of each difference."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from vllm_playbooks.errors import ConfigError
from vllm_playbooks.paths import data_dir
from vllm_playbooks.run.crosscheck import (
    AGREEMENT_NOTES,
    CASES,
    EXPLANATION_KINDS,
    EXPLANATIONS,
    LOG_NAME,
    RECORD_COLUMNS,
    VLLM_VERSION,
    Explanation,
    LogMismatch,
    Verdict,
    case_by_label,
    comparison_table,
    count_lines,
    count_table,
    coverage_problems,
    crosscheck_rows,
    explanation_problems,
    load_provenance,
    load_record,
    log_mismatches,
    our_verdict,
    stale_our_verdicts,
    vllm_argv,
)
from vllm_playbooks.shapes import SHAPES_DIR, get_shape, vllm_path


def test_labels_are_unique_and_the_table_covers_the_pitfalls() -> None:
    labels = [c.label for c in CASES]
    assert len(labels) == len(set(labels)) >= 35
    for pitfall in (
        "draft-tp-key",
        "draft-temperature",
        "draft-tp1-on-tp2",
        "mtp-k2",
        "mtp-on-llama",
        "eagle3-inferred",
    ):
        assert pitfall in labels


@pytest.mark.parametrize(
    ("label", "outcome", "needle"),
    [
        ("draft-ok", "accepted", ""),
        ("draft-tp-key", "refused", "tensor_parallel_size"),
        ("draft-temperature", "refused", "temperature"),
        ("draft-tp2-on-tp1", "refused", "draft_tensor_parallel_size"),
        ("draft-tp1-on-tp2", "refused", "equal to the target's tensor_parallel_size=2"),
        ("draft-long-len", "refused", "cannot be larger than the target's max_model_len=2048"),
        ("mtp-on-llama", "refused", "needs a target with MTP layers"),
        ("mtp-k1", "accepted", ""),
        ("eagle3-inferred", "accepted", ""),
    ],
)
def test_our_verdicts(label: str, outcome: str, needle: str) -> None:
    verdict = our_verdict(case_by_label(label))
    assert verdict.outcome == outcome
    assert needle in verdict.message


def test_warnings_are_kept_with_an_accepted_verdict() -> None:
    verdict = our_verdict(case_by_label("mtp-k2"))
    assert verdict.outcome == "accepted" and any("same" in w for w in verdict.warnings)


def test_vllm_gets_shape_folders_and_the_mapping_verbatim() -> None:
    argv = vllm_argv(case_by_label("draft-temperature"))
    assert argv[argv.index("--model") + 1] == str(vllm_path(get_shape("llama-3.1-8b")))
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["model"] == str(vllm_path(get_shape("llama-3.2-1b"))) and spec["temperature"] == 0.7
    assert Path(spec["model"]).resolve() == (SHAPES_DIR / "llama-3.2-1b").resolve()
    assert argv[argv.index("--load-format") + 1] == "dummy"
    ngram = json.loads(vllm_argv(case_by_label("ngram-as-model"))[-1])
    assert ngram["model"] == "[ngram]"  # not a shape: passed on as typed


def test_rows_mark_disagreement() -> None:
    cases = [case_by_label("draft-ok"), case_by_label("draft-temperature")]
    theirs = {
        "draft-ok": Verdict(outcome="refused", message="ValueError: x"),
        "draft-temperature": Verdict(outcome="refused", message="ValueError: y"),
    }
    rows = crosscheck_rows(cases, theirs)
    assert rows.set_index("label").agree.to_dict() == {"draft-ok": False, "draft-temperature": True}


def test_unknown_label_is_refused() -> None:
    with pytest.raises(ConfigError, match="no cross-check case 'nope'"):
        case_by_label("nope")


# --- the recorded cross-check (data/checks/), made on the GPU machine with vLLM 0.26 -------------------------------

RERUN = (
    "rerun `vllm-playbooks crosscheck --out data/checks` on a machine with vLLM 0.26 installed "
    "(pip install -r requirements-gpu.txt), commit the new table, and explain any new difference in EXPLANATIONS"
)


@pytest.fixture(scope="module")
def record() -> pd.DataFrame:
    return load_record()


def test_the_record_was_made_with_vllm_0_26(record: pd.DataFrame) -> None:
    provenance = load_provenance()
    assert provenance.vllm_version == VLLM_VERSION == "0.26.0"
    assert provenance.git_sha not in ("", "unknown") and not provenance.git_sha.endswith("-dirty")
    assert tuple(record.columns) == RECORD_COLUMNS


def test_the_record_covers_exactly_the_cases(record: pd.DataFrame) -> None:
    assert coverage_problems(record) == [], RERUN


def test_our_verdicts_now_are_the_recorded_ones(record: pd.DataFrame) -> None:
    stale = stale_our_verdicts(record)
    assert stale == [], f"our verdict changed since the cross-check was recorded for {stale}: {RERUN}"


def test_every_difference_is_explained_and_every_explanation_is_a_difference(record: pd.DataFrame) -> None:
    assert explanation_problems(record) == []
    assert set(record.loc[~record["agree"], "label"]) == set(EXPLANATIONS)
    assert set(AGREEMENT_NOTES) <= set(record.loc[record["agree"], "label"])


def test_an_unexplained_or_stale_entry_is_found(record: pd.DataFrame) -> None:
    flipped = record.copy()
    row = flipped["label"] == "draft-ok"
    flipped.loc[row, "vllm"], flipped.loc[row, "agree"] = "refused", False
    assert explanation_problems(flipped) == ["draft-ok: the verdicts differ and EXPLANATIONS has no entry for it"]
    with pytest.raises(ConfigError, match="draft-ok: the verdicts differ"):
        comparison_table(flipped)
    stale = {**EXPLANATIONS, "draft-eager": Explanation(kind="environment", reason="vllm/x.py")}
    assert explanation_problems(record, stale) == [
        "draft-eager: explained in EXPLANATIONS, but not a recorded difference"
    ]
    assert explanation_problems(record, notes={"draft-k-true": "x"}) == [
        "draft-k-true: noted in AGREEMENT_NOTES, but not a recorded agreement"
    ]


def test_an_agreement_where_vllm_stopped_on_a_missing_package_is_noted(record: pd.DataFrame) -> None:
    # an ImportError is the machine, not a rule: an agreement that rests on one says so on the page
    environment = record[record["agree"] & record["vllm_message"].str.startswith("ImportError")]
    assert set(environment["label"]) <= set(AGREEMENT_NOTES)


def test_each_explanation_cites_vllm_source_in_one_sentence() -> None:
    for label, explanation in EXPLANATIONS.items():
        assert re.search(r"\bvllm/[\w/]+\.py\b", explanation.reason), label
        assert explanation.reason.endswith(".") and ". " not in explanation.reason, label
    for label, note in AGREEMENT_NOTES.items():
        assert re.search(r"\bvllm/[\w/]+\.py\b", note), label


def test_a_changed_verdict_of_ours_is_found(record: pd.DataFrame) -> None:
    changed = record.copy()
    changed.loc[changed["label"] == "mtp-k2", "ours_warnings"] = ""
    changed.loc[changed["label"] == "empty", "ours"] = "accepted"
    assert stale_our_verdicts(changed) == ["mtp-k2", "empty"]


def test_the_comparison_table_and_its_counts(record: pd.DataFrame) -> None:
    table = comparison_table(record)
    assert list(table.columns) == [*RECORD_COLUMNS, "kind", "explanation"]
    differ = table[~table["agree"]]
    assert (differ["kind"] != "").all() and (differ["explanation"] != "").all()
    assert set(table.loc[table["agree"], "kind"]) == {""}
    lines = count_lines(table)
    assert lines[0] == f"cases={len(CASES)} agree={int(record['agree'].sum())} differ={len(differ)}"
    assert [line.split(":")[0] for line in lines[1:]] == list(EXPLANATION_KINDS)
    assert sum(int(line.rsplit(" ", 1)[1]) for line in lines[1:]) == len(differ)


def test_the_loader_refuses_a_record_that_does_not_add_up(tmp_path: Path, record: pd.DataFrame) -> None:
    checks = tmp_path / "checks"
    checks.mkdir()
    bad = record.copy()
    bad.loc[bad["label"] == "draft-ok", "agree"] = False
    bad.to_csv(checks / "speculative-config-crosscheck.csv", index=False)
    with pytest.raises(ConfigError, match=r"agree does not match the two outcomes in rows \['draft-ok'\]"):
        load_record(tmp_path)
    record.drop(columns=["why"]).to_csv(checks / "speculative-config-crosscheck.csv", index=False)
    with pytest.raises(ConfigError, match="columns"):
        load_record(tmp_path)
    with pytest.raises(ConfigError, match="no recorded cross-check"):
        load_record(tmp_path / "nowhere")


def test_the_record_lives_under_the_data_folder() -> None:
    assert (data_dir() / "checks" / "speculative-config-crosscheck.csv").is_file()


def test_the_record_matches_the_summary_its_run_printed(tmp_path: Path, record: pd.DataFrame) -> None:
    assert log_mismatches(record) == []
    checks = tmp_path / "checks"
    checks.mkdir()
    record.to_csv(checks / "speculative-config-crosscheck.csv", index=False)
    with pytest.raises(ConfigError, match=f"{re.escape(str(checks / LOG_NAME))} is missing"):
        log_mismatches(record, tmp_path)
    log = (data_dir() / "checks" / LOG_NAME).read_text()
    (checks / LOG_NAME).write_text(
        log.replace("draft-ok accepted accepted   True", "draft-ok accepted  refused  False")
    )
    assert log_mismatches(record, tmp_path) == [
        LogMismatch("draft-ok", ("accepted", "accepted", "True"), ("accepted", "refused", "False"))
    ]
    (checks / LOG_NAME).write_text("no table here\n")
    with pytest.raises(ConfigError, match="holds no summary table"):
        log_mismatches(record, tmp_path)


#: The inputs issue 43 names: configs vLLM 0.26 accepts that this package refused, and the silent pass.
ISSUE_43 = (
    "suffix-k32",
    "suffix-no-k",
    "mtp-no-k",
    "mtp-no-k-model",
    "draft-k17",
    "gpu-mem-1",
    "draft-slots-use-budget",
    "draft-k-true",
)


def test_the_inputs_of_issue_43_and_ten_more_are_recorded_and_agree_but_the_boolean_k(record: pd.DataFrame) -> None:
    recorded = record.set_index("label")
    assert set(ISSUE_43) <= set(recorded.index)
    own = [c.label for c in CASES][[c.label for c in CASES].index("draft-slots-one-left") :]
    assert len(own) >= 10 and set(own) <= set(recorded.index)
    for label in (*ISSUE_43, *own):
        row = recorded.loc[label]
        assert bool(row["agree"]) == (label != "draft-k-true"), (label, row["ours"], row["vllm"])
    assert recorded.loc["draft-slots-use-budget", "vllm"] == "refused"  # the silent pass, refused by both now
    assert (
        recorded.loc["draft-k-true", "vllm"] == "accepted" and EXPLANATIONS["draft-k-true"].kind == "stricter by design"
    )


def test_every_config_vllm_accepts_and_we_refuse_is_explained(record: pd.DataFrame) -> None:
    refused_by_us = record[(record["vllm"] == "accepted") & (record["ours"] == "refused")]
    assert set(refused_by_us["label"]) == set(EXPLANATIONS)
    assert not len(record[(record["vllm"] == "refused") & (record["ours"] == "accepted")])  # no silent pass left


def test_the_count_table_adds_up_and_matches_the_regression_lines(record: pd.DataFrame) -> None:
    table = comparison_table(record)
    counts = count_table(table).set_index("outcome")["cases"]
    assert counts["every case"] == len(table) == counts["the verdicts agree"] + counts["they differ"]
    assert counts[[f"they differ: {kind}" for kind in EXPLANATION_KINDS]].sum() == counts["they differ"]
    assert (
        count_lines(table)[0]
        == f"cases={len(table)} agree={counts['the verdicts agree']} differ={counts['they differ']}"
    )
