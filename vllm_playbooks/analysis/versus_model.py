"""Measured numbers beside what the step-time model predicts for the same points."""

from __future__ import annotations

import pandas as pd


def beside_model(measured: pd.DataFrame, predicted: pd.DataFrame, value: str, label: str) -> pd.DataFrame:
    """Closed-loop measurements of one configuration (``engine_label`` == ``label``) beside the step model's
    prediction at the same concurrency (``predicted``'s ``batch`` or ``concurrency``): ``measured``, ``predicted``
    and their difference, for ``value`` ('speedup' or 'gain_pct')."""
    rows = measured[(measured["engine_label"] == label) & measured["concurrency"].notna()]
    if "request_rate_qps" in rows.columns:
        rows = rows[rows["request_rate_qps"].isna()]
    model = predicted if "concurrency" in predicted.columns else predicted.rename(columns={"batch": "concurrency"})
    model = model[["concurrency", value]].rename(columns={value: "predicted"})
    table = rows[["concurrency", value]].rename(columns={value: "measured"}).astype({"concurrency": float})
    out = table.merge(model.astype({"concurrency": float}), on="concurrency", how="left").sort_values("concurrency")
    out["measured_minus_predicted"] = out["measured"] - out["predicted"]
    return pd.DataFrame(out).reset_index(drop=True)


def beside_model_by_config(measured: pd.DataFrame, predicted: pd.DataFrame, value: str) -> pd.DataFrame:
    """``beside_model`` for every configuration of ``predicted`` (a ``model.prediction.prediction_frame`` whose
    ``config`` names are engine labels), one table with an ``engine_label`` column, in ``predicted``'s order."""
    tables = [
        beside_model(measured, predicted[predicted["config"] == label], value, label).assign(engine_label=label)
        for label in dict.fromkeys(predicted["config"])
    ]
    columns = ["engine_label", "concurrency", "measured", "predicted", "measured_minus_predicted"]
    return pd.concat(tables, ignore_index=True)[columns] if tables else pd.DataFrame(columns=columns)
