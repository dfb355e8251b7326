"""The page figures draw from tidy tables and say 'not measured yet' instead of failing on an empty one."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from vllm_playbooks import plots  # noqa: E402


@pytest.fixture(autouse=True)
def _close():  # type: ignore[no-untyped-def]
    import matplotlib.pyplot as plt

    yield
    plt.close("all")


def _texts(ax) -> str:  # type: ignore[no-untyped-def]
    return " ".join(t.get_text() for t in ax.texts)


def test_empty_measurements_say_not_measured() -> None:
    assert "not measured yet" in _texts(plots.speedup_vs_load(pd.DataFrame()))
    assert "not measured yet" in _texts(plots.gain_vs_concurrency(pd.DataFrame(), "chat"))


def test_measured_curves_are_drawn() -> None:
    table = pd.DataFrame({"engine_label": ["a", "a"], "request_rate_qps": [1.0, 2.0], "concurrency": [None, None],
                          "speedup": [1.5, 1.2]})  # fmt: skip
    ax = plots.speedup_vs_load(table)
    assert len(ax.lines) >= 2 and ax.get_xlabel().startswith("request rate")
    assert "not measured yet" in _texts(plots.speedup_vs_load(table, x="concurrency"))  # no closed-loop rows
    closed = table.assign(request_rate_qps=[None, None], concurrency=[1.0, 4.0])
    assert plots.speedup_vs_load(closed, x="concurrency").get_xlabel().startswith("concurrent requests")
    gains = pd.DataFrame({"engine_label": ["a", "a"], "concurrency": [1, 4], "gain_pct": [10.0, 5.0]})
    ax = plots.gain_vs_concurrency(gains, "chat")
    ax.figure.canvas.draw()
    box = ax.get_legend().get_window_extent().transformed(ax.transAxes.inverted())
    assert ax.get_title() == "chat" and box.y0 < 0.1 and abs(box.x0 + box.x1 - 1) < 0.1  # bottom centre


def test_theory_figures() -> None:
    implied = pd.DataFrame({"source": ["x", "x"], "implied_c": [0.03, 0.06]})
    predicted = pd.DataFrame({"config": ["r", "r"], "batch": [1, 8], "c": [0.2, 0.1]})
    ax = plots.speedup_vs_cost_ratio(1.85, implied, predicted)
    assert ax.lines[0].get_ydata()[0] == pytest.approx(1.85) and len(ax.collections) >= 2
    frame = pd.DataFrame({"config": ["r", "r"], "batch": [1, 8], "speedup": [1.1, 1.5]})
    assert plots.predicted_vs_batch(frame).get_xscale() == "log"


def test_measured_metric_needs_rows_with_its_load() -> None:
    rows = pd.DataFrame({"engine_label": ["a"], "concurrency": [None], "request_rate_qps": [1.0], "tpot_mean_ms": [5.0]})
    assert "not measured yet" in _texts(plots.measured_metric(rows, "tpot_mean_ms"))
    assert plots.measured_metric(rows, "tpot_mean_ms", x="request_rate_qps").get_ylabel() == "TPOT mean (ms)"


def test_predicted_vs_logged_has_one_readable_row_per_config() -> None:
    table = pd.DataFrame({"case": ["a", "a", "b"], "engine_label": ["x", "y", "x"],
                          "kv_tokens_vllm": [100, 200, 300], "kv_tokens_ours": [110, 190, 300]})  # fmt: skip
    ax = plots.predicted_vs_logged(table)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a · x", "a · y", "b · x"]
    assert ax.get_xlabel() == "KV-cache size (tokens)" and len(ax.patches) >= 6
