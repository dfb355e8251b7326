"""A claim's verdict per GPU, from the rows a case page shows: each GPU's rows judged on their own, never mixed.

A page that shows rows of several GPUs (``-p hardware all``, or a live run beside the reference rows) states one
verdict per GPU, and heads with the one of the GPU it is about: in live mode the GPU it just ran on, else the
reference GPU (``hardware.REFERENCE_GPU``), else the first GPU its rows name.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from vllm_playbooks.claims.ledger import (CheckResult, Evidence, claim_of, get_check, load_evidence,
                                         noting_not_started)
from vllm_playbooks.hardware import REFERENCE_GPU
from vllm_playbooks.run.budget import gpu_here

if TYPE_CHECKING:
    import pandas as pd


def results_by_gpu(claim_id: str, rows: pd.DataFrame, evidence: Evidence | None = None) -> dict[str, CheckResult]:
    """The check of ``claim_id`` run once per GPU that ``rows`` (a case page's rows, after its filters) name.

    Each run sees, of the claim's own case, the recorded rows (stalled runs left out, as in the ledger) whose point
    is among ``rows`` and that GPU's, and of every other case that GPU's rows only; the published numbers and the
    roofline fit are shared. Without rows, one run on no rows of the case, under the key ``""``: the check then says
    what it says without data ("not measured", or the model's verdict).
    """
    ev = evidence if evidence is not None else load_evidence()
    claim = claim_of(claim_id, ev)
    check = get_check(claim.check)
    shown = set(rows["point_id"].astype(str)) if not rows.empty else set()
    results = {}
    for gpu in gpus_in(rows):
        narrowed = ev.on_gpu(gpu)
        own = narrowed.rows(claim.case)
        judged = check(claim, replace(narrowed, runs={**narrowed.runs,
                                                      claim.case: own[own["point_id"].astype(str).isin(shown)]}))
        results[gpu] = noting_not_started(judged, ev.not_started(claim, gpu))
    return results


def gpus_in(rows: pd.DataFrame) -> list[str]:
    """The GPUs a page's ``rows`` name, in name order; ``[""]`` without rows (one judgement on no rows)."""
    return sorted(str(name) for name in rows["gpu_name"].unique()) if not rows.empty else [""]


def page_gpu(rows: pd.DataFrame, mode: str, here: str | None = None) -> str:
    """The GPU whose rows give a page's headline numbers: ``headline_gpu`` of the GPUs ``rows`` name."""
    return headline_gpu(gpus_in(rows), mode, here)


def headline_gpu(gpus: list[str], mode: str, here: str | None = None) -> str:
    """The GPU whose verdict a page states first: in live mode the GPU here (``here``, default NVML's first), else
    ``REFERENCE_GPU``, where each is among ``gpus``; else the first of ``gpus``."""
    if mode == "live":
        here = here if here is not None else gpu_here()
        if here in gpus:
            return str(here)
    return REFERENCE_GPU if REFERENCE_GPU in gpus else gpus[0]


def page_result(results: dict[str, CheckResult], mode: str, here: str | None = None) -> CheckResult:
    """The result a page heads with, of ``results_by_gpu``'s GPUs (``headline_gpu``)."""
    return results[headline_gpu(list(results), mode, here)]


def verdict_table(by_claim: dict[str, dict[str, CheckResult]]) -> pd.DataFrame:
    """One row per claim and GPU (``results_by_gpu`` of each claim id): ``claim``, ``gpu``, ``verdict`` (as shown:
    ``CheckResult.shown``), ``measured``
    (what that GPU's rows show) and ``rows`` (how many the verdict rests on), for a page whose rows come from more
    than one GPU."""
    import pandas as pd

    records = [{"claim": claim, "gpu": gpu, "verdict": result.shown, "measured": result.measured,
                "rows": result.rows} for claim, results in by_claim.items() for gpu, result in results.items()]  # fmt: skip
    return pd.DataFrame(records, columns=["claim", "gpu", "verdict", "measured", "rows"])


def gpus_of(by_claim: dict[str, dict[str, CheckResult]]) -> int:
    """How many GPUs the verdicts of ``by_claim`` were computed for (a page shows ``verdict_table`` from two on)."""
    return len({gpu for results in by_claim.values() for gpu in results if gpu})


def re_measured_elsewhere(results: dict[str, CheckResult], page: str) -> dict[str, CheckResult]:
    """The other GPUs' results of ``results`` (``results_by_gpu``) that rest on repeated runs, in name order, where the
    result of ``page`` (the GPU a page heads with) rests on fewer: what a page names beside a verdict that is not
    re-measured on its own GPU. Empty where ``page``'s verdict is re-measured or compares no recorded points."""
    if results[page].re_measured is not False:
        return {}
    return {gpu: result for gpu, result in sorted(results.items()) if gpu != page and result.re_measured}
