"""The claims ledger: every claim checked on the evidence (``claims.claim``, ``claims.loading``), once per GPU where
its deciding points are, as a table and its CSV export (``book.ledger`` words it as Markdown)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import pandas as pd

from vllm_playbooks.claims.claim import CheckResult, Claim, Evidence, re_measured
from vllm_playbooks.claims.lead import lead_gpu
from vllm_playbooks.claims.loading import load_claims
from vllm_playbooks.config.case_file import CLAIMS_FILE
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.run.deciding import deciding_part

LEDGER_COLUMNS = [
    "claim",
    "case",
    "text",
    "sources",
    "source_urls",
    "source_kind",
    "published",
    "measured",
    "not_started",
    "rows",
    "verdict",
    "model_says",
    "model_verdict",
    "hardware",
    "points",
    "min_clean_repeats",
    "spread_pct",
    "band_pct",
    "deciding_part",
    "headline",
]


#: The machine-readable export (``vllm-playbooks ledger --format csv``): one row per claim and GPU it is judged on
#: (``build_ledger``), the same numbers the ledger page shows. ``verdict`` is a word of ``Verdict`` alone;
#: ``runs_per_side`` the fewest clean runs of any side of any point it compares (blank where it compares none or its
#: check does not count them); ``headline`` is true on the line the book leads with (``judged_per_gpu``);
#: ``deciding_part`` names the part of the claim's case that measures the points its verdict rests on (blank: none).
EXPORT_COLUMNS = [
    "claim_id",
    "hardware",
    "headline",
    "verdict",
    "runs_per_side",
    "re_measured",
    "points",
    "spread_pct",
    "band_pct",
    "deciding_part",
]


def ledger_export(ledger: pd.DataFrame) -> pd.DataFrame:
    """The ledger in ``EXPORT_COLUMNS``: one row per line of the ledger (a claim, on a GPU where it is judged per GPU),
    as ``vllm-playbooks ledger --format csv`` prints it. The verdict is a word of the book's vocabulary (``Verdict``)
    and ``runs_per_side`` the runs it rests on; ``re_measured`` says whether those are at least ``MIN_CLEAN_REPEATS``
    (blank for the verdicts that compare no recorded points)."""
    out = ledger.rename(columns={"claim": "claim_id", "min_clean_repeats": "runs_per_side"})
    out = out.astype({"points": int, "runs_per_side": "Int64", "headline": bool})
    fewest = _fewest_runs(ledger)
    out["re_measured"] = pd.array(
        [re_measured(v, n) for v, n in zip(out["verdict"], fewest, strict=True)], dtype="boolean"
    )
    return out[EXPORT_COLUMNS]


def source_kind(flags: Iterable[bool]) -> str:
    """'primary', 'secondary only' or 'primary and secondary', from the sources' ``secondary_only`` flags."""
    values = set(bool(f) for f in flags)
    if values == {False}:
        return "primary"
    if values == {True}:
        return "secondary only"
    return "primary and secondary"


def with_not_started(result: CheckResult, engines: list[str]) -> CheckResult:
    """``result`` with the engines whose server did not start on its GPU (``Evidence.not_started``) in its
    ``not_started``: a comparison on that GPU could not include them."""
    return replace(result, not_started=tuple(engines))


def judged_per_gpu(claim: Claim, evidence: Evidence) -> list[tuple[str, CheckResult]]:
    """``claim``'s check, once per GPU of ``Evidence.deciding_gpus`` on that GPU's rows alone: no GPU's rows move
    another's verdict. The GPU the book leads with comes first (``claims.lead.lead_gpu``: the most clean runs a side
    at the compared points; a tie, the reference GPU), the others follow in ``deciding_gpus``' order. A claim without
    deciding points (a rule of thumb weighed on every recorded row), or with none of them recorded yet, is checked
    once on all the evidence, under the GPU ``""``."""
    check = evidence.check(claim.check)
    gpus = evidence.deciding_gpus(claim)
    if not gpus:
        return [("", check(claim, evidence))]
    judged = [
        (gpu, with_not_started(check(claim, evidence.on_gpu(gpu)), evidence.not_started(claim, gpu))) for gpu in gpus
    ]
    lead = lead_gpu({gpu: result.fewest_runs for gpu, result in judged})
    return sorted(judged, key=lambda line: line[0] != lead)


def build_ledger(evidence: Evidence, claims: list[Claim] | None = None) -> pd.DataFrame:
    """One line per claim (default: every case's) and GPU it is judged on (``judged_per_gpu``: the line the book leads
    with first, marked ``headline``; one line for a claim judged on every GPU's rows at once), its check run on
    ``evidence``, in ``LEDGER_COLUMNS``. ``hardware`` names the GPU a line was judged on, else the GPUs of
    the points it compares."""
    items = claims if claims is not None else load_claims(published=evidence.published)
    records = []
    for claim, (gpu, result) in ((c, judged) for c in items for judged in judged_per_gpu(c, evidence)):
        sources = evidence.sources(claim)
        records.append(
            {
                "claim": claim.claim_id,
                "case": claim.case,
                "text": claim.text,
                "sources": " ".join(claim.sources),
                "source_urls": " ".join(dict.fromkeys(sources["source_url"])),
                "source_kind": source_kind(sources["secondary_only"]),
                "published": result.published,
                "measured": result.measured,
                "not_started": list(result.not_started),
                "rows": result.rows,
                "verdict": str(result.verdict),
                "model_says": result.model_says,
                "model_verdict": str(result.model_verdict) if result.model_verdict else "",
                **result.noise,
                **({"hardware": gpu} if gpu else {}),
                "deciding_part": (deciding_part(claim.case, claim.claim_id) or "")
                if claim.claim_id in evidence.deciding
                else "",
                "headline": not records or records[-1]["claim"] != claim.claim_id,  # judged_per_gpu puts the lead first
            }
        )
    return pd.DataFrame(records, columns=LEDGER_COLUMNS)


def headline_lines(ledger: pd.DataFrame) -> pd.DataFrame:
    """One line per claim of ``build_ledger``'s ledger: its ``headline`` line, the best-evidenced GPU's where a claim
    is judged per GPU (what the book's key findings and the re-measure commands state)."""
    return ledger[ledger["headline"].astype(bool)]


def result_for(claim_id: str, evidence: Evidence) -> CheckResult:
    """The check of one claim run on ``evidence``: the verdict the ledger leads with for that claim
    (``judged_per_gpu``'s first), for a page that states the same."""
    return judged_per_gpu(claim_of(claim_id, evidence), evidence)[0][1]


def claim_of(claim_id: str, evidence: Evidence) -> Claim:
    """The line of ``claims.csv`` with ``claim_id`` (its sources checked against ``evidence``'s published numbers);
    ``ConfigError`` where there is none."""
    for claim in load_claims(published=evidence.published):
        if claim.claim_id == claim_id:
            return claim
    raise ConfigError(f"no claim {claim_id!r} in any case's {CLAIMS_FILE}")


def _fewest_runs(ledger: pd.DataFrame) -> list[int | None]:
    """Each claim's ``min_clean_repeats`` as a whole number, None where its check counts none."""
    return [None if pd.isna(n) else int(n) for n in ledger["min_clean_repeats"]]
