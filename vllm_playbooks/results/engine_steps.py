"""Engine steps of recorded points: how many tokens and sequences each scheduler step carried, from vLLM's counters.

vLLM observes every engine step in the histogram ``vllm:iteration_tokens_total`` and counts output tokens in
``vllm:generation_tokens_total``. What a step adds to the histogram is its output tokens plus the whole prompt length
of each request whose prefill *finished* in it (``IterationStats.update_from_output`` in vLLM 0.26): a chunk of a long
prompt that does not finish it counts nothing. With prompts that fit one step (the #27462 runs: 128 tokens in) this is
the tokens the step scheduled; with 13,000-token prompts and an 8,192-token step budget, each prompt shows up once, at
the step that finished it, as a step of more than 8,192 tokens. A point's ``/metrics`` scrapes before and after its
measured run give what the run alone did, so from raw files already recorded:

- **tokens per step**: the histogram's sum over its count;
- **sequences per step**: output tokens per step, divided by the mean acceptance length under speculative decoding
  (each decoding sequence emits one token per step, or one per accepted draft plus one);
- **running sequences**: sequences per step × the pipeline parallel size: with P stages, P steps are in flight and
  every running sequence is in exactly one of them;
- **fill**: running sequences over the batch the load allowed, min(concurrency, ``max_num_seqs``). Near 1 the cap
  set the batch; well below 1 something else did (the load generator or vLLM's API server could not keep the
  sequences coming), so the point does not measure the cap. Where the server's own log sampled its running requests
  during the measured run (vLLM's stats line, every ~10 s; at least ``MIN_LOG_SAMPLES`` samples), the fill is the
  median of those samples over the allowed batch (``fill_source`` "server log"): the engine's own count, not an
  estimate. Otherwise it is the estimate above (``fill_source`` "counters"): with pipeline stages the steps of a
  run's ramp-up and drain carry fewer sequences, so the estimate reads low;
- **small steps**: the share of steps that carried at most ``SMALL_STEP_TOKENS`` tokens, and the per-bucket counts
  (``step_histogram``), which show how evenly the running sequences split into pipeline microbatches.

The buckets are vLLM's own (1, 8, 16, 32, … tokens), so the shape is resolved only that finely. Like the GPU samples,
none of this is a column of ``runs.csv``: it is read from each point's raw scrapes at replay.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from vllm_playbooks import paths
from vllm_playbooks.engine.metrics import Histogram, diff_metrics, parse_metrics
from vllm_playbooks.results import raw
from vllm_playbooks.results.server_logs import logged_running
from vllm_playbooks.results.textfiles import read_text

#: A step of at most this many tokens counts as small (vLLM's second bucket bound).
SMALL_STEP_TOKENS = 8
#: A point whose fill is below this did not run as many sequences as its cap and load allowed.
FILL_THRESHOLD = 0.9
#: The fewest stats lines of the server's log in a measured run for the fill to come from the log.
MIN_LOG_SAMPLES = 2

#: Columns of the measured row that ``step_summary`` and ``step_histogram`` repeat.
ROW_COLUMNS = (
    "point_id",
    "engine_label",
    "model_shape",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "max_num_seqs",
    "concurrency",
    "output_tok_s",
)
SUMMARY_COLUMNS = (
    "engine_steps",
    "output_tokens",
    "tokens_per_step",
    "sequences_per_step",
    "running_mean",
    "batch_allowed",
    "running_logged",
    "log_samples",
    "fill",
    "fill_source",
    "small_step_frac",
)


@dataclass(frozen=True)
class EngineSteps:
    """One measured run's engine steps: the step histogram's increase and the output tokens emitted."""

    histogram: Histogram
    output_tokens: float

    @property
    def steps(self) -> int:
        """Engine steps taken during the measured run."""
        return round(self.histogram.count)

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens scheduled per step (prompt and output)."""
        return self.histogram.total / self.histogram.count if self.histogram.count else math.nan

    def small_step_frac(self, tokens: int = SMALL_STEP_TOKENS) -> float:
        """Share of steps with at most ``tokens`` tokens (``tokens`` must be one of the histogram's bounds)."""
        at_most = self.histogram.count - self.histogram.count_above(tokens)
        return at_most / self.histogram.count if self.histogram.count else math.nan


def read_engine_steps(point_dir: Path) -> EngineSteps | None:
    """The engine steps of one point from its two scrapes; None when the server did not export the histogram."""
    delta = diff_metrics(
        *(parse_metrics(read_text(point_dir / name)) for name in (raw.METRICS_BEFORE, raw.METRICS_AFTER))
    )
    return None if delta.step_tokens is None else EngineSteps(delta.step_tokens, delta.generation_tokens)


