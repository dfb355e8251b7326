"""Figures for the case pages: tidy frame in, matplotlib Axes out, one look for every page."""

from __future__ import annotations

from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from vllm_playbooks.analysis.runs import with_hardware_series
from vllm_playbooks.book.figure_record import record_figures

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from matplotlib.axes import Axes


#: Axis labels with units, keyed by column.
LABELS = {
    "concurrency": "concurrent requests (--max-concurrency)",
    "request_rate_qps": "request rate (QPS, Poisson)",
    "output_tok_s": "output throughput (tok/s)",
    "total_tok_s": "total throughput (tok/s)",
    "tpot_p50_ms": "TPOT median (ms)",
    "tpot_mean_ms": "TPOT mean (ms)",
    "tpot_p99_ms": "TPOT p99 (ms)",
    "itl_p50_ms": "ITL median (ms, per streamed chunk)",
    "itl_p99_ms": "ITL p99 (ms, per streamed chunk)",
    "ttft_p50_ms": "TTFT median (ms)",
    "e2el_p50_ms": "end-to-end latency median (ms)",
    "change_pct": "change vs no speculation (%)",
    "mean_acceptance_length": "mean acceptance length (tokens/step)",
    "max_num_seqs": "--max-num-seqs",
    "output_tok_s_per_gpu": "output throughput per GPU (tok/s)",
    "predicted_output_tok_s": "predicted output throughput (tok/s)",
    "predicted_tok_s_per_gpu": "predicted output throughput per GPU (tok/s)",
    "util_mean_pct": "GPU utilisation, mean of samples (%)",
    "below_threshold_frac": "share of samples below the busy threshold",
    "power_mean_w": "GPU power, mean (W)",
    "speedup": "TPOT speed-up vs no speculation (×)",
    "gain_pct": "gain vs no speculation (%)",
    "batch": "sequences decoding at once",
    "step_off_ms": "engine step without speculation (ms)",
    "added_ms": "time speculation adds to a step (ms)",
    "added_share": "added time / step without speculation",
}


#: Legend titles in words for the columns a legend is drawn from.
LEGEND_TITLES = {"engine_label": "configuration", "model_shape": "model shape"}


#: Scales seaborn's notebook fonts so that a two-panel figure, shrunk to the page's column at a 1400 px window, keeps
#: its text at 10 px or more.
FONT_SCALE = 1.3


#: The width of one panel of a row of small multiples, in inches: three of them and a legend beside stay under the
#: width at which a page's column (about 770 px) shrinks the figure's smallest text below 10 px.
PANEL_WIDTH_IN = 3.8


#: The most series one panel draws; more are split into small multiples (``series_groups``), as the site check asks.
MAX_SERIES = 6


#: The colour each config got on this page so far (``page_colors``): one colour per config across every figure.
_PAGE_COLORS: dict[str, tuple[float, float, float]] = {}


def use_book_style() -> None:
    """The one seaborn theme of the book (fonts scaled by ``FONT_SCALE``), a fresh colour per config for this page
    (``page_colors``), and figures saved with the record the site check reads (``figure_record.record_figures``)."""
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind", font_scale=FONT_SCALE)
    _PAGE_COLORS.clear()
    record_figures()


def page_colors(labels: Iterable[str]) -> dict[str, tuple[float, float, float]]:
    """The colour of each label on this page: a label keeps the colour it got the first time any figure of the page
    drew it; new labels take the palette's next colours, in sorted order (cycling past the palette's end)."""
    palette = sns.color_palette("colorblind", n_colors=10)
    for name in sorted(set(labels) - set(_PAGE_COLORS)):
        _PAGE_COLORS[name] = palette[len(_PAGE_COLORS) % len(palette)]
    return {name: _PAGE_COLORS[name] for name in sorted(set(labels))}


