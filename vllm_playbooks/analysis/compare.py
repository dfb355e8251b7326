"""Comparisons a case page needs: speculation against the baseline at the same load, and where it stops paying.

Paired comparisons (``paired_versus``): each run of a config against the run of the reference config measured next
to it. A paired part (``config.pairing``, ``run.paired``) measures the configs it compares in turn on one GPU. Two runs
of one pair share the host's and the GPU's state of those minutes, so their ratio carries little of the drift that moves
both; the spread of the ratios over the pairs is the noise of the comparison itself. ``paired_versus`` judges a
change on that spread (``analysis.noise``: the band is the larger of it and ``MIN_BAND_PCT``) and, beside it, shows
what the same runs give unpaired: the spread of every run of one side over every run of the other
(``noise.cross_ratios``), so a page can show what pairing bought.

Runs pair when they belong to one paired session (``pair_session``, from ``results.conditions``), match on
``MATCH_COLUMNS`` (same case, settings, load and GPU model) and come at the same turn: the first run
of each config at that load in the session, the second, and so on (``pair_position`` orders them; repeat indices
need not agree, since a config with older runs of its own numbers its new ones after them).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from vllm_playbooks.analysis.noise import (
    MIN_CLEAN_REPEATS,
    Effect,
    band_pct,
    cross_ratios,
    effect_of_speedup,
    spread_of,
)
from vllm_playbooks.config.engine import cudagraph_mode_forced_by
from vllm_playbooks.config.speculative import SpeculativeConfig
from vllm_playbooks.model.speculative import tokens_per_step_from_rates

#: Columns that must match for a speculative row and a baseline row to be compared: the same case, engine settings
#: and load (the spread of its lengths included), on the same GPU. Repeated runs of one point share all of them.
MATCH_COLUMNS = (
    "case",
    "model_shape",
    "load_format",
    "input_len",
    "output_len",
    "random_range_ratio",
    "concurrency",
    "request_rate_qps",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_name",
)


#: The match columns that name a configuration's setting and workload but not its load: a side measured fewer than
#: three times borrows the widest spread its configuration showed in this setting (``borrowed_spread``).
SETTING_COLUMNS = tuple(c for c in MATCH_COLUMNS if c not in ("concurrency", "request_rate_qps"))


#: Match columns a frame built by hand may leave out: it then compares as one case with fixed lengths.
_OPTIONAL_MATCH = {"case": "—", "random_range_ratio": 0.0}


#: The environment variable that overrides vLLM 0.26's choice of model runner ("0": V1, "1": Model Runner V2).
MODEL_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"


def forced_model_runner(engine_config_json: object) -> str | None:
    """ "V1" or "V2" where a recorded row's engine config (its ``engine_config_json``) forces vLLM's model runner
    through ``VLLM_USE_V2_MODEL_RUNNER`` in its ``env``; None where vLLM chose (or the row has no config)."""
    import json

    if not isinstance(engine_config_json, str):
        return None
    value = (json.loads(engine_config_json).get("env") or {}).get(MODEL_RUNNER_ENV)
    if value is None:
        return None
    return "V2" if str(value).strip().lower() in {"1", "true"} else "V1"


def forced_cudagraph_mode(engine_config_json: object) -> str | None:
    """The CUDA-graph mode a recorded row's engine config forces through ``--compilation-config`` in its
    ``extra_args`` (``config.engine.cudagraph_mode_forced_by``), e.g. "PIECEWISE"; None where vLLM chose (or the row
    has no config)."""
    import json

    if not isinstance(engine_config_json, str):
        return None
    return cudagraph_mode_forced_by(json.loads(engine_config_json).get("extra_args") or ())


def is_control(engine_config_json: object) -> bool:
    """Whether a recorded row's engine config forces how vLLM executes the model: its model runner
    (``forced_model_runner``) or its CUDA-graph mode (``forced_cudagraph_mode``). Such a server measures one cost
    apart from the rest; it is not vLLM's own choice of how to run the config."""
    return forced_model_runner(engine_config_json) is not None or forced_cudagraph_mode(engine_config_json) is not None