def _acceptance_length(value: object) -> float:
    """The row's mean acceptance length, 1 where it has none (no speculative decoding)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 1.0
    return 1.0 if math.isnan(number) or number <= 0 else number


def step_summary(runs: pd.DataFrame, data: Path | None = None) -> pd.DataFrame:
    """Per measured row: its identity (``ROW_COLUMNS``) and ``SUMMARY_COLUMNS``; NaN where the point's scrapes lack
    the step histogram (vLLM versions that do not export it)."""
    base = data if data is not None else paths.data_dir()
    records = []
    for row in runs.itertuples(index=False):
        record = {name: getattr(row, name) for name in ROW_COLUMNS}
        steps = read_engine_steps(base / row.raw_path)
        known = _known(row.concurrency) and _known(row.max_num_seqs)
        allowed = min(float(row.concurrency), float(row.max_num_seqs)) if known else math.nan
        record["batch_allowed"] = allowed
        if steps is None or not steps.steps:
            record.update(
                engine_steps=math.nan,
                output_tokens=math.nan,
                tokens_per_step=math.nan,
                sequences_per_step=math.nan,
                running_mean=math.nan,
                fill=math.nan,
                fill_source="",
                small_step_frac=math.nan,
            )
        else:
            tokens_per_sequence = _acceptance_length(getattr(row, "mean_acceptance_length", None))
            per_step = steps.output_tokens / steps.steps / tokens_per_sequence
            running = per_step * int(row.pipeline_parallel_size)
            record.update(
                engine_steps=steps.steps,
                output_tokens=round(steps.output_tokens),
                tokens_per_step=steps.tokens_per_step,
                sequences_per_step=per_step,
                running_mean=running,
                fill=running / allowed if allowed else math.nan,
                fill_source="counters",
                small_step_frac=steps.small_step_frac(),
            )
        logged = _logged_running(row, base)
        record.update(running_logged=statistics.median(logged) if logged else math.nan, log_samples=len(logged))
        if len(logged) >= MIN_LOG_SAMPLES and allowed:
            record.update(fill=record["running_logged"] / allowed, fill_source="server log")
        records.append(record)
    return pd.DataFrame(records, columns=[*ROW_COLUMNS, *SUMMARY_COLUMNS])


def _logged_running(row: object, data: Path) -> list[int]:
    """The running requests the row's server logged during its measured run (``server_logs.logged_running``); [] for
    a row that does not say when it ran (no ``measured_at`` or ``config_id``)."""
    config_id, measured_at = getattr(row, "config_id", None), getattr(row, "measured_at", None)
    if not isinstance(config_id, str) or not isinstance(measured_at, str):
        return []
    end = dt.datetime.fromisoformat(measured_at)
    start = end - dt.timedelta(seconds=float(row.duration_s))  # type: ignore[attr-defined]
    logs = (data / str(row.raw_path)).parents[3] / "logs"  # type: ignore[attr-defined]
    return logged_running(logs, config_id, start, end)


def step_histogram(runs: pd.DataFrame, data: Path | None = None) -> pd.DataFrame:
    """Per measured row and histogram bucket: the row's identity, the bucket's token range (``tokens_above``,
    ``tokens_at_most``) and the share of the run's engine steps that fell in it. Rows without the histogram are
    left out."""
    base = data if data is not None else paths.data_dir()
    records = []
    for row in runs.itertuples(index=False):
        steps = read_engine_steps(base / row.raw_path)
        if steps is None or not steps.steps:
            continue
        lows = (0.0, *steps.histogram.bounds[:-1])
        for low, high, count in zip(lows, steps.histogram.bounds, steps.histogram.per_bucket, strict=True):
            records.append(
                {
                    **{name: getattr(row, name) for name in ROW_COLUMNS},
                    "tokens_above": low,
                    "tokens_at_most": high,
                    "step_share": count / steps.histogram.count,
                }
            )
    return pd.DataFrame(records, columns=[*ROW_COLUMNS, "tokens_above", "tokens_at_most", "step_share"])


def with_step_times(runs: pd.DataFrame, data: Path | None = None) -> pd.DataFrame:
    """``runs`` with ``engine_steps`` (the measured run's steps, from its scrapes), ``steps_per_1k_tokens`` (steps per
    1,000 output tokens the run emitted: runs of one case can differ in their number of prompts) and ``ms_per_step``
    (the run's wall time over its steps: how long one step took on average); NaN where the scrapes lack the step
    histogram."""
    summary = step_summary(runs, data)
    out = runs.copy()
    out["engine_steps"] = summary["engine_steps"].to_numpy(dtype=float)
    out["steps_per_1k_tokens"] = 1000.0 * out["engine_steps"] / summary["output_tokens"].to_numpy(dtype=float)
    out["ms_per_step"] = 1000.0 * out["duration_s"].astype(float) / out["engine_steps"]
    return out


def _known(value: object) -> bool:
    try:
        return not math.isnan(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
