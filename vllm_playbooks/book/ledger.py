"""The claims ledger as the page and ``vllm-playbooks ledger --markdown`` show it (``claims.ledger.build_ledger``'s
lines in words): a summary table, then one collapsed section per line."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import pandas as pd

from vllm_playbooks.claims.verdict import DATA_VERDICTS


def _link_label(url: str) -> str:
    match = re.match(r"https://github\.com/([^/]+/[^/]+)/(?:issues|pull|discussions)/(\d+)", url)
    if match:
        return f"{match.group(1)}#{match.group(2)}"
    return re.sub(r"^https?://(www\.)?", "", url).split("/")[0]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("$", "\\$") or "—"


def measured_words(measured: str, not_started: Iterable[str]) -> str:
    """What a verdict's rows show (``CheckResult.measured``), then the engines whose server did not start on its GPU
    (``CheckResult.not_started``), which a comparison there could not include."""
    engines = list(not_started)
    if not engines:
        return measured
    words = f"did not start on this GPU: {', '.join(engines)}"
    return f"{measured}; {words}" if measured else words


def with_measured_words(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (``claims.per_gpu.verdict_table``'s) with each line's ``measured`` followed by its ``not_started``
    (``measured_words``), as the pages show what a GPU's rows show."""
    pairs = zip(table["measured"], table["not_started"], strict=True)
    return table.assign(measured=[measured_words(measured, engines) for measured, engines in pairs])


def remeasure_command(case: str, part: str) -> str:
    """The command that measures one part of ``case`` on this machine's first GPU: for a claim, its deciding part."""
    return f"vllm-playbooks run --case {case} --gpus 0 --part {part}"


def ledger_markdown(ledger: pd.DataFrame) -> str:
    """The ledger as MyST Markdown: a summary table, then each line's published numbers, our rows, the noise its
    verdict rests on and the model in a collapsed section of its own. Each verdict names the GPU and the clean runs a
    side it rests on; a claim judged on more than one GPU leads with its ``headline`` line, the others below it."""
    judged = [_judged_on(r) for r in ledger.itertuples()]
    lines = ["| claim | source | verdict | judged on | model's verdict |", "|---|---|---|---|---|"]
    for r, on in zip(ledger.itertuples(), judged, strict=True):
        links = ", ".join(f"[{_link_label(u)}]({u})" for u in r.source_urls.split())
        marker = " **[secondary]**" if r.source_kind == "secondary only" else ""
        claim, verdict = (
            (f"**{r.claim}**: {_cell(r.text)}", f"**{r.verdict}**") if r.headline else (f"↳ {r.claim}", r.verdict)
        )
        lines.append(f"| {claim} | {links}{marker} | {verdict} | {_cell(on)} | {_cell(r.model_verdict)} |")
    for r, on in zip(ledger.itertuples(), judged, strict=True):  # one collapsed section per line
        noise = None
        if r.points and not pd.isna(r.min_clean_repeats):
            spread = (
                "no spread yet (single runs)"
                if r.spread_pct == 0 and r.min_clean_repeats < 2
                else f"widest spread {r.spread_pct:.1f} %"
            )
            noise = (
                f"- *Noise:* {int(r.points)} compared point{'s' if r.points != 1 else ''} on {r.hardware}; the "
                f"fewest clean runs of a point: {int(r.min_clean_repeats)}; {spread}; band {r.band_pct:.1f} %"
            )
        lines += [
            "",
            f":::{{dropdown}} {r.claim}: {r.verdict}" + (f" ({on})" if on else ""),
            f"{_cell(r.text)} ({r.case}; sources: {r.source_kind})",
            "",
            f"- *Published:* {_cell(r.published)}",
            f"- *Our rows:* {_cell(measured_words(r.measured, r.not_started))} → **{r.verdict}**",
            *([noise] if noise else []),
            *(
                [
                    f"- *Re-measure:* `{remeasure_command(r.case, r.deciding_part)}` measures again the points this "
                    "verdict rests on"
                ]
                if r.deciding_part
                else []
            ),
            f"- *Model says:* {_cell(r.model_says)}" + (f" → {r.model_verdict}" if r.model_verdict else ""),
            ":::",
        ]
    return "\n".join(lines)


def _judged_on(line: Any) -> str:
    """What a ledger line's data verdict rests on, in a few words: its GPU(s) and clean runs a side ('' for a verdict
    on no rows)."""
    if line.verdict not in {str(v) for v in DATA_VERDICTS}:
        return ""
    runs = (
        "runs not counted"
        if pd.isna(line.min_clean_repeats)
        else (f"{int(line.min_clean_repeats)} run{'' if int(line.min_clean_repeats) == 1 else 's'} a side")
    )
    return ", ".join(part for part in (line.hardware, runs) if part)