def is_baseline(df: pd.DataFrame) -> pd.Series:
    """True for the rows a speculative row is compared with: speculation off, run as vLLM chose to run it.

    A spec-off server whose config forces a model runner or a CUDA-graph mode (``is_control``) is a control, not a
    baseline: it is compared by label (``analysis.schedule.change_chain``), never pooled with the baseline rows of the
    same load."""
    if df.empty:
        return pd.Series(dtype=bool)
    configs = df["engine_config_json"] if "engine_config_json" in df.columns else pd.Series(None, index=df.index)
    return (df["spec_method"] == "none") & ~configs.map(is_control).astype(bool)


def versus_baseline(df: pd.DataFrame, metric: str = "output_tok_s", extra: Sequence[str] = ()) -> pd.DataFrame:
    """One row per speculative config and load, its ``metric`` beside its baseline's at the same load and settings.

    Repeated runs of a point (same engine label and ``MATCH_COLUMNS``) are repeats, never separate points: each side
    enters as the median of its runs, with ``…_runs`` (how many) and ``…_spread_pct`` (``analysis.noise``: highest −
    lowest over the median, 0 for one run). ``band_pct`` is the band the comparison uses (``noise.band_pct``) and
    ``effect`` what the change is called: gain, loss, or within noise. A side measured fewer than ``MIN_CLEAN_REPEATS``
    times has no trustworthy spread of its own: ``borrowed_spread_pct`` is the widest spread its configuration showed
    in the same setting (``borrowed_spread``; 0 where it has none), and the band is at least that. ``ratio`` is
    speculative / baseline and ``change_pct`` the change in percent; for latencies a ratio below 1 is the better
    result, for throughputs above 1.
    ``extra`` names further columns of the speculative rows to carry along (numbers as the median of the runs, for
    example ``acceptance_rate``). The baseline rows are ``is_baseline``'s: a spec-off control that forces a model
    runner or a CUDA-graph mode is neither a baseline nor compared here. Pass rows without stalls.

    Where ``df`` holds paired runs (``pair_session``, ``results.conditions``) of a line, the line is judged on its
    pairs alone (``_judged_on_pairs``): ``pairs`` says how many (0: judged unpaired, as above).
    """
    keys = list(MATCH_COLUMNS)
    df = with_match_columns(df)
    filled = df.assign(**{k: df[k].astype("string").fillna("—") for k in keys})
    base = _median_of_runs(filled[is_baseline(df)], keys, metric, "baseline")
    described = ["spec_method", "num_speculative_tokens", "imposed_alpha", "imposed_acceptance_rates", *extra]
    described = [c for c in dict.fromkeys(described) if c in filled.columns and c not in keys]
    spec = _median_of_runs(
        filled[filled["spec_method"] != "none"], [*keys, "engine_label"], metric, "speculative", described
    )
    base["baseline_borrowed_pct"] = borrowed_spread(base, list(SETTING_COLUMNS), "baseline")
    spec["speculative_borrowed_pct"] = borrowed_spread(spec, [*SETTING_COLUMNS, "engine_label"], "speculative")
    merged = spec.merge(base, on=keys, how="inner")
    missing = pd.Series([None] * len(merged), index=merged.index, dtype="object")
    out = pd.DataFrame(
        {
            "engine_label": merged["engine_label"],
            "spec_method": merged["spec_method"],
            "k": merged["num_speculative_tokens"],
            "imposed_alpha": merged["imposed_alpha"],
            "imposed_acceptance_rates": merged.get("imposed_acceptance_rates", missing),
            "case": merged["case"].astype(str),
            "model_shape": merged["model_shape"].astype(str),
            "input_len": pd.to_numeric(merged["input_len"], errors="coerce"),
            "output_len": pd.to_numeric(merged["output_len"], errors="coerce"),
            "random_range_ratio": pd.to_numeric(merged["random_range_ratio"], errors="coerce"),
            "concurrency": pd.to_numeric(merged["concurrency"], errors="coerce"),
            "request_rate_qps": pd.to_numeric(merged["request_rate_qps"], errors="coerce"),
            "gpu_name": merged["gpu_name"].astype(str),
            "metric": metric,
            "baseline": merged["baseline"].astype(float),
            "speculative": merged["speculative"].astype(float),
            **{name: merged[name] for name in extra if name != "case"},
            "baseline_runs": merged["baseline_runs"].astype(int),
            "speculative_runs": merged["speculative_runs"].astype(int),
            "baseline_spread_pct": merged["baseline_spread_pct"].astype(float),
            "speculative_spread_pct": merged["speculative_spread_pct"].astype(float),
            "borrowed_spread_pct": merged[["baseline_borrowed_pct", "speculative_borrowed_pct"]].max(axis=1),
        }
    )
    out["ratio"] = out["speculative"] / out["baseline"]
    out["band_pct"] = [
        band_pct(a, b, c)
        for a, b, c in zip(
            out["baseline_spread_pct"], out["speculative_spread_pct"], out["borrowed_spread_pct"], strict=True
        )
    ]
    out["pairs"] = 0
    if "pair_session" in df.columns and df["pair_session"].notna().any():
        out = _judged_on_pairs(out, df[is_baseline(df) | (df["spec_method"] != "none")], metric)
    out["change_pct"] = 100.0 * (out["ratio"] - 1.0)
    speedups = out["ratio"] if higher_is_better(metric) else 1.0 / out["ratio"]
    out["effect"] = [str(effect_of_speedup(s, b)) for s, b in zip(speedups, out["band_pct"], strict=True)]
    order = ["engine_label", "input_len", "random_range_ratio", "request_rate_qps", "concurrency"]
    return out.sort_values(order, na_position="last").reset_index(drop=True)


