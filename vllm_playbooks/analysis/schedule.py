"""Batch-size schedules (num_speculative_tokens_per_batch_size): what a measured schedule delivered, and change chains
between controls."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

from vllm_playbooks.analysis.compare import is_baseline, pd_isna, recorded_speculative


def schedule_outcome(
    df: pd.DataFrame,
    schedule_label: str,
    fixed_label: str,
    metric: str = "output_tok_s",
) -> pd.DataFrame:
    """What a measured batch-size schedule (``num_speculative_tokens_per_batch_size``) delivered at each concurrency:
    the k its schedule sets there (taking the concurrency as the batch size, the most the server can schedule at
    once), the drafts it made, and its ``metric`` against what it is meant to match: ``fixed_label`` (the same
    speculative config without a schedule) where it speculates, speculation off where its k is 0.

    Repeats of a point count as one, at their median (``num_drafts`` too); each GPU's rows are compared with that
    GPU's references only. Columns: gpu_name, engine_label, concurrency, scheduled_k, num_drafts, ``metric``,
    reference_label, reference, change_pct; concurrencies whose reference was not measured are left out; an empty
    table where the schedule was not measured.
    """
    columns = [
        "gpu_name",
        "engine_label",
        "concurrency",
        "scheduled_k",
        "num_drafts",
        metric,
        "reference_label",
        "reference",
        "change_pct",
    ]
    df = df if "gpu_name" in df else df.assign(gpu_name="")
    rows = df[df["engine_label"] == schedule_label]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    spec = recorded_speculative(rows["engine_config_json"].iloc[0])
    if spec is None:
        raise ValueError(f"{schedule_label} has no speculative config, so no schedule")
    off = df[is_baseline(df)]
    fixed = df[df["engine_label"] == fixed_label]
    records = []
    for (gpu, concurrency), runs in rows.groupby(["gpu_name", "concurrency"], sort=True):
        k = spec.k_at_batch_size(int(concurrency))
        reference_rows = fixed if k else off
        same = reference_rows[(reference_rows["concurrency"] == concurrency) & (reference_rows["gpu_name"] == gpu)]
        if same.empty:
            continue
        reference = float(same[metric].astype(float).median())
        value = float(runs[metric].astype(float).median())
        drafts = runs["num_drafts"].astype(float).median()
        records.append(
            {
                "gpu_name": gpu,
                "engine_label": schedule_label,
                "concurrency": int(concurrency),
                "scheduled_k": k,
                "num_drafts": None if pd.isna(drafts) else round(drafts),
                metric: value,
                "reference_label": fixed_label if k else str(same["engine_label"].iloc[0]),
                "reference": reference,
                "change_pct": 100.0 * (value / reference - 1.0),
            }
        )
    return pd.DataFrame(records, columns=columns).astype({"num_drafts": "Int64"})


def schedule_table(outcomes: pd.DataFrame, metric: str = "output_tok_s") -> pd.DataFrame:
    """Several ``schedule_outcome`` tables (concatenated) side by side: one row per concurrency and scheduled k (and
    GPU, where they come from more than one), the
    reference (its label and ``metric``), then for each schedule, in the order they come, its drafts, ``metric`` and
    change against the reference. Columns are ``(group, field)`` with group "reference" or a schedule's label; a
    concurrency a schedule lacks is empty there."""
    index = ["concurrency", "scheduled_k"]
    if outcomes["gpu_name"].nunique() > 1:
        index = ["gpu_name", *index]
    fields = ["num_drafts", metric, "change_pct"]
    labels = list(dict.fromkeys(outcomes["engine_label"]))
    reference = outcomes.drop_duplicates(index).set_index(index)[["reference_label", "reference"]]
    reference.columns = pd.MultiIndex.from_tuples([("reference", "engine_label"), ("reference", metric)])
    wide = outcomes.set_index([*index, "engine_label"])[fields].unstack("engine_label")
    wide = wide.swaplevel(axis=1).reindex(columns=[(label, field) for label in labels for field in fields])
    return pd.concat([reference, wide], axis=1).sort_index(level="concurrency")


def change_chain(
    df: pd.DataFrame, labels: Sequence[str], modes: pd.DataFrame, metric: str = "output_tok_s"
) -> pd.DataFrame:
    """A gap between two servers taken apart one change at a time: ``labels`` run from the reference to the server
    it is compared with, each a control that differs from the one before in as little as possible.

    One row per step (each label against the one before it) and a last row "total" (the last label against the
    first); ``differs`` says what changed, from the servers' logs in ``modes`` (``results.server_logs.server_modes``:
    model runner, CUDA graphs, async scheduling) and the rows' ``spec_method``; one column per concurrency that every
    label was measured at, holding the change of ``metric`` in percent (medians over repeats). The steps compound: the
    product of their ratios is the total's."""
    if len(labels) < 2:
        raise ValueError(f"a change chain needs at least two labels, got {list(labels)}")
    values = (
        df[df["engine_label"].isin(list(labels))]
        .pivot_table(index="engine_label", columns="concurrency", values=metric, aggfunc="median")
        .reindex(list(labels))
        .dropna(axis="columns")
    )
    values.columns = [int(level) for level in values.columns]
    described = modes.drop_duplicates("engine_label").set_index("engine_label")
    methods = df.drop_duplicates("engine_label").set_index("engine_label")["spec_method"]

    def setting(label: str) -> dict[str, str]:
        logged = described.loc[label] if label in described.index else None

        def said(column: str, text: Callable[[object], str] = str) -> str:
            return "not logged" if logged is None or pd_isna(logged[column]) else text(logged[column])

        return {
            "speculation": str(methods.get(label, "not recorded")),
            "model runner": said("model_runner"),
            "CUDA graphs": said("cudagraph_mode"),
            "async scheduling": said("async_scheduling", lambda on: "on" if on else "off"),
        }

    def differs(label: str, reference: str) -> str:
        before, after = setting(reference), setting(label)
        changed = [f"{name} {before[name]} → {after[name]}" for name in before if before[name] != after[name]]
        return "; ".join(changed) or "nothing logged"

    steps = [(labels[i], labels[i - 1]) for i in range(1, len(labels))] + [(labels[-1], labels[0])]
    records = []
    for number, (label, reference) in enumerate(steps, start=1):
        change = 100.0 * (values.loc[label] / values.loc[reference] - 1.0)
        records.append(
            {
                "step": "total" if number == len(steps) else str(number),
                "server": label,
                "against": reference,
                "differs": differs(label, reference),
                **change.to_dict(),
            }
        )
    return pd.DataFrame(records).set_index("step")


def schedule_switched_off(engine_config_json: object, concurrency: object) -> bool:
    """True where a recorded row's speculative config (its ``engine_config_json``) has a batch-size schedule that
    sets k = 0 at ``concurrency`` (taken as the batch size); False without a schedule or a concurrency."""
    spec = recorded_speculative(engine_config_json)
    if spec is None or spec.keeps_full_cudagraphs or pd_isna(concurrency):  # no schedule
        return False
    return spec.k_at_batch_size(int(concurrency)) == 0


def scheduled_off(df: pd.DataFrame) -> pd.Series:
    """True for each recorded row whose speculative config's batch-size schedule sets k = 0 at its concurrency
    (``schedule_switched_off``): speculation was (nearly) off there, so its acceptance and chunking say nothing about
    drafting. False for every other row, speculative or not, and for request-rate loads."""
    if df.empty:
        return pd.Series(dtype=bool)
    return df.apply(
        lambda row: (
            row["spec_method"] != "none" and schedule_switched_off(row.get("engine_config_json"), row["concurrency"])
        ),
        axis=1,
    ).astype(bool)
