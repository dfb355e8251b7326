"""Figures of parallel layouts (the pipeline-parallelism case): a metric by max_num_seqs per layout, GPU
utilization, and the share of engine steps by batch size."""

from __future__ import annotations

from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from vllm_playbooks.book.plots import LABELS, legend_beside, log2_ticks, message_axes
from vllm_playbooks.model.pipeline import with_layout

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: Parallel layouts in a fixed order, so each keeps its colour on every figure whichever of them a frame holds.
LAYOUT_ORDER = ("PP=1", "PP=2", "TP=2", "TP=2 PP=2")


def layout_palette(layouts: list[str]) -> tuple[list[str], dict[str, tuple[float, float, float]]]:
    """(hue order, colours) for the layouts present: known layouts first in ``LAYOUT_ORDER``, each its own colour."""
    known = [lay for lay in LAYOUT_ORDER if lay in layouts]
    order = known + sorted(set(layouts) - set(LAYOUT_ORDER))
    colours = sns.color_palette("colorblind", len(LAYOUT_ORDER) + len(order))
    mapping = {lay: colours[i] for i, lay in enumerate(LAYOUT_ORDER)}
    extra = iter(colours[len(LAYOUT_ORDER) :])
    return order, {lay: mapping[lay] if lay in mapping else next(extra) for lay in order}


def by_max_num_seqs(
    frame: pd.DataFrame, y: str, hue: str = "layout", ax: Axes | None = None, title: str | None = None
) -> Axes:
    """``y`` against ``--max-num-seqs`` (log-2 axis), one line per ``hue`` (parallel layout); with no rows the axes
    say 'not measured yet' instead of drawing."""
    data = frame.dropna(subset=[y]) if y in frame else frame.iloc[0:0]
    if data.empty:
        return message_axes(ax, f"{title + ': ' if title else ''}not measured yet")
    ax = ax or plt.subplots(figsize=(6.4, 4.0))[1]
    order, palette = layout_palette(list(data[hue].unique()))
    sns.lineplot(
        data=data,
        x="max_num_seqs",
        y=y,
        hue=hue,
        style=hue,
        markers=True,
        dashes=False,
        ax=ax,
        errorbar=None,
        hue_order=order,
        style_order=order,
        palette=palette,
    )
    log2_ticks(ax, data["max_num_seqs"])
    legend_beside(ax)
    ax.set_xlabel(LABELS["max_num_seqs"])
    ax.set_ylabel(LABELS.get(y, y))
    ax.set_ylim(bottom=0)
    if title:
        ax.set_title(title)
    return ax


def gpu_utilization(
    summary: pd.DataFrame, y: str = "util_mean_pct", ax: Axes | None = None, title: str | None = None
) -> Axes:
    """Per-GPU utilisation (``gpu_samples.gpu_summary``) against ``--max-num-seqs``: colour = layout, line style =
    the GPU's position in the engine (GPU 0 = the first stage under PP). Points without samples are left out; with
    none at all the axes say so."""
    data = summary.dropna(subset=[y]) if y in summary else summary.iloc[0:0]
    if data.empty:
        return message_axes(ax, f"{title + ': ' if title else ''}no GPU samples recorded yet")
    data = data.assign(gpu=[f"GPU {int(g)}" for g in data["gpu"]])
    ax = ax or plt.subplots(figsize=(6.4, 4.0))[1]
    order, palette = layout_palette(list(data["layout"].unique()))
    sns.lineplot(
        data=data,
        x="max_num_seqs",
        y=y,
        hue="layout",
        style="gpu",
        markers=True,
        ax=ax,
        errorbar=None,
        hue_order=order,
        palette=palette,
        style_order=sorted(data["gpu"].unique()),
    )
    log2_ticks(ax, data["max_num_seqs"])
    legend_beside(ax)
    ax.set_xlabel(LABELS["max_num_seqs"])
    ax.set_ylabel(LABELS.get(y, y))
    if y.endswith("_pct"):
        ax.set_ylim(0, 105)
    if title:
        ax.set_title(title)
    return ax


def _bucket_name(low: float, high: float) -> str:
    if high == float("inf"):
        return f"> {low:g}"
    return f"≤ {high:g}" if low == 0 else f"{low + 1:g}–{high:g}"


def step_shares(
    histogram: pd.DataFrame, ax: Axes | None = None, title: str | None = None, min_share: float = 0.01
) -> Axes:
    """Share of engine steps per tokens-per-step bucket (rows of ``results.engine_steps.step_histogram``), one bar
    colour per layout; buckets that hold less than ``min_share`` of the steps of every layout (the few prefill-heavy
    steps) are left out, and the x label says so; with no rows the axes say so."""
    if histogram.empty:
        return message_axes(ax, f"{title + ': ' if title else ''}no step histogram recorded")
    data = with_layout(histogram)
    used = data.groupby(["tokens_above", "tokens_at_most"])["step_share"].max()
    used = used[used >= min_share].index
    data = data[data.set_index(["tokens_above", "tokens_at_most"]).index.isin(used)]
    data = data.assign(
        bucket=[_bucket_name(lo, hi) for lo, hi in zip(data.tokens_above, data.tokens_at_most, strict=True)]
    )
    ax = ax or plt.subplots(figsize=(6.4, 4.0))[1]
    order, palette = layout_palette(list(data["layout"].unique()))
    buckets = [_bucket_name(lo, hi) for lo, hi in sorted(used)]
    sns.barplot(
        data=data,
        x="bucket",
        y="step_share",
        hue="layout",
        order=buckets,
        hue_order=order,
        palette=palette,
        errorbar=None,
        ax=ax,
    )
    legend_beside(ax)
    ax.set_xlabel(f"tokens scheduled in the step\n(buckets under {min_share:.0%} of steps left out)")
    ax.set_ylabel("share of engine steps")
    ax.set_ylim(0, 1)
    if title:
        ax.set_title(title)
    return ax
