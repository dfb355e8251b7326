"""The cross-check table: our verdicts, the argv vLLM gets, and the comparison rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_playbooks.config.crosscheck import (
    CASES,
    Verdict,
    case_by_label,
    crosscheck_rows,
    our_verdict,
    vllm_argv,
)
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.shapes import SHAPES_DIR, get_shape, vllm_path


def test_labels_are_unique_and_the_table_covers_the_pitfalls() -> None:
    labels = [c.label for c in CASES]
    assert len(labels) == len(set(labels)) >= 35
    for pitfall in ("draft-tp-key", "draft-temperature", "draft-tp1-on-tp2", "mtp-k2", "mtp-on-llama", "eagle3-inferred"):
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
    theirs = {"draft-ok": Verdict(outcome="refused", message="ValueError: x"),
              "draft-temperature": Verdict(outcome="refused", message="ValueError: y")}  # fmt: skip
    rows = crosscheck_rows(cases, theirs)
    assert rows.set_index("label").agree.to_dict() == {"draft-ok": False, "draft-temperature": True}


def test_unknown_label_is_refused() -> None:
    with pytest.raises(ConfigError, match="no cross-check case 'nope'"):
        case_by_label("nope")
