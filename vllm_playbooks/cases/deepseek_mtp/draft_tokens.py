"""The DeepSeek MTP page's sweep of draft tokens k: TPOT speed-ups by k and load, the best k at each load, the
acceptance band, and the draft cost each pair implies beside the step model's."""

from __future__ import annotations

import json

import pandas as pd

from vllm_playbooks.cases.deepseek_mtp import tpot_speedups
from vllm_playbooks.model.speculative import (
    draft_cost_from_tpot,
)


def k_sweep(df: pd.DataFrame, model_shape: str, metric: str = "tpot_mean_ms") -> pd.DataFrame:
    """MTP configurations of one target by k: speedup against speculation off at each load, with the imposed rates
    and the measured acceptance length (for the k = 1, 2, 3 comparison at the same first-position acceptance)."""
    table = tpot_speedups(df, metric)
    return table[table["model_shape"] == model_shape].sort_values(["k", "request_rate_qps", "concurrency"])


def _position_1_rates(table: pd.DataFrame) -> list[float]:
    """The imposed acceptance of draft position 1 of each row (NaN where none was imposed)."""
    return [
        json.loads(rates)[0] if isinstance(rates, str) else float("nan") for rates in table["imposed_acceptance_rates"]
    ]


def best_k_by_load(sweep: pd.DataFrame, first_rate: float = 0.85) -> pd.DataFrame:
    """For each load of a ``k_sweep`` table, among the configurations whose imposed acceptance at position 1 is
    ``first_rate``: the k with the largest speed-up (``best_k``, ``speedup``) and k = 1's speed-up (``k1_speedup``);
    ``first_rate`` is repeated in ``position_1_rate``."""
    columns = [
        "load",
        "request_rate_qps",
        "concurrency",
        "best_k",
        "engine_label",
        "speedup",
        "k1_speedup",
        "position_1_rate",
    ]
    if sweep.empty:  # no MTP row of that shape among the rows chosen (a part of the grid)
        return pd.DataFrame(columns=columns)
    same = sweep[[abs(first - first_rate) < 1e-9 for first in _position_1_rates(sweep)]]
    rows = []
    for load, group in same.groupby("load", sort=False):
        top = group.loc[group["speedup"].idxmax()]
        k1 = group.loc[group["k"] == 1, "speedup"]
        rows.append(
            {
                "load": load,
                "request_rate_qps": top["request_rate_qps"],
                "concurrency": top["concurrency"],
                "best_k": int(top["k"]),
                "engine_label": top["engine_label"],
                "speedup": top["speedup"],
                "k1_speedup": k1.iloc[0] if len(k1) else float("nan"),
                "position_1_rate": first_rate,
            }
        )
    return pd.DataFrame(rows, columns=columns)


def acceptance_band(sweep: pd.DataFrame, k: int = 1) -> pd.DataFrame:
    """The configurations of one ``k`` in a ``k_sweep`` table that differ in their imposed i.i.d. acceptance
    (``imposed_alpha``): one row per load and α with the speed-up and the measured mean acceptance length, request
    rates first, then concurrencies, α ascending within a load."""
    columns = [
        "load",
        "request_rate_qps",
        "concurrency",
        "imposed_alpha",
        "engine_label",
        "speedup",
        "mean_acceptance_length",
    ]
    rows = sweep[(sweep["k"] == k) & sweep["imposed_alpha"].notna()][columns].astype({"imposed_alpha": float})
    return rows.sort_values(["request_rate_qps", "concurrency", "imposed_alpha"], na_position="last").reset_index(
        drop=True
    )


def draft_cost_beside_model(sweep: pd.DataFrame, predicted: pd.DataFrame) -> pd.DataFrame:
    """The draft cost c that each closed-loop pair of a ``k_sweep`` table implies
    (``model.speculative.draft_cost_from_tpot`` with the measured mean acceptance length) beside the step model's c at
    the same batch (``predicted``: a ``model.prediction.prediction_frame`` whose ``config`` names are engine labels).

    ``draft_ms_measured`` = c × the measured spec-off TPOT, the time of one draft forward if verifying k + 1 tokens
    costs one decode step; where it costs more (an MoE layer reads more experts for more tokens), that extra lands in
    c too. ``beyond_reads_ms`` is what the measurement leaves beyond the model's roofline time of the draft forward
    (its ``draft_ms`` less the ``draft_fixed_cost_ms`` it charged, repeated as ``model_fixed_cost_ms``), to set
    beside that fixed cost.
    """
    rows = sweep[
        sweep["concurrency"].notna()
        & sweep["request_rate_qps"].isna()
        & sweep["engine_label"].isin(set(predicted["config"]))
    ]
    records = []
    for row in rows.itertuples():
        model = predicted[(predicted["config"] == row.engine_label) & (predicted["batch"] == row.concurrency)]
        if model.empty:
            continue
        c = draft_cost_from_tpot(row.speculative, row.baseline, float(row.mean_acceptance_length), int(row.k))
        draft_ms, fixed_ms = float(model["draft_ms"].iloc[0]), float(model["draft_fixed_cost_ms"].iloc[0])
        records.append(
            {
                "engine_label": row.engine_label,
                "k": int(row.k),
                "concurrency": row.concurrency,
                "tau_measured": float(row.mean_acceptance_length),
                "tpot_off_ms": row.baseline,
                "c_measured": c,
                "c_model": float(model["c"].iloc[0]),
                "draft_ms_measured": c * row.baseline,
                "draft_ms_model": draft_ms,
                "model_fixed_cost_ms": fixed_ms,
                "beyond_reads_ms": c * row.baseline - (draft_ms - fixed_ms),
            }
        )
    columns = [
        "engine_label",
        "k",
        "concurrency",
        "tau_measured",
        "tpot_off_ms",
        "c_measured",
        "c_model",
        "draft_ms_measured",
        "draft_ms_model",
        "model_fixed_cost_ms",
        "beyond_reads_ms",
    ]
    return pd.DataFrame(records, columns=columns)