def _judged_on_pairs(comparison: pd.DataFrame, rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    """``comparison`` (``versus_baseline``'s lines before their effect) with each line that ``rows`` hold pairs of
    (``paired_versus`` against the baseline's label) taken from its pairs: both sides as the medians of their paired
    runs, as many runs a side as pairs, the ratio as the median pair ratio and the band as the pairs' own
    (``paired_spread_pct``, at least ``MIN_BAND_PCT``); ``pairs`` counts them. Other lines are left as they were."""
    baseline_labels = sorted(set(rows.loc[is_baseline(rows), "engine_label"]))
    paired = pd.concat([paired_versus(rows, label, metric) for label in baseline_labels], ignore_index=True)
    if paired.empty:
        return comparison
    keys = [
        "engine_label",
        "case",
        "model_shape",
        "gpu_name",
        "input_len",
        "output_len",
        "random_range_ratio",
        "concurrency",
        "request_rate_qps",
    ]
    out = comparison.copy()
    line_of = {tuple(_key(out.loc[i, k]) for k in keys): i for i in out.index}
    for line in paired.itertuples(index=False):
        at = line_of.get(tuple(_key(getattr(line, k)) for k in keys))
        if at is None:
            continue
        out.loc[at, ["baseline", "speculative", "ratio", "band_pct", "pairs"]] = (
            line.reference,
            line.value,
            line.ratio,
            line.band_pct,
            line.pairs,
        )
        out.loc[at, ["baseline_runs", "speculative_runs"]] = line.pairs
        out.loc[at, ["baseline_spread_pct", "speculative_spread_pct", "borrowed_spread_pct"]] = (
            line.reference_spread_pct,
            line.value_spread_pct,
            0.0,
        )
    return out


def _key(value: object) -> object:
    """A comparison key cell as both frames spell it: numbers as floats (NaN as None), everything else as text."""
    if pd_isna(value):
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)


def borrowed_spread(sides: pd.DataFrame, setting: list[str], name: str) -> list[float]:
    """For each line of ``sides`` (``_median_of_runs``' lines of one side, ``name``), the spread a line measured fewer
    than ``MIN_CLEAN_REPEATS`` times is taken to have at least: the widest ``…_spread_pct`` of the lines of the same
    ``setting`` (a configuration in one setting and workload) measured at least twice, at any load; 0 for a line
    measured ``MIN_CLEAN_REPEATS`` times or more, or whose setting has no repeated line. A host-sensitive
    configuration that varies by 40 % at one load is not trusted to 5 % at the next on the strength of one run, or
    of two that happened to agree."""
    runs = sides[f"{name}_runs"]
    repeated = sides[f"{name}_spread_pct"].astype(float).where(runs >= 2)
    widest = repeated.groupby([sides[c] for c in setting], dropna=False).transform("max").fillna(0.0)
    return widest.where(runs < MIN_CLEAN_REPEATS, 0.0).tolist()


