"""The cross-check page's text: the Markdown table of every case, the differences grouped by kind, and the messages
shortened for a table cell."""

from __future__ import annotations

import pandas as pd
import pytest

from vllm_playbooks.book.crosscheck_page import (
    agreement_notes_markdown,
    disagreements_markdown,
    provenance_markdown,
    shorten_message,
    table_markdown,
)
from vllm_playbooks.run.crosscheck import AGREEMENT_NOTES, EXPLANATIONS, comparison_table, load_provenance, load_record


@pytest.fixture(scope="module")
def record() -> pd.DataFrame:
    return load_record()


def test_the_page_tables(record: pd.DataFrame) -> None:
    table = comparison_table(record)
    full = table_markdown(table)
    assert full.count("\n") == len(table) + 1 and full.count("**no**") == int((~table["agree"]).sum())
    prose = disagreements_markdown(table)
    for label in EXPLANATIONS:
        assert f"`{label}`" in prose
    assert "**stricter by design** (3 cases)" in prose
    # flags are code (not typeset as dashes), a message's own code spans stay code, and its underscores are not emphasis
    flagged = disagreements_markdown(
        table.assign(ours="accepted", ours_warnings="refuses an explicit --async-scheduling")
    )
    assert "an explicit `--async-scheduling`" in flagged
    assert "but `num_speculative_tokens` was not provided" in full
    assert "synthetic\\_acceptance\\_\\* needs" in full


def test_messages_are_shortened_for_the_table() -> None:
    ours = 'Bad speculative_config {"method": "ngram", "x": [1]}: prompt_lookup_min (5) > prompt_lookup_max (2)'
    assert shorten_message(ours) == "prompt_lookup_min (5) > prompt_lookup_max (2)"
    assert shorten_message("ValidationError: Value error, bad") == "ValidationError: bad"
    assert shorten_message("x" * 200, width=20) == "x" * 19 + "…"


def test_the_provenance_paragraph_names_the_recording(record: pd.DataFrame) -> None:
    provenance = load_provenance()
    text = provenance_markdown(provenance, record)
    assert f"The {len(record)} cases" in text and f"**{provenance.vllm_version}**" in text
    assert f"`{provenance.git_sha[:7]}`" in text and f"**{provenance.collected_at[:10]}**" in text


def test_the_agreement_notes_name_each_noted_case(record: pd.DataFrame) -> None:
    text = agreement_notes_markdown(comparison_table(record))
    noted = set(AGREEMENT_NOTES) & set(record.loc[record["agree"], "label"])
    assert all(f"`{label}`" in text for label in noted)
    assert text.count("**`") == len(noted)
