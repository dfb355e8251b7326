"""Where speculation stops paying: the crossover concurrency and the inter-token-latency artifact of chunked
streaming."""

from __future__ import annotations

import numpy as np
import pandas as pd

from vllm_playbooks.analysis.compare import higher_is_better, versus_baseline
from vllm_playbooks.analysis.noise import Effect


def crossover(comparison: pd.DataFrame) -> pd.DataFrame:
    """Where each speculative config stops paying, from ``versus_baseline`` rows of a throughput metric.

    One row per config: the highest measured concurrency where it gained, the lowest where it lost (``None`` where
    there is none), each beyond that point's band (``band_pct``: ``analysis.noise``), and a sentence naming the
    concurrencies within noise. Latency metrics are refused.
    """
    if comparison.empty:
        return pd.DataFrame(columns=["engine_label", "gains_up_to", "loses_from", "text"])
    metric = str(comparison["metric"].iloc[0])
    if not higher_is_better(metric):
        raise ValueError(f"crossover reads a throughput (higher is better), not {metric!r}")
    records = []
    for label, group in comparison.dropna(subset=["concurrency"]).groupby("engine_label"):
        group = group.sort_values("concurrency")
        gains = group[group["effect"] == Effect.GAIN]["concurrency"]
        losses = group[group["effect"] == Effect.LOSS]["concurrency"]
        even = group[group["effect"] == Effect.NONE]
        up_to = int(gains.max()) if not gains.empty else None
        loses = int(losses.min()) if not losses.empty else None
        parts = []
        if up_to is not None:
            parts.append(f"gains up to {up_to} stream{'s' if up_to > 1 else ''}")
        if not even.empty:
            levels = ", ".join(str(int(c)) for c in even["concurrency"])
            parts.append(f"within noise (±{even['band_pct'].max():.0f} %) at {levels}")
        if loses is not None:
            parts.append(f"loses from {loses} stream{'s' if loses > 1 else ''}")
        records.append(
            {
                "engine_label": label,
                "gains_up_to": up_to,
                "loses_from": loses,
                "text": f"{label}: " + "; ".join(parts) + ".",
            }
        )
    out = pd.DataFrame(records)
    return out.astype({"gains_up_to": "Int64", "loses_from": "Int64"})


def itl_artifact(df: pd.DataFrame) -> pd.DataFrame:
    """How much of speculation's rise in inter-token latency is the streaming artifact, at each paired load.

    ``vllm bench serve`` times ITL per streamed chunk, and with speculation one chunk carries every token a verify step
    accepted, so mean ITL ≈ mean TPOT × tokens per chunk. Columns: the ITL and TPOT ratios on/off (means), their
    quotient ``chunking`` (≈ tokens per chunk), the measured mean acceptance length beside it, and ``artifact_share``:
    the share of the ITL rise, on a log scale, that chunking alone explains (log chunking / log ITL ratio, at most 1:
    where TPOT fell, all of the rise is chunking).
    """
    itl = versus_baseline(df, "itl_mean_ms", extra=["mean_acceptance_length"])
    tpot = versus_baseline(df, "tpot_mean_ms")
    keys = ["engine_label", "concurrency", "request_rate_qps", "input_len", "output_len"]
    both = itl.merge(tpot[[*keys, "ratio"]], on=keys, suffixes=("_itl", "_tpot"))
    out = both[["engine_label", "concurrency"]].copy()
    out["itl_ratio"] = both["ratio_itl"]
    out["tpot_ratio"] = both["ratio_tpot"]
    out["chunking"] = out["itl_ratio"] / out["tpot_ratio"]
    out["mean_acceptance_length"] = both["mean_acceptance_length"].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.log(out["chunking"]) / np.log(out["itl_ratio"])
    out["artifact_share"] = share.clip(upper=1.0).where(out["itl_ratio"] > 1.0)
    return out.reset_index(drop=True)


def change_table(comparison: pd.DataFrame) -> pd.DataFrame:
    """``change_pct`` of each speculative config (rows: label, k, imposed α) at each measured concurrency (columns)."""
    return comparison.pivot_table(
        index=["engine_label", "k", "imposed_alpha"], columns="concurrency", values="change_pct", aggfunc="first"
    ).round(1)
