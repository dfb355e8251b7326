"""Tables for people: headers in words, rounded numbers, no index, blanks for missing values."""

from __future__ import annotations

import pandas as pd

from vllm_playbooks.book.tables import SHOWN_ROWS, for_people, in_words, people_html, places_for, short_gpu_names


def test_a_table_for_people_has_words_rounded_numbers_and_no_index() -> None:
    frame = pd.DataFrame(
        {
            "engine_label": ["off", "k4"],
            "runs": [3, 2],
            "change_pct": [1.23456, None],
            "tok_s": [2343.6123, 1908.4],
            "hidden": [1, 2],
        }
    )
    html = for_people(
        frame,
        {"engine_label": "config", "runs": "runs", "change_pct": "change (%)", "tok_s": "output (tok/s)"},
        decimals={"tok_s": 0},
    ).to_html()
    assert "config" in html and "change (%)" in html and "hidden" not in html and "engine_label" not in html
    assert ">1.2<" in html and ">2,344<" in html and ">1,908<" in html and ">3<" in html
    assert "nan" not in html.lower() and "None" not in html
    assert 'class="row_heading' not in html  # no index column


def test_any_displayed_table_is_for_people() -> None:
    frame = pd.DataFrame(
        {
            "engine_label": ["off", "k4"],
            "tpot_p50_ms": [12.3456, None],
            "share": [0.12345, 0.5],
            "tok_s": [2343.6123, 1908.4],
            "ok": [True, False],
        }
    )
    html = people_html(frame)
    assert "engine label" in html and "tpot p50 ms" in html and "engine_label" not in html
    assert ">12.3<" in html and ">0.123<" in html and ">2,344<" in html and ">True<" in html
    assert "nan" not in html.lower() and "None" not in html and 'class="row_heading' not in html


def test_a_named_index_becomes_columns_and_long_tables_fold() -> None:
    frame = pd.DataFrame({"x": range(SHOWN_ROWS + 3)}, index=pd.Index(range(SHOWN_ROWS + 3), name="concurrency"))
    html = people_html(frame)
    assert "concurrency" in html and 'class="row_heading' not in html
    assert html.count("<table") == 2 and f"All {SHOWN_ROWS + 3} rows" in html
    assert "<details>" not in people_html(frame.head(SHOWN_ROWS))


def test_in_words_keeps_the_named_columns_in_order_in_words_and_shares_in_percent() -> None:
    frame = pd.DataFrame(
        {"case": ["a", "b"], "coverage": [0.8, 0.25], "hidden": [1, 2]}, index=pd.Index([1, 2], name="calibrated on")
    )
    shown = in_words(frame, {"coverage": "inside (%)", "case": "case"}, percent=["coverage"])
    assert list(shown.columns) == ["inside (%)", "case"] and shown["inside (%)"].tolist() == [80.0, 25.0]
    assert shown.index.name == "calibrated on" and frame["coverage"].tolist() == [0.8, 0.25]  # the input is untouched
    assert "calibrated on" in people_html(shown)


def test_row_labels_stay_and_row_numbers_go() -> None:
    labelled = pd.DataFrame({"value": [1.5, 2.5]}, index=["carried", "calibrated"])
    html = people_html(labelled)
    assert ">carried<" in html and ">calibrated<" in html and 'class="row_heading' not in html
    filtered = pd.DataFrame({"value": [1.5, 2.5, 3.5]}).iloc[[0, 2]]  # a filtered frame keeps its row numbers
    assert ">2<" not in people_html(filtered) and ">index<" not in people_html(filtered)


def test_places_follow_the_size_of_a_column() -> None:
    assert [places_for(pd.Series(v)) for v in ([150.0], [15.0], [1.5], [0.15], [float("nan")])] == [0, 1, 2, 3, 0]


def test_a_table_names_gpus_without_the_vendors_word() -> None:
    frame = pd.DataFrame(
        {
            "gpu_name": ["NVIDIA H200", "NVIDIA H100 80GB HBM3", "cpu", None],
            "runs": [3, 2, 1, 0],
            "note": ["NVIDIAN"] * 4,
        }
    )
    assert short_gpu_names(frame)["gpu_name"].tolist()[:3] == ["H200", "H100 80GB HBM3", "cpu"]
    assert short_gpu_names(frame)["note"].tolist() == ["NVIDIAN"] * 4  # only a whole "NVIDIA " prefix goes
    assert frame["gpu_name"][0] == "NVIDIA H200"  # the frame itself is left as it was
    for html in (people_html(frame), for_people(frame, {"gpu_name": "GPU", "runs": "runs"}).to_html()):
        assert ">H200<" in html and ">H100 80GB HBM3<" in html and "NVIDIA H" not in html
