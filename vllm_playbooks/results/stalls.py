"""Engine stalls in recorded points: output-token gaps of seconds, from vLLM's inter-token latency histogram.

vLLM observes the gap between consecutive output tokens of every request in ``vllm:inter_token_latency_seconds``.
A decode step of the shapes in this book takes milliseconds to a few hundred milliseconds; steps that also carry
chunks of long prompts take longer (the 70B shape with 1,240-token prompts at concurrency 64 had gaps of 1-2.5 s in
its runs), but no recorded run of the dense shapes had a gap above ``STALL_S`` (2.5 s, one of vLLM's bucket bounds).
Such a gap means the engine emitted nothing for seconds while requests were running. Every sequence running at that
moment records one such gap, so the count is about the stall events times the sequences running then.

What a stall costs a run is its share of the requests' time: the stalled gaps' length (at least their bucket's lower
bound each) over the sum of the requests' end-to-end latencies (completed × mean E2E latency: the sequence-seconds of
the run, whatever its load). A point whose ``stall_share`` reaches ``STALL_SHARE`` (1 %) is **stalled**: its throughput
and latencies understate the engine, so pages show it, say so (``book.page_notes.stall_note``) and leave it out of
their verdicts (``unstalled``); the live runner measures such a point again (``run.measure.measure_point``), as it does
a run that came in short. A lone long gap (one request's, say) stays below the threshold. Like the engine steps, none of
this is a column of ``runs.csv``: it is read from each point's raw scrapes at replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from vllm_playbooks import paths
from vllm_playbooks.engine.metrics import Histogram, MetricsSnapshot, diff_metrics, parse_metrics
from vllm_playbooks.results import raw
from vllm_playbooks.results.textfiles import read_text

#: An output-token gap longer than this (seconds; a bucket bound of vLLM's histogram) is a stall.
STALL_S = 2.5
#: A point is stalled when at least this share of its requests' time went by in stalls.
STALL_SHARE = 0.01

#: Columns of the measured row that ``stall_table`` repeats.
ROW_COLUMNS = ("point_id", "engine_label", "concurrency", "request_rate_qps", "output_tok_s")
STALL_COLUMNS = ("token_gaps", "stalled_gaps", "longest_gap_at_most_s", "stall_share")


@dataclass(frozen=True)
class Gaps:
    """One measured run's output-token gaps: the increase of vLLM's inter-token latency histogram."""

    histogram: Histogram

    @property
    def stalled(self) -> int:
        """Gaps longer than ``STALL_S``."""
        return round(self.histogram.count_above(STALL_S))

    @property
    def stalled_s_at_least(self) -> float:
        """Seconds the gaps longer than ``STALL_S`` lasted together, counting each at its bucket's lower bound."""
        lows = (0.0, *self.histogram.bounds[:-1])
        return sum(low * count for low, count in zip(lows, self.histogram.per_bucket, strict=True) if low >= STALL_S)

    def share_of(self, completed: float, e2el_mean_ms: float) -> float:
        """At least what share of the requests' time (``completed`` × mean E2E latency) went by in stalls."""
        request_s = completed * e2el_mean_ms / 1000.0
        return self.stalled_s_at_least / request_s if request_s > 0 else float("nan")

    @property
    def longest_at_most_s(self) -> float:
        """Upper bound of the highest bucket that holds a gap (``inf`` beyond the last bound; 0 for no gaps)."""
        filled = [bound for bound, count in zip(self.histogram.bounds, self.histogram.per_bucket, strict=True) if count]
        return filled[-1] if filled else 0.0


def gaps_between(before: MetricsSnapshot, after: MetricsSnapshot) -> Gaps | None:
    """The output-token gaps between two scrapes; None when the server does not export the histogram."""
    delta = diff_metrics(before, after)
    return None if delta.inter_token is None else Gaps(delta.inter_token)


def read_gaps(point_dir: Path) -> Gaps | None:
    """The output-token gaps of one recorded point, from its two scrapes."""
    before, after = (parse_metrics(read_text(point_dir / name)) for name in (raw.METRICS_BEFORE, raw.METRICS_AFTER))
    return gaps_between(before, after)


def stall_table(runs: pd.DataFrame, data: Path | None = None) -> pd.DataFrame:
    """Per measured row: its identity (``ROW_COLUMNS``), the output-token gaps of its run, how many were longer than
    ``STALL_S``, the bucket bound the longest one fell under, and the stalls' share of the requests' time; NaN where
    the scrapes lack the histogram."""
    base = data if data is not None else paths.data_dir()
    records = []
    for row in runs.itertuples(index=False):
        record = {name: getattr(row, name) for name in ROW_COLUMNS}
        gaps = read_gaps(base / row.raw_path)
        if gaps is None:
            record.update(dict.fromkeys(STALL_COLUMNS, float("nan")))
        else:
            record.update(
                token_gaps=round(gaps.histogram.count),
                stalled_gaps=gaps.stalled,
                longest_gap_at_most_s=gaps.longest_at_most_s,
                stall_share=gaps.share_of(row.completed, row.e2el_mean_ms),
            )
        records.append(record)
    return pd.DataFrame(records, columns=[*ROW_COLUMNS, *STALL_COLUMNS])


def mark_stalled(runs: pd.DataFrame, data: Path | None = None) -> pd.DataFrame:
    """``runs`` with a boolean column ``stalled``: ``stall_share`` ≥ ``STALL_SHARE`` (False where the scrapes lack
    the histogram). Verdicts and the claims ledger leave such rows out (``unstalled``)."""
    table = stall_table(runs, data)
    out = runs.copy()
    out["stalled"] = out["point_id"].isin(set(table.loc[table.stall_share >= STALL_SHARE, "point_id"]))
    return out


def unstalled(runs: pd.DataFrame, data: Path | None = None) -> pd.DataFrame:
    """``runs`` without its stalled rows, by its ``stalled`` column (``mark_stalled``), read from the raw scrapes
    where it has none."""
    marked = runs if "stalled" in runs.columns else mark_stalled(runs, data)
    return marked[~marked["stalled"].astype(bool)]


def describe_load(request_rate_qps: float | None, concurrency: float | None) -> str:
    """A measured row's load in words: its request rate where it has one (None or NaN: none), else its
    concurrency."""
    return f"{request_rate_qps:g} QPS" if pd.notna(request_rate_qps) else f"concurrency {concurrency:g}"