def metric_vs_load(
    df: pd.DataFrame,
    y: str,
    x: str = "concurrency",
    hue: str = "engine_label",
    ax: Axes | None = None,
    palette: Mapping[str, tuple[float, float, float]] | None = None,
) -> Axes:
    """``y`` against the load level, one line per ``hue`` (coloured by ``palette`` when given, e.g. ``page_colors``;
    configs by ``page_colors`` otherwise), the legend beside the axes; log-2 x axis for concurrency sweeps. An empty
    ``df`` gives an axes that says it has no rows."""
    ax = ax or plt.subplots(figsize=(6.4, 4.0))[1]
    if df.empty:  # the rows a page's parameters chose (a part of the grid) hold none for this figure
        ax.text(0.5, 0.5, "no rows among those chosen", ha="center", va="center", transform=ax.transAxes)
        ax.set_ylabel(LABELS.get(y, y))
        return ax
    present = set(df[hue])
    hue_order = [name for name in palette if name in present] if palette is not None else None
    if palette is None and hue == "engine_label":  # the page's colours, the configs in the rows' order
        palette, hue_order = page_colors(df[hue]), list(dict.fromkeys(df[hue]))
    sns.lineplot(data=df, x=x, y=y, hue=hue, hue_order=hue_order, palette=palette, marker="o", ax=ax, errorbar=None)
    legend_beside(ax)
    if x == "concurrency":
        log2_ticks(ax, df[x])
    ax.set_xlabel(LABELS.get(x, x))
    ax.set_ylabel(LABELS.get(y, y))
    return ax


def legend_beside(target: Axes | Figure) -> None:
    """Put the legend beside the plot instead of over its lines (the pages' sweeps draw a dozen configs).

    For one ``Axes``, its legend moves to the right of it. For a ``Figure`` of several axes that share their hues (a
    grid of metrics of the same configs), the first legend found becomes one legend at the figure's right and every
    axes' own legend is removed. Call it after ``Figure.tight_layout``: the saved image grows to hold the legend.
    """
    if not isinstance(target, Figure):
        if target.get_legend() is not None:
            title = target.get_legend().get_title().get_text()
            sns.move_legend(
                target, "upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title=LEGEND_TITLES.get(title, title)
            )
        return
    legends = [(ax, ax.get_legend()) for ax in target.axes if ax.get_legend() is not None]
    if not legends:
        return
    first_ax, first = legends[0]
    handles, labels = first_ax.get_legend_handles_labels()
    title = first.get_title().get_text()
    for _, legend in legends:
        legend.remove()
    target.legend(handles, labels, title=title, loc="upper left", bbox_to_anchor=(1.0, 0.98), frameon=False)