def draft_fixed_cost_ms(table: pd.DataFrame) -> float:
    """The fixed cost of one draft forward as measured: the median ``beyond_reads_ms`` of a
    ``draft_cost_beside_model`` table at its lowest concurrency, where verifying costs a decode step most nearly
    (NaN for an empty table)."""
    if table.empty:
        return float("nan")
    lowest = table[table["concurrency"] == table["concurrency"].min()]
    return float(lowest["beyond_reads_ms"].median())


def fixed_cost_change(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """Two ``model.prediction.prediction_frame`` tables of the same configs and batches, made with different draft
    fixed costs, side by side: c and the speed-up before and after, per config and batch."""
    keep = ["config", "batch", "draft_fixed_cost_ms", "c", "speedup"]
    return before[keep].merge(after[keep], on=["config", "batch"], suffixes=("_before", "_after"))


def added_step_time(
    sweep: pd.DataFrame,
    before: pd.DataFrame | None = None,
    after: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """What speculation added to an engine step, per closed-loop pair of a ``tpot_speedups`` (or ``k_sweep``) table,
    measured and as two ``model.prediction.prediction_frame`` tables predict it (``before`` and ``after``, e.g. with a
    whole step's fixed cost per draft forward and with a measured one; their ``config`` names are engine labels, and
    only those configurations are kept). Without the two tables every closed-loop pair is kept and the model columns are
    NaN.

    A verify step emits τ tokens per sequence, so its time is TPOT × τ: ``step_on_ms`` = the speculative TPOT × the
    measured mean acceptance length, ``step_off_ms`` = the spec-off TPOT, ``added_ms`` their difference (the draft
    forwards plus what verifying k + 1 tokens costs beyond a decode step) and ``added_share`` = ``added_ms`` /
    ``step_off_ms``, the cost ratio that S = τ / (1 + added_share) turns into the speed-up. The models' ``added_ms``
    and ``speedup`` follow with the suffixes ``_before`` and ``_after``.
    """
    rows = sweep[sweep["concurrency"].notna() & sweep["request_rate_qps"].isna()]
    if before is not None:
        rows = rows[rows["engine_label"].isin(set(before["config"]))]
    records = []
    for row, first_rate in zip(rows.itertuples(), _position_1_rates(rows), strict=True):
        record = {
            "gpu_name": getattr(row, "gpu_name", ""),
            "engine_label": row.engine_label,
            "model_shape": row.model_shape,
            "k": int(row.k),
            "position_1_rate": first_rate,
            "concurrency": row.concurrency,
            "step_off_ms": row.baseline,
            "step_on_ms": row.speculative * row.mean_acceptance_length,
        }
        record["added_ms"] = record["step_on_ms"] - record["step_off_ms"]
        record["added_share"] = record["added_ms"] / record["step_off_ms"]
        record["speedup"] = row.speedup
        for suffix, predicted in (("before", before), ("after", after)):
            model = (
                predicted[(predicted["config"] == row.engine_label) & (predicted["batch"] == row.concurrency)]
                if predicted is not None
                else pd.DataFrame()
            )
            found = not model.empty
            record[f"added_ms_{suffix}"] = (
                float(model["tpot_on_ms"].iloc[0] * model["tau"].iloc[0] - model["tpot_off_ms"].iloc[0])
                if found
                else float("nan")
            )
            record[f"speedup_{suffix}"] = float(model["speedup"].iloc[0]) if found else float("nan")
        records.append(record)
    columns = [
        "gpu_name",
        "engine_label",
        "model_shape",
        "k",
        "position_1_rate",
        "concurrency",
        "step_off_ms",
        "step_on_ms",
        "added_ms",
        "added_share",
        "speedup",
        "added_ms_before",
        "speedup_before",
        "added_ms_after",
        "speedup_after",
    ]
    table = pd.DataFrame(records, columns=columns)
    return table.sort_values(["concurrency", "step_off_ms"], ascending=[True, False]).reset_index(drop=True)
