"""Published numbers by claim id (vllm_playbooks/cases/<case>/published.csv) and the tables a page shows of them."""

from __future__ import annotations

import pandas as pd

from vllm_playbooks.errors import SchemaError


def published_value(published: pd.DataFrame, claim_id: str) -> float:
    match = published.loc[published["claim_id"] == claim_id, "value"]
    if len(match) != 1:
        raise SchemaError(f"reference table: expected one row {claim_id!r}, found {len(match)}")
    return float(match.iloc[0])


def published_values(published: pd.DataFrame, prefix: str) -> list[float]:
    rows = published[published["claim_id"].str.match(rf"^{prefix}\d+$")]
    if rows.empty:
        raise SchemaError(f"reference table: no rows {prefix}1, {prefix}2, …")
    order = rows["claim_id"].str.removeprefix(prefix).astype(int).sort_values().index
    return [float(v) for v in rows.loc[order, "value"]]


def claims_table(published: pd.DataFrame, prefixes: tuple[str, ...] = ()) -> pd.DataFrame:
    """The rows a page shows as 'what was reported': claim, setting, value, unit, secondary flag, source.

    ``prefixes`` leaves out rows whose claim_id starts with one of them (sources of imposed settings, shown apart).
    """
    keep = ~published["claim_id"].str.startswith(prefixes) if prefixes else published["claim_id"].notna()
    return published.loc[keep, ["claim_id", "setting", "value", "unit", "secondary_only", "source_url"]].reset_index(
        drop=True
    )


def source_link(published: pd.DataFrame, prefixes: tuple[str, ...] = ()) -> str:
    """The distinct sources of ``published`` (rows whose claim_id starts with one of ``prefixes``, or all), as
    Markdown links named by their host and path, in the table's order: '[host/path](url), [host/path](url)'."""
    from urllib.parse import urlsplit

    rows = published[published["claim_id"].str.startswith(prefixes)] if prefixes else published
    urls = list(dict.fromkeys(rows["source_url"].dropna()))
    if not urls:
        raise SchemaError("reference table: no source URL for these rows")
    return ", ".join(f"[{urlsplit(u).netloc}{urlsplit(u).path.rstrip('/')}]({u})" for u in urls)


def published_row(published: pd.DataFrame, claim_id: str) -> str:
    """One published number in words: '<claim_id>: <value> <unit> (<setting>; <url>)'."""
    match = published[published["claim_id"] == claim_id]
    if len(match) != 1:
        raise SchemaError(f"reference table: expected one row {claim_id!r}, found {len(match)}")
    row = match.iloc[0]
    return f"{claim_id}: {row['value']:g} {row['unit']} ({row['setting']}; {row['source_url']})"
