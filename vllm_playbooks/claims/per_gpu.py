"""A claim's verdict per GPU, from the rows a case page judges: each GPU's rows judged on their own, never mixed.

A page states one verdict per GPU its rows name and leads with one (``verdict_gpu``): in live mode the GPU it just
ran on, else the best-evidenced, as the ledger does (``claims.lead``); the others go in one table under it
(``verdict_table``), which says where one disagrees with the lead beyond their bands. The page's figures and
numbers come from one GPU's rows (``page_gpu``): in live mode the GPU here, else the reference GPU
(``hardware.REFERENCE_GPU``), whose rows hold the case's whole grid, else the first GPU its rows name.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from vllm_playbooks.claims.claim import CheckResult, Evidence
from vllm_playbooks.claims.lead import disagree, lead_gpu
from vllm_playbooks.claims.ledger import claim_of, with_not_started
from vllm_playbooks.hardware import REFERENCE_GPU
from vllm_playbooks.run.budget import gpu_here


def results_by_gpu(claim_id: str, rows: pd.DataFrame, evidence: Evidence) -> dict[str, CheckResult]:
    """The check of ``claim_id`` run once per GPU that ``rows`` (a case page's rows, after its filters) name.

    Each run sees, of the claim's own case, the recorded rows (stalled runs left out, as in the ledger) whose point
    is among ``rows`` and that GPU's, and of every other case that GPU's rows only; the published numbers and the
    roofline fit are shared. Without rows, one run on no rows of the case, under the key ``""``: the check then says
    what it says without data ("not measured", or the model's verdict).
    """
    claim = claim_of(claim_id, evidence)
    check = evidence.check(claim.check)
    shown = set(rows["point_id"].astype(str)) if not rows.empty else set()
    results = {}
    for gpu in gpus_in(rows):
        narrowed = evidence.on_gpu(gpu)
        own = narrowed.rows(claim.case)
        judged = check(
            claim, replace(narrowed, runs={**narrowed.runs, claim.case: own[own["point_id"].astype(str).isin(shown)]})
        )
        results[gpu] = with_not_started(judged, evidence.not_started(claim, gpu))
    return results


def gpus_in(rows: pd.DataFrame) -> list[str]:
    """The GPUs a page's ``rows`` name, in name order; ``[""]`` without rows (one judgement on no rows)."""
    return sorted(str(name) for name in rows["gpu_name"].unique()) if not rows.empty else [""]


def page_gpu(rows: pd.DataFrame, mode: str, here: str | None = None) -> str:
    """The GPU whose rows give a page's figures and numbers: ``headline_gpu`` of the GPUs ``rows`` name (its verdict
    may lead with another GPU's: ``verdict_gpu``)."""
    return headline_gpu(gpus_in(rows), mode, here)


def headline_gpu(gpus: list[str], mode: str, here: str | None = None) -> str:
    """The GPU whose rows a page draws and counts from: in live mode the GPU here (``here``, default NVML's first),
    else ``REFERENCE_GPU`` (every case's whole grid), where each is among ``gpus``; else the first of ``gpus``."""
    if mode == "live":
        here = here if here is not None else gpu_here()
        if here in gpus:
            return str(here)
    return REFERENCE_GPU if REFERENCE_GPU in gpus else gpus[0]


def verdict_gpu(results: dict[str, CheckResult], mode: str, here: str | None = None) -> str:
    """The GPU whose verdict a page leads with, of ``results_by_gpu``'s GPUs: in live mode the GPU here (``here``,
    default NVML's first) where it has a result; else the best-evidenced (``claims.lead.lead_gpu``: the most clean
    runs a side at the compared points, a tie going to the reference GPU), as the ledger leads."""
    if mode == "live":
        here = here if here is not None else gpu_here()
        if here in results:
            return str(here)
    return lead_gpu({gpu: result.fewest_runs for gpu, result in results.items()})


def page_result(results: dict[str, CheckResult], mode: str, here: str | None = None) -> CheckResult:
    """The result a page leads with, of ``results_by_gpu``'s GPUs (``verdict_gpu``)."""
    return results[verdict_gpu(results, mode, here)]


#: ``verdict_table``'s columns.
VERDICT_TABLE_COLUMNS = [
    "claim",
    "gpu",
    "headline",
    "verdict",
    "runs_per_side",
    "spread_pct",
    "band_pct",
    "measured",
    "not_started",
    "rows",
    "disagrees",
]


def verdict_table(
    by_claim: dict[str, dict[str, CheckResult]], mode: str = "replay", here: str | None = None
) -> pd.DataFrame:
    """One row per claim and GPU (``results_by_gpu`` of each claim id), each claim's lead first (``verdict_gpu``,
    ``headline`` true), then its other GPUs in name order: ``verdict`` (the word), ``runs_per_side`` (the fewest clean
    runs of any side of a compared point; missing where it compares none), the widest ``spread_pct`` and ``band_pct``,
    ``measured`` (what that GPU's rows show), ``not_started`` (the engines whose server did not start there), ``rows``
    (how many the verdict rests on) and ``disagrees``: whether that GPU's verdict differs from the lead's beyond both
    their bands (``claims.lead.disagree``)."""
    records = []
    for claim, results in by_claim.items():
        lead = verdict_gpu(results, mode, here)
        first = results[lead]
        for gpu in sorted(results, key=lambda name: (name != lead, name)):
            result = results[gpu]
            records.append(
                {
                    "claim": claim,
                    "gpu": gpu,
                    "headline": gpu == lead,
                    "verdict": str(result.verdict),
                    "runs_per_side": result.fewest_runs,
                    "spread_pct": result.noise["spread_pct"],
                    "band_pct": result.noise["band_pct"],
                    "measured": result.measured,
                    "not_started": list(result.not_started),
                    "rows": result.rows,
                    "disagrees": gpu != lead
                    and disagree(str(first.verdict), first.pairs, str(result.verdict), result.pairs),
                }
            )
    table = pd.DataFrame(records, columns=VERDICT_TABLE_COLUMNS)
    return table.astype(
        {"runs_per_side": "Int64", "spread_pct": float, "band_pct": float, "headline": bool, "disagrees": bool}
    )


def gpus_of(by_claim: dict[str, dict[str, CheckResult]]) -> int:
    """How many GPUs the verdicts of ``by_claim`` were computed for (a page shows ``verdict_table`` from two on)."""
    return len({gpu for results in by_claim.values() for gpu in results if gpu})
