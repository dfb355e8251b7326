"""Tables for people: headers in words, rounded numbers, no index, blanks for missing values."""

from __future__ import annotations

import pandas as pd

from vllm_playbooks.book.tables import for_people


def test_a_table_for_people_has_words_rounded_numbers_and_no_index() -> None:
    frame = pd.DataFrame({"engine_label": ["off", "k4"], "runs": [3, 2], "change_pct": [1.23456, None],
                          "tok_s": [2343.6123, 1908.4], "hidden": [1, 2]})  # fmt: skip
    html = for_people(frame, {"engine_label": "config", "runs": "runs", "change_pct": "change (%)",
                              "tok_s": "output (tok/s)"}, decimals={"tok_s": 0}).to_html()  # fmt: skip
    assert "config" in html and "change (%)" in html and "hidden" not in html and "engine_label" not in html
    assert ">1.2<" in html and ">2,344<" in html and ">1,908<" in html and ">3<" in html
    assert "nan" not in html.lower() and "None" not in html
    assert 'class="row_heading' not in html  # no index column