def with_match_columns(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the optional match columns it lacks (a frame built by hand: one case, fixed lengths)."""
    return df.assign(**{k: v for k, v in _OPTIONAL_MATCH.items() if k not in df.columns})


def _median_of_runs(
    rows: pd.DataFrame, keys: list[str], metric: str, name: str, described: Sequence[str] = ()
) -> pd.DataFrame:
    """One line per ``keys`` group of ``rows``: ``name`` (the median of ``metric`` over its runs), ``name_runs`` and
    ``name_spread_pct`` (``noise.spread_of``); each ``described`` column as the median of its runs where numeric,
    else its first value."""
    records = []
    for values, group in rows.groupby(keys, sort=False, dropna=False):
        spread = spread_of(group[metric].astype(float))
        record = dict(zip(keys, values, strict=True))
        for column in described:
            numbers = pd.to_numeric(group[column], errors="coerce")
            record[column] = numbers.median() if numbers.notna().any() else group[column].iloc[0]
        records.append(
            {**record, name: spread.median, f"{name}_runs": spread.runs, f"{name}_spread_pct": spread.spread_pct}
        )
    columns = [*keys, *described, name, f"{name}_runs", f"{name}_spread_pct"]
    return pd.DataFrame(records, columns=columns)


def higher_is_better(metric: str) -> bool:
    """Throughputs are better higher; latencies (columns in ms) are better lower."""
    return not metric.endswith("_ms")


def winning_lines(group: pd.DataFrame) -> pd.DataFrame:
    """The lines of ``group`` (one speculative config's ``versus_baseline`` lines) where it beat its baseline beyond
    the band (``effect`` 'gain': higher throughput or lower latency than the baseline's noise allows), in order."""
    return group[group["effect"] == Effect.GAIN]


def winning_levels(group: pd.DataFrame) -> list[int]:
    """Concurrency levels at which one speculative config beat its baseline beyond the band (``winning_lines``)."""
    return sorted(int(c) for c in winning_lines(group)["concurrency"].dropna())


def acceptance_check(df: pd.DataFrame) -> pd.DataFrame:
    """Measured mean acceptance length beside the one the imposed per-position rates imply (1 + Σ p_i)."""
    import json

    spec = df[df["imposed_acceptance_rates"].notna()].copy()
    spec["expected_acceptance_length"] = [
        tokens_per_step_from_rates(json.loads(r)) for r in spec["imposed_acceptance_rates"]
    ]
    spec["deviation_pct"] = 100.0 * (spec["mean_acceptance_length"] / spec["expected_acceptance_length"] - 1.0)
    columns = [
        "engine_label",
        "concurrency",
        "request_rate_qps",
        "imposed_alpha",
        "expected_acceptance_length",
        "mean_acceptance_length",
        "deviation_pct",
        "acceptance_rate",
        "per_position_acceptance",
    ]
    return spec[columns].reset_index(drop=True)


def pd_isna(value: object) -> bool:
    """True for None and NaN (pandas' missing values)."""
    return bool(pd.isna(value))


def recorded_speculative(engine_config_json: object) -> SpeculativeConfig | None:
    """The speculative config stored in a recorded row's ``engine_config_json`` (None for speculation off, or where
    the row has no config), validated without repeating its advisories."""
    import json

    if not isinstance(engine_config_json, str):
        return None
    spec_json = json.loads(engine_config_json).get("speculative")
    return SpeculativeConfig.model_validate(spec_json, context={"advisories": False}) if spec_json else None


#: The columns of ``paired_versus``, one line per compared config, load and GPU model.
PAIRED_COLUMNS = (
    "engine_label",
    "reference_label",
    "case",
    "model_shape",
    "gpu_name",
    "concurrency",
    "request_rate_qps",
    "input_len",
    "output_len",
    "random_range_ratio",
    "metric",
    "pairs",
    "pair_mode",
    "reference",
    "value",
    "ratio",
    "change_pct",
    "ratio_lowest",
    "ratio_highest",
    "paired_spread_pct",
    "band_pct",
    "effect",
    "reference_spread_pct",
    "value_spread_pct",
    "unpaired_spread_pct",
    "unpaired_band_pct",
)


def paired_ratios(rows: pd.DataFrame, reference_label: str, metric: str = "output_tok_s") -> pd.DataFrame:
    """One line per pair of runs in ``rows`` (recorded rows with ``results.conditions.CONDITION_COLUMNS``): a run of
    any other engine label beside the run of ``reference_label`` of the same paired session, match columns and turn;
    with both values of ``metric`` and ``ratio`` (other / reference). Runs not measured in a paired session,
    or without a partner, are left out. Pass rows without stalls."""
    keys = ["pair_session", *MATCH_COLUMNS, "turn"]
    paired = with_match_columns(rows)
    paired = paired[paired["pair_session"].notna()]
    paired = paired.assign(**{k: paired[k].astype("string").fillna("—") for k in MATCH_COLUMNS})
    order = paired["pair_position"].astype(float)
    paired = paired.assign(
        turn=order.groupby([paired[k] for k in ["pair_session", *MATCH_COLUMNS, "engine_label"]])
        .rank(method="first")
        .astype(int)
    )
    reference = paired[paired["engine_label"] == reference_label]
    other = paired[paired["engine_label"] != reference_label]
    merged = other.merge(reference[[*keys, metric]], on=keys, how="inner", suffixes=("", "_reference"))
    return pd.DataFrame(
        {
            "engine_label": merged["engine_label"],
            "reference_label": reference_label,
            **{k: merged[k] for k in keys},
            "pair_mode": merged["pair_mode"],
            "reference": merged[f"{metric}_reference"].astype(float),
            "value": merged[metric].astype(float),
            "ratio": merged[metric].astype(float) / merged[f"{metric}_reference"].astype(float),
        }
    )


def paired_versus(rows: pd.DataFrame, reference_label: str, metric: str = "output_tok_s") -> pd.DataFrame:
    """One line per compared engine label, load and GPU model of ``paired_ratios``: how many pairs, the median of
    each side, the median ratio (``change_pct``), the lowest and highest ratio, their spread in percent of the median
    (``paired_spread_pct``), the band (``noise.band_pct`` of that spread) and what the change is called (``effect``).
    Beside them, each side's own spread, and what the same runs give unpaired: the spread of their cross ratios
    (``unpaired_spread_pct``) and its band. Empty (with ``PAIRED_COLUMNS``) where ``rows`` hold no pair."""
    pairs = paired_ratios(rows, reference_label, metric)
    group_keys = ["engine_label", "gpu_name", *[k for k in MATCH_COLUMNS if k != "gpu_name"]]
    lines = []
    for values, group in pairs.groupby(group_keys, sort=True):
        key = dict(zip(group_keys, values, strict=True))
        ratio, reference, value = (spread_of(group[c]) for c in ("ratio", "reference", "value"))
        speedup = ratio.median if higher_is_better(metric) else 1.0 / ratio.median
        band = band_pct(ratio.spread_pct)
        unpaired = spread_of(cross_ratios(group["reference"], group["value"]))
        concurrency = pd.to_numeric(key["concurrency"], errors="coerce")
        rate = pd.to_numeric(key["request_rate_qps"], errors="coerce")
        lines.append(
            {
                "engine_label": key["engine_label"],
                "reference_label": reference_label,
                "case": key["case"],
                "model_shape": key["model_shape"],
                "gpu_name": key["gpu_name"],
                "concurrency": concurrency,
                "request_rate_qps": rate,
                "input_len": int(key["input_len"]),
                "output_len": int(key["output_len"]),
                "random_range_ratio": float(key["random_range_ratio"]),
                "metric": metric,
                "pairs": ratio.runs,
                "pair_mode": " / ".join(sorted(set(group["pair_mode"].dropna()))),
                "reference": reference.median,
                "value": value.median,
                "ratio": ratio.median,
                "change_pct": 100.0 * (ratio.median - 1.0),
                "ratio_lowest": ratio.lowest,
                "ratio_highest": ratio.highest,
                "paired_spread_pct": ratio.spread_pct,
                "band_pct": band,
                "effect": str(effect_of_speedup(speedup, band)),
                "reference_spread_pct": reference.spread_pct,
                "value_spread_pct": value.spread_pct,
                "unpaired_spread_pct": unpaired.spread_pct,
                "unpaired_band_pct": band_pct(unpaired.spread_pct),
            }
        )
    return pd.DataFrame(lines, columns=list(PAIRED_COLUMNS))
