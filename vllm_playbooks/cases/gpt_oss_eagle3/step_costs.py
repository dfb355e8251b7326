"""What a step costs on the EAGLE-3 page: the step factors of each length profile, the KV-cache pressure at each load,
and the step cost by acceptance α."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from vllm_playbooks.analysis.compare import is_baseline
from vllm_playbooks.analysis.profiles import gain_table, with_profile
from vllm_playbooks.results.server_logs import startup_memory_of_rows

STEP_FACTOR_COLUMNS = (
    "profile",
    "concurrency",
    "fewer_steps_x",
    "step_cost_x",
    "gain_pct",
    "steps_per_1k_off",
    "steps_per_1k_spec",
    "ms_per_step_off",
    "ms_per_step_spec",
)


def step_factors(df: pd.DataFrame, profiles: Mapping[str, tuple[int, int]], engine: str) -> pd.DataFrame:
    """The output-throughput gain of ``engine`` over speculation off, split into its two factors per profile and
    concurrency: how many times fewer engine steps the run took per output token (``fewer_steps_x``) and how many
    times longer each step took (``step_cost_x``). ``df`` needs ``steps_per_1k_tokens`` and ``ms_per_step``
    (``results.engine_steps.with_step_times``). Output throughput is tokens over wall time, and wall time is steps
    times time per step, so 1 + gain = fewer_steps_x / step_cost_x: speculation pays exactly where it saves more
    steps than each of them costs. Each GPU's runs are paired with its own (one row per GPU where ``df`` holds
    several)."""
    keys = ["profile", "concurrency", "gpu_name"]
    parts = []
    for metric, prefix in (("steps_per_1k_tokens", "steps_per_1k"), ("ms_per_step", "ms_per_step")):
        table = gain_table(df, profiles, metric)
        table = table[table["engine_label"] == engine]
        parts.append(
            table[keys + ["baseline", "speculative"]].rename(
                columns={"baseline": f"{prefix}_off", "speculative": f"{prefix}_spec"}
            )
        )
    gains = gain_table(df, profiles, "output_tok_s")
    gains = gains[gains["engine_label"] == engine][keys + ["gain_pct"]]
    out = parts[0].merge(parts[1], on=keys).merge(gains, on=keys).dropna()
    if out.empty:
        return pd.DataFrame(columns=list(STEP_FACTOR_COLUMNS))
    out["fewer_steps_x"] = out["steps_per_1k_off"] / out["steps_per_1k_spec"]
    out["step_cost_x"] = out["ms_per_step_spec"] / out["ms_per_step_off"]
    return out.sort_values(keys)[list(STEP_FACTOR_COLUMNS)].reset_index(drop=True)


#: The columns of ``kv_pressure``.
KV_PRESSURE_COLUMNS = (
    "gpu_name",
    "engine_label",
    "concurrency",
    "runs",
    "kv_cache_tokens",
    "tokens_needed",
    "preemptions_per_run",
)


def kv_pressure(
    df: pd.DataFrame,
    profiles: Mapping[str, tuple[int, int]],
    engine: str,
    profile: str = "chat",
    data: Path | None = None,
) -> pd.DataFrame:
    """Whether the KV cache held the load, per GPU, for speculation off and ``engine`` at the highest concurrency of
    ``profile`` that both measured on that GPU: the KV-cache tokens vLLM logged at start-up (the smallest pool of
    the servers that measured those runs: ``results.server_logs.startup_memory_of_rows``, NA without their logs), the
    most tokens the load can hold at once (``tokens_needed``: concurrency × (input + output) tokens) and the
    preemptions a run (mean over its ``runs``). A pool below the need makes vLLM preempt and recompute requests, and a
    gain measured there is partly capacity (a drafter that leaves more cache), not fewer steps."""
    rows = with_profile(df, profiles)
    rows = rows[(rows["profile"] == profile) & ((rows["engine_label"] == engine) | is_baseline(rows))]
    tops = []
    for _, on_gpu in rows.groupby("gpu_name", sort=True):
        both = on_gpu.groupby("concurrency")["engine_label"].nunique()
        if (both >= 2).any():
            tops.append(on_gpu[on_gpu["concurrency"] == both[both >= 2].index.max()])
    if not tops:
        return pd.DataFrame(columns=list(KV_PRESSURE_COLUMNS))
    top = pd.concat(tops)
    # only the runs shown: one log read per server
    top = top.assign(kv_cache_tokens=startup_memory_of_rows(top, data)["kv_cache_tokens"])
    input_len, output_len = profiles[profile]
    records = []
    for gpu, on_gpu in top.groupby("gpu_name", sort=True):
        for _, runs in sorted(on_gpu.groupby("engine_label"), key=lambda group: not is_baseline(group[1]).all()):
            label = runs["engine_label"].iloc[0]
            records.append(
                {
                    "gpu_name": gpu,
                    "engine_label": label,
                    "concurrency": int(runs["concurrency"].iloc[0]),
                    "runs": len(runs),
                    "kv_cache_tokens": runs["kv_cache_tokens"].min(),
                    "tokens_needed": int(runs["concurrency"].iloc[0]) * (input_len + output_len),
                    "preemptions_per_run": float(runs["num_preemptions"].mean()),
                }
            )
    return pd.DataFrame(records, columns=list(KV_PRESSURE_COLUMNS)).astype({"kv_cache_tokens": "Int64"})


def step_cost_by_alpha(
    df: pd.DataFrame,
    profiles: Mapping[str, tuple[int, int]],
    k: int = 3,
    overlapped: Iterable[str] = (),
) -> pd.DataFrame:
    """Milliseconds per engine step of the runs at one k and different imposed α, per profile and concurrency.

    At a fixed k a step drafts k tokens and verifies k + 1 per sequence whatever is accepted, so its cost depends
    on α only through the work on the accepted tokens; how far the α runs' step times spread (``spread_pct``:
    slowest over fastest, less one) bounds how much one run's step time moves between runs (other server starts, other
    machines), the scale below which a gain difference between two α runs is not acceptance's doing. ``df`` needs
    ``ms_per_step`` (``results.engine_steps.with_step_times``); only loads with two or more α (``alphas``) appear.
    ``alpha_slow`` and ``alpha_fast`` name the pair; ``overlapped`` (point ids, ``analysis.overlapping_points``)
    marks in ``shared_host`` whether the slowest run shared its host with another server.
    """
    columns = [
        "profile",
        "concurrency",
        "alphas",
        "alpha_fast",
        "ms_fast",
        "alpha_slow",
        "ms_slow",
        "spread_pct",
        "shared_host",
    ]
    rows = df[
        (df["spec_method"] == "eagle3")
        & (df["num_speculative_tokens"] == k)
        & df["imposed_alpha"].notna()
        & df["ms_per_step"].notna()
        & df["concurrency"].notna()
    ]
    rows = with_profile(rows, profiles)
    shared = set(overlapped)
    records = []
    for (profile, conc), group in rows.groupby(["profile", "concurrency"]):
        if group["imposed_alpha"].nunique() < 2:
            continue
        fastest, slowest = group.loc[group["ms_per_step"].idxmin()], group.loc[group["ms_per_step"].idxmax()]
        records.append(
            {
                "profile": profile,
                "concurrency": int(conc),
                "alphas": tuple(sorted(float(a) for a in group["imposed_alpha"].unique())),
                "alpha_fast": float(fastest["imposed_alpha"]),
                "ms_fast": float(fastest["ms_per_step"]),
                "alpha_slow": float(slowest["imposed_alpha"]),
                "ms_slow": float(slowest["ms_per_step"]),
                "spread_pct": 100 * (float(slowest["ms_per_step"]) / float(fastest["ms_per_step"]) - 1),
                "shared_host": slowest["point_id"] in shared,
            }
        )
    return pd.DataFrame(records, columns=columns)