def series_groups(labels: Sequence[str], size: int = MAX_SERIES) -> list[list[str]]:
    """``labels`` (distinct, in their order) split into as few consecutive groups of at most ``size`` as possible, of
    sizes that differ by one at most: the panels of small multiples."""
    names = list(dict.fromkeys(labels))
    count = -(-len(names) // size) or 1
    width = -(-len(names) // count)
    return [names[i : i + width] for i in range(0, len(names), width)] or [[]]


def _legends_per_row(axes: Sequence[Sequence[Axes]]) -> None:
    """Small multiples: each row keeps one legend, beside its last panel."""
    for row in axes:
        for ax in row[:-1]:
            if ax.get_legend() is not None:
                ax.get_legend().remove()
        legend_beside(row[-1])


def metric_grid(df: pd.DataFrame, metrics: Sequence[str], ncols: int | None = None) -> Figure:
    """One panel per metric against concurrency, the configs of ``df`` as lines (one per config and GPU where the
    rows come from several), with one legend beside the grid (``legend_beside``). More than ``MAX_SERIES`` lines
    become small multiples: one row of panels per group of them (``series_groups``), each row with its legend. With
    no rows (a run of other configs), one panel says so instead of failing."""
    if df.empty:
        fig, ax = plt.subplots(figsize=(6.4, 2.0))
        ax.text(0.5, 0.5, "not measured in this run", ha="center", va="center")
        ax.set_axis_off()
        return fig
    series = with_hardware_series(df)
    groups = series_groups(series["series"])
    if len(groups) > 1:
        palette = page_colors(series["series"])
        fig, axes = plt.subplots(
            len(groups),
            len(metrics),
            figsize=(PANEL_WIDTH_IN * len(metrics), 3.4 * len(groups)),
            squeeze=False,
            sharex=True,
        )
        for row, group in zip(axes, groups, strict=True):
            for ax, metric in zip(row, metrics, strict=True):
                metric_vs_load(series[series["series"].isin(group)], metric, hue="series", ax=ax, palette=palette)
        _legends_per_row(axes)
        fig.tight_layout()
        return fig
    ncols = ncols or len(metrics)
    nrows = -(-len(metrics) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(PANEL_WIDTH_IN * ncols, 3.6 * nrows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics, strict=False):
        metric_vs_load(series, metric, hue="series", ax=ax)
    for ax in axes.flat[len(metrics) :]:
        ax.set_axis_off()
    legend_beside(fig)  # first: the axes' own legends would squeeze the panels in tight_layout
    fig.tight_layout()
    return fig


def change_vs_load(comparison: pd.DataFrame, x: str = "concurrency", ax: Axes | None = None) -> Axes:
    """Percent change of speculation against the baseline per load level, with the break-even line at 0 and the noise
    band shaded around it (``band_pct``, the widest of the load's pairs): a point inside it is no change.

    With no pair to compare (only one side measured so far) the axes say so instead of drawing a line. Without ``ax``
    and with more than ``MAX_SERIES`` lines, the figure gets one panel per group of lines (small multiples, stacked)
    and the first panel is returned.
    """
    if comparison.empty:
        ax = ax or plt.subplots(figsize=(6.4, 4.0))[1]
        ax.text(0.5, 0.5, "no speculative point with a baseline\nat the same load yet", ha="center", va="center")
        ax.set_axis_off()
        return ax
    series = with_hardware_series(comparison)
    groups = series_groups(series["series"]) if ax is None else [list(dict.fromkeys(series["series"]))]
    axes = (
        [ax]
        if ax is not None
        else list(plt.subplots(len(groups), 1, figsize=(6.4, 3.6 * len(groups)), sharex=True, squeeze=False)[1][:, 0])
    )
    palette = page_colors(series["series"]) if len(groups) > 1 else None
    metric = comparison["metric"].iloc[0]
    for panel, group in zip(axes, groups, strict=True):
        rows = series[series["series"].isin(group)]
        metric_vs_load(rows, "change_pct", x=x, hue="series", ax=panel, palette=palette)
        if "band_pct" in rows:
            band = rows.groupby(x)["band_pct"].max().sort_index()
            panel.fill_between(
                band.index, -band.to_numpy(), band.to_numpy(), color="grey", alpha=0.2, linewidth=0, label="_noise band"
            )
        panel.axhline(0.0, color="black", linewidth=1)
        panel.set_ylabel(LABELS["change_pct"])
    axes[0].set_title(LABELS.get(metric, metric) + (" (grey: noise band)" if "band_pct" in series else ""))
    return axes[0]


def predicted_vs_logged(table: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """KV-cache tokens: the calculator's prediction beside what vLLM logged at start-up, one pair per config."""
    long = table.melt(
        id_vars=["case", "engine_label"],
        value_vars=["kv_tokens_vllm", "kv_tokens_ours"],
        var_name="source",
        value_name="kv_tokens",
    )
    long["config"] = long["case"] + " · " + long["engine_label"]
    long["source"] = long["source"].map({"kv_tokens_vllm": "vLLM 0.26 (logged)", "kv_tokens_ours": "calculator"})
    configs = long["config"].nunique()
    ax = ax or plt.subplots(figsize=(8, max(4.0, 0.3 * configs)))[1]  # one row per config, labels readable
    sns.barplot(data=long, y="config", x="kv_tokens", hue="source", orient="h", ax=ax)
    ax.set_ylabel("")
    ax.set_xlabel("KV-cache size (tokens)")
    return ax


def predicted_with_measured(curve: pd.DataFrame, measured: pd.DataFrame, y: str, ax: Axes | None = None) -> Axes:
    """A predicted curve (lines) with measured points of the same configurations (crosses), against concurrency."""
    ax = metric_vs_load(curve, y, ax=ax)
    if not measured.empty:
        sns.scatterplot(
            data=measured,
            x="concurrency",
            y=y,
            hue="engine_label",
            marker="X",
            s=120,
            ax=ax,
            palette=page_colors(measured["engine_label"]),
            legend=False,
            zorder=3,
        )
    ax.set_ylabel(LABELS.get(y, y))
    ax.set_title("lines: model" + (", crosses: measured" if not measured.empty else " (nothing measured to show)"))
    return ax


def message_axes(ax: Axes | None, message: str) -> Axes:
    """``ax`` (a new one without) showing ``message`` instead of a plot: what a figure with no data draws."""
    ax = ax or plt.subplots(figsize=(6.4, 4.0))[1]
    ax.text(0.5, 0.5, message, ha="center", va="center")
    ax.set_axis_off()
    return ax


def _not_measured(ax: Axes | None, what: str) -> Axes:
    return message_axes(ax, f"{what}:\nnot measured yet")


#: Two tick labels on a log-2 axis closer than this (in doublings) would print into each other ("128200").
MIN_LABEL_GAP_LOG2 = 0.8


def spaced_labels(ticks: Sequence[float], min_gap_log2: float = MIN_LABEL_GAP_LOG2) -> list[str]:
    """Labels for sorted log-2 axis ``ticks``: a tick within ``min_gap_log2`` doublings of the last one labelled gets
    no label (the last tick always keeps its label, taking it from the one before when they crowd)."""
    import math

    labels = [""] * len(ticks)
    kept: list[int] = []
    for i, tick in enumerate(ticks):
        if not kept or math.log2(tick / ticks[kept[-1]]) >= min_gap_log2:
            kept.append(i)
        elif i == len(ticks) - 1 and len(kept) > 1:
            kept[-1] = i
    for i in kept:
        labels[i] = f"{ticks[i]:g}"
    return labels


def log2_ticks(ax: Axes, values: pd.Series) -> None:
    """A log-2 x axis on ``ax`` with a tick at each distinct value, labelled where the labels do not crowd."""
    ticks = sorted(float(v) for v in values.dropna().unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, spaced_labels(ticks))


def sweep_vs_concurrency(frame: pd.DataFrame, y: str, ax: Axes | None = None, title: str | None = None) -> Axes:
    """``metric_vs_load`` for a concurrency sweep, or 'not measured yet' when the sweep has no rows."""
    if frame.empty or y not in frame or frame[y].dropna().empty:
        return message_axes(ax, f"{title + ': ' if title else ''}not measured yet")
    ax = metric_vs_load(frame, y, ax=ax)
    if title:
        ax.set_title(title)
    return ax


def speedup_vs_cost_ratio(tau: float, implied: pd.DataFrame, predicted: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Leviathan's k = 1 speed-up τ / (1 + c) against the draft cost ratio c, with the c the published speed-ups imply
    (``implied``: source, implied_c) and the c the step model predicts (``predicted``: config, batch, c)."""
    ax = ax or plt.subplots(figsize=(7.0, 4.2))[1]
    c = np.linspace(0.0, 1.0, 101)
    ax.plot(c, tau / (1.0 + c), color="black", linewidth=1.2, label=f"τ / (1 + c), τ = {tau:g}")
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    # the published sources in black, told apart by marker: the colours stay for the configs (at most six series)
    sns.scatterplot(
        data=implied,
        x="implied_c",
        y=tau / (1.0 + implied["implied_c"]),
        style="source",
        markers=["s", "D", "^", "v"][: implied["source"].nunique()],
        color="black",
        s=70,
        ax=ax,
    )
    sns.scatterplot(data=predicted, x="c", y=tau / (1.0 + predicted["c"]), hue="config", style="batch", s=60, ax=ax)
    ax.set_xlabel("draft cost ratio c = T_draft / T_target step")
    ax.set_ylabel("speed-up, k = 1 (×)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # beside: inside it hid the points
    return ax


def predicted_vs_batch(frame: pd.DataFrame, y: str = "speedup", hue: str = "config", ax: Axes | None = None) -> Axes:
    """A prediction table (``model.prediction.prediction_frame``) against batch, one line per ``hue``, with the
    break-even line."""
    ax = ax or plt.subplots(figsize=(6.4, 4.0))[1]
    sns.lineplot(data=frame, x="batch", y=y, hue=hue, marker="o", ax=ax, errorbar=None)
    ax.set_xscale("log", base=2)
    ticks = sorted(frame["batch"].unique())
    ax.set_xticks(ticks, [str(int(t)) for t in ticks])
    ax.axhline(1.0 if y == "speedup" else 0.0, color="black", linewidth=1)
    ax.set_xlabel(LABELS["batch"])
    ax.set_ylabel(LABELS.get(y, y) + " (model)")
    return ax


def speedup_vs_load(table: pd.DataFrame, x: str = "request_rate_qps", ax: Axes | None = None) -> Axes:
    """Measured TPOT speed-up against the load, one line per speculative config (``verdicts`` tables); ``x`` is
    ``request_rate_qps`` (Poisson arrivals) or ``concurrency`` (closed loop)."""
    rows = table[table[x].notna()] if not table.empty else table
    if rows.empty:
        return _not_measured(ax, f"TPOT speed-up against {LABELS.get(x, x)}")
    ax = metric_vs_load(rows, "speedup", x=x, ax=ax)
    ax.axhline(1.0, color="black", linewidth=1)
    return ax


def gain_vs_concurrency(
    gains: pd.DataFrame,
    title: str,
    ax: Axes | None = None,
    palette: Mapping[str, tuple[float, float, float]] | None = None,
) -> Axes:
    """Measured gain against concurrency, one line per speculative config (coloured by ``palette`` when given), with
    the break-even line at 0."""
    if gains.empty:
        return _not_measured(ax, title)
    ax = metric_vs_load(gains, "gain_pct", ax=ax, palette=palette)
    ax.axhline(0.0, color="black", linewidth=1)
    ax.set_title(title)
    if ax.get_legend() is not None:  # two columns under the axes: inside, it would hide curves near break-even
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    return ax


def measured_metric(df: pd.DataFrame, y: str, x: str = "concurrency", ax: Axes | None = None) -> Axes:
    """``metric_vs_load`` over the rows that have ``x``, or a 'not measured yet' note when there are none."""
    rows = df[df[x].notna()] if not df.empty else df
    if rows.empty:
        return _not_measured(ax, LABELS.get(y, y))
    return metric_vs_load(rows, y, x=x, ax=ax)


def medians_with_range(
    spreads: pd.DataFrame,
    title: str,
    ax: Axes | None = None,
    palette: Mapping[str, tuple[float, float, float]] | None = None,
) -> Axes:
    """Medians over repeated runs against concurrency, each with a bar from its lowest to its highest run: one colour
    per engine config (``palette``), a solid line for fixed lengths and a dashed one for varied lengths
    (``cases.load_desync.point_spreads`` rows: engine_label, concurrency, lengths, median, lowest, highest)."""
    if spreads.empty:
        raise ValueError("no medians to plot")
    ax = ax or plt.subplots(figsize=(6.4, 4.0))[1]
    colors = palette or page_colors(spreads["engine_label"])
    for (label, lengths), group in spreads.groupby(["engine_label", "lengths"], sort=True):
        group = group.sort_values("concurrency")
        errors = [group["median"] - group["lowest"], group["highest"] - group["median"]]
        ax.errorbar(
            group["concurrency"],
            group["median"],
            yerr=errors,
            color=colors[label],
            capsize=4,
            marker="o",
            linestyle="-" if lengths == "fixed" else "--",
            label=f"{label}, {lengths} lengths",
        )
    log2_ticks(ax, spreads["concurrency"])
    ax.set_xlabel(LABELS["concurrency"])
    ax.set_title(title)
    return ax
