"""The page figures draw from tidy tables and say 'not measured yet' instead of failing on an empty one."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from vllm_playbooks.book import plots


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


def test_a_metric_without_rows_among_those_chosen_says_so() -> None:
    ax = plots.metric_vs_load(pd.DataFrame(columns=["concurrency", "step_off_ms", "model_shape"]), "step_off_ms")
    assert "no rows among those chosen" in _texts(ax)


def test_measured_curves_are_drawn() -> None:
    table = pd.DataFrame(
        {"engine_label": ["a", "a"], "request_rate_qps": [1.0, 2.0], "concurrency": [None, None], "speedup": [1.5, 1.2]}
    )
    ax = plots.speedup_vs_load(table)
    assert len(ax.lines) >= 2 and ax.get_xlabel().startswith("request rate")
    assert "not measured yet" in _texts(plots.speedup_vs_load(table, x="concurrency"))  # no closed-loop rows
    closed = table.assign(request_rate_qps=[None, None], concurrency=[1.0, 4.0])
    assert plots.speedup_vs_load(closed, x="concurrency").get_xlabel().startswith("concurrent requests")
    gains = pd.DataFrame({"engine_label": ["a", "a"], "concurrency": [1, 4], "gain_pct": [10.0, 5.0]})
    ax = plots.gain_vs_concurrency(gains, "chat")
    ax.figure.canvas.draw()
    box = ax.get_legend().get_window_extent().transformed(ax.transAxes.inverted())
    label = ax.xaxis.label.get_window_extent().transformed(ax.transAxes.inverted())
    assert ax.get_title() == "chat" and box.y1 < label.y0 and abs(box.x0 + box.x1 - 1) < 0.1  # under the x label


def test_a_config_keeps_its_colour_in_every_panel() -> None:
    import matplotlib.pyplot as plt

    chat = pd.DataFrame(
        {
            "engine_label": ["k2", "k2", "k4", "k4", "k5", "k5"],
            "concurrency": [1, 4] * 3,
            "gain_pct": [10.0, 5.0, 12.0, 6.0, 14.0, 7.0],
        }
    )
    swe = chat[chat.engine_label != "k4"]  # without k4, seaborn alone would give k5 k4's colour
    colors = plots.page_colors(chat["engine_label"])
    assert list(colors) == ["k2", "k4", "k5"] and len(set(colors.values())) == 3
    _, axes = plt.subplots(1, 2)
    for ax, gains in zip(axes, [chat, swe], strict=True):
        plots.gain_vs_concurrency(gains, "p", ax=ax, palette=colors)
    drawn = [
        {
            text.get_text(): handle.get_color()
            for text, handle in zip(ax.get_legend().get_texts(), ax.get_legend().legend_handles, strict=True)
        }
        for ax in axes
    ]
    assert drawn[1]["k5"] == drawn[0]["k5"] == colors["k5"] and "k4" not in drawn[1]
    assert drawn[0]["k4"] != drawn[1]["k5"]


def test_theory_figures() -> None:
    implied = pd.DataFrame({"source": ["x", "x"], "implied_c": [0.03, 0.06]})
    predicted = pd.DataFrame({"config": ["r", "r"], "batch": [1, 8], "c": [0.2, 0.1]})
    ax = plots.speedup_vs_cost_ratio(1.85, implied, predicted)
    assert ax.lines[0].get_ydata()[0] == pytest.approx(1.85) and len(ax.collections) >= 2
    frame = pd.DataFrame({"config": ["r", "r"], "batch": [1, 8], "speedup": [1.1, 1.5]})
    assert plots.predicted_vs_batch(frame).get_xscale() == "log"


def test_measured_metric_needs_rows_with_its_load() -> None:
    rows = pd.DataFrame(
        {"engine_label": ["a"], "concurrency": [None], "request_rate_qps": [1.0], "tpot_mean_ms": [5.0]}
    )
    assert "not measured yet" in _texts(plots.measured_metric(rows, "tpot_mean_ms"))
    assert plots.measured_metric(rows, "tpot_mean_ms", x="request_rate_qps").get_ylabel() == "TPOT mean (ms)"


def test_predicted_vs_logged_has_one_readable_row_per_config() -> None:
    table = pd.DataFrame(
        {
            "case": ["a", "a", "b"],
            "engine_label": ["x", "y", "x"],
            "kv_tokens_vllm": [100, 200, 300],
            "kv_tokens_ours": [110, 190, 300],
        }
    )
    ax = plots.predicted_vs_logged(table)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a · x", "a · y", "b · x"]
    assert ax.get_xlabel() == "KV-cache size (tokens)" and len(ax.patches) >= 6


def _sweep(labels: int) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"engine_label": f"cfg-{i}", "concurrency": c, "output_tok_s": 10.0 * i + c, "tpot_p50_ms": c + i}
            for i in range(labels)
            for c in (1, 8, 64)
        ]
    )


def test_one_legend_beside_a_grid_of_the_same_configs() -> None:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2)
    for ax, metric in zip(axes, ["output_tok_s", "tpot_p50_ms"]):
        plots.metric_vs_load(_sweep(11), metric, ax=ax)
    fig.tight_layout()
    plots.legend_beside(fig)
    assert all(ax.get_legend() is None for ax in axes)
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [f"cfg-{i}" for i in range(11)]
    assert legend.get_title().get_text() == "configuration"  # the column's name in words
    fig.canvas.draw()
    box = legend.get_window_extent().transformed(fig.transFigure.inverted())
    assert box.x0 >= 1.0  # right of the axes, over none of the lines


def test_a_single_plots_legend_moves_beside_it() -> None:
    ax = plots.change_vs_load(_sweep(5).assign(change_pct=lambda d: d["output_tok_s"] - 40.0, metric="output_tok_s"))
    plots.legend_beside(ax)
    legend = ax.get_legend()
    assert len(legend.get_texts()) == 5
    assert (ax.get_title(), ax.get_ylabel()) == ("output throughput (tok/s)", "change vs no speculation (%)")
    ax.figure.canvas.draw()
    assert legend.get_window_extent().x0 > ax.get_window_extent().x1


def test_a_change_plot_of_many_lines_becomes_small_multiples_with_the_noise_band() -> None:
    from vllm_playbooks.book.figure_record import panel_series

    sweep = _sweep(11).assign(change_pct=lambda d: d["output_tok_s"] - 40.0, metric="output_tok_s", band_pct=7.5)
    ax = plots.change_vs_load(sweep)
    panels = ax.figure.axes
    assert [panel_series(panel) for panel in panels] == [6, 5]
    band = [c for c in ax.collections if c.get_label() == "_noise band"]
    assert len(band) == 1 and band[0].get_paths()[0].get_extents().y0 == pytest.approx(-7.5)
    assert "noise band" in ax.get_title()


def test_series_groups_are_as_few_and_even_as_possible() -> None:
    assert plots.series_groups([f"s{i}" for i in range(12)]) == [
        [f"s{i}" for i in range(6)],
        [f"s{i}" for i in range(6, 12)],
    ]
    assert [len(g) for g in plots.series_groups([f"s{i}" for i in range(13)])] == [5, 5, 3]
    assert plots.series_groups(["a", "b", "a"]) == [["a", "b"]]


def test_crowded_log2_ticks_lose_a_label_not_overlap() -> None:
    assert plots.spaced_labels([1, 2, 4, 128, 200]) == ["1", "2", "4", "", "200"]
    assert plots.spaced_labels([16, 32, 64, 128, 256]) == ["16", "32", "64", "128", "256"]


def test_a_metric_grid_draws_a_panel_per_metric_with_one_legend_beside() -> None:
    sweep = _sweep(3).assign(tpot_p99_ms=lambda d: d["output_tok_s"] / 10, itl_p99_ms=lambda d: d["output_tok_s"] / 5)
    fig = plots.metric_grid(sweep, ["output_tok_s", "tpot_p99_ms", "itl_p99_ms"], ncols=2)
    drawn = [ax for ax in fig.axes if ax.axison]
    assert [ax.get_ylabel() for ax in drawn] == [plots.LABELS[m] for m in ("output_tok_s", "tpot_p99_ms", "itl_p99_ms")]
    assert len(fig.axes) == 4 and not fig.axes[3].axison  # the grid's fourth cell is left blank
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["cfg-0", "cfg-1", "cfg-2"]
    empty = plots.metric_grid(sweep.iloc[0:0], ["output_tok_s"])
    assert "not measured in this run" in _texts(empty.axes[0]) and not empty.legends


def test_a_config_keeps_its_colour_across_the_figures_of_a_page() -> None:
    plots.use_book_style()  # a new page: colours start afresh
    first = plots.page_colors(["b", "a"])
    later = plots.page_colors(["c", "b"])  # a later figure of the same page, with a config the first lacked
    assert later["b"] == first["b"] and later["c"] not in first.values()
    rows = pd.DataFrame({"engine_label": ["c", "c"], "concurrency": [1, 4], "output_tok_s": [1.0, 2.0]})
    ax = plots.metric_vs_load(rows, "output_tok_s")
    from matplotlib.colors import to_rgb

    assert to_rgb(ax.get_lines()[0].get_color()) == pytest.approx(later["c"])
    plots.use_book_style()
    assert plots.page_colors(["c"])["c"] == first["a"]  # the next page starts with the palette's first colour


def test_the_legend_sits_beside_the_data() -> None:
    rows = pd.DataFrame(
        {"engine_label": ["a", "a", "b", "b"], "concurrency": [1, 4, 1, 4], "output_tok_s": [1.0, 2.0, 1.5, 2.5]}
    )
    ax = plots.metric_vs_load(rows, "output_tok_s")
    ax.figure.canvas.draw()
    box = ax.get_legend().get_window_extent().transformed(ax.transAxes.inverted())
    assert box.x0 > 1.0  # right of the axes, over no line


def test_a_grid_keeps_its_panels_wide() -> None:
    fig = plots.metric_grid(_sweep(6), ["output_tok_s", "tpot_p50_ms"])
    assert all(ax.get_position().width > 0.3 for ax in fig.axes)  # the legend sits beside the grid, not in it
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)


def test_a_grid_of_many_lines_gets_a_row_per_group_each_with_its_legend() -> None:
    from vllm_playbooks.book.figure_record import panel_series

    fig = plots.metric_grid(_sweep(11), ["output_tok_s", "tpot_p50_ms"])
    assert len(fig.axes) == 4 and [panel_series(ax) for ax in fig.axes] == [6, 6, 5, 5]
    legends = [ax.get_legend() for ax in fig.axes]
    assert legends[0] is None and legends[2] is None
    assert [len(legends[i].get_texts()) for i in (1, 3)] == [6, 5]
